"""Migration 017: the staging tables in four batch slots, a merged batch's slot TRUNCATEd when it has it to itself.

Against a real PostgreSQL (the embedded server): the slot a batch is staged in, the TRUNCATE that empties it after its
merge (a new relfilenode, no deleted tuples), the DELETE it falls back to when the slot holds another batch's rows or
someone else holds a lock on it (without waiting), staging in another slot while a merge holds its slot's lock, a
batch smaller than TRUNCATE_MIN_ROWS DELETEd (the tests of the TRUNCATE lower the threshold to 0, ``truncate_small``),
and rows staged before the migration moved into their slots.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

import sink.postgres
from sink.derive import STAGING_COLUMNS
from sink.postgres import HANDOVER_TABLE, STAGING_SLOTS, GraphStore, clear_slot, slotted, staging_slot
from tests.test_store_postgres import one, pipeline_events

pytestmark = pytest.mark.integration


@pytest.fixture
def store(pg_dsn: str):
    with GraphStore(pg_dsn) as s:
        s.migrate()
        yield s


@pytest.fixture
def truncate_small(monkeypatch):
    """The slot of a batch of any size TRUNCATEd (these tests' batches are a few events)."""
    monkeypatch.setattr(sink.postgres, "TRUNCATE_MIN_ROWS", 0)


def _relfilenode(dsn: str, table: str) -> int:
    return one(dsn, "SELECT relfilenode FROM pg_class WHERE relname = %s", table)[0]


def _staged(dsn: str, batch_id: int) -> int:
    return one(dsn, "SELECT count(*) FROM stg_events WHERE batch_id = %s", batch_id)[0]


def test_slot_names():
    assert [staging_slot(b) for b in (0, 1, 4, 7, -1, -3, -4, 2**40 + 5)] == [0, 1, 0, 3, 3, 1, 0, 1]
    assert STAGING_SLOTS == 4
    sql = "SELECT 1 FROM stg_events e JOIN stg_event_keys k USING (event_hash), stg_datasets, stg_dataset_versions"
    assert slotted(sql, 6) == ("SELECT 1 FROM stg_events_s2 e JOIN stg_event_keys_s2 k USING (event_hash), "
                               "stg_datasets_s2, stg_dataset_versions_s2")
    assert slotted("stg_self_parts", 3) == "stg_self_parts"
    assert slotted("DELETE FROM stg_event_keys WHERE batch_id = %s", 7) == "DELETE FROM stg_event_keys_s3 WHERE batch_id = %s"


def test_a_batch_is_staged_in_its_slot_and_its_merge_truncates_it(store, pg_dsn, truncate_small):
    events = pipeline_events(str(uuid.uuid4()))
    GraphStore.stage_partition(pg_dsn, 5, 0, events[:2])
    GraphStore.stage_partition(pg_dsn, 5, 1, events[2:])
    assert one(pg_dsn, "SELECT count(*) FROM stg_events_s1")[0] == 3
    assert one(pg_dsn, "SELECT count(*) FROM stg_events WHERE batch_id = 5")[0] == 3   # the parent reads them all
    before = {t: _relfilenode(pg_dsn, f"{t}_s1") for t in STAGING_COLUMNS}
    result = store.merge(5)
    assert (result.events_in, result.events_new) == (3, 3)
    assert one(pg_dsn, "SELECT state FROM lineage_runs")[0] == "COMPLETE"
    for table in STAGING_COLUMNS:
        assert one(pg_dsn, f"SELECT count(*) FROM {table}")[0] == 0
        assert _relfilenode(pg_dsn, f"{table}_s1") != before[table], f"{table}_s1 was not truncated"


def test_clear_says_how_it_cleared(store, pg_dsn, truncate_small):
    conn = store.conn
    with conn.transaction(), conn.cursor() as cur:
        assert GraphStore._clear(cur, 9) == "empty"
    GraphStore.stage_partition(pg_dsn, 9, 0, pipeline_events(str(uuid.uuid4())))
    GraphStore.stage_partition(pg_dsn, 13, 0, pipeline_events(str(uuid.uuid4())))   # slot 1 too
    with conn.transaction(), conn.cursor() as cur:
        assert GraphStore._clear(cur, 9) == "delete"
    assert (_staged(pg_dsn, 9), _staged(pg_dsn, 13)) == (0, 3)
    with conn.transaction(), conn.cursor() as cur:
        assert GraphStore._clear(cur, 13) == "truncate"
    assert _staged(pg_dsn, 13) == 0


def _handover(events: list) -> dict[str, tuple[bytes | None, str]]:
    return {e.event_hash: (b"key", '{"record": 1}') for e in events}


def test_the_merge_leaves_the_hand_over_to_the_enrich_step_which_clears_its_slot(store, pg_dsn, truncate_small):
    first, second = pipeline_events(str(uuid.uuid4())), pipeline_events(str(uuid.uuid4()), t0=10)
    GraphStore.stage_partition(pg_dsn, 7, 0, first, _handover(first))
    store.merge(7)
    assert one(pg_dsn, "SELECT count(*) FROM stg_event_keys_s3 WHERE batch_id = 7")[0] == 3   # read after the commit
    GraphStore.stage_partition(pg_dsn, 11, 0, second, _handover(second))                    # slot 3 as well
    conn = store.conn
    with conn.transaction(), conn.cursor() as cur:
        assert clear_slot(cur, 7, (HANDOVER_TABLE,)) == "delete"
    assert one(pg_dsn, "SELECT count(*) FROM stg_event_keys WHERE batch_id = 11")[0] == 3
    store.merge(11)
    node = _relfilenode(pg_dsn, "stg_event_keys_s3")
    with conn.transaction(), conn.cursor() as cur:
        assert clear_slot(cur, 11, (HANDOVER_TABLE,)) == "truncate"
    assert one(pg_dsn, "SELECT count(*) FROM stg_event_keys")[0] == 0
    assert _relfilenode(pg_dsn, "stg_event_keys_s3") != node


def test_a_slot_shared_with_another_batch_keeps_that_batchs_rows(store, pg_dsn, truncate_small):
    first, second = pipeline_events(str(uuid.uuid4())), pipeline_events(str(uuid.uuid4()), t0=10)
    GraphStore.stage_partition(pg_dsn, 2, 0, first)
    GraphStore.stage_partition(pg_dsn, 6, 0, second)      # another writer's batch (or a left-over) in slot 2
    node = _relfilenode(pg_dsn, "stg_events_s2")
    store.merge(2)
    assert (_staged(pg_dsn, 2), _staged(pg_dsn, 6)) == (0, 3)
    assert _relfilenode(pg_dsn, "stg_events_s2") == node   # deleted from, not truncated
    assert store.merge(6).events_new == 3
    assert one(pg_dsn, "SELECT count(*) FROM lineage_runs WHERE state = 'COMPLETE'")[0] == 2
    assert one(pg_dsn, "SELECT count(*) FROM stg_provenance")[0] == 0


def test_a_locked_slot_falls_back_to_delete_without_waiting(store, pg_dsn, truncate_small):
    GraphStore.stage_partition(pg_dsn, 3, 0, pipeline_events(str(uuid.uuid4())))
    node = _relfilenode(pg_dsn, "stg_events_s3")
    with psycopg.connect(pg_dsn) as reader:
        reader.execute("SELECT count(*) FROM stg_events_s3").fetchone()   # holds a lock on the slot until it ends
        done: list[object] = []
        merging = threading.Thread(target=lambda: done.append(store.merge(3)))
        merging.start()
        merging.join(timeout=30)
        assert done, "the merge waited for the reader's lock"
        reader.rollback()
    assert _staged(pg_dsn, 3) == 0
    assert _relfilenode(pg_dsn, "stg_events_s3") == node


def test_a_small_batch_is_deleted_from_its_slot(store, pg_dsn):
    assert sink.postgres.TRUNCATE_MIN_ROWS > 3
    GraphStore.stage_partition(pg_dsn, 10, 0, pipeline_events(str(uuid.uuid4())))
    node = _relfilenode(pg_dsn, "stg_events_s2")
    assert store.merge(10).events_new == 3
    assert _staged(pg_dsn, 10) == 0
    assert _relfilenode(pg_dsn, "stg_events_s2") == node   # deleted from, not truncated
    conn = store.conn
    with conn.transaction(), conn.cursor() as cur:
        assert GraphStore._clear(cur, 10, 3) == "delete"
        assert clear_slot(cur, 10, (HANDOVER_TABLE,), sink.postgres.TRUNCATE_MIN_ROWS) == "empty"


def test_staging_another_slot_does_not_wait_for_a_merge_holding_its_slot(store, pg_dsn):
    GraphStore.stage_partition(pg_dsn, 4, 0, pipeline_events(str(uuid.uuid4())))
    with psycopg.connect(pg_dsn) as merger:
        tables = ", ".join(slotted(t, 4) for t in STAGING_COLUMNS)
        merger.execute(f"TRUNCATE {tables}")     # what a merge's clear holds until its commit
        staged: list[int] = []
        staging = threading.Thread(target=lambda: staged.append(
            GraphStore.stage_partition(pg_dsn, 5, 0, pipeline_events(str(uuid.uuid4())))))
        staging.start()
        staging.join(timeout=30)
        assert staged and staged[0] > 0, "staging slot 1 waited for slot 0's lock"
        merger.commit()
    assert (_staged(pg_dsn, 4), _staged(pg_dsn, 5)) == (0, 3)


def test_rows_staged_before_the_migration_move_into_their_slots(pg_dsn):
    with GraphStore(pg_dsn) as store:
        store.migrate(up_to=16)
        with psycopg.connect(pg_dsn) as conn:
            for batch_id, part in ((6, 0), (6, 1), (-3, 0)):
                conn.execute("INSERT INTO stg_events (batch_id, part, event_hash, event_kind, payload) "
                             "VALUES (%s, %s, %s, 'run', '{}')", (batch_id, part, f"h{batch_id}{part}"))
                conn.execute("INSERT INTO stg_provenance (batch_id, part, provenance_id, node_id) VALUES "
                             "(%s, %s, gen_random_uuid(), gen_random_uuid())", (batch_id, part))
                conn.execute("INSERT INTO stg_event_keys (batch_id, part, event_hash, keys, record) VALUES "
                             "(%s, %s, %s, '{}', '{}')", (batch_id, part, f"h{batch_id}{part}"))
        assert 17 in store.migrate()
    assert one(pg_dsn, "SELECT count(*) FROM stg_events_s2 WHERE batch_id = 6")[0] == 2
    assert one(pg_dsn, "SELECT count(*) FROM stg_events_s1 WHERE batch_id = -3")[0] == 1
    assert one(pg_dsn, "SELECT count(*) FROM stg_provenance")[0] == 3
    assert one(pg_dsn, "SELECT count(*) FROM stg_event_keys_s2 WHERE batch_id = 6")[0] == 2
    assert one(pg_dsn, "SELECT count(*) FROM stg_event_keys_s1 WHERE batch_id = -3")[0] == 1
    assert one(pg_dsn, "SELECT count(*) FROM pg_class WHERE relname ~ 'unslotted'")[0] == 0
    assert one(pg_dsn, "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
                       "WHERE p.relname = 'stg_events'")[0] == STAGING_SLOTS
