"""/api/graph (api/graph.py) against a real PostgreSQL graph, through FastAPI's TestClient: the contract of
docs/HTTP_GRAPH_API.md, status codes, bounded traversals (budget, expandable frontier, expansion), column
level, as-of, routes, impact, runs, events and the ERD."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.graph_rows import NS
from tests.test_catalog import FK, build_warehouse

pytestmark = pytest.mark.integration


def settings_for(dsn: str, **extra):
    from api.settings import ApiSettings

    # no broker is needed by the read API; the ingest producer only logs that 127.0.0.1:1 refuses
    return ApiSettings(postgres_dsn=dsn, bootstrap_servers="127.0.0.1:1", **extra)


@pytest.fixture(scope="module")
def warehouse(pg_server) -> tuple[str, dict[str, str]]:
    dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    return dsn, build_warehouse(dsn)


@pytest.fixture(scope="module")
def client(warehouse) -> Iterator[object]:
    from fastapi.testclient import TestClient

    from api.app import create_app

    with TestClient(create_app(settings_for(warehouse[0]))) as c:
        yield c


def by_label(doc: dict) -> dict[str, dict]:
    return {n["label"]: n for n in doc["nodes"]}


def test_search_and_node(client, warehouse) -> None:
    _, ids = warehouse
    r = client.get("/api/graph/search", params={"q": "orders", "limit": 2})
    assert r.status_code == 200
    doc = r.json()
    assert doc["next_offset"] == 2 and doc["results"][0]["qualified_name"] == "kafka://bus/orders"
    assert set(doc["results"][0]) >= {"id", "type", "namespace", "name", "qualified_name", "column", "score"}
    col = client.get("/api/graph/search", params={"q": "customer_id", "type": "column"}).json()["results"]
    assert [(c["id"], c["column"]) for c in col] == [(ids["A"], "customer_id")]
    assert client.get("/api/graph/search", params={"q": "x", "type": "table"}).status_code == 400
    assert client.get("/api/graph/search", params={"q": " "}).status_code == 400
    assert client.get("/api/graph/node", params={"node": ""}).status_code == 400
    node = client.get("/api/graph/node", params={"node": f"{NS}/raw.orders"}).json()
    assert node["schema"][0]["name"] == "id" and node["constraints"]["foreignKeys"] == FK["foreignKeys"]
    assert node["aliases"] == ["hive/warehouse.orders"] and node["placeholder"] is False
    assert client.get("/api/graph/node", params={"node": ids["A"]}).json()["qualified_name"] == f"{NS}/raw.orders"
    r = client.get("/api/graph/node", params={"node": f"{NS}/missing"})
    assert r.status_code == 404 and "missing" in r.json()["detail"]


def test_lineage_dataset_level_with_jobs_and_folded_edges(client, warehouse) -> None:
    _, ids = warehouse
    doc = client.get("/api/graph/lineage", params={"node": f"{NS}/mart.revenue", "direction": "upstream",
                                                    "depth": 2}).json()
    nodes = by_label(doc)
    assert doc["root"] == ids["D"] and doc["truncated"] is False
    assert set(nodes) == {f"{NS}/mart.revenue", "job:airflow/revenue", "job:airflow/quick_revenue",
                          f"{NS}/stg.orders", f"{NS}/raw.orders", "job:airflow/clean_orders",
                          "job:airflow/dedupe_orders", f"{NS}/raw.customers", "job:scanner/ddl/schema.sql",
                          "job:airflow/ingest_orders"}     # ingest_orders writes raw.orders through its alias
    assert nodes[f"{NS}/stg.orders"]["depth"] == 1 and nodes[f"{NS}/raw.orders"]["depth"] == 1
    assert nodes["job:airflow/revenue"]["last_run_state"] == "FAIL"
    assert nodes[f"{NS}/mart.revenue"]["anomaly"] is True and nodes[f"{NS}/mart.revenue"]["last_run_state"] == "FAIL"
    # raw.customers, at depth 2, has no writer: nothing more to expand
    assert nodes[f"{NS}/raw.customers"]["expandable"] is False
    types = {(e["source"], e["target"]): e for e in doc["edges"]}
    agg = types[(ids["C"], ids["D"])]
    assert agg["type"] == "aggregated_from" and agg["job"] == ids["J2"]
    assert types[(ids["J2"], ids["D"])]["type"] == "writes" and types[(ids["C"], ids["J2"])]["type"] == "reads"
    assert all(e["source"] in {n["id"] for n in doc["nodes"]} and e["target"] in {n["id"] for n in doc["nodes"]}
               for e in doc["edges"])


def test_budget_marks_the_frontier_and_expansion_finds_the_rest(client, warehouse) -> None:
    _, ids = warehouse
    full = client.get("/api/graph/lineage", params={"node": f"{NS}/stg.orders", "depth": 3}).json()
    cut = client.get("/api/graph/lineage", params={"node": f"{NS}/stg.orders", "depth": 3, "budget": 4}).json()
    assert len(cut["nodes"]) == 4 and cut["truncated"] is True and len(full["nodes"]) > 4
    frontier = [n for n in cut["nodes"] if n["expandable"]]
    assert frontier and all(n["hidden_neighbours"] > 0 for n in frontier)
    hidden = sum(n["hidden_neighbours"] for n in cut["nodes"])
    assert hidden >= 1
    # expanding every frontier node by one step reaches nodes of the full answer that the cut one lacked
    cut_ids = {n["id"] for n in cut["nodes"]}
    reached = set()
    for n in frontier:
        exp = client.get("/api/graph/lineage", params={"node": n["id"], "depth": 1}).json()
        reached |= {m["id"] for m in exp["nodes"]}
    assert (reached - cut_ids) & {n["id"] for n in full["nodes"]}
    # depth-limited frontier: raw.orders at depth 1 upstream from mart.revenue has writers beyond
    one = by_label(client.get("/api/graph/lineage", params={"node": f"{NS}/mart.revenue", "direction": "upstream",
                                                             "depth": 1}).json())
    assert one[f"{NS}/stg.orders"]["expandable"] is True and one[f"{NS}/stg.orders"]["hidden_neighbours"] >= 2


def test_column_level_and_as_of(client, warehouse) -> None:
    _, ids = warehouse
    doc = client.get("/api/graph/lineage", params={"node": f"{NS}/mart.revenue#total", "direction": "upstream",
                                                    "depth": 3, "level": "column"}).json()
    cols = {n["id"]: n for n in doc["nodes"] if n["type"] == "column"}
    assert set(cols) == {f"{ids['D']}#total", f"{ids['C']}#amount", f"{ids['A']}#amount"}
    assert cols[f"{ids['A']}#amount"]["dataset_id"] == ids["A"] and cols[f"{ids['A']}#amount"]["depth"] == 2
    assert {n["id"] for n in doc["nodes"] if n["type"] == "dataset"} == {ids["A"], ids["C"], ids["D"]}
    edge = next(e for e in doc["edges"] if e["target"] == f"{ids['D']}#total")
    assert (edge["source"], edge["type"], edge["transformation"]) == (f"{ids['C']}#amount", "aggregated_from",
                                                                    "amount -> total")
    # as of: raw.customers fed job revenue in January only (graph_rows: valid_to T0 + 31 days)
    params = {"node": "job:airflow/revenue", "direction": "upstream", "depth": 1}
    now = {n["label"] for n in client.get("/api/graph/lineage", params=params).json()["nodes"]}
    then = {n["label"] for n in client.get("/api/graph/lineage", params={**params, "as_of": "2026-01-15T00:00:00Z"})
            .json()["nodes"]}
    assert f"{NS}/raw.customers" in then - now
    bad = client.get("/api/graph/lineage", params={**params, "as_of": "2026-01-15T00:00:00"})
    assert bad.status_code == 400 and "time zone" in bad.json()["detail"]


@pytest.mark.parametrize("params", [{"depth": 0}, {"depth": 11}, {"budget": 0}, {"direction": "sideways"},
                                    {"level": "table"}, {"as_of": "yesterday"}])
def test_lineage_bad_parameters_are_400(client, params) -> None:
    r = client.get("/api/graph/lineage", params={"node": f"{NS}/mart.revenue", **params})
    assert r.status_code == 400 and r.json()["detail"]


def test_routes_impact_runs_events(client, warehouse) -> None:
    _, ids = warehouse
    doc = client.get("/api/graph/routes", params={"from": f"{NS}/raw.orders", "to": f"{NS}/mart.revenue"}).json()
    assert [ids["A"], ids["J6"], ids["D"]] in doc["routes"] and len(doc["routes"]) == 2
    assert {n["id"] for n in doc["nodes"]} == {x for r in doc["routes"] for x in r}
    imp = client.get("/api/graph/impact", params={"node": f"{NS}/stg.orders"}).json()
    assert f"{NS}/mart.revenue" in {d["label"] for d in imp["datasets"]}
    assert {"owner": "team-mart", "nodes": [f"{NS}/mart.revenue"]} in imp["owners"]
    runs = client.get("/api/graph/runs", params={"job": "airflow/revenue"}).json()
    assert [r["run_id"] for r in runs["runs"]] == [ids["run"]] and runs["next_offset"] is None
    assert client.get("/api/graph/runs", params={"job": "airflow/nope"}).status_code == 404
    ev = client.get("/api/graph/events", params={"limit": 1}).json()
    assert ev["events"][0]["job"] == "job:scanner/ddl/schema.sql" and ev["next_offset"] is None
    assert ev["events"][0]["outputs"] == [{"namespace": NS, "name": "raw.orders"}]
    assert client.get("/api/graph/events", params={"limit": 0}).status_code == 400


def test_erd_tables_columns_and_relations(client, warehouse) -> None:
    _, ids = warehouse
    doc = client.get("/api/graph/erd", params={"namespace": NS, "schema": "raw"}).json()
    tables = {t["table"]: t for t in doc["tables"]}
    assert set(tables) == {"orders", "customers"}
    orders = tables["orders"]
    assert (orders["schema"], orders["database"], orders["source_file"]) == ("raw", None, "ddl/schema.sql")
    assert [(c["name"], c["primary_key"]) for c in orders["columns"]] == [("id", True), ("customer_id", False),
                                                                         ("amount", False)]
    assert doc["relations"] == [{"name": "fk_customer", "from_table": ids["A"], "from_columns": ["customer_id"],
                                 "to_table": ids["B"], "to_columns": ["id"]}]
    only_file = client.get("/api/graph/erd", params={"source_file": "ddl/schema.sql"}).json()
    assert [t["id"] for t in only_file["tables"]] == [ids["A"]]
    page = client.get("/api/graph/erd", params={"limit": 1}).json()
    assert len(page["tables"]) == 1 and page["next_offset"] == 1


def test_hot_routes_answer_their_documented_models(client) -> None:
    """/search and /lineage skip FastAPI's response validation (orjson): their answers must still be
    valid documents of the models the OpenAPI file names."""
    from api.graph import LineageResponse, SearchResponse

    for params in ({"node": f"{NS}/stg.orders", "depth": 3}, {"node": f"{NS}/mart.revenue#total", "level": "column"},
                   {"node": f"{NS}/stg.orders", "budget": 3}):
        doc = client.get("/api/graph/lineage", params=params).json()
        assert LineageResponse.model_validate(doc).model_dump(mode="json") == doc
    doc = client.get("/api/graph/search", params={"q": "orders"}).json()
    assert SearchResponse.model_validate(doc).model_dump(mode="json", exclude_unset=True) == doc
    spec = client.get("/openapi.json").json()["paths"]
    for route, model in (("/api/graph/lineage", "LineageResponse"), ("/api/graph/search", "SearchResponse")):
        assert spec[route]["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(model)


def test_openapi_documents_every_route(client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("search", "node", "lineage", "routes", "impact", "runs", "events", "erd", "live"):
        assert f"/api/graph/{route}" in paths


def test_read_key_when_configured(warehouse) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    app = create_app(settings_for(warehouse[0], api_keys=["s3cret"], read_requires_key=True))
    with TestClient(app) as c:
        assert c.get("/api/graph/search", params={"q": "orders"}).status_code == 401
        assert c.get("/api/graph/search", params={"q": "orders"},
                     headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert c.get("/api/graph/search", params={"q": "orders"},
                     headers={"Authorization": "Bearer s3cret"}).status_code == 200

