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
