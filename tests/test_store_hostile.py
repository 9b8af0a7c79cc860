"""Hostile input to the store: stored verbatim or rejected clearly, never executed, never corrupting others."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from schemas.identity import dataset_id
from sink.postgres import GraphStore
from tests.test_derive import NS, ds, run_event, stored

pytestmark = pytest.mark.integration

HOSTILE_NAMES = [
    "public.\"quoted\" 'single'",
    "x'); DROP TABLE lineage_events; --",
    "semi;colon;name",
    "tab\there\nnewline\rcr\\backslash\\N\\.",
    "日本語のテーブル.売上",
    "таблица.заказы",
    "جدول.الطلبات",
    "emoji 🚀 table",
    "long." + "x" * 10_240,
]


@pytest.fixture
def store(pg_dsn: str):
    with GraphStore(pg_dsn) as s:
        s.migrate()
        yield s


def test_hostile_names_stored_verbatim(store, pg_dsn):
    rid = str(uuid.uuid4())
    event = run_event("COMPLETE", "2024-05-01T10:00:00.000000Z", rid, job="job;'\"\\\t",
                      inputs=[ds(n, fields=["a\tb", "c\\d"]) for n in HOSTILE_NAMES],
                      outputs=[ds("out", fields=["a"])],
                      job_facets={"sql": {"query": "SELECT 1; DROP TABLE lineage_runs; -- \\\t\n"},
                                  "documentation": {"description": "d" * 10_240}})
    result = store.write_batch(1, [stored(event)])
    assert result.events_new == 1 and result.rows_by_table["rejected_events"] == 0
    with psycopg.connect(pg_dsn) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM lineage_datasets WHERE namespace = %s", (NS,))}
        assert names == set(HOSTILE_NAMES) | {"out"}
        for name in HOSTILE_NAMES:
            row = conn.execute("SELECT dataset_id::text, fields->0->>'name' FROM lineage_datasets WHERE name = %s",
                               (name,)).fetchone()
            assert row == (dataset_id(NS, name), "a\tb")
        assert conn.execute("SELECT transformation->>'logic' FROM lineage_edges WHERE kind = 'dataset' LIMIT 1"
                            ).fetchone()[0] == "SELECT 1; DROP TABLE lineage_runs; -- \\\t\n"
        assert conn.execute("SELECT count(*) FROM lineage_runs").fetchone()[0] == 1
        assert conn.execute("SELECT payload::jsonb->'job'->>'name' FROM lineage_events").fetchone()[0] == "job;'\"\\\t"


def test_nul_byte_event_rejected_others_stored(store, pg_dsn):
    good = stored(run_event("COMPLETE", "2024-05-01T10:00:00.000000Z", str(uuid.uuid4()), outputs=[ds("good")]), "f:1")
    nul = stored(run_event("COMPLETE", "2024-05-01T10:00:00.000000Z", str(uuid.uuid4()),
                           outputs=[ds("bad\x00name")]), "f:2")
    surrogate = stored(run_event("COMPLETE", "2024-05-01T10:00:00.000000Z", str(uuid.uuid4()),
                                 outputs=[ds("lone\ud800")]), "f:3")
    result = store.write_batch(1, [good, nul, surrogate])
    assert result.events_in == 1 and result.rows_by_table["rejected_events"] == 2
    assert [(s, e.code) for s, e in store.last_rejections] == [("f:2", "validation.unstorable"),
                                                               ("f:3", "validation.unstorable")]
    with psycopg.connect(pg_dsn) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM lineage_datasets")] == ["good"]


def test_one_megabyte_of_facets(store, pg_dsn):
    big = {f"facet{i}": {"_producer": "https://x/p", "blob": "z" * 1000, "i": i} for i in range(1024)}
    event = run_event("COMPLETE", "2024-05-01T10:00:00.000000Z", str(uuid.uuid4()), outputs=[ds("big", **big)],
                      run_facets={"custom": {"payload": "y" * 50_000}})
    result = store.write_batch(1, [stored(event)])
    assert result.events_new == 1
    with psycopg.connect(pg_dsn) as conn:
        size = conn.execute("SELECT octet_length(payload::text) FROM lineage_events").fetchone()[0]
        assert size > 1_000_000
        assert conn.execute("SELECT is_placeholder FROM lineage_datasets WHERE name = 'big'").fetchone()[0] is False


def test_parent_run_never_seen(store, pg_dsn):
    parent = str(uuid.uuid4())
    child = str(uuid.uuid4())
    event = run_event("START", "2024-05-01T10:00:00.000000Z", child,
                      run_facets={"parent": {"run": {"runId": parent}, "job": {"namespace": "ns", "name": "p"},
                                             "root": {"run": {"runId": parent}, "job": {"namespace": "ns", "name": "p"}}}})
    store.write_batch(1, [stored(event)])
    with psycopg.connect(pg_dsn) as conn:
        rows = dict(conn.execute("SELECT run_id::text, is_placeholder FROM lineage_runs").fetchall())
        assert rows == {parent: True, child: False}
        assert conn.execute("SELECT root_run_id::text FROM lineage_runs WHERE run_id = %s", (child,)).fetchone()[0] == parent
