"""Producer models, keys, settings, the builder's event sequence and the demo generator (pure)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from producers.builder import LineageRun, lineage_run, track_lineage
from producers.keys import message_key
from producers.models import (
    DatasetEvent,
    JobEvent,
    RunEvent,
    facet,
    input_field,
    parse_event,
    schema_facet,
)
from producers.settings import EmitterSettings
from schemas.errors import EventValidationError

pytestmark = pytest.mark.unit

RUN_ID = "123e4567-e89b-12d3-a456-426614174000"


def run_event(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "eventTime": "2024-05-01T12:00:00.123+02:00", "eventType": "COMPLETE",
        "producer": "https://example.com/p", "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json",
        "run": {"runId": RUN_ID, "facets": {"custom": {"a": None, "nested": [1, {"b": "x"}]}}},
        "job": {"namespace": "ns", "name": "job", "facets": {}},
        "inputs": [{"namespace": "pg", "name": "t_in", "facets": {}, "inputFacets": {}}],
        "outputs": [{"namespace": "s3", "name": "t_out", "facets": {}, "outputFacets": {}}],
    }
    doc.update(overrides)
    return doc


class _Collect:
    """Collects what the builder emits (a plain list; the Kafka path is tested in test_emitter.py)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)


def test_run_event_round_trips_to_spec_json() -> None:
    doc = run_event(extraTopLevel={"kept": True})
    assert RunEvent.model_validate(doc).to_dict() == doc
    assert parse_event(doc).to_dict() == doc


@pytest.mark.parametrize(("mutate", "field", "code"), [
    (lambda d: d["run"].update(runId="not-a-uuid"), "run.runId", "validation.run_id"),
    (lambda d: d.update(eventTime="2024-05-01T12:00:00"), "eventTime", "validation.event_time"),
    (lambda d: d.update(eventTime="2024-05-01"), "eventTime", "validation.event_time"),
    (lambda d: d.update(eventTime="yesterday"), "eventTime", "validation.event_time"),
    (lambda d: d.update(eventType="FINISHED"), "eventType", "validation.event_type"),
    (lambda d: d["job"].pop("namespace"), "job.namespace", "validation.missing"),
    (lambda d: d["job"].update(name=""), "job.name", "validation.type"),
    (lambda d: d["outputs"][0].pop("name"), "outputs[0].name", "validation.missing"),
    (lambda d: d["inputs"][0].update(namespace=None), "inputs[0].namespace", "validation.type"),
    (lambda d: d.update(inputs={"not": "a list"}), "inputs", "validation.type"),
    (lambda d: d.pop("eventTime"), "eventTime", "validation.event_time"),
    (lambda d: d.update(producer="not a uri"), "producer", "validation.type"),
])
def test_bad_events_are_rejected_naming_the_field(mutate: Any, field: str, code: str) -> None:
    doc = run_event()
    mutate(doc)
    with pytest.raises(EventValidationError) as info:
        parse_event(doc)
    assert info.value.field == field
    assert info.value.code == code
    assert field.split(".")[-1].split("[")[0] in str(info.value)


def test_pydantic_error_names_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        RunEvent(eventTime="2024-05-01T12:00:00Z", run={"runId": "nope"}, job={"namespace": "n", "name": "j"})
    assert info.value.errors()[0]["loc"] == ("run", "runId")
    assert "UUID" in str(info.value)


def test_dataset_and_job_events() -> None:
    ds = parse_event({"eventTime": "2024-05-01T10:00:00Z", "producer": "urn:p", "schemaURL": "s",
                      "dataset": {"namespace": "pg", "name": "t", "facets": {"schema": {"fields": []}}}})
    assert isinstance(ds, DatasetEvent) and ds.dataset.facets["schema"] == {"fields": []}
    job = parse_event({"eventTime": "2024-05-01T10:00:00Z", "producer": "urn:p", "schemaURL": "s",
                       "job": {"namespace": "n", "name": "j"}, "inputs": [], "outputs": []})
    assert isinstance(job, JobEvent) and job.to_dict()["job"] == {"namespace": "n", "name": "j", "facets": {}}
    with pytest.raises(EventValidationError) as info:
        parse_event({"eventTime": "2024-05-01T10:00:00Z", "producer": "urn:p", "schemaURL": "s"})
    assert info.value.code == "validation.not_an_event"


def test_uuid_objects_and_aware_datetimes_are_accepted() -> None:
    from datetime import UTC, datetime
    rid = uuid.uuid4()
    event = RunEvent(eventTime=datetime(2024, 1, 1, tzinfo=UTC), run={"runId": rid},
                     job={"namespace": "n", "name": "j"}, eventType="START")
    assert event.to_dict()["run"]["runId"] == str(rid)
    assert event.to_dict()["eventTime"] == "2024-01-01T00:00:00+00:00"
    with pytest.raises(ValidationError):
        RunEvent(eventTime=datetime(2024, 1, 1), run={"runId": rid}, job={"namespace": "n", "name": "j"})


