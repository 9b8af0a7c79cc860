"""Issue 15 item 4 through the real stream: a broken standard facet is dropped, the event lands without it,
and the DLQ gets a ``validation.facet`` record with the original bytes and the JSON path of the violation."""

from __future__ import annotations

import json

import psycopg
import pytest

from stream_processor.consumer import DeadLetter, read_records
from stream_processor.testing import PRODUCER, StreamHarness, produce, run_event, test_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FACET = {"_producer": PRODUCER,
         "_schemaURL": "https://openlineage.io/spec/facets/1-0-1/OwnershipDatasetFacet.json#/$defs/OwnershipDatasetFacet"}


def test_broken_facet_is_dropped_and_dead_lettered_while_the_event_lands(spark, kafka_bootstrap, topic_names,
                                                                         pg_dsn, tmp_path):
    broken = run_event(job="broken_facet")
    broken["outputs"][0]["facets"] = {
        "ownership": {**FACET, "owners": [{"name": "team:a"}, {"type": "MAINTAINER"}]},   # owners[1] has no name
        "documentation": {**FACET, "description": "kept"}}
    good = run_event(job="good")
    good["outputs"][0]["facets"] = {"ownership": {**FACET, "owners": [{"name": "team:b", "type": None}]}}
    no_schema_url = {k: v for k, v in run_event(job="no_schema_url").items() if k != "schemaURL"}
    values = [json.dumps(e).encode() for e in (broken, good, no_schema_url)]
    produce(kafka_bootstrap, topic_names["events"], values)

    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"))
    with StreamHarness(spark, settings) as h:
        h.drain()
        assert h.total("rejected") == 2          # one facet record, one whole message (core)
        assert h.total("consumed") == 3          # a facet record does not count its event twice

    with psycopg.connect(pg_dsn) as conn:
        stored = {r[0]: r[1] for r in conn.execute("SELECT job_name, payload FROM lineage_events")}
        owners = dict(conn.execute("SELECT name, owner FROM lineage_datasets WHERE name = 'out'").fetchall())
    assert set(stored) == {"broken_facet", "good"}
    payload = stored["broken_facet"] if isinstance(stored["broken_facet"], dict) else json.loads(stored["broken_facet"])
    facets = payload["outputs"][0]["facets"]
    assert "ownership" not in facets and facets["documentation"]["description"] == "kept"
    assert owners == {"out": "team:b"}           # only the valid ownership facet reached the graph

    dead = [d for d in read_records(kafka_bootstrap, topic_names["dlq"], max_records=2, idle_timeout_seconds=15)
            if isinstance(d, DeadLetter)]
    by_code = {d.error_code: d for d in dead}
    assert set(by_code) == {"validation.facet", "validation.missing"}
    facet = by_code["validation.facet"]
    assert facet.value == values[0]                            # the original bytes
    assert facet.field == "outputs[0].facets.ownership.owners[1].name"
    assert facet.error_class == "FacetValidationError" and facet.field in facet.message
    assert facet.topic == topic_names["events"] and facet.offset == 0
    core = by_code["validation.missing"]
    assert core.value == values[2] and core.field == "schemaURL"
