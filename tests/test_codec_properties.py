"""Property tests: on any input, decode_message raises only DecodeError and validate_event only
EventValidationError; any JSON object round-trips through every encoding."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.avro import ENVELOPE, latest
from schemas.codec import decode_message, encode_confluent, encode_json, encode_single_object
from schemas.errors import DecodeError, EventValidationError
from schemas.identity import event_hash
from schemas.validate import validate_event

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REGISTRY = {1: latest(ENVELOPE).json}
FINGERPRINT = latest(ENVELOPE).fingerprint

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),  # strict JSON: no NaN / Infinity
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=30,
)
uuid_like = st.one_of(st.uuids().map(str), st.text(max_size=40))
name_obj = st.fixed_dictionaries(
    {"namespace": st.one_of(st.text(max_size=10), json_scalars), "name": st.one_of(st.text(max_size=10), json_scalars)},
    optional={"facets": json_values, "inputFacets": json_values, "outputFacets": json_values},
)
event_like = st.fixed_dictionaries({}, optional={
    "eventType": st.one_of(st.sampled_from(["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]), json_scalars),
    "eventTime": st.one_of(st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()), json_scalars),
    "run": st.one_of(st.fixed_dictionaries({"runId": uuid_like}, optional={"facets": json_values}), json_values),
    "job": st.one_of(name_obj, json_values),
    "dataset": st.one_of(name_obj, json_values),
    "inputs": st.one_of(st.lists(name_obj, max_size=3), json_values),
    "outputs": st.one_of(st.lists(st.one_of(name_obj, st.just({"namespace": "n", "name": "$self"})), max_size=3),
                         json_values),
    "producer": st.one_of(st.just("https://example.com/p"), json_scalars),
    "schemaURL": st.one_of(st.text(max_size=10), json_scalars),
    "custom": json_values,
})
subjects = st.one_of(st.none(), st.fixed_dictionaries({"namespace": st.text(max_size=5), "name": st.text(max_size=5)}),
                     json_values)
headers = st.one_of(
    st.none(),
    st.lists(st.tuples(st.sampled_from(["lineage.subject", "other", "x"]), st.one_of(st.none(), st.binary(max_size=40))),
             max_size=3),
)


def strict(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True)


@SETTINGS
@given(value=st.binary(max_size=300), hdrs=headers)
def test_decode_arbitrary_bytes_raises_only_decode_error(value: bytes, hdrs: Any) -> None:
    try:
        out = decode_message(value, hdrs, registry=REGISTRY)
    except DecodeError as exc:
        assert exc.code.startswith("decode") and exc.message
        assert exc.code != "decode.internal", exc.message  # an unforeseen exception, converted by the guard
    else:
        assert out and all(isinstance(m.document, dict) for m in out)


@SETTINGS
@given(body=st.binary(max_size=300), prefix=st.sampled_from([b"\xc3\x01" + FINGERPRINT, b"\x00\x00\x00\x00\x01"]))
def test_decode_arbitrary_avro_bodies_raises_only_decode_error(body: bytes, prefix: bytes) -> None:
    try:
        decode_message(prefix + body, registry=REGISTRY)
    except DecodeError as exc:
        assert exc.code != "decode.internal", exc.message


@SETTINGS
@given(doc=json_values)
def test_decode_arbitrary_json_raises_only_decode_error(doc: Any) -> None:
    try:
        decode_message(json.dumps(doc).encode())
    except DecodeError as exc:
        assert exc.code != "decode.internal", exc.message


@SETTINGS
@given(doc=st.one_of(event_like, json_values), subject=subjects,
       link=st.one_of(st.none(), st.sampled_from(["/outputs/0", "/events/0/outputs/1", "/x"]), json_scalars),
       index=st.one_of(st.none(), st.integers(0, 3)))
def test_validate_arbitrary_documents_raises_only_validation_errors(doc: Any, subject: Any, link: Any,
                                                                    index: Any) -> None:
    try:
        out = validate_event(doc, subject, link, event_index=index, event_count=None if index is None else 4)
    except EventValidationError as exc:
        assert exc.code.startswith("validation") and exc.field
    else:
        assert out["eventTime"].endswith("Z")
        assert len(event_hash(out)) == 64


@SETTINGS
@given(doc=event_like, subject=st.one_of(st.none(), st.fixed_dictionaries({"namespace": st.text(min_size=1, max_size=5),
                                                                            "name": st.text(min_size=1, max_size=5)})))
def test_any_event_shaped_object_round_trips_in_every_encoding(doc: dict[str, Any], subject: Any) -> None:
    for value in (encode_single_object(doc, subject), encode_confluent(doc, 1, subject), encode_json(doc)):
        [msg] = decode_message(value, registry=REGISTRY)
        assert strict(msg.document) == strict(doc)
    [msg] = decode_message(encode_single_object(doc, subject))
    assert msg.subject == subject


names = st.text(min_size=1, max_size=12).filter(lambda s: s != "$self")
#: facets: BaseFacet (`_producer` / `_schemaURL` URIs) plus any content
facets = st.dictionaries(st.text(max_size=8), st.fixed_dictionaries(
    {"_producer": st.just("https://example.com/p"), "_schemaURL": st.just("https://example.com/f#/$defs/F")},
    optional={"content": json_values}), max_size=3)
valid_dataset = st.fixed_dictionaries({"namespace": names, "name": names}, optional={"facets": facets})
valid_event = st.fixed_dictionaries({
    # RFC 3339 offsets are whole minutes (the spec's "date-time"); zoneinfo's historical local mean times are
    # not (Asia/Kolkata was +05:53:20 in 1941), and isoformat() would write their seconds: not a valid event.
    "eventTime": st.datetimes(min_value=datetime(1900, 1, 2), timezones=st.timezones())
                   .filter(lambda d: int(d.utcoffset().total_seconds()) % 60 == 0).map(lambda d: d.isoformat()),
    "run": st.fixed_dictionaries({"runId": st.uuids().map(str)}, optional={"facets": facets}),
    "job": st.fixed_dictionaries({"namespace": names, "name": names}, optional={"facets": facets}),
    "producer": st.sampled_from(["https://github.com/OpenLineage/OpenLineage/tree/1.0.0/client", "urn:x:y"]),
    "schemaURL": st.just("https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"),
}, optional={
    "eventType": st.sampled_from(["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]),
    "inputs": st.lists(valid_dataset, max_size=3),
    "outputs": st.lists(valid_dataset, max_size=3),
    "customTopLevel": json_values,
})


@SETTINGS
@given(doc=valid_event)
def test_valid_events_validate_idempotently_and_hash_the_same_in_every_encoding(doc: dict[str, Any]) -> None:
    out = validate_event(doc)
    assert out["eventTime"].endswith("Z") and len(out["eventTime"]) == 27
    assert validate_event(out) == out  # normalisation is idempotent
    expected = event_hash(out)
    for value in (encode_single_object(doc), encode_confluent(doc, 1), encode_json(doc)):
        [msg] = decode_message(value, registry=REGISTRY)
        assert event_hash(validate_event(msg.document)) == expected