# -- keys -----------------------------------------------------------------------------------

def _official_key(event: Any) -> str | None:
    from openlineage.client.transport import kafka

    transport = object.__new__(kafka.KafkaTransport)  # the key function needs no producer
    return transport._get_message_key(event)


def test_keys_match_the_official_kafka_transport() -> None:
    from openlineage.client import event_v2
    from openlineage.client.facet_v2 import parent_run
    from openlineage.client.serde import Serde

    job = event_v2.Job(namespace="ns", name="child")
    plain = event_v2.RunEvent(eventTime="2024-01-01T00:00:00Z", eventType=event_v2.RunState.START,
                              run=event_v2.Run(runId=RUN_ID), job=job)
    with_parent = event_v2.RunEvent(
        eventTime="2024-01-01T00:00:00Z", eventType=event_v2.RunState.START, job=job,
        run=event_v2.Run(runId=RUN_ID, facets={"parent": parent_run.ParentRunFacet(
            run=parent_run.Run(runId=str(uuid.uuid4())), job=parent_run.Job(namespace="dagns", name="dag"))}))
    with_root = event_v2.RunEvent(
        eventTime="2024-01-01T00:00:00Z", eventType=event_v2.RunState.START, job=job,
        run=event_v2.Run(runId=RUN_ID, facets={"parent": parent_run.ParentRunFacet(
            run=parent_run.Run(runId=str(uuid.uuid4())), job=parent_run.Job(namespace="dagns", name="task"),
            root=parent_run.Root(run=parent_run.RootRun(runId=str(uuid.uuid4())),
                                 job=parent_run.RootJob(namespace="rootns", name="root")))}))
    dataset = event_v2.DatasetEvent(eventTime="2024-01-01T00:00:00Z",
                                    dataset=event_v2.StaticDataset(namespace="pg", name="public.t"))
    job_event = event_v2.JobEvent(eventTime="2024-01-01T00:00:00Z", job=job)
    expected = ["run:ns/child", "run:dagns/dag", "run:rootns/root", "dataset:pg/public.t", "job:ns/child"]
    for event, want in zip([plain, with_parent, with_root, dataset, job_event], expected, strict=True):
        assert _official_key(event) == want
        assert message_key(Serde.to_dict(event)) == want


def test_key_of_unknown_shape_is_none() -> None:
    assert message_key({"hello": "world"}) is None
    parent_without_job = run_event(run={"runId": RUN_ID, "facets": {"parent": {"run": {"runId": RUN_ID}}}})
    assert message_key(parent_without_job) == "run:ns/job"


# -- settings -------------------------------------------------------------------------------

def test_settings_render_librdkafka_keys_and_hide_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINEAGE_BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("LINEAGE_SASL_PASSWORD", "s3cret")
    settings = EmitterSettings(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u",
                               extra_config={"socket.keepalive.enable": True})
    config = settings.librdkafka_config()
    assert config["bootstrap.servers"] == "k1:9092,k2:9092"
    assert config["acks"] == "all" and config["enable.idempotence"] == "true"
    assert config["sasl.password"] == "s3cret" and config["security.protocol"] == "SASL_SSL"
    assert config["socket.keepalive.enable"] == "true"
    assert "s3cret" not in repr(settings)
    with pytest.raises(ValidationError):
        EmitterSettings(bootstrap_servers="x:1", no_such_setting=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        EmitterSettings(bootstrap_servers="x:1", encoding="xml")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="acks"):
        EmitterSettings(bootstrap_servers="x:1", extra_config={"acks": "1"})


# -- builder --------------------------------------------------------------------------------

def test_lineage_run_emits_start_then_complete_with_added_datasets() -> None:
    sink = _Collect()
    with lineage_run(sink, "etl", "daily", inputs=[("pg", "public.orders")]) as run:
        run.add_output("s3", "orders_daily", facets={"schema": schema_facet([("id", "bigint")])})
        run.add_column_lineage("s3", "orders_daily", {"id": [input_field("pg", "public.orders", "id")]})
        run.add_job_facet("sql", facet("1-1-0/SQLJobFacet", query="select 1"))
    start, complete = sink.events
    assert [start["eventType"], complete["eventType"]] == ["START", "COMPLETE"]
    assert start["run"]["runId"] == complete["run"]["runId"] == run.run_id
    assert start["outputs"] == [] and [o["name"] for o in complete["outputs"]] == ["orders_daily"]
    lineage = complete["outputs"][0]["facets"]["columnLineage"]
    assert lineage["fields"]["id"]["inputFields"][0]["transformations"][0] == {
        "type": "DIRECT", "subtype": "IDENTITY", "masking": False}
    assert complete["job"]["facets"]["sql"]["query"] == "select 1"
    assert all(parse_event(e) for e in sink.events)
    from schemas.validate import validate_event
    assert validate_event(complete)["outputs"][0]["name"] == "orders_daily"


