"""Bad input goes to the DLQ with its bytes and a reason; good events of the same batch reach the graph."""

from __future__ import annotations

import json

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.consumer import DeadLetter, read_records
from stream_processor.testing import StreamHarness, produce, run_event, test_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _corpus() -> list[tuple[str, bytes]]:
    good = encode_single_object(run_event())
    no_offset = run_event(when="2026-11-22T10:00:00")
    deep = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
    return [
        ("garbage", b"\x07\xffnot a message at all"),
        ("truncated_avro", good[: len(good) // 2]),
        ("unknown_fingerprint", b"\xc3\x01" + b"\x01\x02\x03\x04\x05\x06\x07\x08" + good[10:]),
        ("not_an_event", b'{"hello": "world"}'),
        ("deep_json", deep),
        ("no_offset", json.dumps(no_offset).encode()),
    ]


def test_bad_messages_land_in_dlq_and_good_ones_in_graph(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    good = [run_event(job=f"good{i}") for i in range(5)]
    corpus = _corpus()
    messages = [encode_single_object(good[0]), json.dumps(good[1]).encode()]
    messages += [(value, [("case", name.encode())]) for name, value in corpus]
    messages += [encode_single_object(e) for e in good[2:]]
    produce(kafka_bootstrap, topic_names["events"], messages)

    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"))
    with StreamHarness(spark, settings) as h:
        h.drain()
        assert h.total("rejected") == len(corpus)

    with psycopg.connect(pg_dsn) as conn:
        names = sorted(r[0] for r in conn.execute("SELECT job_name FROM lineage_events"))
    assert names == sorted(e["job"]["name"] for e in good)

    dead = [r for r in read_records(kafka_bootstrap, topic_names["dlq"], max_records=len(corpus),
                                    idle_timeout_seconds=15)]
    assert len(dead) == len(corpus) and all(isinstance(d, DeadLetter) for d in dead)
    by_case = {dict(d.headers)["case"].decode(): d for d in dead}
    assert set(by_case) == {name for name, _ in corpus}
    for name, value in corpus:
        d = by_case[name]
        assert d.value == value, name  # the original bytes
        assert d.topic == topic_names["events"] and d.offset >= 0
        assert d.error_code and d.message
    assert by_case["garbage"].error_class == "DecodeError"
    assert by_case["truncated_avro"].error_code.startswith("decode.")
    assert by_case["unknown_fingerprint"].error_code.startswith("decode.unknown")
    assert by_case["deep_json"].error_code == "decode.too_deep"
    assert by_case["not_an_event"].error_class == "EventValidationError"
    assert by_case["no_offset"].error_code == "validation.event_time"
    assert by_case["no_offset"].field == "eventTime" and "eventTime" in by_case["no_offset"].message
