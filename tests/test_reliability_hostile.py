"""Hostile input, all in one run with good traffic interleaved, through the real query.

Bad messages (random bytes, truncated / bit-flipped Avro, unknown fingerprints and Confluent schema
ids, a deep-nesting JSON bomb, a 10 MB string field, invalid UTF-8) must each land in the DLQ with
a reason; good ones (including SQL metacharacters in every string field, years 1900 and 2200, and
an event with 100,000 outputs) must land in the graph; the query must never fail or restart.

Year 9999 has its own test: today it kills the query (see there).
"""

from __future__ import annotations

import json
import os
import random
import uuid
from urllib.parse import quote

import psycopg
import pytest
from confluent_kafka import Producer

from schemas.codec import DEFAULT_MAX_BYTES, decode_message, encode_single_object
from schemas.errors import DecodeError
from stream_processor.consumer import DeadLetter, read_records
from stream_processor.testing import StreamHarness, run_event, test_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SQL = "'; DROP TABLE lineage_events; -- \" \\ %s $1 `x` /* */ ;"
CONTROL = "".join(chr(c) for c in range(1, 32)) + "\x7f"


def _rss_kb(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))


def _produce(bootstrap: str, topic: str, messages: list[bytes]) -> list[tuple[int, int]]:
    """Produce ``messages`` in order; returns ``(partition, offset)`` of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 64 * 1024 * 1024,
                         "compression.type": "lz4", "log_level": 3, "linger.ms": 5})
    where: list[tuple[int, int] | None] = [None] * len(messages)
    errors: list[str] = []

    def report(i: int):
        def cb(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                where[i] = (msg.partition(), msg.offset())
        return cb

    for i, value in enumerate(messages):
        producer.produce(topic, value=value, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:1]
    return [w for w in where if w is not None]


def _bit_flips(rng: random.Random, valid: bytes, count: int) -> list[bytes]:
    """``count`` single-bit flips of the Avro body that the decoder rejects (others may decode validly)."""
    out: list[bytes] = []
    for _ in range(10_000):
        pos = rng.randrange(10, len(valid))
        data = bytearray(valid)
        data[pos] ^= 1 << rng.randrange(8)
        try:
            decode_message(bytes(data))
        except DecodeError:
            out.append(bytes(data))
            if len(out) == count:
                return out
    raise AssertionError("could not find enough rejected bit flips")


def _hostile(rng: random.Random) -> dict[str, bytes]:
    valid = encode_single_object(run_event(job="victim"))
    bad: dict[str, bytes] = {
        "random": bytes(rng.randrange(256) for _ in range(300)),
        "random_c3": b"\xc3\x02" + bytes(rng.randrange(256) for _ in range(100)),
        "truncated": valid[: len(valid) // 2],
        "truncated_header": valid[:5],
        "unknown_fingerprint": valid[:2] + bytes(8 * [0xAB]) + valid[10:],
        "unknown_schema_id": b"\x00" + (987654).to_bytes(4, "big") + valid[10:],
        "json_bomb": b'{"a":' * 200_000 + b"1" + b"}" * 200_000,
        "huge_string": json.dumps({**run_event(job="huge"),
                                   "run": {"runId": str(uuid.uuid4()),
                                           "facets": {"x": {"_producer": "p", "_schemaURL": "s",
                                                            "blob": "A" * (10 * 1024 * 1024)}}}}).encode(),
        "invalid_utf8": b'{"eventType": "COMPLETE", "job": {"namespace": "\xff\xfe\xc3\x28", "name": "x"}}',
        "empty": b"",
        "not_an_event": b'{"hello": "world"}',
    }
    for i, flipped in enumerate(_bit_flips(rng, valid, 5)):
        bad[f"bit_flip_{i}"] = flipped
    return bad


def _sql_event() -> dict:
    event = run_event(job=f"job{SQL}", inputs=(f"in{SQL}",), outputs=(f"out{SQL}",), namespace=f"ns{SQL}")
    event["producer"] = "https://example.com/p?q=%27%3B--"
    # `_producer` must be a URI (core spec): the metacharacters go in percent-encoded there, verbatim elsewhere
    event["run"]["facets"] = {"custom": {"_producer": f"https://x/{quote(SQL, safe='')}", "_schemaURL": "https://x/s",
                                         "note": SQL}}
    return event


def _control_event() -> dict:
    return run_event(job=f"job{CONTROL}", inputs=(f"in{CONTROL}",), outputs=(f"out{CONTROL}",),
                     namespace=f"ns{CONTROL}")


def test_hostile_input_goes_to_the_dlq_and_good_traffic_to_the_graph(spark, kafka_bootstrap, topic_names,
                                                                     pg_dsn, tmp_path):
    rng = random.Random(int(os.environ.get("LINEAGE_TEST_SEED", "1234")))
    bad = _hostile(rng)
    good_names: list[str] = []
    messages: list[bytes] = []
    kinds: list[str] = []   # "bad:<name>" or "good"

    def good(n: int) -> None:
        for _ in range(n):
            name = f"good{len(good_names)}"
            good_names.append(name)
            messages.append(encode_single_object(run_event(job=name)))
            kinds.append("good")

    good(20)
    for name, value in bad.items():
        messages.append(value)
        kinds.append(f"bad:{name}")
        good(5)
    special = {
        "sql": _sql_event(),
        "past": run_event(job="past1900", when="1900-01-01T00:00:00+00:00"),
        "future": run_event(job="future2200", when="2200-12-31T23:59:59+00:00"),
        "wide": run_event(job="wide", outputs=[f"o{i}" for i in range(100_000)]),
    }
    for event in special.values():
        messages.append(encode_single_object(event))
        kinds.append("good")
        good(5)
    messages.append(encode_single_object(_control_event()))
    kinds.append("control")
    good(20)   # after the far-future event: nothing may be dropped as late

    offsets = _produce(kafka_bootstrap, topic_names["events"], messages)
    assert len(offsets) == len(messages)

    # librdkafka's default message.max.bytes (1 MB) for the processor's producers: a 10 MB dead letter
    # must be cut to fit, and the 100,000-output event's enriched record skipped, never fail the batch
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"), publish_graph=False)
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    rss_before, jvm_before = _rss_kb(), _rss_kb(jvm)
    with StreamHarness(spark, settings) as harness:
        harness.drain(timeout_seconds=300, extra_batches=2)
        assert harness.query.exception() is None and harness.query.isActive
        query_id = harness.query.id
        run_id = harness.query.runId
    assert (query_id, run_id) == (harness.query.id, harness.query.runId)  # one run: it never restarted
    rss_after, jvm_after = _rss_kb(), _rss_kb(jvm)
    print(f"RSS: driver Python {rss_before / 1024:.0f} -> {rss_after / 1024:.0f} MB, "
          f"driver JVM {jvm_before / 1024:.0f} -> {jvm_after / 1024:.0f} MB")

    dead = [r for r in read_records(kafka_bootstrap, topic_names["dlq"], idle_timeout_seconds=8,
                                    conf={"fetch.max.bytes": 64 * 1024 * 1024})
            if isinstance(r, DeadLetter)]
    by_coord = {(d.partition, d.offset): d for d in dead}
    for kind, (part, off) in zip(kinds, offsets, strict=True):
        if not kind.startswith("bad:"):
            continue
        letter = by_coord.get((part, off))
        assert letter is not None, f"{kind} ({part}@{off}) is not in the DLQ"
        assert letter.error_code and letter.message, f"{kind}: no reason"
        assert letter.topic == topic_names["events"]
    codes = {kind: by_coord[(p, o)].error_code for kind, (p, o) in zip(kinds, offsets, strict=True)
             if kind.startswith("bad:")}
    assert codes["bad:huge_string"] == "decode.too_large"
    assert codes["bad:unknown_fingerprint"].startswith("decode.unknown")
    assert codes["bad:json_bomb"] == "decode.too_deep", codes
    huge = by_coord[offsets[kinds.index("bad:huge_string")]]
    assert huge.value is not None and 0 < len(huge.value) < 1_000_000 and "truncated" in huge.message
    assert harness.total("dlq_truncated") == 2   # the 10 MB string and the ~1.4 MB JSON bomb
    assert harness.total("enriched_chunked") == 1   # the 100,000-output event, published in chunks

    with psycopg.connect(pg_dsn) as conn:
        names = [r[0] for r in conn.execute("SELECT job_name FROM lineage_events")]
        wide_outputs = conn.execute(
            "SELECT count(*) FROM lineage_run_io WHERE run_id = %s AND direction = 'output'",
            (special["wide"]["run"]["runId"],)).fetchone()[0]
        sql_ns = conn.execute("SELECT job_namespace, job_name FROM lineage_events WHERE run_id = %s",
                              (special["sql"]["run"]["runId"],)).fetchone()
        datasets = {r[0] for r in conn.execute("SELECT name FROM lineage_datasets WHERE namespace = %s",
                                               (f"ns{SQL}",))}
    for name in good_names + ["past1900", "future2200", "wide"]:
        assert names.count(name) == 1, f"{name} is not in the graph exactly once"
    assert sql_ns == (f"ns{SQL}", f"job{SQL}")
    assert datasets == {f"in{SQL}", f"out{SQL}"}
    assert wide_outputs == 100_000
    # the control-character event is either stored verbatim or rejected with a reason, never lost
    control_at = offsets[kinds.index("control")]
    stored = f"job{CONTROL}" in names
    assert stored or (control_at in by_coord and by_coord[control_at].error_code), "control event lost"
    expected_bad = sum(k.startswith("bad:") for k in kinds) + (0 if stored else 1)
    assert harness.total("rejected") == expected_bad
    assert len(names) == len(good_names) + 4 + (1 if stored else 0)
    assert DEFAULT_MAX_BYTES < 10 * 1024 * 1024  # the huge string is over the decoder's limit


def test_year_9999_event_time_does_not_kill_the_query(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    messages = [encode_single_object(run_event(job="before")),
                encode_single_object(run_event(job="future9999", when="9999-12-31T23:59:59+00:00")),
                encode_single_object(run_event(job="after"))]
    _produce(kafka_bootstrap, topic_names["events"], messages)
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"), publish_graph=False)
    with StreamHarness(spark, settings) as harness:
        harness.drain(timeout_seconds=180, extra_batches=2)
        assert harness.query.exception() is None and harness.query.isActive
    with psycopg.connect(pg_dsn) as conn:
        names = sorted(r[0] for r in conn.execute("SELECT job_name FROM lineage_events"))
    dead = [r for r in read_records(kafka_bootstrap, topic_names["dlq"], idle_timeout_seconds=5)
            if isinstance(r, DeadLetter)]
    # beyond what the stateful operators can represent: rejected to the DLQ naming the field; the
    # events around it are stored and the query lives on (it used to die on every restart)
    assert names == ["after", "before"]
    assert [(d.error_code, d.field) for d in dead] == [("validation.event_time", "eventTime")]
