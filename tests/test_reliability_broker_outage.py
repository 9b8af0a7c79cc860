"""Stop the Kafka broker under a running `lineage process` and steady traffic; bring it back empty.

The embedded broker (tansu, memory storage) loses every topic and record when it stops. So the
test plays what an operator does: restart it on the same port, recreate the topics and re-publish
every event (the producer saw delivery failures for those it could not send; those it sent went
with the old log). Meanwhile the processor must neither die nor spin: it waits for Kafka
(log line and ``lineage_waiting_for{dependency="kafka"} 1``), then resumes from its checkpoint,
notices that the topics are new logs (topic ids) and reads them from the start. The graph ends
with every event exactly once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request
import uuid

import psycopg
import pytest

from lineage.embedded.broker import EmbeddedBroker, create_topics
from lineage.embedded.ports import free_port
from schemas.codec import encode_single_object
from stream_processor.testing import produce, run_event, start_processor

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _count(dsn: str) -> tuple[int, int]:
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            return conn.execute("SELECT count(*), count(DISTINCT event_hash) FROM lineage_events").fetchone()
    except psycopg.errors.UndefinedTable:
        return (0, 0)


def _metric(port: int, name: str, labels: str = "") -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3).read().decode()
    except OSError:
        return None
    total = None
    for line in text.splitlines():
        if line.startswith("#") or re.split(r"[{ ]", line, maxsplit=1)[0] != name or labels not in line:
            continue
        total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


class _Traffic(threading.Thread):
    """Publishes about 50 new events a second; remembers every event and which deliveries failed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.topic = topic
        # short delivery timeout: during the outage the caller hears about failures within seconds
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 3000,
                                  "log_level": 0})
        self.events: list[bytes] = []
        self.delivered = 0
        self.failed: list[str] = []
        self.stop = threading.Event()

    def _report(self, err: object, _msg: object) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed.append(str(err))

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(10):
                value = encode_single_object(run_event(job=f"b{len(self.events)}",
                                                       outputs=(f"o{len(self.events) % 20}",)))
                self.events.append(value)
                self.producer.produce(self.topic, value=value, on_delivery=self._report)
            self.producer.poll(0)
            self.stop.wait(0.2)
        self.producer.flush(10)


def test_broker_outage_processor_waits_and_resumes_exactly_once(pg_dsn, tmp_path):
    port = free_port()
    names = {k: f"b{uuid.uuid4().hex[:8]}.{k}" for k in ("events", "enriched", "graph", "dlq")}
    broker = EmbeddedBroker(port=port, topics=(), log_path=tmp_path / "tansu.log").start()
    create_topics(broker.bootstrap, names.values(), partitions=3)
    metrics_port = free_port()
    proc = start_processor(broker.bootstrap, names, pg_dsn, tmp_path, "process.log",
                           "--metrics-port", str(metrics_port), max_offsets_per_trigger=500)
    log_file = tmp_path / "process.log"
    traffic = _Traffic(broker.bootstrap, names["events"])

    def tail() -> str:
        return log_file.read_text(errors="replace")[-4000:]

    try:
        traffic.start()
        deadline = time.monotonic() + 300
        while _count(pg_dsn)[0] == 0:  # the processor is up and has committed some of the traffic
            assert proc.poll() is None, tail()
            assert time.monotonic() < deadline, f"no event reached the graph\n{tail()}"
            time.sleep(0.5)

        broker.stop()
        down_at = time.monotonic()
        waiting_seen = False
        deadline = down_at + 240
        pattern = re.compile(rf"waiting for Kafka at 127\.0\.0\.1:{port}: .*, retry in [0-9.]+s")
        # down for longer than a trigger interval, and until the supervisor says (and meters) that it waits
        while not (waiting_seen and pattern.search(log_file.read_text(errors="replace"))
                   and time.monotonic() - down_at > 8):
            assert proc.poll() is None, f"the processor died while the broker was down\n{tail()}"
            assert time.monotonic() < deadline, f"the processor never reported waiting for Kafka\n{tail()}"
            waiting_seen = waiting_seen or _metric(metrics_port, "lineage_waiting_for", 'dependency="kafka"') == 1.0
            time.sleep(0.5)
        time.sleep(2)
        assert proc.poll() is None, tail()
        assert traffic.failed, "the producer must surface delivery failures during the outage"
        traffic.stop.set()
        traffic.join(30)

        broker.start()  # same port, empty: the topics and their records are gone
        create_topics(broker.bootstrap, names.values(), partitions=3)
        n = len(traffic.events)
        produce(broker.bootstrap, names["events"], traffic.events)  # every event, as the caller re-sends

        deadline = time.monotonic() + 300
        while _count(pg_dsn) != (n, n):
            assert proc.poll() is None, f"the processor died after the broker came back\n{tail()}"
            assert time.monotonic() < deadline, f"graph has {_count(pg_dsn)} of {n} events\n{tail()}"
            assert _count(pg_dsn)[0] <= n, "an event landed twice"
            time.sleep(1)
        time.sleep(3)  # a few more batches: still exactly once
        assert _count(pg_dsn) == (n, n)
        text = log_file.read_text(errors="replace")
        assert f"Kafka at 127.0.0.1:{port} is back" in text, tail()
        assert _metric(metrics_port, "lineage_waiting_for", 'dependency="kafka"') == 0.0
        assert (_metric(metrics_port, "lineage_source_offset_resets_total") or 0) >= 1, \
            "the recreated topic's partitions were not counted as reset"
        with psycopg.connect(pg_dsn) as conn:
            jobs = {r[0] for r in conn.execute("SELECT job_name FROM lineage_events")}
        assert jobs == {f"b{i}" for i in range(n)}
        print(f"broker outage: {n} events, {len(traffic.failed)} delivery failures during the outage, "
              f"{n} / {n} in the graph once")
    finally:
        traffic.stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except Exception:  # noqa: BLE001 - a stuck stop: kill the whole session
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        broker.stop()


