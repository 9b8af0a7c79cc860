"""The ``lineage_kafka`` Python streaming source: columns, the ListOffsets quirk, limits, starting offsets."""

from __future__ import annotations

import json

import pytest

from stream_processor.kafka_source import KAFKA_SCHEMA, plan_end_offsets, register
from stream_processor.testing import produce


@pytest.mark.unit
def test_plan_end_offsets_spreads_a_read_limit_over_partitions():
    start = {("t", 0): 0, ("t", 1): 10, ("t", 2): 5}
    latest = {("t", 0): 100, ("t", 1): 10, ("t", 2): 105}
    assert plan_end_offsets(start, latest, None) == latest
    ends = plan_end_offsets(start, latest, 50)
    assert ends == {("t", 0): 25, ("t", 1): 10, ("t", 2): 30}
    assert plan_end_offsets(start, latest, 1000) == latest


def _stream(spark, bootstrap, **options):
    register(spark)
    reader = spark.readStream.format("lineage_kafka").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.mark.integration
@pytest.mark.slow
def test_source_reads_every_event_of_a_quiet_topic_with_native_columns(spark, kafka_bootstrap, topic_names,
                                                                      tmp_path):
    topic = topic_names["events"]
    n = 2500
    produce(kafka_bootstrap, topic, [(f"v{i}".encode(), [("h", str(i).encode())], f"k{i}".encode())
                                     for i in range(n)])
    df = _stream(spark, kafka_bootstrap, subscribe=topic, maxOffsetsPerTrigger="1000")
    assert df.schema.simpleString() == spark.createDataFrame([], KAFKA_SCHEMA).schema.simpleString()
    q = (df.writeStream.format("memory").queryName("src_quiet")
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        q.processAllAvailable()
        assert q.exception() is None
        rows = spark.sql("SELECT count(*) AS n, count(DISTINCT partition, offset) AS d, "
                         "min(size(headers)) AS h, max(timestampType) AS tt FROM src_quiet").collect()[0]
        assert (rows.n, rows.d, rows.h, rows.tt) == (n, n, 1, 0)
        sample = spark.sql("SELECT key, value, headers[0].value AS hv FROM src_quiet WHERE value = 'v42'").collect()
        assert [(bytes(r.key), bytes(r.hv)) for r in sample] == [(b"k42", b"42")]
        # the read limit made several batches; each planned at most ~1000 records
        sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        assert len(sizes) >= 3 and max(sizes) <= 1000 + 3
        # the tail: a few more events on the now quiet topic all arrive
        produce(kafka_bootstrap, topic, [b"tail1", b"tail2", b"tail3"])
        q.processAllAvailable()
        assert spark.sql("SELECT count(*) FROM src_quiet").collect()[0][0] == n + 3
        end = q.lastProgress["sources"][0]["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        assert sum(end[topic].values()) == n + 3
    finally:
        q.stop()


@pytest.mark.integration
def test_starting_offsets_latest_json_and_pattern(spark, kafka_bootstrap, topic_names, tmp_path):
    topic = topic_names["events"]
    produce(kafka_bootstrap, topic, [(b"old", None, b"same")] * 6)  # one key: one partition
    # JSON starting offsets: partitions not named start at the earliest offset
    df = _stream(spark, kafka_bootstrap, subscribePattern=topic.replace(".", r"\.").replace("events", "ev.*"),
                 startingOffsets=json.dumps({topic: {"0": 2, "1": 2, "2": 2}}))
    q = df.writeStream.format("memory").queryName("src_json").option("checkpointLocation", str(tmp_path / "a")).start()
    latest = _stream(spark, kafka_bootstrap, subscribe=topic, startingOffsets="latest")
    q2 = latest.writeStream.format("memory").queryName("src_latest").option(
        "checkpointLocation", str(tmp_path / "b")).start()
    try:
        q.processAllAvailable()
        q2.processAllAvailable()
        assert spark.sql("SELECT count(*) FROM src_json").collect()[0][0] == 4
        produce(kafka_bootstrap, topic, [b"new"])
        q2.processAllAvailable()
        assert [bytes(r[0]) for r in spark.sql("SELECT value FROM src_latest").collect()] == [b"new"]
        assert q.exception() is None and q2.exception() is None
    finally:
        q.stop()
        q2.stop()
