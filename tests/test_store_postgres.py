"""sink/postgres.py GraphStore against a real PostgreSQL (embedded, and the machine's 127.0.0.1:5432)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from schemas.identity import dataset_id, job_id
from sink.migrate import available_migrations
from sink.postgres import GraphStore
from tests.test_derive import NS, col_lineage_12, ds, run_event, stored

pytestmark = pytest.mark.integration

GRAPH_TABLES = ("lineage_namespaces", "lineage_datasets", "lineage_dataset_versions", "lineage_jobs",
                "lineage_job_versions", "lineage_runs", "lineage_run_io", "lineage_edges", "lineage_column_lineage",
                "lineage_provenance", "lineage_quality")


def snapshot(dsn: str, tables: tuple[str, ...] = GRAPH_TABLES + ("lineage_events",)) -> dict[str, list[tuple]]:
    """Every row of every table, as sorted text tuples (bookkeeping received_at excluded)."""
    out = {}
    with psycopg.connect(dsn) as conn:
        for table in tables:
            cols = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
                (table,)).fetchall() if r[0] != "received_at"]
            # bookkeeping last_batch_id last (columns added by later migrations come after it in the table)
            cols = [c for c in cols if c != "last_batch_id"] + ["last_batch_id"] * ("last_batch_id" in cols)
            rows = conn.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
            out[table] = sorted(tuple(str(v) for v in row) for row in rows)
    return out


def one(dsn: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchone()


def pipeline_events(run_id: str, t0: int = 0) -> list:
    """START / RUNNING / COMPLETE of one run reading orders and writing daily (aggregation)."""
    def t(minute: int) -> str:
        return f"2024-05-01T10:{minute + t0:02d}:00.000000Z"
    out = ds("public.daily", fields=["day", "total"],
             columnLineage=col_lineage_12("public.orders", {"day": [("day", "DIRECT", "IDENTITY")],
                                                            "total": [("amount", "DIRECT", "AGGREGATION")]}))
    out["outputFacets"] = {"outputStatistics": {"rowCount": 100}}
    jf = {"sql": {"query": "SELECT day, sum(amount) AS total FROM orders GROUP BY day"},
          "sourceCodeLocation": {"type": "git", "url": "https://git/etl", "version": "v1"}}
    ins = [ds("public.orders", fields=["day", "amount", "id"])]
    return [stored(run_event("START", t(0), run_id, inputs=ins, outputs=[out], job_facets=jf), "f:1"),
            stored(run_event("RUNNING", t(1), run_id, inputs=ins, outputs=[out], job_facets=jf), "f:2"),
            stored(run_event("COMPLETE", t(5), run_id, inputs=ins, outputs=[out], job_facets=jf,
                             run_facets={"errorMessage": {"message": "ignored on complete"}} if False else None),
                   "f:3")]


@pytest.fixture
def store(pg_dsn: str):
    with GraphStore(pg_dsn) as s:
        s.migrate()
        yield s


def test_write_batch_builds_the_graph(store, pg_dsn):
    rid = str(uuid.uuid4())
    result = store.write_batch(1, pipeline_events(rid), identity={"user": "tester"})
    assert (result.events_in, result.events_new, result.duplicates) == (3, 3, 0)
    assert result.rows_added > 10 and not result.already_committed
    state, started, ended, duration = one(
        pg_dsn, "SELECT state, started_at::text, ended_at::text, duration_ms FROM lineage_runs WHERE run_id = %s", rid)
    assert state == "COMPLETE" and duration == 5 * 60 * 1000
    assert started.startswith("2024-05-01 10:00:00") and ended.startswith("2024-05-01 10:05:00")
    edge = one(pg_dsn, "SELECT edge_type, transformation->>'type', metadata->>'duration_ms', metadata->>'records_processed'"
               " FROM lineage_edges WHERE kind = 'dataset'")
    assert edge == ("aggregated_from", "sql", "300000", "100")
    assert one(pg_dsn, "SELECT count(*) FROM lineage_edges WHERE kind IN ('reads', 'writes')")[0] == 2
    tx = one(pg_dsn, "SELECT identity->>'user', producers, events_new FROM lineage_transactions WHERE batch_id = 1")
    assert tx == ("tester", ["https://example.com/producer"], 3)


def test_run_state_machine_out_of_order(store, pg_dsn):
    rid = str(uuid.uuid4())
    start, running, complete = pipeline_events(rid)
    store.write_batch(1, [complete])
    assert one(pg_dsn, "SELECT state, ended_at IS NOT NULL, duration_ms FROM lineage_runs WHERE run_id = %s",
               rid) == ("COMPLETE", True, None)
    store.write_batch(2, [start])
    assert one(pg_dsn, "SELECT state, duration_ms FROM lineage_runs WHERE run_id = %s", rid) == ("COMPLETE", 300000)
    store.write_batch(3, [running])             # a late RUNNING never overwrites the terminal state
    assert one(pg_dsn, "SELECT state, state_time::text FROM lineage_runs WHERE run_id = %s", rid)[0] == "COMPLETE"
    # edge metadata picked up the duration known only after the START arrived
    assert one(pg_dsn, "SELECT metadata->>'duration_ms' FROM lineage_edges WHERE kind = 'dataset'")[0] == "300000"


def test_idempotent_replay_table_by_table(store, pg_dsn):
    events = pipeline_events(str(uuid.uuid4())) + pipeline_events(str(uuid.uuid4()), t0=10)
    store.write_batch(1, events)
    before = snapshot(pg_dsn)
    again = store.write_batch(2, list(reversed(events)))        # any replay, other order, new batch id
    assert (again.events_new, again.duplicates, again.rows_added, again.rows_modified) == (0, 6, 0, 0)
    same = store.write_batch(1, events)                         # the same batch id: already committed
    assert same.already_committed
    assert snapshot(pg_dsn) == before                           # last_batch_id included: unchanged


def test_duplicates_across_and_within_batches(store, pg_dsn):
    events = pipeline_events(str(uuid.uuid4()))
    first = store.write_batch(1, events[:2] + events[:1])
    assert (first.events_in, first.events_new, first.duplicates) == (3, 2, 1)
    second = store.write_batch(2, events)
    assert (second.events_in, second.events_new, second.duplicates) == (3, 1, 2)
    assert one(pg_dsn, "SELECT count(*) FROM lineage_events")[0] == 3


def test_placeholders_filled_later(store, pg_dsn):
    child, parent = str(uuid.uuid4()), str(uuid.uuid4())
    event = run_event("COMPLETE", "2024-05-01T10:00:00.000000Z", child, inputs=[ds("raw.src")], outputs=[ds("out")],
                      run_facets={"parent": {"run": {"runId": parent}, "job": {"namespace": "airflow", "name": "dag"}}})
    store.write_batch(1, [stored(event)])
    assert one(pg_dsn, "SELECT is_placeholder, job_id::text FROM lineage_runs WHERE run_id = %s", parent) == (
        True, job_id("airflow", "dag"))
    assert one(pg_dsn, "SELECT is_placeholder FROM lineage_jobs WHERE job_id = %s", job_id("airflow", "dag"))[0]
    assert one(pg_dsn, "SELECT is_placeholder FROM lineage_datasets WHERE dataset_id = %s",
               dataset_id(NS, "raw.src"))[0] is True
    # the parent's own events and the source's description arrive later (earlier event time)
    parent_event = run_event("START", "2024-05-01T09:59:00.000000Z", parent, job="dag")
    describe = {"eventTime": "2024-05-01T09:00:00.000000Z", "producer": "https://x/p", "schemaURL": "x",
                "dataset": {"namespace": NS, "name": "raw.src",
                            "facets": {"documentation": {"description": "raw feed"}}}}
    store.write_batch(2, [stored(parent_event), stored(describe)])
    assert one(pg_dsn, "SELECT is_placeholder, state FROM lineage_runs WHERE run_id = %s", parent) == (False, "START")
    assert one(pg_dsn, "SELECT is_placeholder FROM lineage_jobs WHERE job_id = %s", job_id("airflow", "dag"))[0] is False
    assert one(pg_dsn, "SELECT is_placeholder, description FROM lineage_datasets WHERE dataset_id = %s",
               dataset_id(NS, "raw.src")) == (False, "raw feed")
    assert one(pg_dsn, "SELECT parent_run_id::text FROM lineage_runs WHERE run_id = %s", child)[0] == parent


def test_aliases_resolve_to_one_node_across_batches(store, pg_dsn):
    physical = {"namespace": "s3://bucket", "name": "warehouse/orders",
                "facets": {"symlinks": {"identifiers": [{"namespace": "hive://ms", "name": "db.orders",
                                                         "type": "TABLE"}]}}}
    store.write_batch(1, [stored(run_event("COMPLETE", "2024-05-01T10:00:00.000000Z", str(uuid.uuid4()),
                                           job="spark.job", inputs=[ds("src")], outputs=[physical]))])
    # later: another producer names the physical path without symlinks, a third the table name
    store.write_batch(2, [
        stored(run_event("COMPLETE", "2024-05-01T11:00:00.000000Z", str(uuid.uuid4()), job="reader.a",
                         inputs=[{"namespace": "s3://bucket", "name": "warehouse/orders"}], outputs=[ds("a")])),
        stored(run_event("COMPLETE", "2024-05-01T11:00:00.000000Z", str(uuid.uuid4()), job="reader.b",
                         inputs=[{"namespace": "hive://ms", "name": "db.orders"}], outputs=[ds("b")])),
    ])
    canonical = dataset_id("hive://ms", "db.orders")
    assert one(pg_dsn, "SELECT alias_of::text FROM lineage_datasets WHERE dataset_id = %s",
               dataset_id("s3://bucket", "warehouse/orders"))[0] == canonical
    # every edge into a and b starts at the canonical node once aliases are resolved the readers' way
    sources = {r for (r,) in psycopg.connect(pg_dsn).execute(
        "SELECT DISTINCT coalesce(d.alias_of, d.dataset_id)::text FROM lineage_edges e"
        " JOIN lineage_datasets d ON d.dataset_id = e.source_node_id"
        " WHERE e.kind = 'dataset' AND e.target_node_id = ANY(%s)",
        ([dataset_id(NS, "a"), dataset_id(NS, "b")],)).fetchall()}
    assert sources == {canonical}
    assert one(pg_dsn, "SELECT alias_of IS NULL FROM lineage_datasets WHERE dataset_id = %s", canonical)[0]
    writer = one(pg_dsn, "SELECT count(*) FROM lineage_edges WHERE kind = 'writes' AND target_node_id = %s", canonical)
    assert writer[0] == 1


def test_edge_validity_when_new_job_version_stops_reading(store, pg_dsn):
    def ev(time: str, version: str, inputs: list[str]) -> Any:
        return stored(run_event("COMPLETE", time, str(uuid.uuid4()), job="report.job",
                                inputs=[ds(n) for n in inputs], outputs=[ds("report")],
                                job_facets={"sourceCodeLocation": {"type": "git", "url": "https://g", "version": version}}))
    v1 = ev("2024-05-01T10:00:00.000000Z", "v1", ["a", "b"])
    store.write_batch(1, [v1])
    store.write_batch(2, [ev("2024-05-02T10:00:00.000000Z", "v2", ["a"])])
    rows = dict(psycopg.connect(pg_dsn).execute(
        "SELECT source_node_id::text, valid_to::text FROM lineage_edges WHERE kind = 'dataset'").fetchall())
    assert rows[dataset_id(NS, "a")] is None
    assert rows[dataset_id(NS, "b")].startswith("2024-05-02 10:00:00")
    # replaying the v1 batch later changes nothing about today's graph
    before = snapshot(pg_dsn)
    store.write_batch(3, [v1])
    assert snapshot(pg_dsn, GRAPH_TABLES) == {k: v for k, v in before.items() if k in GRAPH_TABLES}


def test_quality_against_previous_version_from_earlier_batch(store, pg_dsn):
    def ev(time: str, version: str, rows: int, nulls: int, fields: list[str]) -> Any:
        out = ds("metrics", fields=fields, version={"datasetVersion": version},
                 dataQualityMetrics={"rowCount": rows, "columnMetrics": {"a": {"nullCount": nulls}}})
        return stored(run_event("COMPLETE", time, str(uuid.uuid4()), outputs=[out]))
    store.write_batch(1, [ev("2024-05-01T10:00:00.000000Z", "1", 1000, 0, ["a", "b"])])
    store.write_batch(2, [ev("2024-05-02T10:00:00.000000Z", "2", 100, 50, ["a"])])
    metrics, anomalies = one(pg_dsn, "SELECT q.metrics, q.anomalies FROM lineage_quality q "
                             "JOIN lineage_dataset_versions v USING (version_id) WHERE v.version = '2'")
    assert metrics["completeness"] == pytest.approx(0.5) and metrics["consistency"] == 0.5
    assert {(a["type"], a["severity"]) for a in anomalies} == {("missing", "critical"), ("invalid", "high"),
                                                                 ("invalid", "medium")}


def test_stage_partition_and_merge(store, pg_dsn):
    events = pipeline_events(str(uuid.uuid4()))
    assert GraphStore.stage_partition(pg_dsn, 7, 0, events[:2]) > 0
    GraphStore.stage_partition(pg_dsn, 7, 1, events[2:])
    GraphStore.stage_partition(pg_dsn, 7, 1, events[2:])           # a retried task replaces its rows
    result = store.merge(7, identity={"app": "spark"})
    assert (result.events_in, result.events_new) == (3, 3)
    assert one(pg_dsn, "SELECT count(*) FROM stg_events")[0] == 0
    assert one(pg_dsn, "SELECT state FROM lineage_runs")[0] == "COMPLETE"


def test_concurrent_writers_overlapping_batches(pg_dsn):
    with GraphStore(pg_dsn) as s:
        s.migrate()
    runs = [str(uuid.uuid4()) for _ in range(30)]
    shared = [e for r in runs for e in pipeline_events(r)]
    batches = {1: shared[: len(shared) * 2 // 3], 2: shared[len(shared) // 3:]}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def writer(batch_id: int) -> None:
        try:
            with GraphStore(pg_dsn) as s:
                barrier.wait(timeout=30)
                for i in range(3):
                    s.write_batch(batch_id * 10 + i, list(reversed(batches[batch_id])) if i % 2 else batches[batch_id])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    concurrent = snapshot(pg_dsn, GRAPH_TABLES)
    # the same events written once by a single writer give the same graph (bookkeeping aside)
    assert one(pg_dsn, "SELECT count(*) FROM lineage_events")[0] == len(shared)
    assert one(pg_dsn, "SELECT count(*) FROM lineage_runs WHERE state = 'COMPLETE' AND duration_ms = 300000")[0] == 30
    assert _bookkept(concurrent) == _bookkept(_written_once(pg_dsn, shared))


def _written_once(pg_dsn: str, events: list) -> dict:
    """The graph tables' rows after emptying them and writing ``events`` in one batch by one writer."""
    with psycopg.connect(pg_dsn) as conn:
        for t in GRAPH_TABLES:
            conn.execute(f"TRUNCATE {t}")
        conn.execute("TRUNCATE lineage_events, lineage_transactions")
    with GraphStore(pg_dsn) as s:
        s.write_batch(99, events)
    return snapshot(pg_dsn, GRAPH_TABLES)


