"""The ``lineage_kafka`` Python streaming source: columns, the ListOffsets quirk, limits, starting offsets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.unit
def test_plan_end_offsets_fills_the_read_limit_exactly():
    # three partitions of a 40,000-record backlog: flooring each share (Spark's rounding) read 4,998 records per
    # batch, and the drain needed a ninth batch for the 16 left; the shares now add up to the limit
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 13_333, ("t", 1): 13_333, ("t", 2): 13_334}
    sizes = []
    while start != latest:
        ends = plan_end_offsets(start, latest, 5_000)
        assert all(start[tp] <= ends[tp] <= latest[tp] for tp in latest)
        sizes.append(sum(ends[tp] - start[tp] for tp in latest))
        start = ends
    assert sizes == [5_000] * 8
    # the records left over go to the largest remainders (ties in partition order), each share stays within its lag
    assert plan_end_offsets({("t", 0): 0, ("t", 1): 0, ("t", 2): 0},
                            {("t", 0): 2, ("t", 1): 2, ("t", 2): 2}, 4) == {("t", 0): 2, ("t", 1): 1, ("t", 2): 1}
    assert plan_end_offsets({("t", 0): 0, ("t", 1): 0}, {("t", 0): 7, ("t", 1): 2}, 5) == {("t", 0): 4, ("t", 1): 1}
    # every lagging partition moves, its record taken from the largest share; only when more partitions lag than
    # the limit allows records does the batch read more (one each)
    three = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    assert plan_end_offsets(three, {("t", 0): 1000, ("t", 1): 1, ("t", 2): 1}, 5) == {
        ("t", 0): 3, ("t", 1): 1, ("t", 2): 1}
    assert plan_end_offsets(three, {("t", 0): 100, ("t", 1): 1, ("t", 2): 1}, 2) == {
        ("t", 0): 1, ("t", 1): 1, ("t", 2): 1}


@pytest.mark.unit
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20_000)), min_size=1, max_size=6),
       st.integers(1, 12_000))
def test_plan_end_offsets_reads_the_limit_and_moves_every_lagging_partition(partitions, max_rows):
    start = {("t", i): s for i, (s, _) in enumerate(partitions)}
    latest = {("t", i): s + lag for i, (s, lag) in enumerate(partitions)}
    ends = plan_end_offsets(start, latest, max_rows)
    lags = {tp: latest[tp] - start[tp] for tp in start}
    assert all(start[tp] <= ends[tp] <= latest[tp] for tp in start)
    assert all(ends[tp] > start[tp] for tp in start if lags[tp] > 0)
    if sum(lags.values()) <= max_rows:
        assert ends == latest
    else:   # the limit exactly, unless more partitions lag than it allows records (then one each)
        assert sum(ends[tp] - start[tp] for tp in start) == max(max_rows, sum(1 for lag in lags.values() if lag))


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


@pytest.mark.unit
def test_split_ranges_covers_every_offset_once_in_at_least_min_pieces():
    from stream_processor.kafka_source import split_ranges

    ranges = {("t", 0): (0, 1000), ("t", 1): (10, 11), ("t", 2): (500, 2500), ("u", 0): (7, 9)}
    for wanted in (0, 1, 4, 6, 9, 40):
        pieces = split_ranges(ranges, wanted)
        assert len(pieces) >= min(wanted, sum(b - a for a, b in ranges.values()))
        for tp, (a, b) in ranges.items():
            mine = [r for t, r in pieces if t == tp]
            assert mine[0][0] == a and mine[-1][1] == b
            assert all(x < y for x, y in mine) and all(p[1] == q[0] for p, q in zip(mine, mine[1:], strict=False))
    assert split_ranges(ranges, 4) == list(ranges.items())          # already 4 tasks: untouched
    assert [r for _, r in split_ranges({("t", 0): (0, 100), ("t", 1): (0, 300)}, 4)] == [
        (0, 100), (0, 100), (100, 200), (200, 300)]                  # in proportion to the offsets


@pytest.mark.integration
@pytest.mark.slow
def test_min_partitions_splits_the_reads_and_keeps_chunk_groups_whole(spark, kafka_bootstrap, topic_names,
                                                                        tmp_path):
    """``minPartitions``: more read tasks than Kafka partitions, every record once; chunked records whose
    chunks straddle a cut are read whole by the range holding their chunk 0."""
    from confluent_kafka import Producer

    from producers.chunking import HEADROOM_BYTES, split_message
    from stream_processor.kafka_source import KafkaStreamReader, split_ranges

    topic = topic_names["events"]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    sent: list[tuple[bytes, bytes]] = []
    groups: list[tuple[int, int]] = []   # offsets [first, last] of each chunked record, all in partition 0
    offset = 0
    while offset < 100:
        if offset in (23, 48, 73):       # 4 chunks each: the cuts of [0, 100) into 4 fall at 25, 50, 75
            key, value = f"big{offset}".encode(), bytes([65 + offset % 26]) * (3 * (40_000 - HEADROOM_BYTES) + 10)
            chunks = split_message(value, [], 40_000)
            assert len(chunks) == 4
            for part, headers in chunks:
                producer.produce(topic, value=part, key=key, headers=headers, partition=0)
            groups.append((offset, offset + 3))
            offset += 4
        else:
            key, value = f"k{offset}".encode(), f"v{offset}".encode()
            producer.produce(topic, value=value, key=key, partition=0)
            offset += 1
        sent.append((key, value))
    assert producer.flush(30) == 0
    cuts = [r[0] for _, r in split_ranges({(topic, 0): (0, 100)}, 4)][1:]
    assert all(any(a < c <= b for a, b in groups) for c in cuts)   # every cut falls inside a chunked record

    reader = KafkaStreamReader({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic,
                                "minPartitions": "4"})
    assert len(reader.partitions(reader.initialOffset(), reader.latestOffset())) == 4

    df = _stream(spark, kafka_bootstrap, subscribe=topic, minPartitions="4")
    q = (df.writeStream.format("memory").queryName("src_split")
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        q.processAllAvailable()
        assert q.exception() is None
        rows = spark.sql("SELECT key, value FROM src_split").collect()
    finally:
        q.stop()
    assert sorted((bytes(r.key), bytes(r.value)) for r in rows) == sorted(sent)


class _CountingConsumer:
    """The probe's real consumer, with each ``consume`` call's ``num_messages`` recorded (a spy, not a mock)."""

    def __init__(self, consumer):
        self._consumer, self.asked = consumer, []

    def consume(self, num_messages=1, timeout=-1):
        self.asked.append(num_messages)
        return self._consumer.consume(num_messages=num_messages, timeout=timeout)

    def __getattr__(self, name):
        return getattr(self._consumer, name)


@pytest.mark.integration
def test_probe_ends_are_the_log_ends_and_it_asks_only_for_what_it_waits_for(kafka_bootstrap, topic_names):
    """``HighWatermarkProbe.ends`` plans every micro-batch: each partition's end is its log end, round after round
    (records in several batches, uneven partitions, a round with nothing new), and its fetch loop never asks
    ``consume`` for more messages than partitions it still waits for. Asking for 1,000 made every call wait out its
    whole 50 ms timeout, so each plan took >= 50 ms (~52 ms against ~2-5 ms measured, session 43)."""
    from confluent_kafka import Producer

    from stream_processor.kafka_source import HighWatermarkProbe

    topic = topic_names["events"]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    probe = HighWatermarkProbe({"bootstrap.servers": kafka_bootstrap})
    spy = probe._consumer = _CountingConsumer(probe.consumer)
    tps = probe.partitions([topic], None)
    assert tps == [(topic, 0), (topic, 1), (topic, 2)]
    expected = {tp: 0 for tp in tps}
    known: dict = {}
    for counts in ((5, 0, 40), (1, 300, 2), (0, 0, 0), (60, 7, 1)):
        for partition, n in enumerate(counts):
            for i in range(n):
                producer.produce(topic, f"r{i}".encode(), partition=partition)
            expected[(topic, partition)] += n
        producer.flush(10)
        ends = probe.ends(tps, known)
        assert ends == expected
        known = ends
    assert spy.asked and all(1 <= n <= len(tps) for n in spy.asked)
    probe.close()
