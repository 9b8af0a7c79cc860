"""Evo object-version lineage helpers: self_link choice, splitting multi-object runs, bad links."""

from __future__ import annotations

from typing import Any

import pytest

from producers.emitter import LineageEmitter
from producers.evo import evo_document, publish_document, resolve_pointer, self_link_for, split_object_outputs
from producers.settings import EmitterSettings
from schemas.errors import SelfLinkError

NS = "evogeoscienceobject://hub1/ws/inst"


def ev(time: str, outputs: list[str], event_type: str = "COMPLETE") -> dict[str, Any]:
    return {"eventTime": time, "eventType": event_type, "producer": "p", "schemaURL": "s",
            "run": {"runId": "123e4567-e89b-12d3-a456-426614174000", "facets": {}},
            "job": {"namespace": "evocompute", "name": "parsers.dxf:v1.0.0", "facets": {}},
            "inputs": [], "outputs": [{"namespace": NS, "name": n, "facets": {}} for n in outputs]}


@pytest.mark.unit
def test_self_link_points_at_the_latest_self_output() -> None:
    events = [ev("2024-01-01T00:00:05Z", ["other", "$self"]), ev("2024-01-01T00:00:01+00:00", ["$self"]),
              ev("2024-01-01T00:00:03Z", ["x"])]
    assert self_link_for(events) == "/events/0/outputs/1"
    events.append(ev("2024-01-01T01:00:05+01:00", ["$self"]))  # same instant as events[0], later in the list
    assert self_link_for(events) == "/events/3/outputs/0"
    doc = evo_document(events)
    assert resolve_pointer(doc, doc["self_link"])["name"] == "$self"
    with pytest.raises(SelfLinkError):
        self_link_for([ev("2024-01-01T00:00:00Z", ["a"])])


@pytest.mark.unit
def test_split_object_outputs_keeps_non_objects_and_facets() -> None:
    event = ev("2024-01-01T00:00:00Z", ["a:1", "b:2"])
    event["outputs"].append({"namespace": "s3://x", "name": "report", "facets": {}})
    event["outputs"][1]["facets"] = {"schema": {"fields": []}}
    parts = split_object_outputs(event, lambda o: o["namespace"] == NS)
    assert [s["name"] for s, _ in parts] == ["a:1", "b:2"]
    assert [[o["name"] for o in e["outputs"]] for _, e in parts] == [["$self", "report"], ["$self", "report"]]
    assert parts[1][1]["outputs"][0]["facets"] == {"schema": {"fields": []}}
    assert event["outputs"][0]["name"] == "a:1"  # the original is untouched


@pytest.mark.integration
@pytest.mark.parametrize("link", ["/events/0/outputs/1", "/events/5/outputs/0", "/outputs/0", "bogus"])
def test_publish_document_refuses_links_that_miss_self(kafka_bootstrap: str, link: str) -> None:
    emitter = LineageEmitter(EmitterSettings(bootstrap_servers=kafka_bootstrap, topic="unused.evo"))
    doc = {"events": [ev("2024-01-01T00:00:00Z", ["$self", "other"])], "self_link": link}
    with pytest.raises(SelfLinkError):
        publish_document(emitter, doc, {"namespace": NS, "name": "obj:1"})
    assert emitter.queued == 0
    emitter.close()