def _bookkept(snap: dict) -> dict:
    """``snap`` without ``last_batch_id`` (each row's last column): bookkeeping that differs by construction."""
    return {t: sorted(r[:-1] for r in rows) for t, rows in snap.items()}


def test_external_dsn_system_postgres(system_pg_dsn):
    with GraphStore(system_pg_dsn) as s:
        assert s.migrate() == [m.version for m in available_migrations()]
        assert s.migrate() == []
        rid = str(uuid.uuid4())
        s.write_batch(1, pipeline_events(rid))
        assert one(system_pg_dsn, "SELECT state FROM lineage_runs WHERE run_id = %s", rid)[0] == "COMPLETE"


def _demo_events(n: int) -> list:
    import json as _json

    from producers.demo import DemoTraffic
    from schemas.codec import SUBJECT_HEADER, decode_message
    from schemas.validate import validate_message
    from tests.test_derive import stored as _stored

    out = []
    for i, message in enumerate(DemoTraffic(seed=3).take(n)):
        headers = [(SUBJECT_HEADER, _json.dumps(message.subject).encode())] if message.subject else None
        for decoded in decode_message(_json.dumps(message.value).encode(), headers):
            out.append(_stored(validate_message(decoded), f"demo@{i}"))
    return out


def test_arrival_order_and_batching_do_not_change_the_graph(pg_server):
    import random

    events = _demo_events(400)          # symlinks included: alias resolution is per event
    one_batch, shuffled = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}"), \
        pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    with GraphStore(one_batch) as s:
        s.migrate()
        s.write_batch(1, events)
    mixed = events[:]
    random.Random(5).shuffle(mixed)
    with GraphStore(shuffled) as s:
        s.migrate()
        for i in range(0, len(mixed), 37):
            s.write_batch(i + 1, mixed[i:i + 37])

    def strip(snap):
        return {t: sorted(r[:-1] for r in rows) for t, rows in snap.items()}
    a, b = strip(snapshot(one_batch, GRAPH_TABLES)), strip(snapshot(shuffled, GRAPH_TABLES))
    for table in GRAPH_TABLES:
        assert a[table] == b[table], table
    assert len(a["lineage_edges"]) > 50 and len(a["lineage_quality"]) > 10


def test_parts_sharing_some_keys_merge_as_one_part(pg_dsn):
    """A batch staged by several parts (the Kafka partitions of a micro-batch): keys staged by one part take the
    one-row projection, keys staged by several are aggregated (sink/postgres.py ``_reduce``); the graph is the
    one the same events give staged by a single part."""
    with GraphStore(pg_dsn) as s:
        s.migrate()
    runs = [str(uuid.uuid4()) for _ in range(12)]
    events = [e for r in runs for e in pipeline_events(r)]      # runs share their datasets and jobs
    for part in range(3):   # START and COMPLETE of a run in different parts; run 0's events twice (parts 0 and 1)
        GraphStore.stage_partition(pg_dsn, 5, part, events[part::3] + (events[:3] if part == 1 else []))
    with GraphStore(pg_dsn) as s:
        assert s.merge(5).events_new == len(events)
    parts = snapshot(pg_dsn, GRAPH_TABLES)
    assert one(pg_dsn, "SELECT count(*) FROM lineage_runs WHERE state = 'COMPLETE' AND duration_ms = 300000")[0] == 12
    assert _bookkept(parts) == _bookkept(_written_once(pg_dsn, events))
