"""schemas.validate: OpenLineage 2-0-x rules, normalisation, `$self` and `self_link`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode_message, encode_evo_document, subject_header
from schemas.errors import EventValidationError, SelfLinkError
from schemas.validate import (
    EVENT_TYPES,
    classify_event,
    normalise_event_time,
    validate_event,
    validate_message,
)

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "fixtures" / "openlineage"
RUN_ID = "ea041791-68bc-4ae1-bd89-4c8106a157e4"
SUBJECT = {"namespace": "evogeoscienceobject://hub1/i/w", "name": "obj-1:17"}
FACET = {"_producer": "https://example.com/p", "_schemaURL": "https://example.com/f.json#/$defs/F", "n": 1}


def run_event(**over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "eventType": "COMPLETE",
        "eventTime": "2024-05-01T14:30:00.123+02:00",
        "run": {"runId": RUN_ID, "facets": {}},
        "job": {"namespace": "ns", "name": "job"},
        "inputs": [{"namespace": "db", "name": "in"}],
        "outputs": [{"namespace": "db", "name": "out", "outputFacets": {}}],
        "producer": "https://github.com/OpenLineage/OpenLineage/tree/1.0.0/client/python",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    }
    ev.update(over)
    return ev


def fails(doc: Any, field: str, code: str, *args: Any, error: type = EventValidationError, **kw: Any) -> str:
    with pytest.raises(error) as info:
        validate_event(doc, *args, **kw)
    assert info.value.field == field, info.value.message
    assert info.value.code == code
    assert field in info.value.message or field in ("$", "subject")
    return info.value.message


def test_spec_event_type_enum_matches_the_fetched_json_schema() -> None:
    spec = json.loads((FIXTURES / "OpenLineage.json").read_text())
    run_event_schema = spec["$defs"]["RunEvent"]["allOf"][1]
    assert set(run_event_schema["properties"]["eventType"]["enum"]) == EVENT_TYPES
    assert run_event_schema["required"] == ["run", "job"]  # eventType is optional in 2-0-x
    assert spec["$defs"]["BaseEvent"]["required"] == ["eventTime", "producer", "schemaURL"]


def test_valid_run_event_is_normalised_into_a_new_dict() -> None:
    ev = run_event()
    before = copy.deepcopy(ev)
    out = validate_event(ev)
    assert ev == before  # input untouched
    assert out is not ev
    assert out["eventTime"] == "2024-05-01T12:30:00.123000Z"
    assert out["run"] == {"runId": RUN_ID, "facets": {}}
    assert out["inputs"] == ev["inputs"] and out["outputs"] == ev["outputs"]


@pytest.mark.parametrize("name", ["serde_example_run_event.json", "serde_example_job_event.json",
                                  "serde_example_dataset_event.json", "example_full_event.json"])
def test_spec_example_events_validate_once_their_time_has_an_offset(name: str) -> None:
    doc = json.loads((FIXTURES / "events" / name).read_text())
    if not doc["eventTime"].endswith("Z"):
        fails(doc, "eventTime", "validation.event_time")  # the examples' naive times are rejected
        doc["eventTime"] += "Z"
    out = validate_event(doc)
    assert out["eventTime"].endswith("Z") and len(out["eventTime"]) == 27


@pytest.mark.parametrize("raw,expected", [
    ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000000Z"),
    ("2024-05-01T12:00:00z", "2024-05-01T12:00:00.000000Z"),
    ("2024-05-01T14:00:00+02:00", "2024-05-01T12:00:00.000000Z"),
    ("2024-05-01T14:00:00+0200", "2024-05-01T12:00:00.000000Z"),
    ("2024-05-01T14:00:00+02", "2024-05-01T12:00:00.000000Z"),
    ("2024-05-01T00:30:00.5-05:30", "2024-05-01T06:00:00.500000Z"),
    ("2024-05-01 12:00:00.123456789Z", "2024-05-01T12:00:00.123456Z"),
    ("2024-12-31T23:59:59.999999-01:00", "2025-01-01T00:59:59.999999Z"),
    ("2024-02-29T00:00:00+00:00", "2024-02-29T00:00:00.000000Z"),
])
def test_event_time_is_rewritten_to_utc_microseconds(raw: str, expected: str) -> None:
    assert normalise_event_time(raw) == expected
    assert validate_event(run_event(eventTime=raw))["eventTime"] == expected


@pytest.mark.parametrize("raw", [
    "2024-05-01T12:00:00", "2024-05-01T12:00:00.123", "2024-05-01", "yesterday", "", "2023-02-29T00:00:00Z",
    "2024-13-01T00:00:00Z", "2024-05-01T25:00:00Z", "2024-05-01T12:00:00+24:00", "0001-01-01T00:00:00+01:00",
    "2024-05-01T12:00Z", 1714564800, None, "２０２４-05-01T12:00:00Z",
    "1941-01-01T00:00:00+05:53:20",   # an offset with seconds (isoformat() of a local mean time): not RFC 3339
])
def test_bad_or_naive_event_time_is_rejected(raw: Any) -> None:
    msg = fails(run_event(eventTime=raw), "eventTime", "validation.event_time")
    if raw == "2024-05-01T12:00:00":
        assert "offset" in msg


def test_missing_fields_name_the_field() -> None:
    for key, field in [("eventTime", "eventTime"), ("producer", "producer"), ("job", "job")]:
        ev = run_event()
        del ev[key]
        fails(ev, field, "validation.missing")
    ev = run_event()
    del ev["run"]["runId"]
    fails(ev, "run.runId", "validation.missing")
    ev = run_event()
    del ev["job"]["name"]
    fails(ev, "job.name", "validation.missing")


@pytest.mark.parametrize("run_id", ["not-a-uuid", 12, "", "ea041791-68bc-4ae1-bd89-4c8106a157e", None,
                                    "ea041791-68bc-4ae1-bd89-4c8106a157e4 ", "{ea041791-68bc-4ae1-bd89-4c8106a157e4}"])
def test_run_id_must_be_a_uuid(run_id: Any) -> None:
    code = "validation.missing" if run_id is None else "validation.run_id"
    fails(run_event(run={"runId": run_id}), "run.runId", code)


def test_run_id_is_lower_cased() -> None:
    assert validate_event(run_event(run={"runId": RUN_ID.upper()}))["run"]["runId"] == RUN_ID


@pytest.mark.parametrize("event_type", ["start", "DONE", 1, None, ""])
def test_event_type_must_be_in_the_enum_when_present(event_type: Any) -> None:
    fails(run_event(eventType=event_type), "eventType", "validation.event_type")


def test_event_type_is_optional_as_in_the_spec() -> None:
    ev = run_event()
    del ev["eventType"]
    assert "eventType" not in validate_event(ev)


@pytest.mark.parametrize("producer", ["not a uri", "lineage-demo", "", 5, "https://x y"])
def test_producer_must_be_an_absolute_uri(producer: Any) -> None:
    fails(run_event(producer=producer), "producer", "validation.type")


def test_inputs_and_outputs_are_lists_of_named_objects() -> None:
    fails(run_event(inputs={"namespace": "a"}), "inputs", "validation.type")
    fails(run_event(outputs=["x"]), "outputs[0]", "validation.type")
    outs = [{"namespace": "a", "name": "b"}, {"namespace": "a", "name": "c"}, {"namespace": "a", "name": 3}]
    fails(run_event(outputs=outs), "outputs[2].name", "validation.type")
    fails(run_event(inputs=[{"name": "b"}]), "inputs[0].namespace", "validation.missing")
    fails(run_event(inputs=[{"namespace": "a", "name": None}]), "inputs[0].name", "validation.missing")
    fails(run_event(inputs=[{"namespace": "a", "name": "b", "facets": []}]), "inputs[0].facets", "validation.type")
    fails(run_event(outputs=[{"namespace": "a", "name": "b", "outputFacets": 1}]), "outputs[0].outputFacets",
          "validation.type")
    fails(run_event(run={"runId": RUN_ID, "facets": "x"}), "run.facets", "validation.type")
    # an explicit null for an optional field is read as absent (producers built on attrs / dataclasses)
    assert validate_event(run_event(job={"namespace": "a", "name": "b", "facets": None}))["job"]["facets"] is None


def test_run_event_gets_empty_inputs_and_outputs_when_absent() -> None:
    ev = run_event()
    del ev["inputs"], ev["outputs"]
    out = validate_event(ev)
    assert out["inputs"] == [] and out["outputs"] == []


def test_classify_event() -> None:
    assert classify_event(run_event()) == "run"
    assert classify_event({"job": {}}) == "job"
    assert classify_event({"dataset": {}}) == "dataset"
    for doc in ({}, {"eventType": "START"}, [], "x", None):
        with pytest.raises(EventValidationError) as info:
            classify_event(doc)
        assert info.value.code == "validation.not_an_event"


def test_dataset_and_job_events() -> None:
    ds = {"eventTime": "2024-05-01T12:00:00Z", "producer": "https://p", "schemaURL": "https://s",
          "dataset": {"namespace": "db", "name": "t", "facets": {"schema": {
              "_producer": "https://p", "_schemaURL": "https://s#/$defs/SchemaDatasetFacet", "fields": []}}}}
    assert validate_event(ds)["dataset"] == ds["dataset"]
    fails({**ds, "dataset": {"namespace": "db"}}, "dataset.name", "validation.missing")
    fails({**ds, "dataset": "db.t"}, "dataset", "validation.type")
    job = {"eventTime": "2024-05-01T12:00:00Z", "producer": "https://p", "schemaURL": "https://s",
           "job": {"namespace": "n", "name": "j"},
           "inputs": [{"namespace": "db", "name": "a"}]}
    out = validate_event(job)
    assert out["inputs"] == job["inputs"] and "outputs" not in out
    fails({**job, "job": {"namespace": "n"}}, "job.name", "validation.missing")
    fails({**job, "schemaURL": 3}, "schemaURL", "validation.type")


# --------------------------------------------------------------------------- $self and self_link


def self_event(**over: Any) -> dict[str, Any]:
    return run_event(outputs=[{"namespace": "x", "name": "other"},
                              {"namespace": "evogeoscienceobject://hub1/i/w", "name": "$self", "facets": {"f": FACET}}],
                     **over)


def test_self_output_is_replaced_by_the_subject() -> None:
    out = validate_event(self_event(), SUBJECT)
    assert out["outputs"][1] == {**SUBJECT, "facets": {"f": FACET}}
    assert out["outputs"][0] == {"namespace": "x", "name": "other"}


def test_self_without_subject_is_a_self_link_error() -> None:
    fails(self_event(), "outputs[1].name", "validation.self_link", error=SelfLinkError)


def test_self_as_an_input_is_rejected() -> None:
    fails(run_event(inputs=[{"namespace": "a", "name": "$self"}]), "inputs[0].name", "validation.self_link",
          SUBJECT, error=SelfLinkError)


@pytest.mark.parametrize("subject", [{"namespace": "a"}, {"namespace": "", "name": "x"}, "a/b",
                                     {"namespace": "a", "name": "$self"}])
def test_bad_subject_is_a_self_link_error(subject: Any) -> None:
    with pytest.raises(SelfLinkError):
        validate_event(self_event(), subject)


def test_self_link_must_point_at_a_self_output() -> None:
    assert validate_event(self_event(), SUBJECT, "/outputs/1")["outputs"][1]["name"] == SUBJECT["name"]
    assert validate_event(self_event(), SUBJECT, "/events/0/outputs/1")["outputs"][1]["namespace"] == SUBJECT["namespace"]
    for link in ["/outputs/0", "/outputs/2", "/events/0/inputs/0", "outputs/1", "/outputs/01", "", 5]:
        fails(self_event(), "self_link", "validation.self_link", SUBJECT, link, error=SelfLinkError)


def test_self_link_is_checked_only_on_the_event_it_points_at() -> None:
    start = self_event(eventType="START")
    start["outputs"] = []  # the START event has no $self output
    complete = self_event()
    assert validate_event(start, SUBJECT, "/events/1/outputs/1", event_index=0, event_count=2)["outputs"] == []
    assert validate_event(complete, SUBJECT, "/events/1/outputs/1", event_index=1, event_count=2)
    fails(complete, "self_link", "validation.self_link", SUBJECT, "/events/2/outputs/1", event_index=0,
          event_count=2, error=SelfLinkError)
    fails(complete, "self_link", "validation.self_link", SUBJECT, "/outputs/1", event_index=0, error=SelfLinkError)


def test_decoded_evo_document_validates_with_its_pointer_position() -> None:
    start = self_event(eventType="START")
    start["outputs"] = []
    value = encode_evo_document([start, self_event()], "/events/1/outputs/1")
    msgs = decode_message(value, [subject_header(SUBJECT)])
    # both the explicit helper and the plain three-argument call check the right event
    assert [validate_message(m)["eventType"] for m in msgs] == ["START", "COMPLETE"]
    assert [validate_event(m.document, m.subject, m.self_link)["eventType"] for m in msgs] == ["START", "COMPLETE"]
    bad = decode_message(encode_evo_document([start, self_event()], "/events/0/outputs/0"), [subject_header(SUBJECT)])
    with pytest.raises(SelfLinkError):
        validate_message(bad[0])
    out_of_range = decode_message(encode_evo_document([self_event()], "/events/3/outputs/1"), [subject_header(SUBJECT)])
    with pytest.raises(SelfLinkError):
        validate_event(out_of_range[0].document, out_of_range[0].subject, out_of_range[0].self_link)


def test_seed_example_document_validates() -> None:
    ns = "evogeoscienceobject://hub1/b3bfd062-820d-4aa4-9751-bda2f1cd8946/c2be55db-53f0-4032-b57f-dde3ddd678d8"
    seed = {
        "eventType": "COMPLETE", "eventTime": "2024-07-04T00:00:00Z",
        "job": {"namespace": "evocompute", "name": "parsers.dxf:v1.0.0"},
        "run": {"runId": "123e4567-e89b-12d3-a456-426614174000"},
        "inputs": [{"namespace": ns, "name": "65e24708-6ce3-4d85-b8a3-abcdb1ced751:1720050462228330567"}],
        "outputs": [{"namespace": ns, "name": "$self"}],
        "producer": "https://github.com/OpenLineage/OpenLineage/blob/v1-0-0/client",
        "schemaURL": "https://github.com/SeequentEvo/evo-schemas/blob/main/schema/components/lineage/1.0.0/"
                     "lineage.schema.json#/$defs/RunEvent",
    }
    [msg] = decode_message(encode_evo_document([seed], "/events/0/outputs/0"),
                           [subject_header({"namespace": ns, "name": "new-object:1"})])
    assert validate_message(msg)["outputs"] == [{"namespace": ns, "name": "new-object:1"}]


def test_empty_namespace_and_name_are_valid_as_in_the_spec() -> None:
    # spec/OpenLineage.json: Job and Dataset namespace / name are "type": "string" with no minLength
    event = run_event(job={"namespace": "", "name": ""}, inputs=[{"namespace": "", "name": "t"}],
                      outputs=[{"namespace": "s3://bucket", "name": ""}])
    out = validate_event(event)
    assert out["job"] == {"namespace": "", "name": ""}
    assert (out["inputs"][0]["namespace"], out["outputs"][0]["name"]) == ("", "")
    dataset_event = {"eventTime": "2024-05-01T12:00:00Z", "producer": "https://example.com/p", "schemaURL": "https://s",
                     "dataset": {"namespace": "", "name": ""}}
    assert validate_event(dataset_event)["dataset"] == {"namespace": "", "name": ""}
    fails(run_event(job={"namespace": "", "name": 7}), "job.name", "validation.type")


def _times_by_datetime(value: str) -> str:
    """The normalised text through datetime for every input (the UTC shortcut's oracle): the shortcut's memo of
    calendar dates says no date is valid, so normalise_event_time takes its datetime path."""
    import schemas.validate as validate

    shortcut = validate._valid_date
    validate._valid_date = lambda y, mo, d: False
    try:
        return normalise_event_time(value)
    finally:
        validate._valid_date = shortcut


def _outcome(fn: Any, value: str) -> tuple[str, str]:
    try:
        return "ok", fn(value)
    except EventValidationError as exc:
        return "error", exc.code


def test_the_utc_shortcut_writes_what_datetime_writes() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    two = st.integers(min_value=0, max_value=99).map(lambda n: f"{n:02d}")
    times = st.builds(
        lambda y, mo, d, sep, h, mi, s, frac, z: f"{y:04d}-{mo}-{d}{sep}{h}:{mi}:{s}{frac}{z}",
        st.sampled_from([0, 1, 1900, 2000, 2023, 2024, 9999]), two, two, st.sampled_from(["T", "t", " "]), two, two,
        two, st.sampled_from(["", ".", ".1", ".123", ".123456", ".1234567", ",5"]),
        st.sampled_from(["Z", "z", "+00:00", "-00:00", "+0000", "+00", "+00:30", "+01:00", "-05:30", "+24:00", ""]))

    @settings(max_examples=500, deadline=None)
    @given(times)
    def check(value: str) -> None:
        assert _outcome(normalise_event_time, value) == _outcome(_times_by_datetime, value)

    check()
    for value in ("2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "2024-01-01T24:00:00Z",
                  "2024-01-01T23:59:60Z", "2024-12-31T23:59:59.9999999Z"):
        assert _outcome(normalise_event_time, value) == _outcome(_times_by_datetime, value), value
