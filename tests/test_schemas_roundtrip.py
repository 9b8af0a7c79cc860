"""The Avro schemas carry OpenLineage events losslessly, and evolve backward- and forward-compatibly."""

from __future__ import annotations

import io
import json
from datetime import UTC
from pathlib import Path
from typing import Any

import fastavro
import pytest

from schemas.avro import (
    ENVELOPE,
    SCHEMA_DIR,
    by_fingerprint,
    crc64_avro,
    latest,
    load_schema,
    shipped_schemas,
)
from schemas.codec import (
    SINGLE_OBJECT_MAGIC,
    decode_message,
    decode_record,
    encode_confluent,
    encode_json,
    encode_record,
    encode_single_object,
    event_to_envelope,
)
from schemas.registry import LocalSchemaRegistry

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "openlineage"
RUN_ID = "ea041791-68bc-4ae1-bd89-4c8106a157e4"


def strict(doc: Any) -> str:
    """Type-exact comparison form: 1 and 1.0 and True differ here, key order does not."""
    return json.dumps(doc, sort_keys=True, ensure_ascii=True)


def spec_events() -> list[tuple[str, dict[str, Any]]]:
    """Every example event of the spec and client tests, plus every facet example placed in an event."""
    out = []
    for path in sorted((FIXTURES / "events").glob("*.json")) + [FIXTURES / "spec_tests" / "example_full_event.json"]:
        out.append((path.name, json.loads(path.read_text())))
    for path in sorted((FIXTURES / "spec_tests").glob("*/*.json")):
        facets = json.loads(path.read_text())
        kind = path.parent.name
        event: dict[str, Any] = {
            "eventType": "COMPLETE", "eventTime": "2024-05-01T12:00:00.000Z",
            "run": {"runId": RUN_ID, "facets": {}},
            "job": {"namespace": "ns", "name": "job", "facets": {}},
            "inputs": [{"namespace": "db", "name": "in", "facets": {}, "inputFacets": {}}],
            "outputs": [{"namespace": "db", "name": "out", "facets": {}, "outputFacets": {}}],
            "producer": "https://github.com/OpenLineage/OpenLineage/tree/1.0.0/client/python",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        }
        if kind.endswith("InputDatasetFacet"):
            event["inputs"][0]["inputFacets"] = facets
        elif kind.endswith("OutputDatasetFacet"):
            event["outputs"][0]["outputFacets"] = facets
        elif kind.endswith("DatasetFacet"):
            event["inputs"][0]["facets"] = facets
            event["outputs"][0]["facets"] = facets
        elif kind.endswith("RunFacet"):
            event["run"]["facets"] = facets
        else:  # JobFacet, LineageFacet (a job facet)
            event["job"]["facets"] = facets
        out.append((f"{kind}/{path.name}", event))
    return out


SPEC_EVENTS = spec_events()


def test_fixtures_cover_the_spec_examples() -> None:
    names = [n for n, _ in SPEC_EVENTS]
    assert len(names) >= 50
    assert "serde_example_dataset_event.json" in names and "serde_example_job_event.json" in names
    assert any(n.startswith("ColumnLineageDatasetFacet/") for n in names)


@pytest.mark.parametrize("name,event", SPEC_EVENTS, ids=[n for n, _ in SPEC_EVENTS])
def test_every_spec_example_round_trips_in_every_encoding(name: str, event: dict[str, Any]) -> None:
    registry = LocalSchemaRegistry()
    sid = registry.register_envelope()
    for value in (encode_single_object(event), encode_confluent(event, sid), encode_json(event)):
        [decoded] = decode_message(value, registry=registry)
        assert decoded.document == event
        assert strict(decoded.document) == strict(event)


CUSTOM = {
    "eventType": "OTHER",
    "eventTime": "2024-05-01T12:00:00+02:00",
    "run": {"runId": RUN_ID, "facets": {
        "custom": {"_producer": "x", "one": 1, "one_float": 1.0, "zero_neg": -0.0, "huge": 10**40,
                   "huge_neg": -(10**30), "tiny": 5e-324, "big_float": 1.7976931348623157e308,
                   "exp": 1e-7, "bool": True, "none": None, "empty": {}, "empty_list": [], "str": "",
                   "unicode": "Grüße 日本語 🚀 \u0000 \u2028", "escapes": "quote\" back\\ slash / tab\t",
                   "deep": {"a": [{"b": [{"c": [[[{"d": None}]]]}]}]}},
        "weird key ü/~0~1": {"list": [1, 1.0, "1", None, True, False, {"x": [None]}]}},
        "unknownRunKey": [1, 2]},
    "job": {"namespace": "ns", "name": "job ü", "facets": None, "extraJobKey": {"k": 1}},
    "inputs": [{"namespace": "a", "name": "b"}, {"namespace": "c", "name": "d", "facets": {"schema": {"fields": []}}}],
    "outputs": [{"namespace": "e", "name": "$self", "outputFacets": {"outputStatistics": {"rowCount": 2**63}}}],
    "producer": "https://example.com/producer",
    "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    "unknownTopLevel": {"nested": [None, {"deeper": 1.5}]},
    # keys that shadow envelope field names must survive as plain event keys
    "rest": "not the envelope's", "kind": 7, "subject": {"x": 1}, "self_link": None, "trace_id": [],
}

