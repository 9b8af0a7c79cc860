"""Helpers to drive the processor in tests and benchmarks: events, producing, a query harness.

Not used by the product itself; kept in the package so the tests, ``lineage bench`` and users'
own integration tests share one way to run the real query against real servers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from .settings import ProcessorSettings

__all__ = ["run_event", "produce", "test_settings", "StreamHarness", "process_command", "start_processor"]

PRODUCER = "https://github.com/lineage-stream/lineage-stream/tests"
SCHEMA_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


def run_event(run_id: str | None = None, event_type: str = "COMPLETE", when: datetime | str | None = None,
              job: str = "job", inputs: Iterable[str] = ("in",), outputs: Iterable[str] = ("out",),
              namespace: str = "test") -> dict[str, Any]:
    """A valid OpenLineage RunEvent; dataset names are in ``namespace`` (``$self`` stays as is)."""
    if isinstance(when, datetime):
        when = when.isoformat()
    return {
        "eventType": event_type, "eventTime": when or datetime.now(UTC).isoformat(),
        "run": {"runId": run_id or str(uuid.uuid4())}, "job": {"namespace": namespace, "name": job},
        "inputs": [{"namespace": namespace, "name": n} for n in inputs],
        "outputs": [{"namespace": namespace, "name": n} for n in outputs],
        "producer": PRODUCER, "schemaURL": SCHEMA_URL,
    }


def produce(bootstrap: str, topic: str, messages: Iterable[Any], timeout_seconds: float = 30.0) -> int:
    """Produce ``messages`` (bytes, or ``(value, headers)`` / ``(value, headers, key)`` tuples); returns the count."""
    from confluent_kafka import Producer

    from schemas.errors import DeliveryError

    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    n = 0
    for m in messages:
        value, headers, key = (m, None, None) if isinstance(m, (bytes, type(None))) else (tuple(m) + (None,))[:3]
        producer.produce(topic, value=value, key=key, headers=headers,
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        n += 1
        if n % 5000 == 0:
            producer.poll(0)
    if producer.flush(timeout_seconds) or errors:
        raise DeliveryError(f"produce to {topic} failed: {errors[:1]}")
    return n


def json_bytes(event: Any) -> bytes:
    return json.dumps(event).encode("utf-8")


def test_settings(bootstrap: str, topics: dict[str, str], dsn: str, checkpoint_dir: str, **overrides: Any
                  ) -> ProcessorSettings:
    """Settings for one test: its own topics, database and checkpoint; fast triggers."""
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap, "postgres_dsn": dsn, "checkpoint_dir": checkpoint_dir,
        "topic_events": topics["events"], "topic_enriched": topics["enriched"], "topic_graph": topics["graph"],
        "topic_dlq": topics["dlq"], "trigger_interval_seconds": 0.5, "recombine_quiet_seconds": 2.0,
        "shuffle_partitions": 2,
    }
    values.update(overrides)
    return ProcessorSettings(**values)


test_settings.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def process_command(bootstrap: str, topics: dict[str, str], dsn: str, work: Any, *extra: str,
                    max_offsets_per_trigger: int = 300) -> list[str]:
    """``python -m lineage process ...`` for one test: its topics, database, and checkpoint/Parquet/data under ``work``.

    Fast triggers (0.5 s) and a 1 s recombination quiet period; ``extra`` flags come last (and win).
    """
    import sys
    from pathlib import Path

    work = Path(work)
    return [sys.executable, "-m", "lineage", "process", "--bootstrap-servers", bootstrap,
            "--postgres-dsn", dsn, "--checkpoint-dir", str(work / "ck"), "--parquet-dir", str(work / "pq"),
            "--topic-events", topics["events"], "--topic-enriched", topics["enriched"],
            "--topic-graph", topics["graph"], "--topic-dlq", topics["dlq"],
            "--max-offsets-per-trigger", str(max_offsets_per_trigger), "--trigger-interval-seconds", "0.5",
            "--recombine-quiet-seconds", "1", "--data-dir", str(work / "data"), *extra]


def start_processor(bootstrap: str, topics: dict[str, str], dsn: str, work: Any, log_name: str, *extra: str,
                    max_offsets_per_trigger: int = 300) -> Any:
    """Start :func:`process_command` as a child in its own session (kill it with ``os.killpg``), output to ``work/log_name``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    log = open(Path(work) / log_name, "wb")  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(process_command(bootstrap, topics, dsn, work, *extra,
                                                max_offsets_per_trigger=max_offsets_per_trigger),
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    finally:
        log.close()  # the child has its own descriptor


class StreamHarness:
    """Run the real query in this process; ``drain()`` processes what the topics hold now."""

    def __init__(self, spark: Any, settings: ProcessorSettings) -> None:
        from .metrics import ProcessorMetrics

        self.spark = spark
        self.settings = settings
        self.metrics = ProcessorMetrics()
        self.reports: list[Any] = []
        self.query: Any = None
        self.writer: Any = None

    def _on_batch(self, report: Any) -> None:
        self.reports.append(report)
        self.metrics.on_batch(report)

    def start(self) -> StreamHarness:
        from .pipeline import start_query
        from .writer import GraphBatchWriter

        self.writer = GraphBatchWriter(self.settings, on_batch=self._on_batch)
        self.query = start_query(self.spark, self.settings, self.writer)
        return self

    def drain(self, timeout_seconds: float = 180.0, extra_batches: int = 0) -> None:
        """Wait until the query committed everything the topics hold now, plus ``extra_batches``.

        ``processAllAvailable()`` would never return: the source's ticks keep the query from ever reporting
        "no new data".
        """
        import time

        from .runner import committed_offsets, drain_targets, offsets_reached

        targets = drain_targets(self.settings)
        deadline = time.monotonic() + timeout_seconds
        reached_batch: int | None = None
        while time.monotonic() < deadline:
            assert self.query.exception() is None, self.query.exception()
            assert self.query.isActive, "the query stopped"
            progress = self.query.lastProgress
            if reached_batch is None and offsets_reached(committed_offsets(self.query), targets):
                reached_batch = progress["batchId"] if progress else -1
            if reached_batch is not None and progress and progress["batchId"] >= reached_batch + extra_batches:
                # Spark committed the offsets; the writer finishes (merges) a batch after that (writer.py)
                self.writer.wait_finished()
                return
            time.sleep(0.2)
        raise AssertionError(f"the query did not reach {targets} within {timeout_seconds:.0f}s "
                             f"(committed {committed_offsets(self.query)})")

    def wait_for(self, condition: Any, timeout_seconds: float = 120.0, message: str = "condition not met") -> Any:
        """Poll ``condition()`` while the query runs; fail on a query error or at the deadline."""
        import time

        deadline = time.monotonic() + timeout_seconds
        last = None
        while time.monotonic() < deadline:
            assert self.query.exception() is None, self.query.exception()
            last = condition()
            if last:
                return last
            time.sleep(0.3)
        raise AssertionError(f"{message} (after {timeout_seconds:.0f}s; last {last!r})")

    def total(self, metric: str) -> int:
        return sum(r.total(metric) for r in self.reports)

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self.writer is not None:
            # a graph publication still waiting for a PostgreSQL a failed test already dropped would
            # keep the interpreter from exiting (its pool thread is joined at exit)
            self.writer.cancel()

    def __enter__(self) -> StreamHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def utc(days: float = 0.0) -> str:
    """An ISO time ``days`` from now, in UTC with an offset."""
    return (datetime.now(UTC) + timedelta(days=days)).isoformat()