def test_lineage_run_fails_with_error_message_facet_and_reraises() -> None:
    sink = _Collect()
    with pytest.raises(ZeroDivisionError), lineage_run(sink, "etl", "broken"):
        1 / 0  # noqa: B018
    assert [e["eventType"] for e in sink.events] == ["START", "FAIL"]
    error = sink.events[1]["run"]["facets"]["errorMessage"]
    assert error["message"] == "ZeroDivisionError: division by zero"
    assert error["programmingLanguage"] == "python"
    assert "1 / 0" in error["stackTrace"]
    assert error["_schemaURL"].endswith("ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet")


def test_decorator_and_parent_facets() -> None:
    sink = _Collect()

    @track_lineage(sink, "etl", pass_run=True)
    def step(x: int, lineage_run: LineageRun) -> int:
        child = lineage_run.child("sub")
        with child.track():
            grandchild = child.child("subsub")
            with grandchild.track():
                pass
        return x * 2

    assert step(21) == 42
    names = [(e["job"]["name"].rsplit(".", 1)[-1], e["eventType"]) for e in sink.events]
    assert names == [("step", "START"), ("sub", "START"), ("subsub", "START"), ("subsub", "COMPLETE"),
                     ("sub", "COMPLETE"), ("step", "COMPLETE")]
    root_id = sink.events[0]["run"]["runId"]
    sub_parent = sink.events[1]["run"]["facets"]["parent"]
    subsub_parent = sink.events[2]["run"]["facets"]["parent"]
    assert sub_parent["run"]["runId"] == root_id and sub_parent["root"]["run"]["runId"] == root_id
    assert subsub_parent["run"]["runId"] == sink.events[1]["run"]["runId"]
    assert subsub_parent["root"]["run"]["runId"] == root_id
    assert message_key(sink.events[2]) == f"run:etl/{sink.events[0]['job']['name']}"


# -- demo generator -------------------------------------------------------------------------

def test_demo_traffic_is_deterministic_valid_and_rich() -> None:
    from producers.demo import DemoTraffic

    first = DemoTraffic(7).take(1500)
    again = DemoTraffic(7).take(1500)
    other = DemoTraffic(8).take(1500)
    dump = [json.dumps(m.value, sort_keys=True) for m in first]
    assert dump == [json.dumps(m.value, sort_keys=True) for m in again]
    assert dump != [json.dumps(m.value, sort_keys=True) for m in other]
    kinds = {k: sum(m.kind == k for m in first) for k in ("event", "evo", "duplicate", "late")}
    assert kinds["evo"] > 10 and 3 <= kinds["duplicate"] <= 40 and 3 <= kinds["late"] <= 40
    from schemas.validate import validate_event

    events = [e for m in first for e in (m.value["events"] if m.subject else [m.value])]
    for event in events:
        parse_event(event)
    for m in first:  # the processor's validator accepts all of it too
        if m.subject:
            n = len(m.value["events"])
            for i, event in enumerate(m.value["events"]):
                validate_event(event, m.subject, m.value["self_link"], event_index=i, event_count=n)
        else:
            validate_event(m.value)
    types = {e["eventType"] for e in events}
    assert {"START", "RUNNING", "COMPLETE", "FAIL"} <= types
    text = json.dumps([m.value for m in first])
    for needle in ('"parent"', '"root"', '"columnLineage"', '"AGGREGATION"', '"INDIRECT"', '"dataQualityMetrics"',
                   '"outputStatistics"', '"dataQualityAssertions"', '"ownership"', '"tags"', '"documentation"',
                   '"sourceCodeLocation"', '"sql"', '"symlinks"', '"schema"', '"$self"'):
        assert needle in text, needle
    # duplicates are exact copies of an earlier message
    seen: set[str] = set()
    for m, d in zip(first, dump, strict=True):
        if m.kind == "duplicate":
            assert d in seen
        seen.add(d)
    # late events arrive after a later event of the stream
    times = [m.value["eventTime"] for m in first if m.subject is None]
    assert any(b < a for a, b in zip(times, times[1:], strict=False))
    # every Evo document's self_link points at a $self output, and the subject is set
    from producers.evo import resolve_pointer
    for m in first:
        if m.subject:
            assert resolve_pointer(m.value, m.value["self_link"])["name"] == "$self"
            assert m.subject["namespace"].startswith("evogeoscienceobject://")
