"""The writer finishes a batch after Spark committed it (stream_processor/writer.py, "Pipelining").

A batch that was staged and marked in ``lineage_staged_batches`` (migration 011) but not finished - the
processor died after Spark committed its offsets, before the merge - is the only copy of those events:
the next writer finishes it (merge, enriched records, Parquet, graph topic) before it stages anything.
Real PostgreSQL and Kafka; the staging is what the executors' staging pass does (no Spark needed).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from schemas.identity import canonical_json, event_hash
from sink.model import StoredEvent
from sink.postgres import GraphStore
from stream_processor.consumer import EnrichedRecord, GraphChange, read_records
from stream_processor.publish import handover_record
from stream_processor.testing import run_event, test_settings
from stream_processor.writer import GraphBatchWriter


def _stage(dsn: str, batch_id: int, jobs: list[str]) -> list[StoredEvent]:
    events = []
    for job in jobs:
        event = run_event(str(uuid.uuid4()), job=job, inputs=[f"{job}_in"], outputs=[f"{job}_out"])
        events.append(StoredEvent(event=event, event_hash=event_hash(event), source=f"t[0]@{len(events)}",
                                  text=canonical_json(event)))
    handover = {e.event_hash: (e.event["job"]["name"].encode(), handover_record({
        "event_json": e.text, "event_hash": e.event_hash, "kind": "run", "event_type": "COMPLETE",
        "event_time": None, "run_id": e.event["run"]["runId"], "job_namespace": "test",
        "job_name": e.event["job"]["name"], "revision": 0, "source_topic": "t", "source_partition": 0,
        "source_offset": n, "subject": None})) for n, e in enumerate(events)}
    GraphStore.stage_partition(dsn, batch_id, 0, events, handover)
    return events


@pytest.mark.integration
def test_a_staged_batch_left_by_a_crash_is_finished_first(kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"),
                             parquet_dir=str(tmp_path / "parquet"))
    writer = GraphBatchWriter(settings)
    writer.store  # noqa: B018 - migrates
    # what a writer leaves when its process dies after marking batches 3 and 4, before finishing them
    _stage(pg_dsn, 3, ["crash_a", "crash_b"])
    _stage(pg_dsn, 4, ["crash_c"])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO lineage_staged_batches (batch_id) VALUES (3), (4)")
        assert conn.execute("SELECT count(*) FROM lineage_events").fetchone()[0] == 0

    writer._recover()          # what the first call of the next run's writer does before staging
    writer.drain()
    with psycopg.connect(pg_dsn) as conn:
        assert dict(conn.execute("SELECT job_name, first_batch_id FROM lineage_events").fetchall()) == {
            "crash_a": 3, "crash_b": 3, "crash_c": 4}
        assert [b for (b,) in conn.execute("SELECT batch_id FROM lineage_transactions ORDER BY 1")] == [3, 4]
        assert conn.execute("SELECT count(*) FROM lineage_staged_batches").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM stg_events").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM stg_event_keys").fetchone()[0] == 0
        assert conn.execute("SELECT relpersistence FROM pg_class WHERE relname = 'stg_events'").fetchone()[0] == "p"
    enriched = [r for r in read_records(kafka_bootstrap, topic_names["enriched"], idle_timeout_seconds=5)
                if isinstance(r, EnrichedRecord)]
    assert sorted(r.job_name for r in enriched) == ["crash_a", "crash_b", "crash_c"]
    assert all(r.key == r.job_name.encode() and r.provenance for r in enriched)
    graph = [r for r in read_records(kafka_bootstrap, topic_names["graph"], idle_timeout_seconds=5)
             if isinstance(r, GraphChange)]
    assert {r.batch_id for r in graph} == {3, 4}
    assert list((tmp_path / "parquet").rglob("*.parquet")), "the recovered batches were not exported"

    writer._recover()          # nothing left: a second recovery finishes nothing
    writer.drain()
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM lineage_transactions").fetchone()[0] == 2
    writer.close()


class _FakeFinish(GraphBatchWriter):
    """The writer with a merge and after-commit steps that record the order they ran in and fail for one batch (the
    seam under test is the finisher's queue and its after-commit thread, not the store)."""

    def __init__(self, settings, fail_merge: int | None = None, fail_after: int | None = None) -> None:
        import threading

        super().__init__(settings)
        self.fail_merge, self.fail_after = fail_merge, fail_after
        self.merged: list[int] = []
        self.after_done: list[int] = []
        self.release = threading.Event()         # the merges wait for it
        self.release_after = threading.Event()   # the after-commit steps wait for it

    def _recombine(self, batch_id, counts) -> None:   # the `$self` step's thread: nothing to absorb here
        pass

    def _finish(self, batch_id, counts, started, timings, report, step=None, after=None):
        self.release.wait(10)
        self.merged.append(batch_id)
        if batch_id == self.fail_merge:
            raise RuntimeError(f"merge of batch {batch_id} failed")
        return after.submit(self._after_commit_in_order, batch_id, counts, started, timings, report, None, 0.0)

    def _after_commit(self, batch_id, counts, started, timings, report, result, committed_at) -> None:
        self.release_after.wait(10)
        self.after_done.append(batch_id)
        if batch_id == self.fail_after:
            raise RuntimeError(f"export of batch {batch_id} failed")


def _fake_writer(kafka_bootstrap, topic_names, tmp_path, **failing) -> _FakeFinish:
    return _FakeFinish(test_settings(kafka_bootstrap, topic_names, "postgresql://unused@127.0.0.1:1/x",
                                     str(tmp_path / "ck")), **failing)


def test_the_finisher_queue_keeps_order_and_stops_at_a_failure(kafka_bootstrap, topic_names, tmp_path):
    """Two batches may wait for the finisher (FINISH_DEPTH); once one fails, none after it is finished (they stay
    marked for the next run's recovery, in order) and every wait raises the first failure."""
    from schemas.errors import StoreError
    from stream_processor.writer import FINISH_DEPTH

    assert FINISH_DEPTH == 2
    writer = _fake_writer(kafka_bootstrap, topic_names, tmp_path, fail_merge=2)
    writer.release_after.set()
    for b in (1, 2, 3):
        writer._hand_to_finisher(b, {}, 0.0, {})
    writer._wait_finished(keep=3)                       # three queued, none waited for: returns at once
    assert not writer.settled() and writer.merged == []
    writer.release.set()
    with pytest.raises(RuntimeError, match="batch 2 failed"):
        writer._wait_finished(keep=FINISH_DEPTH - 1)
    with pytest.raises(RuntimeError, match="batch 2 failed"):
        writer.wait_finished()                          # the failure stays: every later wait raises it
    assert writer.merged == [1, 2]                      # batch 3 was not merged after 2 failed
    assert writer.after_done == [1]
    assert isinstance(writer._finish_futures[-1].exception(), StoreError)


def test_the_next_merge_runs_while_a_batch_is_exported_and_a_failure_there_stops_the_rest(
        kafka_bootstrap, topic_names, tmp_path):
    """A committed batch's export, enriched records and Parquet files run on their own thread, so the finisher
    merges the next batch meanwhile; they run in commit order, and once one fails none after it runs (those batches
    stay marked: the next run's recovery runs their steps again, their merges no-ops), and every wait raises it."""
    import time

    from schemas.errors import StoreError

    writer = _fake_writer(kafka_bootstrap, topic_names, tmp_path, fail_after=2)
    writer.release.set()
    for b in (1, 2, 3):
        writer._hand_to_finisher(b, {}, 0.0, {})
    deadline = time.monotonic() + 10
    while writer.merged != [1, 2, 3] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert writer.merged == [1, 2, 3] and writer.after_done == []   # merged ahead of batch 1's after-commit steps
    assert not writer.settled()
    writer.release_after.set()
    with pytest.raises(RuntimeError, match="export of batch 2 failed"):
        writer._wait_finished(keep=1)
    with pytest.raises(RuntimeError, match="export of batch 2 failed"):
        writer.wait_finished()
    assert writer.after_done == [1, 2]                  # batch 3's steps did not run after 2's failed
    with pytest.raises(StoreError, match="batch 3 not finished"):
        writer._finish_futures[-1].result().result()
