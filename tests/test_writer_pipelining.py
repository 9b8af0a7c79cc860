"""The writer finishes a batch after Spark committed it (stream_processor/writer.py, "Pipelining").

A batch that was staged and marked in ``lineage_staged_batches`` (migration 011) but not finished - the
processor died after Spark committed its offsets, before the merge - is the only copy of those events:
the next writer finishes it (merge, enriched records, Parquet, graph topic) before it stages anything.
Real PostgreSQL and Kafka; the staging is what the executors' staging pass does (no Spark needed).
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from schemas.identity import canonical_json, event_hash
from sink.model import BatchResult, StoredEvent
from sink.postgres import GraphStore
from stream_processor.consumer import EnrichedRecord, GraphChange, read_records
from stream_processor.publish import handover_record
from stream_processor.testing import run_event, test_settings
from stream_processor.writer import GraphBatchWriter, _Merged


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


def _marked(writer_class, kafka_bootstrap, topic_names, pg_dsn, tmp_path, batches: dict[int, list[str]]):
    """A migrated writer of ``writer_class`` (Parquet in ``tmp_path``), with ``batches`` (batch id -> job names)
    staged and marked: what a writer leaves when it has handed them to its finisher."""
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"),
                             parquet_dir=str(tmp_path / "parquet"))
    writer = writer_class(settings)
    writer.store  # noqa: B018 - migrates
    for batch_id, jobs in batches.items():
        _stage(pg_dsn, batch_id, jobs)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO lineage_staged_batches (batch_id) SELECT unnest(%s::bigint[])", (list(batches),))
    return writer


@pytest.mark.integration
def test_a_staged_batch_left_by_a_crash_is_finished_first(kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    # what a writer leaves when its process dies after marking batches 3 and 4, before finishing them
    writer = _marked(GraphBatchWriter, kafka_bootstrap, topic_names, pg_dsn, tmp_path,
                     {3: ["crash_a", "crash_b"], 4: ["crash_c"]})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
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


class _FailsOnce(GraphBatchWriter):
    """The writer with a finishing that fails for one batch, in its merge step or its export step (the seam under
    test is the two threads' queues, not the store)."""

    def __init__(self, settings, failing: int, step: str) -> None:
        super().__init__(settings)
        self.failing, self.failing_step = failing, step
        self.merged, self.exported, self.release = [], [], threading.Event()

    def _recombine(self, batch_id, counts) -> None:   # the `$self` step's thread: nothing to absorb here
        pass

    def _merge_step(self, batch_id, counts, started, timings, report, step=None):
        self.release.wait(10)
        self.merged.append(batch_id)
        if self.failing_step == "merge" and batch_id == self.failing:
            raise RuntimeError(f"merge of batch {batch_id} failed")
        return _Merged(batch_id, counts, started, timings, report, BatchResult(batch_id=batch_id), None, None)

    def _export_step(self, merged) -> None:
        self.exported.append(merged.batch_id)
        if self.failing_step == "export" and merged.batch_id == self.failing:
            raise RuntimeError(f"export of batch {merged.batch_id} failed")


@pytest.mark.parametrize("failing_step", ["merge", "export"])
def test_the_finisher_queue_keeps_order_and_stops_at_a_failure(kafka_bootstrap, topic_names, tmp_path, failing_step):
    """Two batches may wait for the finisher (FINISH_DEPTH); once one fails, in its merge or its export, none after
    it is exported (they stay marked for the next run's recovery, in order) and every wait raises the first
    failure."""
    from schemas.errors import StoreError
    from stream_processor.writer import FINISH_DEPTH

    assert FINISH_DEPTH == 2
    writer = _FailsOnce(test_settings(kafka_bootstrap, topic_names, "postgresql://unused@127.0.0.1:1/x",
                                      str(tmp_path / "ck")), failing=2, step=failing_step)
    for b in (1, 2, 3):
        writer._hand_to_finisher(b, {}, 0.0, {})
    writer._wait_finished(keep=3)                       # three queued, none waited for: returns at once
    assert not writer.settled() and writer.merged == [] and writer.exported == []
    writer.release.set()
    with pytest.raises(RuntimeError, match=f"{failing_step} of batch 2 failed"):
        writer._wait_finished(keep=FINISH_DEPTH - 1)
    with pytest.raises(RuntimeError, match=f"{failing_step} of batch 2 failed"):
        writer.wait_finished()                          # the failure stays: every later wait raises it
    writer._export_pool.shutdown(wait=True)
    assert writer.exported == ([1] if failing_step == "merge" else [1, 2])   # batch 3 was not exported after 2 failed
    assert writer.merged[:2] == [1, 2] and (failing_step == "export" or writer.merged == [1, 2])
    assert isinstance(writer._finish_futures[-1].exception(), StoreError)


class _SlowExport(GraphBatchWriter):
    """The writer with batch 1's Parquet export held until batch 2's merge has committed."""

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.overlapped = False

    def _write_parquet(self, batch_id, tables) -> None:
        if batch_id == 1:
            deadline = time.monotonic() + 30
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while time.monotonic() < deadline and not self.overlapped:
                    self.overlapped = conn.execute(
                        "SELECT EXISTS (SELECT 1 FROM lineage_transactions WHERE batch_id = 2)").fetchone()[0]
                    time.sleep(0.05)
        super()._write_parquet(batch_id, tables)


@pytest.mark.integration
def test_the_next_merge_runs_beside_a_batch_s_export(kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    """Batch 2 is merged while batch 1 is still being exported (the export thread), and both come out whole: each
    event's enriched record, with the provenance its batch's merge made, the graph topic, Parquet, nothing left
    staged or marked."""
    writer = _marked(_SlowExport, kafka_bootstrap, topic_names, pg_dsn, tmp_path,
                     {1: ["overlap_a", "overlap_b"], 2: ["overlap_c"]})
    reports = []
    writer.on_batch = reports.append
    writer._hand_to_finisher(1, {}, time.time(), {})
    writer._hand_to_finisher(2, {}, time.time(), {})
    writer.drain()
    assert writer.overlapped, "batch 2 was not merged while batch 1 was exported"
    assert [r.batch_id for r in reports] == [1, 2]
    assert all("export_wait" in r.timings for r in reports)
    with psycopg.connect(pg_dsn) as conn:
        assert dict(conn.execute("SELECT job_name, first_batch_id FROM lineage_events").fetchall()) == {
            "overlap_a": 1, "overlap_b": 1, "overlap_c": 2}
        assert conn.execute("SELECT count(*) FROM lineage_staged_batches").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM stg_event_keys").fetchone()[0] == 0
    enriched = [r for r in read_records(kafka_bootstrap, topic_names["enriched"], idle_timeout_seconds=5)
                if isinstance(r, EnrichedRecord)]
    assert sorted(r.job_name for r in enriched) == ["overlap_a", "overlap_b", "overlap_c"]
    for record in enriched:
        assert {(p["dataset"], p["event_type"]) for p in record.provenance} == {
            (f"test/{record.job_name}_in", "accessed"), (f"test/{record.job_name}_out", "created")}
    graph = [r for r in read_records(kafka_bootstrap, topic_names["graph"], idle_timeout_seconds=5)
             if isinstance(r, GraphChange)]
    assert {r.batch_id for r in graph} == {1, 2}
    assert {p.parent.name for p in (tmp_path / "parquet").rglob("*.parquet")} >= {"lineage_events"}
    writer.close()
