"""SIGKILL `lineage process` at random points under steady traffic, three times, restarting it each time.

At the end (drained with ``--available-now``) the PostgreSQL graph and the Parquet tables must equal
those of a clean run over the same input into a fresh database and Parquet dir: row counts per
table, and the contents of lineage_events / lineage_runs / lineage_edges (batch bookkeeping columns
aside, which depend on how the input was cut into batches).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from schemas.codec import encode_single_object
from sink.parquet import TABLES, ParquetGraphStore
from stream_processor.testing import StreamHarness, produce, run_event, start_processor, test_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Tables that log the batches themselves (one row per committed batch): they depend on how the input
#: was cut into batches, so only their presence is compared.
BATCH_LOGS = {"lineage_transactions"}
#: Columns that record *which batch* / when a row was written, not what it is.
BOOKKEEPING = {"last_batch_id", "first_batch_id", "received_at"}
COMPARED = ("lineage_events", "lineage_runs", "lineage_edges")


def _count(dsn: str) -> int:
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            return int(conn.execute("SELECT count(*) FROM lineage_events").fetchone()[0])
    except (psycopg.errors.UndefinedTable, psycopg.OperationalError):
        return 0


def _start(bootstrap: str, topics: dict[str, str], dsn: str, work: Path, log_name: str, *extra: str
           ) -> subprocess.Popen:
    return start_processor(bootstrap, topics, dsn, work, log_name, *extra, max_offsets_per_trigger=200)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # no clean stop: the JVM and the Python workers die with it
    proc.wait(30)


def _drain(bootstrap: str, topics: dict[str, str], dsn: str, work: Path, log_name: str) -> None:
    proc = _start(bootstrap, topics, dsn, work, log_name, "--available-now", "--max-offsets-per-trigger", "2000")
    try:
        assert proc.wait(240) == 0, (work / log_name).read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill(proc)


def _pg_rows(dsn: str, table: str) -> Counter:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(f"SELECT * FROM {table}")  # table names are our constants
        names = [d.name for d in cur.description]
        keep = [i for i, n in enumerate(names) if n not in BOOKKEEPING]
        return Counter(tuple(str(row[i]) for i in keep) for row in cur)


def _pg_counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_name LIKE 'lineage%' AND table_name NOT LIKE '%staging%' ORDER BY 1")
            if r[0] not in BATCH_LOGS]
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables}


def _parquet_rows(root: Path, table: str) -> Counter:
    data = ParquetGraphStore(str(root)).read_table(table).to_pylist()
    return Counter(tuple(str(v) for k, v in sorted(row.items()) if k not in BOOKKEEPING and not k.startswith("_"))
                   for row in data)


class _Traffic(threading.Thread):
    """Produces about ``rate`` valid events per second until stopped; remembers how many."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = [encode_single_object(run_event(job=f"j{self.sent + i}", outputs=(f"o{(self.sent + i) % 50}",)))
                         for i in range(max(self.rate // 5, 1))]
                self.sent += produce(self.bootstrap, self.topic, batch)
                self.stop.wait(0.2)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_three_sigkills_under_traffic_equal_a_clean_run(spark, kafka_bootstrap, topic_names, pg_server, tmp_path):
    seed = int(os.environ.get("LINEAGE_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    crashed_dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    clean_dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    crashed, clean = tmp_path / "crashed", tmp_path / "clean"
    crashed.mkdir()
    clean.mkdir()

    traffic = _Traffic(kafka_bootstrap, topic_names["events"], rate=10)
    traffic.start()
    seen = 0
    try:
        for kill in range(3):
            proc = _start(kafka_bootstrap, topic_names, crashed_dsn, crashed, f"run{kill}.log")
            try:
                deadline = time.monotonic() + 150
                while time.monotonic() < deadline and _count(crashed_dsn) <= seen:
                    assert proc.poll() is None, (crashed / f"run{kill}.log").read_text()[-3000:]
                    time.sleep(0.3)
                assert _count(crashed_dsn) > seen, f"run {kill} made no progress (seed {seed})"
                time.sleep(rng.uniform(0.0, 4.0))  # a random point in the batch cycle
            finally:
                _kill(proc)
            seen = _count(crashed_dsn)
            print(f"kill {kill + 1}: {seen} events in the graph, {traffic.sent} produced (seed {seed})")
    finally:
        traffic.stop.set()
        traffic.join(60)
    assert traffic.error is None, traffic.error
    total = traffic.sent
    assert seen < total, "the kills must land while events are still unprocessed"

    _drain(kafka_bootstrap, topic_names, crashed_dsn, crashed, "final.log")
    # the clean run: the same query in this process's (warm) Spark session, fresh database and dirs
    settings = test_settings(kafka_bootstrap, topic_names, clean_dsn, str(clean / "ck"),
                             parquet_dir=str(clean / "pq"), recombine_quiet_seconds=1.0,
                             max_offsets_per_trigger=2000)
    with StreamHarness(spark, settings) as harness:
        harness.drain(timeout_seconds=240, extra_batches=2)
        assert harness.query.exception() is None

    with psycopg.connect(crashed_dsn) as conn:
        n, distinct = conn.execute("SELECT count(*), count(DISTINCT event_hash) FROM lineage_events").fetchone()
        jobs = {r[0] for r in conn.execute("SELECT job_name FROM lineage_events")}
    assert (n, distinct) == (total, total), f"seed {seed}"
    assert jobs == {f"j{i}" for i in range(total)}
    counts = _pg_counts(crashed_dsn)
    assert counts == _pg_counts(clean_dsn), f"seed {seed}"
    assert counts["lineage_runs"] == total
    for table in COMPARED:
        assert _pg_rows(crashed_dsn, table) == _pg_rows(clean_dsn, table), f"{table} differs (seed {seed})"
    for table in TABLES:
        got, want = _parquet_rows(crashed / "pq", table), _parquet_rows(clean / "pq", table)
        assert sum(got.values()) == sum(want.values()), f"parquet {table} row count (seed {seed})"
        assert got == want, f"parquet {table} differs (seed {seed})"
    assert sum(_parquet_rows(crashed / "pq", "lineage_events").values()) == total
