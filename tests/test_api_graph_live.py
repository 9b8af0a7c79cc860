"""GET /api/graph/live (api/live.py) on a real uvicorn server: every connected client receives a `graph`
server-sent event naming the nodes of a batch the store commits, and one poller serves them all."""

from __future__ import annotations

import asyncio
import http.client
import json
import queue
import threading
import urllib.parse
import urllib.request

import psycopg
import pytest

from sink.postgres import GraphStore
from tests.conftest import assert_eventually
from tests.test_api_graph import settings_for
from tests.test_catalog import demo_events

pytestmark = pytest.mark.integration


def poll_count(url: str) -> int:
    """How many polls the server's live poller has made (``polls`` in ``/api/graph/live/status``)."""
    with urllib.request.urlopen(f"{url}/api/graph/live/status", timeout=5) as response:
        return int(json.loads(response.read())["polls"])


def listen(url: str, out: queue.Queue, stop: threading.Event, conns: list) -> None:
    """Collect the `graph` events of one SSE stream into ``out`` until ``stop`` (or its connection closes)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conns.append(conn)
    conn.request("GET", "/api/graph/live", headers={"Accept": "text/event-stream"})
    response = conn.getresponse()
    out.put(("status", response.status, response.getheader("content-type")))
    event = None
    try:
        while not stop.is_set():
            try:
                line = response.fp.readline().decode("utf-8")
            except (OSError, ValueError):     # closed by the test
                return
            if not line:
                return
            line = line.rstrip("\n")
            if line.startswith(":"):
                out.put(("comment", line))
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "graph":
                out.put(("graph", json.loads(line[6:])))
    finally:
        conn.close()

def test_live_events_reach_every_client(pg_dsn: str) -> None:
    from api.testing import running_server

    with GraphStore(pg_dsn) as store:
        store.migrate()
        store.write_batch(1, demo_events(20))          # committed before anyone listens: not announced
    events = demo_events(120)[60:]
    stop = threading.Event()
    with running_server(settings_for(pg_dsn)) as url:
        streams = [queue.Queue(), queue.Queue()]
        conns: list[http.client.HTTPConnection] = []
        threads = [threading.Thread(target=listen, args=(url, q, stop, conns), daemon=True) for q in streams]
        for t in threads:
            t.start()
        for q in streams:
            assert q.get(timeout=10) == ("status", 200, "text/event-stream; charset=utf-8")
            assert q.get(timeout=10) == ("comment", ": connected")
        # the shared poller's first poll (within a second of the first client) only takes the watermark:
        # wait for it, so that the batch below is news (a batch committed before it would not be announced)
        assert_eventually(lambda: poll_count(url) >= 2, timeout=15)
        with GraphStore(pg_dsn) as store:
            store.write_batch(7, events)
        with psycopg.connect(pg_dsn) as conn:
            written = {r[0] for r in conn.execute(
                "SELECT dataset_id::text FROM lineage_datasets WHERE last_batch_id = 7 UNION "
                "SELECT job_id::text FROM lineage_jobs WHERE last_batch_id = 7").fetchall()}
        assert written
        got = []
        for q in streams:
            kind, message = q.get(timeout=15)
            while kind == "comment":      # a keepalive may come first on a slow machine
                kind, message = q.get(timeout=15)
            assert kind == "graph"
            got.append(message)
        assert got[0] == got[1]
        assert got[0]["batch_id"] == 7 and set(got[0]["changed"]) == written and got[0]["at"]
        stop.set()
        for conn in conns:            # the server's graceful stop would otherwise wait for the open streams
            conn.sock.shutdown(2)


def test_one_poller_serves_all_subscribers(pg_dsn: str) -> None:
    """Two subscribers, one polling task, one read of the log per poll; with no subscriber the task ends."""
    from psycopg_pool import ConnectionPool

    from api.live import LivePoller

    with GraphStore(pg_dsn) as store:
        store.migrate()
    pool = ConnectionPool(pg_dsn, min_size=1, max_size=2, open=True, kwargs={"autocommit": True})

    async def scenario() -> tuple[int, int, bool, dict, dict]:
        poller = LivePoller(pool, poll_seconds=0.1)
        a, b = poller.subscribe(), poller.subscribe()
        task = poller.task
        while not poller.primed:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(_write, pg_dsn)
        ma = await asyncio.wait_for(a.get(), 10)
        mb = await asyncio.wait_for(b.get(), 10)
        same_task = poller.task is task
        poller.unsubscribe(a)
        poller.unsubscribe(b)
        await asyncio.wait_for(task, 5)
        return ma["batch_id"], mb["batch_id"], same_task, ma, mb

    try:
        a_batch, b_batch, same_task, ma, mb = asyncio.run(scenario())
    finally:
        pool.close()
    assert a_batch == b_batch == 3 and same_task and ma is mb


def _write(dsn: str) -> None:
    with GraphStore(dsn) as store:
        store.write_batch(3, demo_events(10))



def test_a_graceful_stop_ends_open_streams(pg_dsn: str) -> None:
    """An open stream ends when the server stops (app.state.stopping), rather than holding the graceful stop
    until uvicorn's timeout (15 s) cancels it."""
    from api.testing import running_server

    with GraphStore(pg_dsn) as store:
        store.migrate()
    out: queue.Queue = queue.Queue()
    stop = threading.Event()
    conns: list[http.client.HTTPConnection] = []
    with running_server(settings_for(pg_dsn)) as url:
        thread = threading.Thread(target=listen, args=(url, out, stop, conns), daemon=True)
        thread.start()
        assert out.get(timeout=10)[:2] == ("status", 200)
        assert out.get(timeout=10) == ("comment", ": connected")
    thread.join(10)                 # well under the 15 s graceful-stop timeout
    assert not thread.is_alive()
