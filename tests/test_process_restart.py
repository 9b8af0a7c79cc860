"""Kill `lineage process` mid-stream (SIGKILL), start it again: the graph holds every event exactly once."""

from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.testing import produce, run_event, start_processor

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _count(dsn: str) -> tuple[int, int]:
    try:
        with psycopg.connect(dsn) as conn:
            return conn.execute("SELECT count(*), count(DISTINCT event_hash) FROM lineage_events").fetchone()
    except psycopg.errors.UndefinedTable:
        return (0, 0)


def _start(kafka_bootstrap, topic_names, pg_dsn, tmp_path, log_name, *extra):
    return start_processor(kafka_bootstrap, topic_names, pg_dsn, tmp_path, log_name, *extra)


def test_sigkill_mid_stream_then_restart_gives_every_event_once(kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    n = 1500
    produce(kafka_bootstrap, topic_names["events"], [encode_single_object(run_event(job=f"r{i}")) for i in range(n)])
    first = _start(kafka_bootstrap, topic_names, pg_dsn, tmp_path, "first.log")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and _count(pg_dsn)[0] == 0:
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.5)
        assert 0 < _count(pg_dsn)[0] < n, "the kill must land mid-stream"
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # no clean stop: the JVM and workers die with it
        first.wait(30)
    partial = _count(pg_dsn)[0]
    second = _start(kafka_bootstrap, topic_names, pg_dsn, tmp_path, "second.log", "--available-now")
    try:
        assert second.wait(300) == 0, (tmp_path / "second.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    total, distinct = _count(pg_dsn)
    assert (total, distinct) == (n, n), f"after restart (had {partial} before the kill)"
    with psycopg.connect(pg_dsn) as conn:
        jobs = {r[0] for r in conn.execute("SELECT job_name FROM lineage_events")}
    assert jobs == {f"r{i}" for i in range(n)}
