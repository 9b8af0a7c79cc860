"""`lineage broker` and `lineage up` as a user runs them: subprocesses, signals, endpoints.json, the lock."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, assert_eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def lineage(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINEAGE_")}
    return subprocess.Popen([sys.executable, "-m", "lineage", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def read_line_matching(proc: subprocess.Popen[str], pattern: str, timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    seen = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            seen.append(line)
            if match := re.search(pattern, line):
                return match
        if proc.poll() is not None and not ready:
            break
    raise AssertionError(f"no line matching {pattern!r} within {timeout}s; got {seen!r}; "
                         f"stderr: {proc.stderr.read() if proc.stderr and proc.poll() is not None else ''}")


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_broker_starts_creates_topics_and_stops_on_sigterm() -> None:
    from confluent_kafka.admin import AdminClient

    proc = lineage("broker", "--port", "0", "--partitions", "2")
    try:
        match = read_line_matching(proc, r"listening on (127\.0\.0\.1):(\d+)", timeout=60)
        port = int(match.group(2))
        topics = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=15).topics
        for name in ("openlineage.events", "openlineage.events.enriched", "openlineage.graph",
                     "openlineage.events.dlq"):
            assert name in topics and len(topics[name].partitions) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert_eventually(lambda: not listening(port), timeout=15, message="broker still listening")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_broker_on_a_busy_port_is_a_usage_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = lineage("broker", "--port", str(busy.getsockname()[1]))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "is in use" in err and "Traceback" not in err


def test_up_writes_endpoints_refuses_a_second_up_and_stops_on_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # --no-processor: the processor (Spark) has its own tests; this one is about `up` itself
    first = lineage("up", "--data-dir", str(data_dir), "--no-demo", "--no-processor", "--duration", "120")
    endpoints_path = data_dir / "endpoints.json"
    try:
        assert_eventually(lambda: endpoints_path.exists() or first.poll() is not None, timeout=120,
                          message="endpoints.json not written")
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        endpoints = json.loads(endpoints_path.read_text())
        assert set(endpoints) == {"kafka_bootstrap", "postgres_dsn", "metrics_url", "parquet_dir", "topics", "pids",
                                  "http_url"}
        assert set(endpoints["topics"]) == {"events", "enriched", "graph", "dlq"}
        assert endpoints["topics"]["events"] == "openlineage.events"
        assert set(endpoints["pids"]) == {"broker", "processor", "server"} and endpoints["pids"]["broker"] > 0
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", endpoints["http_url"])
        with urllib.request.urlopen(endpoints["http_url"] + "/healthz", timeout=10) as health:
            assert json.loads(health.read()) == {"status": "ok", "database": "ok", "broker": "ok"}
        assert endpoints["pids"]["processor"] is None
        assert re.fullmatch(r"127\.0\.0\.1:\d+", endpoints["kafka_bootstrap"])
        assert endpoints["postgres_dsn"].startswith("postgresql://")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", endpoints["metrics_url"])
        assert endpoints["parquet_dir"] == str((data_dir / "parquet").resolve())
        broker_port = int(endpoints["kafka_bootstrap"].rsplit(":", 1)[1])
        assert listening(broker_port)
        import psycopg
        with psycopg.connect(endpoints["postgres_dsn"], connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)

        second = lineage("up", "--data-dir", str(data_dir), "--no-demo", "--duration", "5")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1
        assert "already running" in err and str(first.pid) in err and "Traceback" not in err
        assert endpoints_path.exists()  # the second one did not touch the first one's state

        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=90)
        assert first.returncode == 0, err
        assert not endpoints_path.exists()
        assert not (data_dir / "postgres" / "postmaster.pid").exists(), err  # PostgreSQL stopped too
        assert_eventually(lambda: not listening(broker_port), timeout=15, message="broker still listening")
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)


def test_status_line_reads_the_processor_metrics() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

    from lineage.commands.up import scrape_processor_metrics
    from lineage.embedded.ports import free_port

    registry = CollectorRegistry()
    consumed = Counter("lineage_events_consumed", "in", ["encoding"], registry=registry)
    consumed.labels("avro").inc(40)
    consumed.labels("json").inc(2)
    Counter("lineage_events_rejected", "rejected", ["reason"], registry=registry).labels("validation").inc(3)
    Counter("lineage_batches_committed", "batches", registry=registry).inc(7)
    Gauge("lineage_consumer_lag_records", "lag", ["partition"], registry=registry).labels("0").set(11)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        figures = scrape_processor_metrics(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert figures == {"in": 42.0, "rejected": 3.0, "batches": 7.0, "lag": 11.0}
    assert scrape_processor_metrics(f"http://127.0.0.1:{free_port()}/metrics", 0.5) is None


def test_up_with_external_servers_runs_demo_traffic(kafka_bootstrap: str, system_pg_dsn: str,
                                                     tmp_path: Path) -> None:
    from schemas.codec import decode_message
    from tests.test_emitter import consume_all

    proc = lineage("up", "--data-dir", str(tmp_path), "--bootstrap-servers", kafka_bootstrap,
                   "--postgres-dsn", system_pg_dsn, "--demo-rate", "100", "--duration", "6", "--no-processor")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"broker ready at {kafka_bootstrap}" in err and "stopped" in err
    assert "processor not started" in err
    assert not (tmp_path / "endpoints.json").exists() and not (tmp_path / "postgres").exists()
    messages = consume_all(kafka_bootstrap, "openlineage.events", 50, timeout=30)
    assert len(messages) >= 50
    for msg in messages[:50]:
        assert decode_message(msg.value(), msg.headers())[0].document["eventTime"]
