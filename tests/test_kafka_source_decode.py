"""``lineage_kafka`` with ``decode=packed``: its reader tasks give exactly the rows of ``mapInArrow(decode)``
over its Kafka columns (valid and rejected messages, chunk groups, `$self` documents, range cuts)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.e2e_bench import _demo_values
from producers.chunking import split_message
from schemas.codec import encode_single_object
from stream_processor.decode import PACKED_SCHEMA, PLANNED_AT_COLUMN, READER_PACKED_SCHEMA, unpack_row
from stream_processor.kafka_source import decode_option
from stream_processor.pipeline import build_stream, decoded_stream, read_kafka
from stream_processor.settings import ProcessorSettings
from stream_processor.testing import produce, run_event


def _chunks(job: str) -> list[tuple[bytes, list, bytes]]:
    """The 3 chunks (value, headers, key) of a ~250 kB valid event split at 100 kB."""
    event = run_event(job=job)
    event["run"]["facets"] = {"padding": {"_producer": "https://example.com/tests",
                                          "_schemaURL": "https://example.com/padding.json", "text": "p" * 250_000}}
    chunks = split_message(encode_single_object(event), [("case", job.encode())], 100_000)
    assert len(chunks) == 3
    return [(value, headers, job.encode()) for value, headers in chunks]


def _settings(bootstrap: str, topic: str, checkpoint: str) -> ProcessorSettings:
    # 4 read tasks over 3 partitions and 40 records a batch: range cuts and batch ends fall inside chunk groups
    return ProcessorSettings(bootstrap_servers=bootstrap, postgres_dsn="postgresql://unused/x", topic_events=topic,
                             checkpoint_dir=checkpoint, source_format="lineage_kafka", chunk_timeout_seconds=2.0,
                             source_min_partitions=4, max_offsets_per_trigger=40)


def _rows(spark: Any, stream: Any, name: str, checkpoint: str) -> list[dict[str, Any]]:
    """Every row of ``stream`` (packed columns unpacked), in (partition, offset, event_hash) order."""
    q = stream.writeStream.format("memory").queryName(name).option("checkpointLocation", checkpoint).start()
    try:
        q.processAllAvailable()
        assert q.exception() is None
        rows = spark.sql(f"SELECT * FROM {name}").collect()
    finally:
        q.stop()
    out = []
    for r in rows:
        row = r.asDict()
        row.update(unpack_row(bytes(row.pop("packed"))))
        out.append(row)
    return sorted(out, key=lambda d: (d["source_partition"], d["source_offset"], d["event_hash"]))


def _drain(spark: Any, stream: Any, on_batch: Any, checkpoint: str) -> None:
    """Run ``stream`` into ``foreachBatch(on_batch)`` until it has read everything, then stop it. No-data batches
    are off for the query, as pipeline.start_query turns them off with ticks (the dedupe's watermark asks for them)."""
    conf = "spark.sql.streaming.noDataMicroBatches.enabled"
    spark.conf.set(conf, "false")
    try:
        q = stream.writeStream.foreachBatch(on_batch).option("checkpointLocation", checkpoint).start()
    finally:
        spark.conf.set(conf, "true")
    try:
        q.processAllAvailable()
        assert q.exception() is None
    finally:
        q.stop()


@pytest.mark.unit
def test_decode_option_values():
    assert decode_option({}) == "none"
    assert decode_option({"Decode": "PACKED"}) == "packed"
    with pytest.raises(ValueError, match="option decode of the lineage_kafka source must be one of"):
        decode_option({"decode": "wide"})


@pytest.mark.integration
@pytest.mark.slow
def test_fused_source_gives_the_rows_of_the_unfused_plan(spark, kafka_bootstrap, topic_names, tmp_path):
    topic = topic_names["events"]
    demo = list(_demo_values(80))    # plain events, duplicates, and `$self` documents (a subject header)
    assert sum(1 for _, h in demo if h) >= 2
    produce(kafka_bootstrap, topic, [(v, h, b"demo%d" % (i % 7)) for i, (v, h) in enumerate(demo)])
    produce(kafka_bootstrap, topic, _chunks("whole") + [
        (b"\x00garbage", [("h", b"\x01")], b"bad"), (None, None, b"bad"), (b'{"not": "an event"}', None, b"bad"),
    ] + _chunks("broken")[:2])         # the last chunk of "broken" never comes: chunk.incomplete
    settings = _settings(kafka_bootstrap, topic, str(tmp_path / "unused"))

    fused_stream = decoded_stream(spark, settings)
    assert fused_stream.schema.simpleString() == \
        spark.createDataFrame([], READER_PACKED_SCHEMA).schema.simpleString()
    fused = _rows(spark, fused_stream, "fused_rows", str(tmp_path / "fused"))
    unfused = _rows(spark, decoded_stream(spark, settings, fuse_decode=False), "unfused_rows", str(tmp_path / "u"))

    # the fused reader adds when each batch was planned (the dedupe's "now", dedupe.py): one time per batch
    # (40 records a batch over 4 read tasks)
    planned = [r.pop(PLANNED_AT_COLUMN) for r in fused]
    assert None not in planned
    assert 2 <= len(set(planned)) <= -(-len(fused) // 10)
    assert fused == unfused
    ok = [r for r in fused if r["status"] == "ok"]
    rejected = {r["error_code"]: r for r in fused if r["status"] != "ok"}
    assert len({r["source_offset"] for r in fused if r["key"] == b"bad"}) == 3
    assert {"chunk.incomplete"} <= set(rejected) and len(rejected) >= 3
    for r in (r for r in fused if r["status"] != "ok"):   # everything the dead-letter topic needs
        assert r["source_topic"] == topic and r["source_offset"] is not None and r["error_message"]
        assert r["event_hash"] == f"rejected:{topic}:{r['source_partition']}:{r['source_offset']}:0" or \
            r["error_code"] == "validation.facet"
    garbage = next(r for r in fused if r["key"] == b"bad" and r["raw_value"] == b"\x00garbage")
    assert garbage["raw_headers"] == [{"key": "h", "value": b"\x01"}]
    whole = [r for r in ok if r["job_name"] == "whole"]
    assert len(whole) == 1 and len(whole[0]["event_json"]) > 250_000      # reassembled: one row, chunk 0's offset
    assert rejected["chunk.incomplete"]["key"] == b"broken"
    assert any(r["has_self"] for r in ok)
    assert len(ok) >= len(demo) - 5


@pytest.mark.integration
def test_build_stream_decodes_in_the_source_unless_given_one(spark, kafka_bootstrap, topic_names, tmp_path):
    settings = _settings(kafka_bootstrap, topic_names["events"], str(tmp_path / "ck"))

    def plan(df: Any) -> str:
        return df._jdf.queryExecution().logical().toString()

    fused_stream = build_stream(spark, settings)
    given_stream = build_stream(spark, settings, source=read_kafka(spark, settings))
    fused, given = plan(fused_stream), plan(given_stream)
    assert "MapInArrow" not in fused and "MapInArrow" in given
    # the dedupe's clamp takes "now" from the fused reader's planned_at (a column: the same generated code every
    # batch), from the batch timestamp otherwise, and drops planned_at: both give the same columns
    assert "current_timestamp" not in fused and "current_timestamp" in given
    assert fused_stream.schema == given_stream.schema
    assert PLANNED_AT_COLUMN not in fused_stream.columns
    assert fused_stream.schema.simpleString().startswith(spark.createDataFrame([], PACKED_SCHEMA).schema.simpleString()[:-1])
    with pytest.raises(ValueError, match="only the lineage_kafka source decodes"):
        read_kafka(spark, settings.model_copy(update={"source_format": "kafka"}), decode=True)


@pytest.mark.integration
@pytest.mark.slow
def test_a_checkpoint_of_the_unfused_plan_resumes_fused(spark, kafka_bootstrap, topic_names, tmp_path):
    """Upgrading: the query's state (here the dedupe's) and offsets carry over when the decode moves into
    the source, so a duplicate of an event read before the switch is still dropped after it."""
    topic = topic_names["events"]
    settings = _settings(kafka_bootstrap, topic, str(tmp_path / "ck"))
    first = [encode_single_object(run_event(job=f"before{i}")) for i in range(3)]
    produce(kafka_bootstrap, topic, first)

    def hashes(stream: Any) -> list[str]:
        got: list[str] = []
        # foreachBatch as the processor's: the memory sink cannot resume an append-mode checkpoint.
        _drain(spark, stream, lambda df, _id: got.extend(r.event_hash for r in df.collect()), settings.checkpoint_dir)
        return sorted(got)

    before = hashes(build_stream(spark, settings, fuse_decode=False))
    assert len(before) == 3
    after_event = encode_single_object(run_event(job="after"))
    produce(kafka_bootstrap, topic, [first[0], after_event])
    after = hashes(build_stream(spark, settings))
    assert len(after) == 1 and after[0] not in before


@pytest.mark.integration
@pytest.mark.slow
def test_the_deduplicated_stream_is_not_compiled_again_every_batch(spark, kafka_bootstrap, topic_names, tmp_path):
    """The dedupe's clamp reads "now" from a column: Spark compiles the stage holding it once, not per batch as
    with the batch timestamp, a constant in the generated code (2 extra compilations of ~15-45 ms each per
    batch). Spark's own watermark predicate is still compiled per batch (its watermark is a constant too)."""
    topic = topic_names["events"]
    produce(kafka_bootstrap, topic, [encode_single_object(run_event(job=f"c{i}")) for i in range(240)])
    settings = _settings(kafka_bootstrap, topic, str(tmp_path / "ck"))
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    compiled: list[int] = []

    def batch(df: Any, _id: int) -> None:
        before = metrics.METRIC_COMPILATION_TIME().getCount()
        df.collect()
        compiled.append(metrics.METRIC_COMPILATION_TIME().getCount() - before)

    _drain(spark, build_stream(spark, settings), batch, settings.checkpoint_dir)
    steady = compiled[2:]            # the first batches compile the query's code
    assert len(steady) >= 3, compiled
    assert sum(steady) <= len(steady), compiled
