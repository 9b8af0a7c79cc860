"""The WIA export never contradicts itself (issue 15, item 2): every id and qualified name it writes (edges,
column lineage and its dependencies, provenance, quality) resolves to a node of the same export.

Demo traffic has datasets named ``/lake/...`` in ``s3://`` namespaces, some of them aliases of hive tables
through a ``symlinks`` facet: column lineage used to name the alias (``s3://acme-lake//lake/x``), which the
export folds into its canonical node, so no node carried that qualified name.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from lineage.cli import main
from sink.export import export, wia_document
from sink.graph import load_snapshot
from sink.validation import validate_wia_graph
from tests.test_derive import ds, run_event

pytestmark = pytest.mark.integration


def _demo_files(path: Path, messages: int, seed: int = 7) -> Path:
    """Demo traffic as ``lineage load`` reads it: events and Evo documents (with their ``subject``)."""
    from producers.demo import DemoTraffic

    lines = []
    for m in DemoTraffic(seed).take(messages):
        lines.append(json.dumps({**m.value, "subject": m.subject} if m.subject is not None else m.value))
    path.mkdir(parents=True, exist_ok=True)
    (path / "demo.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _referential(doc: dict) -> list:
    return [v for v in validate_wia_graph(doc) if v.rule == "referential_integrity"]


def _names_resolve(doc: dict) -> None:
    """Every table name of the column lineage (dependencies included) is a node's qualified name."""
    qualified = {n["qualified_name"] for n in doc["nodes"]}
    ids = {n["node_id"] for n in doc["nodes"]}
    for c in doc["column_lineage"]:
        assert {c["source_table"], c["target_table"]} <= qualified, c
        assert {d["source_table"] for d in c["dependencies"]} <= qualified, c
    for e in doc["edges"]:
        assert {e["source_node_id"], e["target_node_id"]} <= ids, e
    for item in doc["provenance"] + doc["quality"]:
        assert item["node_id"] in ids, item


def test_demo_traffic_exports_without_referential_integrity_violations(tmp_path, pg_dsn, capsys):
    source = _demo_files(tmp_path / "demo", 500)
    assert main(["load", str(source), "--postgres-dsn", pg_dsn, "--engine", "local"]) == 0
    capsys.readouterr()
    doc = wia_document(load_snapshot(pg_dsn))
    # the demo does exercise the case: aliases exist and column lineage names datasets that have aliases
    assert doc["metadata"]["custom"]["aliases"] > 0 and doc["column_lineage"]
    assert any(n["name"].startswith("/") for n in doc["nodes"])
    assert _referential(doc) == []
    _names_resolve(doc)
    # through the CLI, as the issue saw it: no violation reported at all of that rule
    out = tmp_path / "graph.json"
    assert main(["export", "--format", "wia-json", "--output", str(out), "--postgres-dsn", pg_dsn]) == 0
    assert "referential_integrity" not in capsys.readouterr().err


def test_dataset_name_starting_with_a_slash_and_its_alias(tmp_path, pg_dsn, capsys):
    """A ``/path`` name in an ``s3://`` namespace, the alias of a hive table, read with column lineage."""
    alias = {"symlinks": {"identifiers": [{"namespace": "hive://metastore", "name": "lake.events",
                                           "type": "TABLE"}]}}
    src = ds("/lake/events", "s3://acme-lake", fields=["id", "v"], **alias)
    col = {"columnLineage": {"fields": {"v2": {"inputFields": [
        {"namespace": "s3://acme-lake", "name": "/lake/events", "field": "v",
         "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}]}]}}}}
    out_ds = ds("/lake/derived", "s3://acme-lake", fields=["v2"], **col)
    # the alias is known from one event; the column lineage names the s3 path in another
    first = run_event("COMPLETE", "2024-08-01T00:00:00Z", str(uuid.uuid4()), job="register", outputs=[src])
    second = run_event("COMPLETE", "2024-08-02T00:00:00Z", str(uuid.uuid4()), job="derive",
                       inputs=[ds("/lake/events", "s3://acme-lake")], outputs=[out_ds])
    (tmp_path / "events.jsonl").write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    assert main(["load", str(tmp_path), "--postgres-dsn", pg_dsn, "--engine", "local"]) == 0
    capsys.readouterr()
    result = export("wia-json", pg_dsn, str(tmp_path / "g.json"))
    doc = json.loads((tmp_path / "g.json").read_text())
    assert [v for v in result.violations if v.rule == "referential_integrity"] == []
    _names_resolve(doc)
    names = {n["qualified_name"] for n in doc["nodes"]}
    assert doc["column_lineage"] and doc["column_lineage"][0]["source_table"] in names
