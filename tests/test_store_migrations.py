"""sink/migrate.py: versioned, append-only migrations; an older database is upgraded in place."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from schemas.identity import dataset_id
from sink.derive import STAGING_COLUMNS
from sink.migrate import available_migrations
from sink.postgres import GraphStore
from tests.test_derive import NS, col_lineage_12, ds, run_event, stored

pytestmark = pytest.mark.integration


def test_numbered_files_in_order():
    versions = [m.version for m in available_migrations()]
    assert versions == sorted(versions) and versions[:2] == [1, 2]


def test_older_database_upgraded_in_place(pg_dsn):
    with GraphStore(pg_dsn) as store:
        assert store.migrate(up_to=1) == [1]
        node = dataset_id(NS, "legacy.table")
        with psycopg.connect(pg_dsn) as conn:   # data written by the 001-only version
            conn.execute("INSERT INTO lineage_datasets (dataset_id, namespace, name, qualified_name, description,"
                         " first_seen, last_seen, facets_time) VALUES (%s, %s, %s, %s, 'old description',"
                         " '2020-01-01Z', '2020-01-01Z', '2020-01-01Z')",
                         (node, NS, "legacy.table", f"{NS}/legacy.table"))
            assert conn.execute("SELECT to_regclass('stg_events')").fetchone()[0] is None
        assert store.migrate() == [v.version for v in available_migrations()][1:]
        assert store.migrate() == []
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute("SELECT description, first_seen::date::text FROM lineage_datasets WHERE dataset_id = %s",
                                (node,)).fetchone() == ("old description", "2020-01-01")
            assert [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")] == \
                [m.version for m in available_migrations()]
        # the upgraded database takes new batches on top of the old rows
        store.write_batch(1, [stored(run_event("COMPLETE", "2024-01-01T00:00:00.000000Z", str(uuid.uuid4()),
                                               inputs=[ds("legacy.table")], outputs=[ds("new.table")]))])
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT description, first_seen::date::text, last_seen::date::text FROM lineage_datasets"
                               " WHERE dataset_id = %s", (node,)).fetchone()
            assert row == ("old description", "2020-01-01", "2024-01-01")


def test_concurrent_starters_apply_each_migration_once(pg_dsn):
    results: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def start() -> None:
        try:
            with GraphStore(pg_dsn) as store:
                barrier.wait(timeout=30)
                results.append(store.migrate())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    applied = sorted(v for r in results for v in r)
    assert applied == [m.version for m in available_migrations()]


def test_staging_columns_match_the_ddl(pg_dsn):
    with GraphStore(pg_dsn) as store:
        store.migrate()
        for table, columns in STAGING_COLUMNS.items():
            ddl = [r[0] for r in store.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
                (table,)).fetchall()]
            assert ddl == ["batch_id", "part", *columns], table


def test_document_columns_collect_no_statistics(pg_dsn):
    """Migration 014: ANALYZE skips the jsonb documents and the event texts (their statistics were never used and
    were most of autoanalyze's cost); the key columns keep theirs, and ANALYZE still runs."""
    with GraphStore(pg_dsn) as store:
        store.migrate()
        store.write_batch(1, [stored(run_event("COMPLETE", "2024-01-01T00:00:00.000000Z", str(uuid.uuid4()),
                                               inputs=[ds("in.table")], outputs=[ds("out.table")]))])
        targets = dict(((t, c), s) for t, c, s in store.conn.execute(
            "SELECT c.relname, a.attname, a.attstattarget FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relname IN ('lineage_events', 'lineage_provenance', 'lineage_quality',"
            " 'lineage_dataset_versions') AND a.attnum > 0 AND NOT a.attisdropped").fetchall())
        for doc in [("lineage_events", "payload"), ("lineage_provenance", "agent"), ("lineage_provenance", "context"),
                    ("lineage_quality", "metrics"), ("lineage_dataset_versions", "fields")]:
            assert targets[doc] == 0, doc
        # NULL (or -1 before PostgreSQL 17): the default target, as every key column keeps
        for key in [("lineage_events", "event_hash"), ("lineage_provenance", "node_id"),
                    ("lineage_dataset_versions", "dataset_id")]:
            assert targets[key] in (None, -1), key
        store.conn.execute("ANALYZE lineage_provenance")
        analysed = {r[0] for r in store.conn.execute(
            "SELECT attname FROM pg_stats WHERE tablename = 'lineage_provenance'").fetchall()}
        assert "node_id" in analysed and "agent" not in analysed and "operation" not in analysed
        store.conn.commit()


def _hot_updates(dsn: str, table: str) -> tuple[int, int]:
    """``(updates, HOT updates)`` of ``table`` as the statistics system has them (flushed by the writers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s",
                           (table,)).fetchone()
        return int(row[0]), int(row[1])


def test_re_merged_rows_are_updated_in_place_and_still_exported(pg_dsn):
    """Migration 015: a column edge, dataset or job a later batch touches again is a HOT update (PostgreSQL 16+,
    the BRIN index on last_batch_id does not block it), and the batch's export still finds exactly its rows."""
    from sink.parquet import changed_rows

    out = ds("hot.target", columnLineage=col_lineage_12("hot.source", {"day": [("day", "DIRECT", "IDENTITY")],
                                                                        "n": [("n", "INDIRECT", "AGGREGATION")]}))
    with GraphStore(pg_dsn) as store:
        store.migrate()
        version = store.conn.execute("SHOW server_version_num").fetchone()[0]
        kinds = {r[0]: r[1] for r in store.conn.execute(
            "SELECT c.relname, am.amname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am am ON am.oid = c.relam JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = i.indkey[0] WHERE a.attname = 'last_batch_id'").fetchall()}
        assert {kinds[f"{t}_batch_brin"] for t in ("lineage_column_lineage", "lineage_datasets", "lineage_jobs",
                                                      "lineage_runs")} \
            == {"brin"}
        assert "lineage_column_lineage_batch" not in kinds and kinds["lineage_edges_batch"] == "btree"
        before = _hot_updates(pg_dsn, "lineage_column_lineage")
        for batch, day in ((101, "01"), (102, "02"), (103, "03")):
            store.write_batch(batch, [stored(run_event("COMPLETE", f"2024-02-{day}T00:00:00.000000Z",
                                                       str(uuid.uuid4()), inputs=[ds("hot.source")], outputs=[out]))])
            store.conn.execute("SELECT pg_stat_force_next_flush()")
        store.conn.commit()
        exported = changed_rows(pg_dsn, 103, ["lineage_column_lineage", "lineage_nodes"])
        assert sorted(exported["lineage_column_lineage"].column("target_column").to_pylist()) == ["day", "n"]
        assert set(exported["lineage_column_lineage"].column("last_batch_id").to_pylist()) == {103}
        names = set(exported["lineage_nodes"].column("name").to_pylist())
        assert {"hot.source", "hot.target", "etl.job"} <= names
        assert changed_rows(pg_dsn, 102, ["lineage_column_lineage"])["lineage_column_lineage"].num_rows == 0
    if int(version) < 160000:
        return   # PostgreSQL 14 / 15: a BRIN-indexed column still blocks HOT
    for _ in range(50):
        updates, hot = _hot_updates(pg_dsn, "lineage_column_lineage")
        if updates - before[0] >= 4:
            break
        time.sleep(0.1)
    assert updates - before[0] >= 4 and hot - before[1] >= 4, (before, updates, hot)
