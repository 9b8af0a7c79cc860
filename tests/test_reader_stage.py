"""Staging in the reader task (stream_processor/reader_stage.py): the same graph as the staging pass, keys, sweep."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import psycopg
import pytest

from benchmarks.e2e_bench import _demo_values
from stream_processor.decode import decode_record
from stream_processor.reader_stage import STAGE_KEY_BASE, SWEEP_SQL, ReaderStager, stage_key
from stream_processor.testing import StreamHarness, produce, test_settings
from stream_processor.writer import STAGE_KEY_METRIC, take_stage_keys

#: Columns that say which batch or which copy of a duplicate wrote a row, not what it is.
BOOKKEEPING = {"last_batch_id", "first_batch_id", "received_at", "source", "commit_seq"}
GRAPH = ("lineage_events", "lineage_namespaces", "lineage_datasets", "lineage_dataset_versions", "lineage_jobs",
         "lineage_job_versions", "lineage_runs", "lineage_run_io", "lineage_edges", "lineage_column_lineage",
         "lineage_provenance", "lineage_quality")
STAGING = ("stg_events", "stg_namespaces", "stg_datasets", "stg_dataset_versions", "stg_jobs", "stg_job_versions",
           "stg_runs", "stg_run_io", "stg_edges", "stg_column_lineage", "stg_provenance", "stg_event_keys",
           "stg_self_parts", "stg_reader_keys")


@pytest.mark.unit
def test_stage_keys_are_apart_from_batch_ids_and_new_for_a_batch_planned_anew():
    key = stage_key("events", 2, 100, 200, 1_700_000_000_000_000)
    assert STAGE_KEY_BASE <= key < 2 * STAGE_KEY_BASE   # stream batch ids are epoch * 2**40 + n, load ids negative
    assert key == stage_key("events", 2, 100, 200, 1_700_000_000_000_000)   # a retried task: the same key
    others = {stage_key("events", 2, 100, 200, 1_700_000_000_000_001), stage_key("events", 1, 100, 200, 1),
              stage_key("events", 2, 100, 201, 1_700_000_000_000_000), stage_key("other", 2, 100, 200, 1)}
    assert key not in others and len(others) == 4


@pytest.mark.unit
def test_the_staging_pass_counts_give_the_batch_its_keys():
    counts = {(STAGE_KEY_METRIC, str(STAGE_KEY_BASE + 5), ""): 3, (STAGE_KEY_METRIC, str(STAGE_KEY_BASE + 1), ""): 2,
              ("consumed", "t", "json"): 6}
    assert take_stage_keys(counts) == ([STAGE_KEY_BASE + 1, STAGE_KEY_BASE + 5], 5)
    assert counts == {("consumed", "t", "json"): 6}


def _rows(value: bytes, headers: list[tuple[str, bytes]] | None = None) -> list[dict[str, Any]]:
    rows = decode_record(value, headers or [])
    for i, row in enumerate(rows):
        row.update(source_topic="t", source_partition=0, source_offset=i, key=b"k", kafka_timestamp=None)
    return rows


@pytest.mark.unit
def test_the_stager_takes_plain_accepted_events_only():
    stager = ReaderStager("postgresql://unused/x", STAGE_KEY_BASE + 7, handover=True)
    demo = list(_demo_values(60))
    plain = next(v for v, h in demo if h is None and b'"$self"' not in v)
    evo = next((v, h) for v, h in demo if h is not None)
    (row,) = _rows(plain)
    text = row["event_json"]
    assert stager.take(row) is True
    assert row["event_json"] is None and row["stage_key"] == STAGE_KEY_BASE + 7 and "_event" not in row
    (event,) = stager.events
    assert event.text == text and event.event_hash == row["event_hash"] and event.source == "t[0]@0"
    assert set(stager.handover) == {row["event_hash"]}
    self_rows = _rows(*evo)
    assert self_rows and all(r["has_self"] for r in self_rows)
    assert not any(stager.take(r) for r in self_rows)        # `$self` parts: recombined in the store, as before
    assert all(r["event_json"] and r.get("stage_key") is None for r in self_rows)
    (bad,) = _rows(b'{"not": "an event"}')
    assert stager.take(bad) is False and len(stager.events) == 1


def _table(conn: psycopg.Connection, table: str) -> Counter:
    cur = conn.execute(f"SELECT * FROM {table}")   # our table names
    keep = [i for i, d in enumerate(cur.description) if d.name not in BOOKKEEPING]
    return Counter(tuple(str(row[i]) for i in keep) for row in cur)


@pytest.mark.integration
@pytest.mark.slow
def test_reader_staging_gives_the_graph_the_staging_pass_gives(spark, kafka_bootstrap, topic_names, pg_server,
                                                               tmp_path):
    # demo traffic: plain events, Evo `$self` documents, duplicates; plus messages the decoder rejects
    values = [(v, h, None) for v, h in _demo_values(1500)] + [(b"\x00garbage", None, None),
                                                            (b'{"not": "an event"}', None, None)]
    produce(kafka_bootstrap, topic_names["events"], values)
    graphs, harnesses = {}, {}
    for staging in (True, False):
        dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
        settings = test_settings(kafka_bootstrap, topic_names, dsn, str(tmp_path / f"ck-{staging}"),
                                 reader_staging=staging, max_offsets_per_trigger=400, recombine_quiet_seconds=1.0)
        with StreamHarness(spark, settings) as h:
            h.drain()
            h.wait_for(h.writer.settled, message="the `$self` groups were not emitted")
            h.drain(extra_batches=1)
        harnesses[staging] = h
        with psycopg.connect(dsn) as conn:
            graphs[staging] = {t: _table(conn, t) for t in GRAPH}
            left = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in STAGING}
            assert not any(left.values()), left      # every staged row was merged and cleared
            assert conn.execute("SELECT count(*) FROM lineage_staged_batches").fetchone()[0] == 0
    on, off = harnesses[True], harnesses[False]
    assert off.total("reader_staged") == 0
    # the plain events (after the dedupe) came staged by the readers; `$self` parts and rejects took the pass
    assert 0 < on.total("reader_staged") < on.total("consumed")
    for metric in ("consumed", "rejected", "self_parts", "recombined", "enriched"):
        assert on.total(metric) == off.total(metric), metric
    assert sum(r.result.events_in for r in on.reports) == sum(r.result.events_in for r in off.reports)
    assert sum(r.result.events_new for r in on.reports) == sum(r.result.events_new for r in off.reports)
    for table in GRAPH:
        assert graphs[True][table] == graphs[False][table], table
    assert sum(graphs[True]["lineage_events"].values()) > 1000


@pytest.mark.integration
def test_the_sweep_removes_old_keys_no_batch_took(pg_dsn):
    from sink.postgres import GraphStore

    store = GraphStore(pg_dsn)
    store.migrate()
    conn = store.conn
    orphan, held, young = STAGE_KEY_BASE + 11, STAGE_KEY_BASE + 12, STAGE_KEY_BASE + 13
    for key, age in ((orphan, "2 hours"), (held, "2 hours"), (young, "1 minute")):
        conn.execute("INSERT INTO stg_reader_keys (stage_key, staged_at) VALUES (%s, now() - %s::interval)",
                     (key, age))
        conn.execute("INSERT INTO stg_namespaces (batch_id, part, namespace, first_seen) VALUES (%s, 0, 'ns', now())",
                     (key,))
        conn.execute("INSERT INTO stg_event_keys (batch_id, part, event_hash, keys, record_key, record) "
                     "VALUES (%s, 0, 'h', '{}', NULL, '{}')", (key,))
    conn.execute("INSERT INTO lineage_staged_batches (batch_id, stage_keys, keyed_events) VALUES (42, %s, 1)",
                 ([held],))
    assert [k for (k,) in conn.execute(SWEEP_SQL).fetchall()] == [orphan]
    for table in ("stg_namespaces", "stg_event_keys"):
        assert sorted(k for (k,) in conn.execute(f"SELECT batch_id FROM {table}")) == [held, young]
    assert sorted(k for (k,) in conn.execute("SELECT stage_key FROM stg_reader_keys")) == [held, young]
    store.close()
