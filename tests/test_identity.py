"""schemas.identity: canonical JSON, event hashes and deterministic UUIDv5 ids."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest

from schemas.codec import decode_message, encode_json, encode_single_object
from schemas.identity import (
    LINEAGE_NAMESPACE,
    canonical_json,
    canonical_json_hashed,
    dataset_id,
    edge_id,
    event_hash,
    hash_canonical,
    job_id,
    node_uuid,
    run_node_id,
)
from schemas.validate import validate_event

pytestmark = pytest.mark.unit

RUN_ID = "ea041791-68bc-4ae1-bd89-4c8106a157e4"


def event(**over: object) -> dict[str, object]:
    ev: dict[str, object] = {
        "eventType": "COMPLETE", "eventTime": "2024-05-01T12:00:00Z",
        "run": {"runId": RUN_ID}, "job": {"namespace": "ns", "name": "job"},
        "inputs": [{"namespace": "db", "name": "a"}], "outputs": [{"namespace": "db", "name": "b"}],
        "producer": "https://example.com/p",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    }
    ev.update(over)
    return ev


def test_canonical_json_sorts_keys_compactly_and_keeps_unicode() -> None:
    assert canonical_json({"b": 1, "a": {"d": [1.0, None], "c": "ü"}}) == '{"a":{"c":"ü","d":[1.0,null]},"b":1}'


def test_event_hash_is_sha256_of_canonical_utf8() -> None:
    ev = event()
    assert event_hash(ev) == hashlib.sha256(canonical_json(ev).encode("utf-8")).hexdigest()
    assert hash_canonical(canonical_json(ev)) == event_hash(ev)
    assert len(event_hash(ev)) == 64


def test_key_order_does_not_change_the_hash() -> None:
    ev = event()
    reordered = json.loads(json.dumps(dict(reversed(list(ev.items())))))
    assert event_hash(ev) == event_hash(reordered)


def test_same_run_and_event_type_with_different_content_hash_differently() -> None:
    a = event()
    b = event(outputs=[{"namespace": "db", "name": "c"}])
    assert (a["run"], a["eventType"]) == (b["run"], b["eventType"])
    assert event_hash(validate_event(a)) != event_hash(validate_event(b))


def test_offset_spellings_of_one_instant_hash_the_same_after_validation() -> None:
    z = validate_event(event(eventTime="2024-05-01T12:00:00Z"))
    plus2 = validate_event(event(eventTime="2024-05-01T14:00:00.000000+02:00"))
    assert event_hash(z) == event_hash(plus2)
    assert event_hash(event(eventTime="2024-05-01T12:00:00Z")) != event_hash(event(eventTime="2024-05-01T14:00:00+02:00"))


def test_hash_survives_every_encoding() -> None:
    ev = event(run={"runId": RUN_ID, "facets": {"x": {"_producer": "https://example.com/p",
                                                         "_schemaURL": "https://example.com/x", "n": 1.0, "big": 10**30}}})
    expected = event_hash(validate_event(ev))
    for value in (encode_single_object(ev), encode_json(ev)):
        assert event_hash(validate_event(decode_message(value)[0].document)) == expected


def test_int_and_float_hash_differently() -> None:
    assert event_hash({"a": 1}) != event_hash({"a": 1.0})


def test_lone_surrogates_hash_without_error() -> None:
    assert len(event_hash({"a": "\ud800"})) == 64


def test_uuid5_formulas() -> None:
    assert LINEAGE_NAMESPACE == uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/lineage-stream/lineage-stream")
    assert dataset_id("db", "t") == str(uuid.uuid5(LINEAGE_NAMESPACE, "dataset\x1fdb\x1ft"))
    assert job_id("ns", "j") == str(uuid.uuid5(LINEAGE_NAMESPACE, "job\x1fns\x1fj"))
    assert node_uuid("column", "db", "t", "c") == str(uuid.uuid5(LINEAGE_NAMESPACE, "column\x1fdb\x1ft\x1fc"))
    assert run_node_id(RUN_ID.upper()) == run_node_id(RUN_ID) == node_uuid("run", RUN_ID)
    assert edge_id("derived_from", "a", "b") == node_uuid("edge", "derived_from", "a", "b")
    assert uuid.UUID(dataset_id("db", "t")).version == 5


def test_ids_are_deterministic_and_unambiguous() -> None:
    assert dataset_id("db", "t") == dataset_id("db", "t")
    assert dataset_id("a/b", "c") != dataset_id("a", "b/c")
    assert dataset_id("ns", "x") != job_id("ns", "x")
    assert edge_id("derived_from", "a", "b") != edge_id("derived_from", "b", "a")


def _reference(value: object) -> tuple[str, str]:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@pytest.mark.parametrize("number", [
    1e16, 1e15, 9999999999999998.0, 1.2345678901234568e20, 1e22, 1e100, 1.5e300, -1e16, 1.7976931348623157e308,
    1e-4, 1e-5, 0.00012345, 0.000012345, 2.5e-7, 5e-324, -0.0, 0.0, 1.0, 0.1, 123.456, -2.5e-7,
    2 ** 63, 2 ** 64 - 1, 2 ** 64, -(2 ** 63) - 1, 10 ** 30, 0, -1,
])
def test_canonical_json_hashed_writes_every_number_as_the_json_module(number: object) -> None:
    for value in (number, [number], {"a": number, "b": [1, number, "x"]}, event(run={"runId": RUN_ID, "n": number})):
        assert canonical_json_hashed(value) == _reference(value)


def test_canonical_json_hashed_matches_the_json_module_on_random_floats_and_strings() -> None:
    import random
    import struct

    rng = random.Random(7)
    for _ in range(20_000):
        bits = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        scaled = rng.uniform(-1, 1) * 10 ** rng.uniform(-30, 30)
        values = [v for v in (bits, scaled, round(scaled, rng.randint(0, 12))) if v == v and abs(v) != float("inf")]
        doc = {"f": values, "s": "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(8)).replace("\ud800", "")}
        assert canonical_json_hashed(doc) == _reference(doc)


def test_canonical_json_hashed_agrees_on_strings_keys_and_what_orjson_refuses() -> None:
    text = "".join(chr(c) for c in range(0, 0xD800)) + "".join(chr(c) for c in range(0xE000, 0x110000, 97))
    cases = [
        {"k": text, text[:500]: 1, "\u00e9": "caf\u00e9", "\U0001f600": ["\u2028", "\x7f", "\x00"]},
        {"a": "lone \ud800 surrogate"}, {"\udfff": 1},        # orjson refuses: the json module writes them
        {1: "int key", 2: None},                                 # non-str keys: the json module's str(key)
        {"uuid-like": "3fa85f64-5717-4e62-b3fc-2c963f66afa6", "v": "0.00001", "w": "1e16"},  # look-alikes in strings
        [True, False, None, [], {}, [[{}]]],
    ]
    for value in cases:
        assert canonical_json_hashed(value) == (canonical_json(value), event_hash(value))


def test_canonical_json_hashed_on_validated_events() -> None:
    from producers.demo import DemoTraffic

    events = [validate_event(m.value) for m in DemoTraffic(seed=3).take(300) if m.subject is None]
    assert events
    for ev in events:
        assert canonical_json_hashed(ev) == (canonical_json(ev), event_hash(ev))
