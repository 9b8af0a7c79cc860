"""Provenance write kinds (issue 15, item 5): the earliest write of a dataset in event time is ``created``,
later writes ``modified``; ``lifecycleStateChange`` CREATE/OVERWRITE/DROP wins; arrival order is irrelevant.

Resolved in the store's merge (sink/postgres.py ``RESOLVE_WRITE_KINDS``, migration 009), so every writer
(the stream's staged merge, ``lineage load``) and every reader (queries, exports, Parquet) agree.
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from lineage.cli import main
from sink.postgres import GraphStore
from tests.test_derive import ds, run_event, stored

pytestmark = pytest.mark.integration


def _write(day: int, name: str = "orders", **facets) -> dict:
    return run_event("COMPLETE", f"2024-07-{day:02d}T00:00:00Z", str(uuid.uuid4()), job=f"writer{day}",
                     inputs=[ds("raw")], outputs=[ds(name, **facets)])


def _kinds(dsn: str, name: str = "orders") -> list[tuple[str, str]]:
    """``(event day, event_type)`` of the write records of dataset ``name``, in event time."""
    with psycopg.connect(dsn) as conn:
        return [(str(t.day), k) for t, k in conn.execute(
            "SELECT p.event_time, p.event_type FROM lineage_provenance p JOIN lineage_datasets d "
            "ON d.dataset_id = p.node_id WHERE d.name = %s AND p.event_type <> 'accessed' "
            "ORDER BY p.event_time", (name,)).fetchall()]


@pytest.fixture
def store(pg_dsn: str):
    with GraphStore(pg_dsn) as s:
        s.migrate()
        yield s


def test_earliest_write_is_created_whatever_the_arrival_order(store, pg_dsn):
    store.write_batch(1, [stored(_write(5))])
    assert _kinds(pg_dsn) == [("5", "created")]
    store.write_batch(2, [stored(_write(9))])
    assert _kinds(pg_dsn) == [("5", "created"), ("9", "modified")]
    # a late-arriving earlier write becomes created; the former created becomes modified
    late = _write(2)
    store.write_batch(3, [stored(late)])
    assert _kinds(pg_dsn) == [("2", "created"), ("5", "modified"), ("9", "modified")]
    # ... and the change of the old record is exported with the batch that made it (Parquet, graph topic)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM lineage_provenance WHERE last_batch_id = 3").fetchone()[0] == 3
    # inputs stay accessed
    with psycopg.connect(pg_dsn) as conn:
        assert {k for (k,) in conn.execute("SELECT DISTINCT p.event_type FROM lineage_provenance p JOIN "
                                           "lineage_datasets d ON d.dataset_id = p.node_id WHERE d.name = 'raw'")} \
            == {"accessed"}
    # a replay (the same event again, in a new batch) changes nothing
    store.write_batch(4, [stored(late)])
    assert _kinds(pg_dsn) == [("2", "created"), ("5", "modified"), ("9", "modified")]


def test_lifecycle_state_change_wins(store, pg_dsn):
    lifecycle = {"lifecycleStateChange": {"lifecycleStateChange": "OVERWRITE"}}
    drop = {"lifecycleStateChange": {"lifecycleStateChange": "DROP"}}
    store.write_batch(1, [stored(_write(3, **lifecycle)), stored(_write(6, **drop)), stored(_write(8))])
    assert _kinds(pg_dsn) == [("3", "created"), ("6", "deleted"), ("8", "modified")]
    # an earlier plain write arrives: it is the first write (created); OVERWRITE stays created, DROP deleted
    store.write_batch(2, [stored(_write(1))])
    assert _kinds(pg_dsn) == [("1", "created"), ("3", "created"), ("6", "deleted"), ("8", "modified")]
    # an explicit DROP as the earliest write stays deleted
    store.write_batch(3, [stored(_write(4, name="tmp", **drop)), stored(_write(5, name="tmp"))])
    assert _kinds(pg_dsn, "tmp") == [("4", "deleted"), ("5", "modified")]


def test_created_through_lineage_load_in_reverse_file_order(tmp_path, pg_dsn, capsys):
    events = [_write(day) for day in (20, 15, 10)]   # latest first, one per batch
    (tmp_path / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    assert main(["load", str(tmp_path), "--postgres-dsn", pg_dsn, "--batch-size", "1", "--engine", "local"]) == 0
    capsys.readouterr()
    assert _kinds(pg_dsn) == [("10", "created"), ("15", "modified"), ("20", "modified")]
