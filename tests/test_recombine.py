"""`$self` recombination: the pure merge, and parts straddling micro-batches plus a late part (revision 2)."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.consumer import EnrichedRecord, read_records
from stream_processor.recombine import merge_parts
from stream_processor.testing import StreamHarness, produce, run_event, test_settings, utc

NS = "evogeoscienceobject://hub1/inst/ws"


@pytest.mark.unit
def test_merge_parts_unions_outputs_in_part_order():
    a = run_event("11111111-1111-1111-1111-111111111111", when="2026-01-01T00:00:01Z", inputs=["x"], outputs=["o1"])
    b = run_event("11111111-1111-1111-1111-111111111111", when="2026-01-01T00:00:00Z", inputs=["x", "y"],
                  outputs=["o2", "o1"])
    parts = [{"event_json": json.dumps(a), "event_hash": "a", "event_time": "2026-01-01T00:00:01+00:00"},
             {"event_json": json.dumps(b), "event_hash": "b", "event_time": "2026-01-01T00:00:00+00:00"}]
    merged = merge_parts(parts)
    assert [o["name"] for o in merged["outputs"]] == ["o2", "o1"]
    assert [i["name"] for i in merged["inputs"]] == ["x", "y"]
    assert merged["eventTime"] == b["eventTime"]  # the first part by event time gives the other fields
    assert merge_parts(list(reversed(parts))) == merged  # arrival order does not matter


def _part(run_id: str, name: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    event = run_event(run_id, "COMPLETE", utc(-0.001), job="evo.publish", inputs=["source"], outputs=["$self"],
                      namespace=NS)
    subject = json.dumps({"namespace": NS, "name": name}).encode()
    return encode_single_object(event), [("lineage.subject", subject)]


@pytest.mark.integration
@pytest.mark.slow
def test_parts_straddling_batches_then_a_late_part(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    run_id = str(uuid.uuid4())
    other = run_event(job="plain")  # a plain event bypasses the recombiner (revision 0)
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"), recombine_quiet_seconds=15.0)
    bad_link = json.dumps({"events": [run_event(run_id, outputs=["not_self"])], "self_link": "/events/0/outputs/0"})

    def revisions() -> list[tuple[int, list[str]]]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT revision, payload FROM lineage_events WHERE run_id = %s ORDER BY revision",
                                (run_id,)).fetchall()
        return [(r, sorted(o["name"] for o in json.loads(p)["outputs"])) for r, p in rows]

    with StreamHarness(spark, settings) as h:
        produce(kafka_bootstrap, topic_names["events"], [_part(run_id, "obj1:1"), encode_single_object(other)])
        h.drain()
        produce(kafka_bootstrap, topic_names["events"], [_part(run_id, "obj2:1"),
                                                         (bad_link.encode(), [("lineage.subject", b'{"namespace": "'
                                                                               + NS.encode() + b'", "name": "z"}')])])
        h.drain()
        assert revisions() == []  # parts wait for the quiet period
        got = h.wait_for(revisions, message="recombined record")
        assert got == [(1, ["obj1:1", "obj2:1"])]
        # a late part after emission: re-emitted as revision 2 with the union of all three
        produce(kafka_bootstrap, topic_names["events"], [_part(run_id, "obj3:1")])
        h.wait_for(lambda: len(revisions()) == 2, message="revision 2")
        assert revisions() == [(1, ["obj1:1", "obj2:1"]), (2, ["obj1:1", "obj2:1", "obj3:1"])]
        # the graph commits before the batch's enrich pass publishes: leave only once that batch has ended
        # (stopping the query in between is a re-run on restart, not a lost record, but this test stops for good)
        h.wait_for(lambda: h.total("enriched") >= 3, message="enriched records of all three")
        assert h.total("rejected") == 1  # the self_link that points at no $self output

    enriched = [r for r in read_records(kafka_bootstrap, topic_names["enriched"], max_records=3,
                                        idle_timeout_seconds=15)]
    assert all(isinstance(r, EnrichedRecord) for r in enriched)
    assert sorted((r.run_id == run_id, r.revision) for r in enriched) == [(False, 0), (True, 1), (True, 2)]


@pytest.mark.parametrize("partitions", [2, 3])
def test_plain_bucket_labels_land_evenly_on_the_shuffle_partitions(spark, partitions):
    """The labels balanced_plain_labels picks are spread evenly by Spark's own hash partitioner."""
    from pyspark.sql import functions as F

    from stream_processor.recombine import balanced_plain_labels

    labels = balanced_plain_labels(spark, partitions, per_partition=4)
    assert len(labels) == len(set(labels)) == 4 * partitions
    placed = (spark.createDataFrame([(label,) for label in labels], "k string")
              .repartition(partitions, "k").groupBy(F.spark_partition_id().alias("p")).count().collect())
    assert sorted(r["count"] for r in placed) == [4] * partitions