ODD_SHAPES: list[dict[str, Any]] = [
    {},
    {"eventType": None, "eventTime": 12, "producer": None, "schemaURL": ["x"]},
    {"run": "not an object", "job": ["not", "an", "object"], "inputs": "nope", "outputs": None},
    {"run": {"runId": 42}, "job": {"namespace": "ns"}, "dataset": {"namespace": None, "name": "x"}},
    {"run": {}, "job": {"namespace": "n", "name": "j"}, "inputs": [{"namespace": "a", "name": "b"}, 3]},
    {"inputs": [], "outputs": [{}], "dataset": {"namespace": "n", "name": "x", "facets": {"f": {}}}},
    {"inputs": [{"namespace": "a", "name": "b", "inputFacets": {"q": 1}}, {"namespace": "c", "name": "d"}]},
    {"eventType": "START", "eventTime": "x", "run": {"runId": "r", "facets": {}}},
    {"deep": json.loads("[" * 200 + "]" * 200)},
]


@pytest.mark.parametrize("event", [CUSTOM, *ODD_SHAPES], ids=["custom", *[f"odd{i}" for i in range(len(ODD_SHAPES))]])
def test_custom_facets_numbers_unicode_nulls_and_odd_shapes_round_trip(event: dict[str, Any]) -> None:
    sid_registry = {1: latest(ENVELOPE).json}
    for value in (encode_single_object(event, {"namespace": "s", "name": "o:1"}, "/outputs/0"),
                  encode_confluent(event, 1), encode_json(event)):
        [decoded] = decode_message(value, registry=sid_registry)
        assert strict(decoded.document) == strict(event)


