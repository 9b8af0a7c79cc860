"""Chunking of large events: split/reassemble (pure), the emitter on the real broker, the source's range rule."""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from typing import Any

import pytest

from producers.chunking import (
    CHUNK_COUNT_HEADER,
    CHUNK_ERROR_HEADER,
    CHUNK_HEADERS,
    CHUNK_ID_HEADER,
    CHUNK_INDEX_HEADER,
    CHUNK_SHA256_HEADER,
    HEADROOM_BYTES,
    ChunkFailure,
    ChunkReassembler,
    Message,
    chunk_rejection,
    split_message,
)
from stream_processor.decode import decode_record

MAX = 100_000  # a small message.max.bytes keeps the pure tests fast


def feed(reassembler: ChunkReassembler, chunks: list[tuple[bytes, list]], start: int = 0, ts: int = 1_000,
         key: bytes = b"k") -> list[Any]:
    out: list[Any] = []
    for i, (value, headers) in enumerate(chunks):
        out += reassembler.add(Message(start + i, ts + i, key, value, headers))
    return out


def with_header(headers: list, name: str, value: bytes) -> list:
    return [(k, value if k == name else v) for k, v in headers]


# -- split ------------------------------------------------------------------------------------

@pytest.mark.unit
def test_small_value_is_not_split():
    headers = [("lineage.subject", b'{"namespace":"n","name":"x"}')]
    assert split_message(b"x" * 1000, headers, MAX) == [(b"x" * 1000, headers)]