@pytest.mark.unit
def test_offset_json_carries_topic_ids_and_resets_that_are_not_topics():
    from stream_processor.kafka_source import _from_offsets, _offset_ids, _to_offsets
    from stream_processor.runner import committed_offsets

    end = _to_offsets({("t", 0): 40, ("t", 1): 7}, ids={"t": "AaIEid"}, **{"from": {("t", 0): 0}, "reset": {("t", 0): 500}})
    assert end == {"t": {"0": 40, "1": 7}, "$ids": {"t": "AaIEid"}, "$from": {"t": {"0": 0}},
                   "$reset": {"t": {"0": 500}}}
    assert _from_offsets(end) == {("t", 0): 40, ("t", 1): 7}
    assert _offset_ids(end) == {"t": "AaIEid"} and _offset_ids(None) == {}

    class Query:
        lastProgress = {"sources": [{"endOffset": json.dumps(end)}]}

    assert committed_offsets(Query()) == {"t": {"0": 40, "1": 7}}


@pytest.mark.unit
def test_a_reset_partition_is_read_from_its_recorded_start_not_the_checkpointed_offset():
    from stream_processor.kafka_source import KafkaStreamReader

    reader = KafkaStreamReader({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"})
    reader._ids = {"t": "new"}  # this process planned the batch: no broker round trip
    start = {"t": {"0": 500, "1": 300}, "$ids": {"t": "old"}}
    end = {"t": {"0": 40, "1": 25}, "$ids": {"t": "new"}, "$from": {"t": {"0": 0, "1": 0}}}
    ranges = reader.partitions(start, end)
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [("t", 0, 0, 40), ("t", 1, 0, 25)]
    # without the recorded start, an end below the checkpointed offset would read nothing (records skipped)
    assert reader.partitions(start, {k: v for k, v in end.items() if k != "$from"}) == []


@pytest.mark.unit
def test_a_kafka_connection_refused_is_not_a_postgres_outage():
    from stream_processor.retry import is_kafka_error, is_postgres_unavailable

    kafka = RuntimeError('t[0]: KafkaError{code=_TRANSPORT,val=-195,str="Connect to ipv4#127.0.0.1:9 failed: '
                         'Connection refused (after 0ms in state CONNECT)"}')
    assert is_kafka_error(kafka)
    assert not is_postgres_unavailable(kafka)
    postgres = RuntimeError('connection failed: connection to server at "127.0.0.1", port 5 failed: Connection refused')
    assert not is_kafka_error(postgres)
    assert is_postgres_unavailable(postgres)
