"""Dataset versions through /api/graph (api/graph.py): /lineage and /impact walk from a version as the CLI's
``--version`` does (sink/versions.py), /ancestors wraps LineageQueries.ancestors, and the HTTP answers are the
library's. The graph is tests/test_versioned_names.py's world::

    ext1 --run1--> A:v1 ;  ext2 --run4--> B:b1 ;  ext3 --run5--> B:b2
    A:v1 + B:b1 --run2--> A:v2 --run3--> C:c1 ;   raw_a --> orders@7 ;  raw_b --> orders@8
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from lineage.cli import main
from sink.queries import LineageQueries
from tests.test_api_graph import settings_for
from tests.test_versioned_names import EVO, FILES, A, B, C, _world

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def graph(pg_server, tmp_path_factory) -> str:
    dsn = pg_server.create_database(f"v_{uuid.uuid4().hex[:16]}")
    folder = tmp_path_factory.mktemp("versions")
    for i, doc in enumerate(_world()):
        (folder / f"{i}.json").write_text(json.dumps(doc), encoding="utf-8")
    assert main(["load", str(folder), "--postgres-dsn", dsn, "--engine", "local"]) == 0
    return dsn


@pytest.fixture(scope="module")
def client(graph) -> Iterator[object]:
    from fastapi.testclient import TestClient

    from api.app import create_app

    with TestClient(create_app(settings_for(graph))) as c:
        yield c


def _lineage(client, **params) -> dict:
    r = client.get("/api/graph/lineage", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def _datasets(doc: dict) -> set[str]:
    return {n["label"] for n in doc["nodes"] if n["type"] == "dataset"} - {_root(doc)["label"]}


def _root(doc: dict) -> dict:
    return next(n for n in doc["nodes"] if n["id"] == doc["root"])


def test_upstream_of_a_version_is_the_library_walk(client, graph) -> None:
    doc = _lineage(client, node=f"{EVO}/{A}:v2", direction="upstream", depth=5)
    with LineageQueries(graph) as q:
        lib = q.upstream(f"{EVO}/{A}:v2", depth=5, stop_at_terminal=False)
    root = _root(doc)
    assert doc["root"] == lib.root.key == f"{lib.root.node_id}@{lib.root.version_id}"
    assert (root["version"], root["version_id"], root["dataset_id"], root["label"]) == (
        "v2", lib.root.version_id, lib.root.node_id, f"{EVO}/{A}:v2")
    # exactly the versions A:v2 came from, as the library walks them: not B:b2, nor ext3 that made it
    assert {n["id"] for n in doc["nodes"]} == {lib.root.key} | {h.node.key for h in lib.hits}
    assert _datasets(doc) == {h.node.label for h in lib.datasets} == {
        f"{EVO}/{A}:v1", f"{EVO}/{B}:b1", f"{FILES}/ext1", f"{FILES}/ext2"}
    depth = {h.node.key: h.level for h in lib.hits}
    assert all(n["depth"] == depth.get(n["id"], 0) for n in doc["nodes"])
    job_edges = {(e["source"], e["target"], e["type"]) for e in doc["edges"] if e["type"] in ("reads", "writes")}
    assert job_edges == {(e.source_id, e.target_id, e.kind) for e in lib.edges}
    b1 = next(n for n in doc["nodes"] if n["label"] == f"{EVO}/{B}:b1")
    assert (b1["version"], b1["id"]) == ("b1", f"{b1['dataset_id']}@{b1['version_id']}")
    assert b1["last_run_state"] == "COMPLETE" and b1["expandable"] is False
    # the jobs fold away: B:b1 -> A:v2 through task4
    task4 = next(n["id"] for n in doc["nodes"] if n["label"] == "job:evo/evo.task4")
    assert {(e["source"], e["target"], e["job"]) for e in doc["edges"] if e["id"].startswith(task4 + ":")} == {
        (b1["id"], doc["root"], task4), (next(n["id"] for n in doc["nodes"] if n["label"] == f"{EVO}/{A}:v1"),
                                         doc["root"], task4)}
    from api.graph import LineageResponse

    assert LineageResponse.model_validate(doc).model_dump(mode="json") == doc


def test_downstream_both_and_the_version_parameter(client, graph) -> None:
    down = _lineage(client, node=f"{EVO}/{B}:b1", direction="downstream", depth=5)
    assert _datasets(down) == {f"{EVO}/{A}:v2", f"{EVO}/{C}:c1"}
    assert _datasets(_lineage(client, node=f"{EVO}/{B}:b2", direction="downstream")) == set()
    both = _lineage(client, node=f"{EVO}/{A}:v2", direction="both", depth=5)
    with LineageQueries(graph) as q:
        up = q.upstream(f"{EVO}/{A}:v2", depth=5, stop_at_terminal=False)
        dn = q.downstream(f"{EVO}/{A}:v2", depth=5, stop_at_terminal=False)
    assert {n["id"] for n in both["nodes"]} == {up.root.key} | {h.node.key for h in [*up.hits, *dn.hits]}
    assert _datasets(both) == {f"{EVO}/{A}:v1", f"{EVO}/{B}:b1", f"{FILES}/ext1", f"{FILES}/ext2", f"{EVO}/{C}:c1"}
    # version= as the CLI's --version, and a version walk's node id works as a node name (expansion)
    seven = _lineage(client, node=f"{FILES}/orders", version="7", direction="upstream")
    assert _datasets(seven) == {f"{FILES}/raw_a"} and _root(seven)["version"] == "7"
    assert _datasets(_lineage(client, node=f"{FILES}/orders", direction="upstream")) == {f"{FILES}/raw_a",
                                                                                        f"{FILES}/raw_b"}
    again = _lineage(client, node=seven["root"], direction="upstream")
    assert again["root"] == seven["root"] and _datasets(again) == {f"{FILES}/raw_a"}
    by_id = _lineage(client, node=seven["root"].split("@")[0], version=_root(seven)["version_id"],
                     direction="upstream")
    assert by_id["root"] == seven["root"]


def test_budget_depth_and_the_frontier(client) -> None:
    one = _lineage(client, node=f"{EVO}/{A}:v2", direction="upstream", depth=1)
    assert _datasets(one) == {f"{EVO}/{A}:v1", f"{EVO}/{B}:b1"}
    frontier = {n["label"]: n for n in one["nodes"] if n["expandable"]}
    assert set(frontier) == {f"{EVO}/{A}:v1", f"{EVO}/{B}:b1"} and one["truncated"] is False
    assert all(n["hidden_neighbours"] == 1 for n in frontier.values())     # the job that wrote each
    cut = _lineage(client, node=f"{EVO}/{A}:v2", direction="upstream", depth=5, budget=2)
    assert len(cut["nodes"]) == 2 and cut["truncated"] is True
    assert [n["label"] for n in cut["nodes"] if n["expandable"]] == ["job:evo/evo.task4"]
    assert all(e["source"] in {n["id"] for n in cut["nodes"]} for e in cut["edges"])


def test_impact_at_a_version(client, graph) -> None:
    r = client.get("/api/graph/impact", params={"node": f"{EVO}/{B}:b1"})
    assert r.status_code == 200
    doc = r.json()
    with LineageQueries(graph) as q:
        lib = q.impact(f"{EVO}/{B}:b1")
    assert doc["root"]["version"] == "b1" and doc["root"]["id"] == lib.root.key
    assert {(d["id"], d["label"], d["depth"]) for d in doc["datasets"]} == {
        (h.node.key, h.node.label, h.level) for h in lib.datasets}
    assert {d["label"] for d in doc["datasets"]} == {f"{EVO}/{A}:v2", f"{EVO}/{C}:c1"}
    assert {j["label"] for j in doc["jobs"]} == {h.node.label for h in lib.jobs}
    eight = client.get("/api/graph/impact", params={"node": f"{FILES}/raw_b", "version": "nope"})
    assert eight.status_code == 404 and "no version" in eight.json()["detail"]


def test_ancestors(client, graph) -> None:
    r = client.get("/api/graph/ancestors", params={"node": f"{EVO}/{C}:c1", "within": f"{EVO}/{A}"})
    assert r.status_code == 200
    doc = r.json()
    with LineageQueries(graph) as q:
        lib = q.ancestors(f"{EVO}/{C}:c1", f"{EVO}/{A}")
    assert doc["root_version"] == lib.root_version == "c1"
    assert doc["within"]["label"] == f"{EVO}/{A}"
    assert [(a["version"], a["steps"], a["run_id"]) for a in doc["ancestors"]] == [
        (a.version, a.steps, a.run_id) for a in lib.ancestors]
    assert {a["version"] for a in doc["ancestors"]} == {"v1", "v2"}
    older = client.get("/api/graph/ancestors", params={"node": f"{EVO}/{A}", "within": f"{EVO}/{A}",
                                                       "version": "v2"}).json()
    assert [a["version"] for a in older["ancestors"]] == ["v1"]
    assert client.get("/api/graph/ancestors", params={"node": f"{EVO}/{C}", "within": f"{EVO}/{A}",
                                                      "version": "c9"}).status_code == 404
    assert client.get("/api/graph/ancestors", params={"node": "job:evo/evo.task1",
                                                      "within": f"{EVO}/{A}"}).status_code == 400


@pytest.mark.parametrize("params, status", [
    ({"node": f"{EVO}/{A}:v9"}, 404),
    ({"node": f"{FILES}/orders", "version": "9"}, 404),
    ({"node": f"{EVO}/{A}:v2", "version": "v1"}, 400),              # the name says v2
    ({"node": f"{EVO}/{A}:v2", "level": "column"}, 400),
    ({"node": "job:evo/evo.task1", "version": "v1"}, 400),
])
def test_unknown_or_contradictory_versions(client, params, status) -> None:
    r = client.get("/api/graph/lineage", params=params)
    assert r.status_code == status and r.json()["detail"]
    if status == 404:
        assert client.get("/api/graph/impact", params=params).status_code == 404


def test_openapi_documents_versions(client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("lineage", "impact", "ancestors"):
        names = {p["name"] for p in paths[f"/api/graph/{route}"]["get"]["parameters"]}
        assert "version" in names
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"version", "version_id"} <= set(schemas["LineageNodeOut"]["properties"])
    assert "AncestorsResponse" in schemas