@pytest.mark.unit
def test_split_slices_value_and_marks_chunks():
    value = os.urandom(350_000)
    original = [("lineage.subject", b"s")]
    chunks = split_message(value, original, MAX)
    payload = MAX - HEADROOM_BYTES - len("lineage.subject") - 1
    assert len(chunks) == -(-len(value) // payload) == 5
    assert b"".join(v for v, _h in chunks) == value
    assert all(len(v) + sum(len(k) + len(h or b"") for k, h in hs) <= MAX - 1024 for v, hs in chunks)
    ids = {dict(h)[CHUNK_ID_HEADER] for _v, h in chunks}
    assert len(ids) == 1 and len(ids.pop()) == 32
    assert [dict(h)[CHUNK_INDEX_HEADER] for _v, h in chunks] == [b"0", b"1", b"2", b"3", b"4"]
    assert {dict(h)[CHUNK_COUNT_HEADER] for _v, h in chunks} == {b"5"}
    assert {dict(h)[CHUNK_SHA256_HEADER] for _v, h in chunks} == {hashlib.sha256(value).hexdigest().encode()}
    assert chunks[0][1][0] == ("lineage.subject", b"s")  # original headers on chunk 0 only
    assert all(not any(k == "lineage.subject" for k, _ in h) for _v, h in chunks[1:])


@pytest.mark.unit
def test_split_refuses_a_limit_below_the_headroom():
    with pytest.raises(ValueError, match="per chunk"):
        split_message(b"x" * 100_000, [], HEADROOM_BYTES + 10)


# -- reassemble -------------------------------------------------------------------------------

@pytest.mark.unit
def test_round_trip_passes_other_messages_through():
    value = os.urandom(250_000)
    chunks = split_message(value, [("h", b"v")], MAX)
    r = ChunkReassembler(timeout_ms=60_000)
    plain = Message(0, 999, b"other", b"plain", [])
    out = r.add(plain) + feed(r, chunks, start=1)
    assert out[0] is plain
    assert len(out) == 2 and isinstance(out[1], Message)
    whole = out[1]
    assert whole.value == value and whole.offset == 1 and whole.key == b"k" and whole.timestamp_ms == 1_000
    assert whole.headers == [("h", b"v")]  # the original headers, without the chunk headers
    assert r.open_anchors() == []


@pytest.mark.unit
def test_interleaved_messages_and_exact_duplicates():
    value = os.urandom(250_000)
    a, b, c = split_message(value, [], MAX)
    r = ChunkReassembler()
    out = []
    for off, (v, h) in enumerate([a, (b"x", []), b, b, (b"y", []), c]):  # b re-sent: absorbed
        out += r.add(Message(off, 1_000, b"k", v, h))
    assert [m.value for m in out] == [b"x", b"y", value]
    assert out[2].offset == 0


@pytest.mark.unit
def test_out_of_order_index_is_rejected_as_incomplete():
    chunks = split_message(os.urandom(250_000), [], MAX)
    r = ChunkReassembler()
    out = feed(r, [chunks[0], chunks[2], chunks[1]])
    assert isinstance(out[0], ChunkFailure) and out[0].code == "chunk.incomplete"
    assert "chunk 1 is lost" in out[0].message and out[0].offset == 0 and out[0].offsets == (0, 1)
    # chunk 1 arriving after its group failed is an orphan of a closed group, not silently taken
    assert isinstance(out[1], ChunkFailure) and out[1].code == "chunk.orphan" and not out[1].unknown_group
    assert len(out) == 2


@pytest.mark.unit
def test_sha_mismatch_is_corrupt():
    chunks = split_message(os.urandom(250_000), [], MAX)
    # flip the first byte (writing 0x00 changed nothing when the random byte was 0x00 already: 1 run in 256)
    chunks[1] = (bytes([chunks[1][0][0] ^ 0xFF]) + chunks[1][0][1:], chunks[1][1])
    out = feed(ChunkReassembler(), chunks)
    assert len(out) == 1 and out[0].code == "chunk.corrupt" and "sha256" in out[0].message


@pytest.mark.unit
def test_duplicate_index_with_different_bytes_is_corrupt():
    chunks = split_message(os.urandom(250_000), [], MAX)
    out = feed(ChunkReassembler(), [chunks[0], chunks[1], (b"other bytes", chunks[1][1]), chunks[2]])
    assert out[0].code == "chunk.corrupt" and "twice" in out[0].message
    assert out[1].code == "chunk.orphan"  # chunk 2, after its group failed


@pytest.mark.unit
def test_count_mismatch_and_bad_headers_are_corrupt():
    chunks = split_message(os.urandom(250_000), [], MAX)
    forged = (chunks[1][0], with_header(chunks[1][1], CHUNK_COUNT_HEADER, b"4"))
    out = feed(ChunkReassembler(), [chunks[0], forged])
    assert [f.code for f in out] == ["chunk.corrupt"] and "count 4" in out[0].message
    bad = (b"v", with_header(chunks[0][1], CHUNK_INDEX_HEADER, b"zero"))
    out = feed(ChunkReassembler(), [bad])
    assert out[0].code == "chunk.corrupt" and "decimal" in out[0].message
    beyond = (b"v", with_header(chunks[0][1], CHUNK_INDEX_HEADER, b"3"))
    assert feed(ChunkReassembler(), [beyond])[0].code == "chunk.corrupt"


@pytest.mark.unit
def test_orphan_of_an_unknown_group():
    chunks = split_message(os.urandom(250_000), [], MAX)
    out = feed(ChunkReassembler(), chunks[1:])
    assert [f.code for f in out] == ["chunk.orphan", "chunk.orphan"]
    assert all(f.unknown_group for f in out) and [f.offset for f in out] == [0, 1]


@pytest.mark.unit
def test_incomplete_group_times_out_on_broker_time_and_bounds():
    chunks = split_message(os.urandom(250_000), [], MAX)
    r = ChunkReassembler(timeout_ms=5_000)
    assert feed(r, chunks[:2], ts=1_000) == []
    assert r.add(Message(2, 5_900, None, b"later", [])) == [Message(2, 5_900, None, b"later", [])]
    out = r.add(Message(3, 6_500, None, b"much later", []))
    assert out[0].value == b"much later"
    failure = out[1]
    assert failure.code == "chunk.incomplete" and failure.offset == 0 and failure.offsets == (0, 1)
    assert "2 of 3 chunks" in failure.message and "timeout 5s" in failure.message
    # the span bound closes a group whatever the timestamps say
    r = ChunkReassembler(timeout_ms=None, max_span_messages=10)
    feed(r, chunks[:1])
    assert r.add(Message(9, None, None, b"x", []))[1:] == []
    assert r.add(Message(10, None, None, b"x", []))[1].code == "chunk.incomplete"
    # giving up at the log end
    r = ChunkReassembler()
    feed(r, chunks[:2], start=7)
    assert r.open_anchors() == [7]
    (failure,) = r.give_up("log end")
    assert failure.code == "chunk.incomplete" and failure.offset == 7 and r.open_anchors() == []


@pytest.mark.unit
def test_failure_becomes_a_dead_letter_row_in_the_decoder():
    chunks = split_message(os.urandom(250_000), [("case", b"c1")], MAX)
    (failure,) = feed(ChunkReassembler(), [chunks[0], chunks[2]])
    msg = failure.as_message()
    assert msg.value == chunks[0][0] and msg.offset == 0
    error = json.loads(dict(msg.headers)[CHUNK_ERROR_HEADER])
    assert error["code"] == "chunk.incomplete" and "offsets 0, 1" in error["message"]
    (row,) = decode_record(msg.value, msg.headers)
    assert row["status"] == "rejected" and row["error_code"] == "chunk.incomplete"
    assert row["error_class"] == "ChunkError"
    # a chunk that reached the decoder without a reassembling source is rejected, not decoded
    (row,) = decode_record(chunks[1][0], chunks[1][1])
    assert row["status"] == "rejected" and row["error_code"] == "chunk.unassembled"
    assert chunk_rejection([("other", b"x")]) is None and chunk_rejection(None) is None


@pytest.mark.unit
def test_reassembled_headers_carry_no_chunk_header():
    chunks = split_message(os.urandom(150_000), [("a", b"1"), ("b", None)], MAX)
    (whole,) = feed(ChunkReassembler(), chunks)
    assert whole.headers == [("a", b"1"), ("b", None)]
    assert not any(k in CHUNK_HEADERS for k, _ in whole.headers)


def _group(n: int, payload: int = 10) -> list[tuple[bytes, list]]:
    value = os.urandom(n * payload)
    gid = uuid.uuid4().hex.encode()
    sha = hashlib.sha256(value).hexdigest().encode()
    return [(value[i * payload:(i + 1) * payload],
             [(CHUNK_ID_HEADER, gid), (CHUNK_INDEX_HEADER, str(i).encode()), (CHUNK_COUNT_HEADER, str(n).encode()),
              (CHUNK_SHA256_HEADER, sha)]) for i in range(n)]


@pytest.mark.unit
def test_two_readers_starting_at_different_offsets_agree():
    """The range rule: every reader that saw a group's chunk 0 decides the group the same way."""
    early, whole, broken = _group(2), _group(3), _group(3)
    # offsets: 0 a, 1 early[0], 2 whole[0], 3 d, 4 whole[1], 5 early[1], 6 broken[0], 7 whole[2], 8 broken[2]
    log = [(b"a", []), early[0], whole[0], (b"d", []), whole[1], early[1], broken[0], whole[2], broken[2]]
    seen = []
    for start in (0, 1, 2):
        out = feed(ChunkReassembler(), log[start:], start=start)
        seen.append(out)
    decided = [{(type(o).__name__, o.offset, getattr(o, "code", None)) for o in out
                if o.offset >= 2 and not getattr(o, "unknown_group", False)} for out in seen]
    assert decided[0] == decided[1] == decided[2] == {
        ("Message", 2, None), ("Message", 3, None), ("ChunkFailure", 6, "chunk.incomplete")}
    # the reader that started after early[0] cannot place early[1]: the source looks back for it
    orphans = [[o.offset for o in out if getattr(o, "unknown_group", False)] for out in seen]
    assert orphans == [[], [], [5]]


# -- the emitter against the real broker ------------------------------------------------------

def wide_event(fields: int = 20_000, job: str = "wide") -> dict[str, Any]:
    """A ~5 MB RunEvent: one output whose schema facet has ``fields`` fields."""
    from stream_processor.testing import run_event

    event = run_event(job=job, outputs=["wide_table"])
    event["outputs"][0]["facets"] = {"schema": {
        "_producer": "https://example.com/tests",
        "_schemaURL": "https://openlineage.io/spec/facets/1-1-1/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet",
        "fields": [{"name": f"column_{i:05d}", "type": "varchar", "description": f"column {i} " + "d" * 200}
                   for i in range(fields)]}}
    return event


def raw_messages(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[Any]:
    """Every message of ``topic`` as stored (no reassembly) once ``expected`` arrived, plus a 1 s grace."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800, "log_level": 3})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=15).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            out += [m for m in consumer.consume(500, timeout=0.5) if m.error() is None]
        grace = time.monotonic() + 1.0
        while time.monotonic() < grace:
            out += [m for m in consumer.consume(500, timeout=0.2) if m.error() is None]
        return sorted(out, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


@pytest.mark.integration
def test_emitter_splits_a_5mb_event_into_chunks(kafka_bootstrap, topic_names):
    from producers.emitter import LineageEmitter
    from producers.metrics import ProducerMetrics
    from producers.settings import EmitterSettings
    from schemas.codec import decode_message

    topic = topic_names["events"]
    settings = EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic, message_max_bytes=1_000_000)
    metrics = ProducerMetrics()
    event = wide_event()
    with LineageEmitter(settings, metrics=metrics) as emitter:
        size = len(emitter.encode(event))
        emitter.emit(event)
        emitter.emit(wide_event(fields=10, job="small"))
    assert size > 4_500_000
    expected = -(-size // (1_000_000 - HEADROOM_BYTES)) + 1
    messages = raw_messages(kafka_bootstrap, topic, expected)
    chunks = [m for m in messages if any(k == CHUNK_ID_HEADER for k, _ in m.headers() or [])]
    assert len(chunks) == expected - 1 > 1
    assert len(messages) == expected
    assert len({m.partition() for m in chunks}) == 1  # one key, one partition, in order
    assert all(len(m.value()) <= 1_000_000 - HEADROOM_BYTES for m in chunks)
    assert metrics.value("lineage_producer_chunked_events_total", topic=topic) == 1
    assert metrics.value("lineage_producer_messages_sent_total", topic=topic, encoding="avro") == len(messages)
    r = ChunkReassembler()
    whole = [o for m in chunks for o in r.add(Message(m.offset(), m.timestamp()[1], m.key(), m.value(),
                                                      m.headers()))]
    assert len(whole) == 1 and isinstance(whole[0], Message)
    (decoded,) = decode_message(whole[0].value, whole[0].headers)
    assert len(decoded.document["outputs"][0]["facets"]["schema"]["fields"]) == 20_000


# -- the source's range rule against the real broker ------------------------------------------

def _rows(bootstrap: str, topic: str, partition: int, start: int, end: int, timeout: float = 2.0) -> list[dict]:
    from stream_processor.kafka_source import KafkaRange, read_range

    rng = KafkaRange(topic, partition, start, end, json.dumps({"bootstrap.servers": bootstrap}), 30_000)
    return [row for batch in read_range(rng, chunk_timeout_seconds=timeout) for row in batch.to_pylist()]


def _view(rows: list[dict]) -> list[tuple[int, bytes, str | None]]:
    out = []
    for r in rows:
        error = next((json.loads(h["value"])["code"] for h in r["headers"] if h["key"] == CHUNK_ERROR_HEADER), None)
        out.append((r["offset"], r["value"], error))
    return sorted(out)


@pytest.mark.integration
def test_read_range_gives_each_group_to_the_range_of_its_chunk_0(kafka_bootstrap, topic_names):
    from stream_processor.testing import produce

    topic = topic_names["events"]
    g = _group(3, payload=1000)
    stray = _group(3)[1]  # a chunk whose group has no chunk 0 anywhere
    log = [(b"a", None), g[0], (b"b", None), g[1], g[2], (b"c", None), stray, (b"d", None)]
    produce(kafka_bootstrap, topic, [(v, h, b"same-key") for v, h in log])
    (partition,) = {m.partition() for m in raw_messages(kafka_bootstrap, topic, len(log))}
    value = b"".join(v for v, _h in g)
    whole = [(0, b"a", None), (1, value, None), (2, b"b", None), (5, b"c", None), (6, stray[0], "chunk.orphan"),
             (7, b"d", None)]
    assert _view(_rows(kafka_bootstrap, topic, partition, 0, 8)) == whole
    for cut in range(1, 8):  # however the log is cut into two ranges, each message goes out exactly once
        first = _view(_rows(kafka_bootstrap, topic, partition, 0, cut))
        second = _view(_rows(kafka_bootstrap, topic, partition, cut, 8))
        assert first + second == whole, cut
    # the group's own row keeps chunk 0's original coordinates, without chunk headers
    (row,) = [r for r in _rows(kafka_bootstrap, topic, partition, 1, 2)]
    assert row["key"] == b"same-key" and row["headers"] == []


@pytest.mark.integration
def test_read_range_times_out_a_group_on_broker_time_whatever_the_cut(kafka_bootstrap, topic_names):
    from confluent_kafka import Producer

    topic = topic_names["events"]
    g = _group(3, payload=1000)
    t0 = int(time.time() * 1000) - 60_000
    log = [(g[0], t0), ((b"x", None), t0 + 10_000), (g[1], t0 + 1), (g[2], t0 + 2), ((b"y", None), t0 + 10_001)]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "log_level": 3})
    for (value, headers), ts in log:
        producer.produce(topic, value=value, key=b"k", headers=headers, timestamp=ts)
    assert producer.flush(30) == 0
    (partition,) = {m.partition() for m in raw_messages(kafka_bootstrap, topic, len(log))}
    # x is 10 s after chunk 0 (timeout 5 s): the group fails there; its late chunks are orphans
    whole = [(0, g[0][0], "chunk.incomplete"), (1, b"x", None), (2, g[1][0], "chunk.orphan"),
             (3, g[2][0], "chunk.orphan"), (4, b"y", None)]
    assert _view(_rows(kafka_bootstrap, topic, partition, 0, 5, timeout=5.0)) == whole
    for cut in (1, 2, 3):
        first = _view(_rows(kafka_bootstrap, topic, partition, 0, cut, timeout=5.0))
        second = _view(_rows(kafka_bootstrap, topic, partition, cut, 5, timeout=5.0))
        assert first + second == whole, cut


@pytest.mark.integration
def test_read_range_gives_up_on_a_group_at_the_log_end(kafka_bootstrap, topic_names):
    from stream_processor.testing import produce

    topic = topic_names["events"]
    g = _group(3, payload=1000)
    produce(kafka_bootstrap, topic, [(v, h, b"k") for v, h in [(b"a", None), g[0], g[1]]])
    (partition,) = {m.partition() for m in raw_messages(kafka_bootstrap, topic, 3)}
    rows = _rows(kafka_bootstrap, topic, partition, 0, 3, timeout=1.0)
    assert _view(rows) == [(0, b"a", None), (1, g[0][0], "chunk.incomplete")]
    error = json.loads(dict((h["key"], h["value"]) for h in rows[-1]["headers"])[CHUNK_ERROR_HEADER])
    assert "2 of 3 chunks" in error["message"] and "offsets 1, 2" in error["message"]


# -- consumers of the output topics -----------------------------------------------------------

@pytest.mark.integration
def test_output_topic_readers_reassemble_chunked_records(kafka_bootstrap, topic_names, caplog):
    from lineage.topic_reader import read_topic
    from stream_processor.consumer import GraphChange, read_records
    from stream_processor.publish import encode_record, graph_change
    from stream_processor.testing import produce

    topic = topic_names["graph"]
    row = {"dataset_id": "d1", "fields": [{"name": f"c{i}", "description": "d" * 100} for i in range(3_000)]}
    value = encode_record("graph_change", graph_change("lineage_datasets", "d1", row, 3))
    small = encode_record("graph_change", graph_change("lineage_jobs", "j1", {"job_id": "j1"}, 3))
    chunks = split_message(value, [], 100_000)
    broken = split_message(value, [], 100_000)[:-1]
    assert len(chunks) > 2
    produce(kafka_bootstrap, topic, [(v, h, b"d1") for v, h in chunks + broken] + [(small, None, b"d1")])

    messages = list(read_topic(kafka_bootstrap, topic))
    # the open group is given up when reading stops, after the message that followed it
    assert [len(m.value()) for m in messages] == [len(value), len(small), len(chunks[0][0])]
    assert messages[0].value() == value and messages[0].offset() == 0 and messages[0].failure is None
    assert messages[2].failure.code == "chunk.incomplete" and messages[2].offset() == len(chunks)

    with caplog.at_level("WARNING", logger="stream_processor.consumer"):
        records = list(read_records(kafka_bootstrap, topic, idle_timeout_seconds=3))
    assert [(type(r), r.id) for r in records] == [(GraphChange, "d1"), (GraphChange, "j1")]
    assert len(records[0].payload["fields"]) == 3_000
    assert "could not be reassembled (chunk.incomplete)" in caplog.text
