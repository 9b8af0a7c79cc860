"""Issue 15 item 4 on the batch path: `lineage load` reports a dropped standard facet like any rejection
(``file:line: field: reason``), stores the event without it, and fails only for messages it could not store."""

from __future__ import annotations

import json

import psycopg
import pytest

from lineage.cli import main
from stream_processor.testing import PRODUCER, run_event

pytestmark = pytest.mark.integration

FACET = {"_producer": PRODUCER, "_schemaURL": "https://openlineage.io/spec/facets/1-0-2/"
         "OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet"}


def test_load_reports_a_dropped_facet_and_stores_the_event_without_it(tmp_path, pg_dsn, capsys):
    broken = run_event(job="broken", when="2024-05-01T10:00:00Z")
    broken["outputs"][0]["outputFacets"] = {"outputStatistics": {**FACET, "rowCount": "10"}}
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps(broken) + "\n", encoding="utf-8")

    code = main(["load", str(path), "--postgres-dsn", pg_dsn, "--engine", "local"])
    out, err = capsys.readouterr()
    assert code == 0                                        # the event was stored: a dropped facet is reported only
    [line] = err.strip().splitlines()
    assert line.startswith(f"{path}:1: outputs[0].outputFacets.outputStatistics.rowCount: ")
    assert "standard facet 'outputStatistics' dropped" in line
    assert "1 new" in out and "0 rejected" in out and "1 invalid facet(s) dropped" in out
    with psycopg.connect(pg_dsn) as conn:
        [(payload,)] = conn.execute("SELECT payload FROM lineage_events").fetchall()
    payload = payload if isinstance(payload, dict) else json.loads(payload)
    assert payload["outputs"][0]["outputFacets"] == {}

    # a core violation in the same file still fails the load (exit 1), naming the field
    no_schema_url = {k: v for k, v in run_event(job="no_schema_url").items() if k != "schemaURL"}
    path.write_text(json.dumps(broken) + "\n" + json.dumps(no_schema_url).replace('"eventType"', '"x": NaN, '
                    '"eventType"') + "\n" + json.dumps(no_schema_url) + "\n", encoding="utf-8")
    code = main(["load", str(path), "--postgres-dsn", pg_dsn, "--engine", "local"])
    out, err = capsys.readouterr()
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 3 and lines[1].startswith(f"{path}:2: ") and "NaN" in lines[1]
    assert lines[2].startswith(f"{path}:3: schemaURL: is required")
    assert "2 rejected, 1 invalid facet(s) dropped" in out
