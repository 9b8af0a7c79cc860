"""Exports against a real PostgreSQL: WIA-DATA-008 (+ §7 validation), JSONL, GraphML, object-array, Parquet."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta

import pytest

from sink.export import export, object_array_document, to_networkx, wia_document
from sink.graph import load_snapshot
from sink.validation import (
    find_cycles,
    object_array_violations,
    validate_lineage_json,
    validate_object_array,
    validate_wia_graph,
)
from tests.graph_rows import T0, GraphRows, sample_warehouse


@pytest.fixture
def warehouse(pg_dsn: str):
    g = GraphRows(pg_dsn)
    ids = sample_warehouse(g)
    # a dataset edge that became history on 2026-02-01
    g.edge("dataset", ids["B"], ids["D"], ids["J2"], "derived_from", first_seen=T0, valid_to=T0 + timedelta(days=31))
    v = g.version(ids["D"], "d1", T0 + timedelta(hours=1))
    g.quality(ids["D"], v, T0 + timedelta(hours=1))
    g.provenance(ids["C"], "h1", T0 + timedelta(hours=2))
    g.provenance(ids["A_alias"], "h0", T0 + timedelta(hours=1))
    for i in range(3):
        g.event({"eventType": "COMPLETE", "eventTime": f"2026-01-0{3 - i}T00:00:00Z",
                 "run": {"runId": f"00000000-0000-0000-0000-00000000000{i}"},
                 "job": {"namespace": "airflow", "name": f"j{i}"}, "producer": "p", "inputs": [], "outputs": []},
                f"hash{i}", T0 + timedelta(days=2 - i))
    yield g, ids
    g.close()


@pytest.mark.integration
def test_wia_json_document_and_violations(warehouse, pg_dsn: str, tmp_path) -> None:
    _, ids = warehouse
    out = tmp_path / "graph.json"
    result = export("wia-json", pg_dsn, str(out))
    doc = json.loads(out.read_text())
    assert doc["version"] == "1.0.0" and doc["generated_at"].endswith("Z")
    assert {n["name"] for n in doc["nodes"]} == {"raw.orders", "raw.customers", "stg.orders", "mart.revenue",
                                                "public.revenue_anon", "revenue.csv"}
    node_a = next(n for n in doc["nodes"] if n["node_id"] == ids["A"])
    assert node_a["metadata"]["custom"]["aliases"] == ["hive/warehouse.orders"]
    assert set(node_a) >= {"node_id", "node_type", "namespace", "name", "qualified_name", "created_at",
                           "updated_at", "metadata", "schema"}
    # 7 current dataset edges; the history edge B -> D is not in today's graph
    assert len(doc["edges"]) == 7
    assert (ids["B"], ids["D"]) not in {(e["source_node_id"], e["target_node_id"]) for e in doc["edges"]}
    agg = next(e for e in doc["edges"] if e["edge_type"] == "aggregated_from")
    assert agg["transformation"]["type"] == "sql" and agg["metadata"]["job_name"] == "j"
    assert {c["transformation_type"] for c in doc["column_lineage"]} == {"direct", "aggregated", "computed"}
    assert [p["node_id"] for p in doc["provenance"]] == [ids["A"], ids["C"]]   # alias folded
    assert doc["quality"][0]["metrics"]["completeness"] == 0.98
    # the only §7 violation: the cycle stg.orders -> stg.orders (dedupe job)
    assert [(v.rule, v.message) for v in result.violations] == [("dag", f"cycle through 1 node(s): {ids['C']}")]
    assert validate_wia_graph(doc) == result.violations


@pytest.mark.integration
def test_wia_json_as_of_and_gzip(warehouse, pg_dsn: str, tmp_path) -> None:
    _, ids = warehouse
    out = tmp_path / "graph.json.gz"
    export("wia-json", pg_dsn, str(out), as_of=T0 + timedelta(days=10), gzip=True)
    with gzip.open(out, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    assert (ids["B"], ids["D"]) in {(e["source_node_id"], e["target_node_id"]) for e in doc["edges"]}
    assert doc["metadata"]["custom"]["as_of"] == "2026-01-11T00:00:00Z"
    assert len(doc["provenance"]) == 2
    early = wia_document(load_snapshot(pg_dsn, as_of=T0 + timedelta(minutes=30)))
    assert early["provenance"] == [] and early["quality"] == []


@pytest.mark.unit
def test_wia_validation_rules() -> None:
    node = {"node_id": "a1b2c3d4-e5f6-7890-abcd-ef1234567890", "node_type": "table", "namespace": "postgres://x:1",
            "name": "t", "qualified_name": "postgres://x:1/t", "created_at": "2025-01-01T00:00:00Z"}
    good = {"graph_id": "g", "version": "1.0.0", "generated_at": "2025-12-26T10:00:00Z", "nodes": [node],
            "edges": []}
    assert validate_wia_graph(good) == []
    bad = json.loads(json.dumps(good))
    bad["nodes"].append(dict(node, namespace="airflow", created_at="2025-01-01T01:00:00+02:00"))
    bad["nodes"].append({"node_id": "nope", "node_type": "cube", "name": "", "namespace": "s3://b"})
    bad["edges"].append({"edge_id": "e", "source_node_id": node["node_id"], "target_node_id": "missing",
                         "edge_type": "copied_from"})
    rules = sorted({v.rule for v in validate_wia_graph(bad)})
    assert rules == ["namespace_format", "referential_integrity", "required_fields", "timestamps", "uniqueness"]
    paths = {v.path for v in validate_wia_graph(bad)}
    assert {"$.nodes[1].node_id", "$.nodes[1].namespace", "$.nodes[1].created_at", "$.nodes[2].name",
            "$.nodes[2].node_type", "$.edges[0].target_node_id", "$.edges[0].edge_type"} <= paths


@pytest.mark.unit
def test_find_cycles() -> None:
    assert find_cycles([("a", "b"), ("b", "c")]) == []
    assert find_cycles([("a", "b"), ("b", "a"), ("c", "c"), ("c", "d")]) == [["a", "b"], ["c"]]
    chain = [(i, i + 1) for i in range(20000)] + [(20000, 0)]       # long: no recursion limit
    assert len(find_cycles(chain)[0]) == 20001


@pytest.mark.integration
def test_jsonl_events(warehouse, pg_dsn: str, tmp_path) -> None:
    out = tmp_path / "events.jsonl"
    assert export("jsonl", pg_dsn, str(out)).count == 3
    lines = out.read_text().splitlines()
    assert [json.loads(line)["job"]["name"] for line in lines] == ["j2", "j1", "j0"]   # event-time order
    assert export("jsonl", pg_dsn, str(out), as_of=T0 + timedelta(hours=12)).count == 1


@pytest.mark.integration
def test_graphml_round_trip(warehouse, pg_dsn: str, tmp_path) -> None:
    import networkx as nx

    _, ids = warehouse
    out = tmp_path / "graph.graphml"
    result = export("graphml", pg_dsn, str(out))
    expected = to_networkx(load_snapshot(pg_dsn))
    back = nx.read_graphml(out, force_multigraph=True)
    assert result.counts == {"nodes": 13, "edges": expected.number_of_edges()}
    assert back.number_of_nodes() == expected.number_of_nodes() == 13       # 6 datasets + 7 jobs, alias folded
    assert back.number_of_edges() == expected.number_of_edges() == 21        # 14 job edges + 7 dataset edges
    assert dict(back.nodes(data=True)) == dict(expected.nodes(data=True))
    assert sorted(back.edges(keys=True, data=True)) == sorted(expected.edges(keys=True, data=True))
    assert back.nodes[ids["J3"]]["tracing"] == '{"privacy_preserving": true, "reversible": false}'
    assert back.has_edge(ids["J0"], ids["A"])        # written to the alias, exported on the canonical node


SEED_EXAMPLE = [
    {"id": "node_0", "name": "spLoadCadenceBudgetData", "schema": "CONSUMPTION_ClinOpsFinance",
     "object_type": "Stored Procedure", "description": "", "data_model_type": "Other",
     "inputs": ["node_1", "node_2"], "outputs": ["node_3"]},
    {"id": "node_1", "name": "MonthlyAverageCurrencyExchangeRate", "schema": "CONSUMPTION_PRIMA",
     "object_type": "Table", "description": "", "data_model_type": "Other", "inputs": [], "outputs": []},
    {"id": "node_2", "name": "vFull_Departmental_Map", "schema": "DBO", "object_type": "View", "description": "",
     "data_model_type": "Other", "inputs": ["node_4", "node_5"], "outputs": []},
    {"id": "node_3", "name": "CadenceBudgetData", "schema": "CONSUMPTION_ClinOpsFinance", "object_type": "Table",
     "description": "", "data_model_type": "Other", "inputs": ["node_0"], "outputs": []},
    {"id": "node_4", "name": "Full_Departmental_Map", "schema": "DBO", "object_type": "Table", "description": "",
     "data_model_type": "Other", "inputs": [], "outputs": []},
    {"id": "node_5", "name": "HrDepartments", "schema": "CONSUMPTION_PRIMA", "object_type": "Table",
     "description": "", "data_model_type": "Other", "inputs": [], "outputs": []},
]


@pytest.mark.unit
def test_object_array_validator_port() -> None:
    assert validate_lineage_json(SEED_EXAMPLE) is True
    assert object_array_violations(SEED_EXAMPLE) == []
    broken = json.loads(json.dumps(SEED_EXAMPLE))
    broken[1]["outputs"] = ["node_0"]              # a table with outputs
    assert validate_object_array(broken) is False
    assert [v.rule for v in object_array_violations(broken)] == ["table_outputs"]
    dangling = json.loads(json.dumps(SEED_EXAMPLE))
    dangling[0]["inputs"] = ["node_2", "node_9"]
    assert validate_object_array(dangling) is False
    assert {v.rule for v in object_array_violations(dangling)} == {"references"}
    unsorted = json.loads(json.dumps(SEED_EXAMPLE))
    unsorted[0]["inputs"] = ["node_2", "node_1"]
    assert validate_object_array(unsorted) is True             # the script does not check order...
    assert [v.rule for v in object_array_violations(unsorted)] == ["sorted_refs"]   # ...the rules do
    typo = json.loads(json.dumps(SEED_EXAMPLE))
    typo[0]["object_type"] = "StoredProcedure"
    assert validate_object_array(typo) is False                # we follow the script
    assert validate_object_array([{"id": "node_0"}]) is False


@pytest.mark.integration
def test_object_array_export(warehouse, pg_dsn: str, tmp_path) -> None:
    out = tmp_path / "objects.json"
    result = export("object-array", pg_dsn, str(out))
    data = json.loads(out.read_text())
    assert validate_object_array(data) is True
    assert result.violations == [] and object_array_violations(data) == []
    assert [n["id"] for n in data] == [f"node_{i}" for i in range(13)]
    by_name = {(n["schema"], n["name"]): n for n in data}
    ids_of = {n["id"]: (n["schema"], n["name"]) for n in data}
    clean = by_name[("airflow", "clean_orders")]
    assert clean["object_type"] == "Stored Procedure"
    assert [ids_of[i] for i in clean["inputs"]] == [("raw", "customers"), ("raw", "orders")]
    assert [ids_of[i] for i in clean["outputs"]] == [("stg", "orders")]
    dedupe = by_name[("airflow", "dedupe_orders")]
    assert dedupe["inputs"] == dedupe["outputs"] == [by_name[("stg", "orders")]["id"]]    # circular, visible
    stg = by_name[("stg", "orders")]
    assert stg["object_type"] == "Table" and stg["outputs"] == []
    assert sorted(ids_of[i][1] for i in stg["inputs"]) == ["clean_orders", "dedupe_orders"]
    assert by_name[("s3://reports", "revenue.csv")]["object_type"] == "Table"     # files keep their name


@pytest.mark.integration
def test_object_array_views_and_dim(pg_dsn: str) -> None:
    g = GraphRows(pg_dsn)
    a = g.dataset("mssql://db", "dbo.DimCustomers")
    v = g.dataset("mssql://db", "dbo.vCustomers", node_type="view")
    j = g.job("mssql://db", "dbo.spLoad")
    g.flow(j, [a], [v])
    data = object_array_document(load_snapshot(pg_dsn))
    g.close()
    assert [(n["object_type"], n["name"], n["data_model_type"]) for n in data] == [
        ("Stored Procedure", "dbo.spLoad", "Other"), ("Table", "DimCustomers", "Dimension"),
        ("View", "vCustomers", "Other")]
    assert data[2]["inputs"] == ["node_0"] and validate_object_array(data)


@pytest.mark.integration
def test_parquet_export_read_by_duckdb(warehouse, pg_dsn: str, tmp_path) -> None:
    import duckdb

    result = export("parquet", pg_dsn, str(tmp_path / "pq"))
    assert result.counts["lineage_nodes"] == 7 + 7            # 7 dataset rows (incl. the alias) + 7 jobs
    assert result.counts["lineage_edges"] == 21
    con = duckdb.connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{tmp_path}/pq/lineage_edges/*.parquet')").fetchone()[0]
    assert n == 21
    names = {r[0] for r in con.execute(
        f"SELECT name FROM read_parquet('{tmp_path}/pq/lineage_nodes/*.parquet') WHERE node_kind = 'dataset'"
    ).fetchall()}
    assert "warehouse.orders" in names and "mart.revenue" in names