def test_numbers_keep_their_json_type_through_avro() -> None:
    [decoded] = decode_message(encode_single_object(CUSTOM))
    custom = decoded.document["run"]["facets"]["custom"]
    assert type(custom["one"]) is int and type(custom["one_float"]) is float
    assert custom["huge"] == 10**40 and type(custom["huge"]) is int
    assert decoded.document["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 2**63
    assert custom["unicode"] == "Grüße 日本語 🚀 \u0000 \u2028"


def test_lone_surrogates_round_trip_through_the_ascii_fallback() -> None:
    event = json.loads('{"run": {"runId": "\\ud800"}, "job": {"namespace": "n", "name": "\\udfff"}, "x": "\\ud83d"}')
    for value in (encode_single_object(event), encode_json(event)):
        [decoded] = decode_message(value)
        assert decoded.document == event


def test_typed_fields_hold_the_core_and_rest_holds_the_facets() -> None:
    rec = event_to_envelope(CUSTOM, {"namespace": "s", "name": "o"}, "/outputs/0")
    assert rec["kind"] == "RUN"
    assert rec["eventType"] == "OTHER" and rec["producer"] == "https://example.com/producer"
    assert rec["run"][1] == {"runId": RUN_ID}
    assert rec["job"][1] == {"namespace": "ns", "name": "job ü"}
    assert [d["name"] for d in rec["inputs"][1]] == ["b", "d"]
    rest = json.loads(rec["rest"])
    assert "runId" not in rest["run"] and "custom" in rest["run"]["facets"]
    assert rest["inputs"] == [{}, {"facets": {"schema": {"fields": []}}}]
    assert rest["rest"] == "not the envelope's" and rest["kind"] == 7


# --------------------------------------------------------------------------- the .avsc files


def test_shipped_schemas_parse_and_fingerprints_match_fastavro() -> None:
    shipped = shipped_schemas()
    names = {(s.name, s.version) for s in shipped}
    assert {(ENVELOPE, 1), (ENVELOPE, 2), ("enriched_record", 1), ("graph_change", 1), ("dead_letter", 1)} <= names
    for s in shipped:
        assert s.fingerprint.hex() == fastavro.schema.fingerprint(s.canonical_form, "CRC-64-AVRO")
        assert by_fingerprint(s.fingerprint) is s
        assert json.loads((SCHEMA_DIR / f"{s.name}.v{s.version}.avsc").read_text()) == s.raw
    assert len({s.fingerprint for s in shipped}) == len(shipped)


def test_crc64_avro_matches_the_specification_vector() -> None:
    # Avro spec: the fingerprint of the schema "null" is 0x63dd24e7cc258f8a.
    assert crc64_avro(b'"null"') == 0x63DD24E7CC258F8A


def test_single_object_header_is_magic_plus_little_endian_fingerprint() -> None:
    value = encode_single_object(CUSTOM)
    assert value[:2] == SINGLE_OBJECT_MAGIC == b"\xc3\x01"
    assert value[2:10] == latest(ENVELOPE).fingerprint
    assert int.from_bytes(value[2:10], "little") == crc64_avro(latest(ENVELOPE).canonical_form.encode())


def test_v2_adds_only_an_optional_field_with_a_default() -> None:
    v1, v2 = load_schema(ENVELOPE, 1), load_schema(ENVELOPE, 2)
    assert v2["fields"][: len(v1["fields"])] == v1["fields"]
    [added] = v2["fields"][len(v1["fields"]):]
    assert added["name"] == "trace_id" and added["default"] is None and added["type"][0] == "null"


def _body(schema: Any, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()


def _v(version: int) -> Any:
    return next(s for s in shipped_schemas() if s.name == ENVELOPE and s.version == version)


def test_v1_reader_reads_v2_data_and_v2_reader_reads_v1_data() -> None:
    v1, v2 = _v(1), _v(2)
    rec = event_to_envelope(CUSTOM, {"namespace": "s", "name": "o"}, "/events/0/outputs/0", trace_id="trace-1")
    new_data = _body(v2.parsed, rec)
    old_reader = fastavro.schemaless_reader(io.BytesIO(new_data), v2.parsed, v1.parsed)
    assert "trace_id" not in old_reader
    assert old_reader["self_link"] == "/events/0/outputs/0"
    assert old_reader["subject"] == {"namespace": "s", "name": "o"}

    old_rec = {k: v for k, v in rec.items() if k != "trace_id"}
    old_data = _body(v1.parsed, old_rec)
    new_reader = fastavro.schemaless_reader(io.BytesIO(old_data), v1.parsed, v2.parsed)
    assert new_reader["trace_id"] is None
    assert new_reader["rest"] == json.loads(json.dumps(old_reader))["rest"]


def test_single_object_decoding_resolves_every_shipped_envelope_version() -> None:
    rec = event_to_envelope(CUSTOM, {"namespace": "s", "name": "o:1"}, "/outputs/0")
    rec.pop("trace_id")
    v1 = _v(1)
    value = SINGLE_OBJECT_MAGIC + v1.fingerprint + _body(v1.parsed, rec)
    [decoded] = decode_message(value)
    assert decoded.encoding == "avro"
    assert strict(decoded.document) == strict(CUSTOM)
    assert decoded.subject == {"namespace": "s", "name": "o:1"} and decoded.self_link == "/outputs/0"


def test_confluent_decoding_resolves_an_old_registered_version() -> None:
    registry = LocalSchemaRegistry()
    old_id = registry.register(load_schema(ENVELOPE, 1))
    new_id = registry.register_envelope()
    assert old_id != new_id and registry.register(load_schema(ENVELOPE, 1)) == old_id
    rec = event_to_envelope(CUSTOM)
    rec.pop("trace_id")
    value = b"\x00" + old_id.to_bytes(4, "big") + _body(_v(1).parsed, rec)
    [decoded] = decode_message(value, registry=registry)
    assert decoded.encoding == "confluent" and strict(decoded.document) == strict(CUSTOM)


# --------------------------------------------------------------------------- the other records


def test_enriched_graph_and_dead_letter_records_round_trip() -> None:
    from datetime import datetime

    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    records = {
        "enriched_record": {
            "event": '{"eventType":"COMPLETE"}', "event_hash": "ab" * 32, "kind": "run", "event_type": "COMPLETE",
            "event_time": "2026-01-02T03:04:05.000000Z", "run_id": RUN_ID, "job_namespace": "ns", "job_name": "j",
            "revision": 3, "source": {"topic": "openlineage.events", "partition": 2, "offset": 2**40},
            "subject": {"namespace": "s", "name": "o"}, "quality": '[{"completeness":1.0}]', "provenance": "[]",
            "processed_at": when,
        },
        "graph_change": {"op": "upsert", "table": "datasets", "id": "d1", "payload": '{"name":"x"}', "batch_id": 7},
        "dead_letter": {
            "key": b"run:ns/j", "value": b"\xc3\x01garbage", "headers": [{"key": "lineage.subject", "value": b"{}"},
                                                                       {"key": "empty", "value": None}],
            "topic": "openlineage.events", "partition": 1, "offset": 99, "error_class": "DecodeError",
            "error_code": "decode.truncated", "message": "truncated", "field": None, "failed_at": when,
        },
    }
    for name, record in records.items():
        value = encode_record(name, record)
        assert value[2:10] == latest(name).fingerprint
        assert decode_record(value, name) == record
        assert decode_record(value) == record
    with pytest.raises(Exception) as info:
        decode_record(encode_record("graph_change", records["graph_change"]), "dead_letter")
    assert getattr(info.value, "code", None) == "decode.unexpected_schema"
