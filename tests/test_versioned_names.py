"""Versioned object names (issue 15, item 3): every query takes the name exactly as the producer sent it
(``<namespace>/<object_id>:<version>``, or ``name@version`` / ``--version`` for a dataset with a
``datasetVersion`` facet) and answers AT that version, through the runs' input and output versions.

The world (seeds/evo-geoscience-object-lineage.md: an object version published with the lineage of the run
that made it, ``$self`` standing for it, inputs named ``<object_id>:<version>``)::

    ext1 --run1--> A:v1 ;  ext2 --run4--> B:b1 ;  ext3 --run5--> B:b2
    A:v1 + B:b1 --run2--> A:v2 --run3--> C:c1
"""

from __future__ import annotations

import json
import uuid

import pytest

from lineage.cli import main
from producers.evo import evo_document
from sink.export import wia_document
from sink.graph import load_snapshot
from sink.queries import LineageQueries, NodeNotFoundError
from tests.test_derive import ds, run_event

pytestmark = pytest.mark.integration

EVO = "evogeoscienceobject://hub/inst/ws"
FILES = "file://share"
A, B, C = (str(uuid.UUID(int=n, version=4)) for n in (0xA, 0xB, 0xC))


def _publish(day: int, subject: str, inputs: list[dict]) -> dict:
    event = run_event("COMPLETE", f"2024-09-{day:02d}T00:00:00Z", str(uuid.uuid4()), job=f"evo.task{day}",
                      job_ns="evo", inputs=inputs, outputs=[ds("$self", EVO)])
    return {**evo_document([event]), "subject": {"namespace": EVO, "name": subject}}


def _world() -> list[dict]:
    return [
        _publish(1, f"{A}:v1", [ds("ext1", FILES)]),
        _publish(2, f"{B}:b1", [ds("ext2", FILES)]),
        _publish(3, f"{B}:b2", [ds("ext3", FILES)]),
        _publish(4, f"{A}:v2", [ds(f"{A}:v1", EVO), ds(f"{B}:b1", EVO)]),
        _publish(5, f"{C}:c1", [ds(f"{A}:v2", EVO)]),
        # a plain dataset with a datasetVersion facet, written twice from different inputs
        run_event("COMPLETE", "2024-09-06T00:00:00Z", str(uuid.uuid4()), job="orders.v7",
                  inputs=[ds("raw_a", FILES)],
                  outputs=[ds("orders", FILES, datasetVersion={"datasetVersion": "7"})]),
        run_event("COMPLETE", "2024-09-07T00:00:00Z", str(uuid.uuid4()), job="orders.v8",
                  inputs=[ds("raw_b", FILES)],
                  outputs=[ds("orders", FILES, datasetVersion={"datasetVersion": "8"})]),
    ]


@pytest.fixture
def graph(tmp_path, pg_dsn, capsys) -> str:
    for i, doc in enumerate(_world()):
        (tmp_path / f"{i}.json").write_text(json.dumps(doc), encoding="utf-8")
    assert main(["load", str(tmp_path), "--postgres-dsn", pg_dsn, "--engine", "local"]) == 0
    capsys.readouterr()
    return pg_dsn


def _labels(result) -> set[str]:
    return {h.node.label for h in result.datasets}


def test_upstream_of_an_object_version_as_the_producer_named_it(graph):
    with LineageQueries(graph) as q:
        up = q.upstream(f"{EVO}/{A}:v2", depth=5)
        assert up.root.version == "v2" and up.root.label == f"{EVO}/{A}:v2"
        # exactly the versions A:v2 came from: not B:b2, nor what B:b2 came from
        assert _labels(up) == {f"{EVO}/{A}:v1", f"{EVO}/{B}:b1", f"{FILES}/ext1", f"{FILES}/ext2"}
        assert {h.node.label for h in up.jobs} == {"job:evo/evo.task1", "job:evo/evo.task2", "job:evo/evo.task4"}
        assert _labels(q.upstream(f"{EVO}/{A}:v1")) == {f"{FILES}/ext1"}
        assert _labels(q.upstream(f"{EVO}/{B}:b2")) == {f"{FILES}/ext3"}
        # the name without a version is the object at large, every version of it and of its inputs: B's
        # other version b2 (from ext3) is then upstream too, which is what the versioned walk avoids
        assert _labels(q.upstream(f"{EVO}/{A}")) == {f"{EVO}/{B}", f"{FILES}/ext1", f"{FILES}/ext2", f"{FILES}/ext3"}


def test_downstream_of_an_input_version(graph):
    with LineageQueries(graph) as q:
        assert _labels(q.downstream(f"{EVO}/{B}:b1")) == {f"{EVO}/{A}:v2", f"{EVO}/{C}:c1"}
        assert _labels(q.downstream(f"{EVO}/{B}:b2")) == set()
        assert _labels(q.downstream(f"{EVO}/{A}:v1")) == {f"{EVO}/{A}:v2", f"{EVO}/{C}:c1"}
        impact = q.impact(f"{EVO}:{B}:b1")         # namespace:name reads the same
        assert {h.node.label for h in impact.datasets} == {f"{EVO}/{A}:v2", f"{EVO}/{C}:c1"}
        with pytest.raises(NodeNotFoundError, match="no version"):
            q.upstream(f"{EVO}/{A}:v9")


def test_dataset_version_facet_by_at_sign_and_explicit_version(graph, capsys):
    with LineageQueries(graph) as q:
        assert _labels(q.upstream(f"{FILES}/orders@7")) == {f"{FILES}/raw_a"}
        assert _labels(q.upstream(f"{FILES}/orders", version="8")) == {f"{FILES}/raw_b"}
        assert _labels(q.upstream(f"{FILES}/orders")) == {f"{FILES}/raw_a", f"{FILES}/raw_b"}
    assert main(["upstream", f"{FILES}/orders", "--version", "7", "--postgres-dsn", graph, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["root"]["version"] == "7"
    assert {n["node"]["label"] for n in out["nodes"] if n["node"]["kind"] == "dataset"} == {f"{FILES}/raw_a"}


def test_cli_upstream_of_an_evo_name(graph, capsys):
    assert main(["upstream", f"{EVO}/{A}:v2", "--postgres-dsn", graph]) == 0
    out = capsys.readouterr().out
    assert f"{EVO}/{B}:b1" in out and f"{EVO}/{B}:b2" not in out and "ext3" not in out
    assert main(["downstream", f"{EVO}/{B}:b1", "--postgres-dsn", graph]) == 0
    assert f"{EVO}/{C}:c1" in capsys.readouterr().out


def test_wia_export_keeps_the_version_identity(graph):
    doc = wia_document(load_snapshot(graph))
    nodes = {n["node_id"]: n for n in doc["nodes"]}
    versions = {(v["qualified_name"], v["version"]): v for v in doc["versions"]}
    record = versions[(f"{EVO}/{A}", "v2")]
    assert record["node_id"] in nodes and nodes[record["node_id"]]["qualified_name"] == f"{EVO}/{A}"
    assert record["name"] == f"{EVO}/{A}:v2"          # the name as the producer sent it
    assert versions[(f"{FILES}/orders", "7")]["name"] == f"{FILES}/orders@7"
    assert {v["version"] for v in doc["versions"] if v["node_id"] == record["node_id"]} == {"v1", "v2"}
