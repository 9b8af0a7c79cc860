"""PostgreSQL goes down under traffic for longer than a trigger interval: the query waits, then catches up.

A tests-owned :class:`~lineage.embedded.postgres.EmbeddedPostgres` (its own data dir and port) is
stopped while the query runs; the batch waiting for it must not commit (its Kafka offsets do not
advance), the log and ``lineage_waiting_for{dependency="postgres"}`` say what it waits for, and
after the restart every event is in the graph exactly once and the query never failed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from schemas.codec import encode_single_object
from stream_processor.pipeline import start_query
from stream_processor.runner import committed_offsets, drain_targets, offsets_reached
from stream_processor.testing import produce, run_event, test_settings
from stream_processor.writer import GraphBatchWriter

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _events(dsn: str) -> tuple[int, int]:
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            return conn.execute("SELECT count(*), count(DISTINCT event_hash) FROM lineage_events").fetchone()
    except (psycopg.OperationalError, psycopg.errors.UndefinedTable):
        return (-1, -1)


def _sample(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float:
    value = registry.get_sample_value(name, labels)
    return float(value or 0.0)


def _retries(registry: CollectorRegistry) -> float:
    return sum(s.value for m in registry.collect() if m.name == "lineage_sink_retries"
               for s in m.samples if s.name == "lineage_sink_retries_total")


def _wait(query, condition, timeout: float, message: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        assert query.isActive, "the query stopped"
        last = condition()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{message} (after {timeout:.0f}s; last {last!r})")


def test_query_waits_for_postgres_and_catches_up(spark, kafka_bootstrap, topic_names, tmp_path, caplog):
    import shutil
    import tempfile

    from lineage.embedded.postgres import EmbeddedPostgres

    # outside pytest's basetemp, as the shared server's (tests/conftest.py says why)
    pg_root = tempfile.mkdtemp(prefix="lineage-test-outage-pg-")
    server = EmbeddedPostgres(Path(pg_root) / "pgdata")
    server.start()
    query = None
    try:
        dsn = server.create_database("outage")
        settings = test_settings(kafka_bootstrap, topic_names, dsn, str(tmp_path / "ck"),
                                 parquet_dir=str(tmp_path / "pq"), trigger_interval_seconds=0.5,
                                 postgres_retry_initial_seconds=0.25, postgres_retry_max_interval_seconds=1.0,
                                 postgres_retry_max_seconds=300.0)
        registry = CollectorRegistry()
        writer = GraphBatchWriter(settings, metrics_registry=registry)
        caplog.set_level(logging.WARNING, logger="stream_processor.retry")

        first = [encode_single_object(run_event(job=f"before{i}")) for i in range(150)]
        produce(kafka_bootstrap, topic_names["events"], first)
        query = start_query(spark, settings, writer)
        _wait(query, lambda: _events(dsn)[0] == 150, 180, "the first events did not arrive")

        server.stop(mode="fast")
        second = [encode_single_object(run_event(job=f"during{i}")) for i in range(150)]
        produce(kafka_bootstrap, topic_names["events"], second)
        targets = drain_targets(settings)
        waiting = {"dependency": "postgres"}
        _wait(query, lambda: _sample(registry, "lineage_waiting_for", waiting) == 1.0, 120,
              "the writer never reported waiting for PostgreSQL")
        # down for several trigger intervals: the batch holding the new events must not commit meanwhile
        _wait(query, lambda: _retries(registry) >= 6, 120, "too few retries")
        assert not offsets_reached(committed_offsets(query), targets), "offsets advanced past uncommitted work"
        text = generate_latest(registry).decode()
        assert 'lineage_waiting_for{dependency="postgres"} 1.0' in text
        assert f"waiting for PostgreSQL at 127.0.0.1:{server.port}" in caplog.text
        assert "retry in" in caplog.text

        server.start()
        _wait(query, lambda: offsets_reached(committed_offsets(query), targets), 180,
              "the query did not catch up after PostgreSQL came back")
        _wait(query, lambda: _sample(registry, "lineage_waiting_for", waiting) == 0.0, 60, "still waiting")
        writer.drain()   # Spark commits a batch's offsets once it is staged; the finisher merges it after (writer.py)
        assert query.exception() is None and query.isActive
        assert _events(dsn) == (300, 300)
        with psycopg.connect(dsn) as conn:
            jobs = sorted(r[0] for r in conn.execute("SELECT job_name FROM lineage_events"))
        assert jobs == sorted([f"before{i}" for i in range(150)] + [f"during{i}" for i in range(150)])
    finally:
        if query is not None and query.isActive:
            writer.cancel()
            query.stop()
        server.stop(mode="immediate")
        shutil.rmtree(pg_root, ignore_errors=True)


@pytest.mark.integration
def test_retrier_retries_only_outages_and_can_be_cancelled(pg_dsn):
    import threading

    from lineage.embedded.ports import free_port
    from stream_processor.retry import (
        BackoffPolicy,
        DependencyMetrics,
        PostgresRetrier,
        RetryCancelled,
        is_postgres_unavailable,
    )

    closed = f"postgresql://postgres@127.0.0.1:{free_port('127.0.0.1')}/x"
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(closed, connect_timeout=2)
    assert is_postgres_unavailable(refused.value)
    assert not is_postgres_unavailable(ValueError("a bug"), pg_dsn)      # PostgreSQL answers: not an outage
    assert is_postgres_unavailable(RuntimeError("Job aborted"), closed)  # inconclusive text: probed
    # a terminated connection as a Spark task failure's text reaches the driver: no psycopg type, no probe
    # needed (PostgreSQL answers again by then)
    assert is_postgres_unavailable(RuntimeError("schemas.errors.StoreError: staging batch 1 part 0 failed: "
                                                "connection socket closed"), pg_dsn)

    registry = CollectorRegistry()
    retrier = PostgresRetrier(pg_dsn, BackoffPolicy(initial_seconds=0.01), DependencyMetrics.for_registry(registry))
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return "done"

    assert retrier.call("merge", flaky) == "done" and len(attempts) == 3
    assert registry.get_sample_value("lineage_sink_retries_total", {"dependency": "postgres", "step": "merge"}) == 2
    with pytest.raises(ValueError):
        retrier.call("merge", lambda: (_ for _ in ()).throw(ValueError("a bug")))

    cancel = threading.Event()
    waiting = PostgresRetrier(closed, BackoffPolicy(initial_seconds=5.0), cancel=cancel)
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(RetryCancelled):
        waiting.call("stage", lambda: psycopg.connect(closed, connect_timeout=2))


@pytest.mark.integration
@pytest.mark.slow
def test_flapping_postgres_connections_lose_nothing(spark, kafka_bootstrap, topic_names, pg_server, tmp_path):
    """Every backend of the graph database is terminated again and again while batches flow: staging
    connections on the executors and the driver's merge die mid-work; the retried batches lose nothing."""
    import threading
    import uuid

    from psycopg.conninfo import conninfo_to_dict

    dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    dbname = conninfo_to_dict(dsn)["dbname"]
    settings = test_settings(kafka_bootstrap, topic_names, dsn, str(tmp_path / "ck"), parquet_dir=str(tmp_path / "pq"),
                             max_offsets_per_trigger=60, postgres_retry_initial_seconds=0.1,
                             postgres_retry_max_interval_seconds=0.5)
    registry = CollectorRegistry()
    writer = GraphBatchWriter(settings, metrics_registry=registry)
    n = 600
    produce(kafka_bootstrap, topic_names["events"], [encode_single_object(run_event(job=f"f{i}")) for i in range(n)])
    stop = threading.Event()
    killed = [0]

    def terminator() -> None:
        with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
            while not stop.wait(0.05):
                killed[0] += sum(r[0] for r in admin.execute(
                    "SELECT pg_terminate_backend(pid)::int FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,)))

    query = start_query(spark, settings, writer)
    thread = threading.Thread(target=terminator, daemon=True)
    try:
        _wait(query, lambda: _events(dsn)[0] > 0, 180, "no first batch")
        thread.start()
        _wait(query, lambda: _retries(registry) >= 3 and killed[0] >= 3, 120, "no connection was killed")
        _wait(query, lambda: _events(dsn)[0] >= n // 2 or _retries(registry) >= 20, 180, "no progress")
        stop.set()
        thread.join(10)
        targets = drain_targets(settings)
        _wait(query, lambda: offsets_reached(committed_offsets(query), targets), 240, "no catch-up")
        writer.drain()   # the last batches' merges may still be retrying when their offsets are committed
        assert query.exception() is None and query.isActive
    finally:
        stop.set()
        writer.cancel()
        if query.isActive:
            query.stop()
    steps = {s.labels["step"]: s.value for m in registry.collect() if m.name == "lineage_sink_retries"
             for s in m.samples if s.name == "lineage_sink_retries_total"}
    print(f"backends terminated: {killed[0]}, retries per step: {steps}")
    assert _events(dsn) == (n, n)
    with psycopg.connect(dsn) as conn:
        assert {r[0] for r in conn.execute("SELECT job_name FROM lineage_events")} == {f"f{i}" for i in range(n)}
        assert conn.execute("SELECT count(*) FROM lineage_runs").fetchone()[0] == n
