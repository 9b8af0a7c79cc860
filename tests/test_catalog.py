"""sink/catalog.py search / show and `lineage search` / `lineage show`, on real PostgreSQL graphs: a small
hand-built warehouse (exact expectations) and a graph written by the store from demo events."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from lineage.cli import main
from schemas.identity import dataset_id, job_id
from sink.catalog import search, show
from sink.postgres import GraphStore
from sink.queries import NodeNotFoundError, QueryError
from tests.graph_rows import NS, T0, GraphRows, sample_warehouse

pytestmark = pytest.mark.integration

DDL_JOB = ("scanner", "ddl/schema.sql")
FK = {"_producer": "https://x/scanner", "_schemaURL": "https://x/TableConstraintsDatasetFacet.json",
      "primaryKey": ["id"],
      "foreignKeys": [{"name": "fk_customer", "columns": ["customer_id"],
                       "references": {"namespace": NS, "name": "raw.customers", "columns": ["id"]}}]}


def build_warehouse(dsn: str) -> dict[str, str]:
    """tests/graph_rows.sample_warehouse plus names for ranking, columns, a quality anomaly and a DDL job whose
    event declares raw.orders' primary and foreign keys (tableConstraints)."""
    g = GraphRows(dsn)
    ids = sample_warehouse(g)
    ids["orders_archive"] = g.dataset(NS, "orders_archive")
    ids["preorders"] = g.dataset(NS, "sales.preorders")
    ids["exact"] = g.dataset("kafka://bus", "orders", fields=[{"name": "order_id", "type": "bigint"}])
    for key, fields, tags in (
            ("A", [{"name": "id", "type": "bigint", "nullable": False, "description": "order id"},
                   {"name": "customer_id", "type": "bigint"}, {"name": "amount", "type": "numeric"}], ["pii"]),
            ("B", [{"name": "id", "type": "bigint"}], [])):
        g.conn.execute("UPDATE lineage_datasets SET fields = %s, tags = %s WHERE dataset_id = %s",
                       (json.dumps(fields), json.dumps(tags), ids[key]))
    ids["ddl"] = g.job(*DDL_JOB, job_type="BATCH/SCANNER/DDL")
    g.flow(ids["ddl"], [], [ids["A"]])
    g.event({"eventType": "COMPLETE", "job": {"namespace": DDL_JOB[0], "name": DDL_JOB[1], "facets": {
        "sql": {"query": "CREATE TABLE raw.orders (id bigint PRIMARY KEY, customer_id bigint REFERENCES customers)"},
        "sourceCodeLocation": {"_producer": "p", "_schemaURL": "s", "type": "file", "url": "file:///repo/ddl/schema.sql",
                               "path": "ddl/schema.sql"},
        "jobType": {"processingType": "BATCH", "integration": "SCANNER", "jobType": "DDL"}}},
        "run": {"runId": str(uuid.uuid4())},
        "outputs": [{"namespace": NS, "name": "raw.orders", "facets": {"tableConstraints": FK}}]}, "h-ddl", T0)
    v1 = g.version(ids["D"], "v1", T0)
    g.quality(ids["D"], v1, T0)
    g.conn.execute("UPDATE lineage_quality SET anomalies = %s, validations = %s WHERE node_id = %s",
                   (json.dumps([{"type": "row_count_drop", "severity": "high"}]),
                    json.dumps([{"rule_name": "amount_positive", "passed": False}]), ids["D"]))
    ids["run"] = g.run(ids["J2"], T0, [(ids["C"], None)], [(ids["D"], v1)], state="FAIL")
    g.conn.execute("UPDATE lineage_dataset_versions SET run_id = %s WHERE version_id = %s", (ids["run"], v1))
    g.provenance(ids["D"], "h1", T0)
    g.close()
    return ids


def demo_events(n: int) -> list:
    from tests.test_store_postgres import _demo_events

    return _demo_events(n)


@pytest.fixture(scope="module")
def warehouse(pg_server) -> tuple[str, dict[str, str]]:
    dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    return dsn, build_warehouse(dsn)


@pytest.fixture(scope="module")
def demo(pg_server) -> str:
    dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    with GraphStore(dsn) as store:
        store.migrate()
        store.write_batch(1, demo_events(300))
    return dsn


def test_search_ranks_exact_then_prefix_then_substring(warehouse) -> None:
    dsn, ids = warehouse
    with psycopg.connect(dsn, autocommit=True) as conn:
        page = search(conn, "Orders", types=["dataset", "job"], limit=50)
        labels = [h.label for h in page.results]
        assert labels[0] == "kafka://bus/orders" and page.results[0].score == 4.0
        # prefix (a name or one of its words starts with it) before substring (inside a word)
        assert labels.index(f"{NS}/orders_archive") < labels.index(f"{NS}/sales.preorders")
        assert labels.index(f"{NS}/raw.orders") < labels.index(f"{NS}/sales.preorders")
        assert "job:airflow/clean_orders" in labels and labels[-1] == f"{NS}/sales.preorders"
        assert [h.score for h in page.results] == sorted((h.score for h in page.results), reverse=True)
        # an alias name finds its canonical node, once
        hive = search(conn, "warehouse.orders", types=["dataset"]).results
        assert [(h.id, h.alias) for h in hive] == [(ids["A"], "hive/warehouse.orders")]
        # pages: disjoint, and together the whole list
        first, second = search(conn, "orders", limit=3), search(conn, "orders", limit=3, offset=3)
        assert first.next_offset == 3 and not {h.label for h in first.results} & {h.label for h in second.results}
        assert [h.label for h in first.results + second.results] == [h.label for h in search(conn, "orders",
                                                                                              limit=6).results]


def test_search_columns_and_namespaces(warehouse) -> None:
    dsn, ids = warehouse
    with psycopg.connect(dsn, autocommit=True) as conn:
        # the column table follows schema changes (trigger of migration 007)
        assert sorted(r[0] for r in conn.execute(
            "SELECT column_name FROM lineage_search_columns WHERE dataset_id = %s", (ids["A"],)).fetchall()) == [
            "amount", "customer_id", "id"]
        cols = search(conn, "order_id", types=["column"]).results
        assert [(h.label, h.score) for h in cols] == [("kafka://bus/orders#order_id", 4.0)]
        cust = {h.label for h in search(conn, "customer", types=["column"]).results}
        assert cust == {f"{NS}/raw.orders#customer_id"}
        # a namespace prefix finds its datasets; a 2-letter text matches prefixes only
        assert {h.label for h in search(conn, "s3://rep").results} == {"s3://reports/revenue.csv"}
        assert {h.label for h in search(conn, "id", types=["column"]).results} == {
            f"{NS}/raw.orders#id", f"{NS}/raw.customers#id"}
        # a schema change replaces the dataset's columns (trigger), and the old name is no longer found
        before = conn.execute("SELECT fields FROM lineage_datasets WHERE dataset_id = %s", (ids["exact"],)).fetchone()[0]
        conn.execute("""UPDATE lineage_datasets SET fields = '[{"name": "Order_Key", "type": "text"}]'
                        WHERE dataset_id = %s""", (ids["exact"],))
        try:
            assert [h.label for h in search(conn, "order_key", types=["column"]).results] == [
                "kafka://bus/orders#Order_Key"]
            assert search(conn, "order_id", types=["column"]).results == []
        finally:
            conn.execute("UPDATE lineage_datasets SET fields = %s WHERE dataset_id = %s",
                         (json.dumps(before), ids["exact"]))
        assert [h.column for h in search(conn, "order_id", types=["column"]).results] == ["order_id"]
        with pytest.raises(QueryError):
            search(conn, "x", types=["table"])
        with pytest.raises(QueryError):
            search(conn, "  ")


def test_search_substring_and_prefix_use_the_indexes(warehouse) -> None:
    dsn, _ = warehouse
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone() is not None
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT * FROM lineage_datasets WHERE lower(qualified_name) LIKE '%rders%'").fetchall())
        assert "lineage_datasets_qname_trgm" in plan
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT * FROM lineage_datasets WHERE lower(name) LIKE 'ord%'").fetchall())
        assert "lineage_datasets_name_prefix" in plan
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT * FROM lineage_search_columns WHERE column_lower LIKE '%der_i%'").fetchall())
        assert "lineage_search_columns_trgm" in plan
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT * FROM lineage_search_columns WHERE column_lower LIKE 'order%'").fetchall())
        assert "lineage_search_columns_prefix" in plan


def test_show_dataset_everything_known(warehouse) -> None:
    dsn, ids = warehouse
    with psycopg.connect(dsn, autocommit=True) as conn:
        d = show(conn, f"{NS}/raw.orders")
        assert (d["id"], d["type"], d["owners"], d["tags"]) == (ids["A"], "dataset", ["team-raw"], ["pii"])
        assert d["schema"][0] == {"name": "id", "type": "bigint", "description": "order id", "nullable": False}
        assert d["aliases"] == ["hive/warehouse.orders"]
        assert d["constraints"] == {"primaryKey": ["id"], "foreignKeys": FK["foreignKeys"]}
        assert show(conn, "hive/warehouse.orders")["id"] == ids["A"]          # an alias shows its node
        m = show(conn, f"{NS}/mart.revenue")
        assert [r["state"] for r in m["runs"]] == ["FAIL"] and m["runs"][0]["duration_s"] == 1.0
        assert m["versions"][0]["version"] == "v1"
        assert m["quality"][0]["anomalies"] == [{"type": "row_count_drop", "severity": "high"}]
        assert m["quality"][0]["failed_validations"] == [{"rule_name": "amount_positive", "passed": False}]
        assert m["provenance"][0]["event_type"] == "modified" and m["constraints"] is None
        col = show(conn, f"{NS}/raw.orders#amount")
        assert (col["type"], col["column"], [f["name"] for f in col["schema"]]) == ("column", "amount", ["amount"])
        with pytest.raises(NodeNotFoundError):
            show(conn, f"{NS}/no.such")


def test_show_job_sql_source_and_type(warehouse) -> None:
    dsn, ids = warehouse
    with psycopg.connect(dsn, autocommit=True) as conn:
        j = show(conn, f"job:{DDL_JOB[0]}/{DDL_JOB[1]}")
        assert j["sql"].startswith("CREATE TABLE raw.orders")
        assert j["source_code_location"] == {"type": "file", "url": "file:///repo/ddl/schema.sql",
                                             "path": "ddl/schema.sql"}
        assert j["job_type"] == {"processingType": "BATCH", "integration": "SCANNER", "jobType": "DDL"}
        r = show(conn, "job:airflow/revenue")
        assert r["owners"] == ["bob"] and [x["run_id"] for x in r["runs"]] == [ids["run"]]
        assert r["job_type"] == {"processingType": "BATCH"} and r["sql"] is None


def test_demo_graph_search_and_show(demo) -> None:
    """On a graph the store wrote from demo events: every dataset is found by its own name, first or tied
    first, and show reports the runs, versions and quality the store holds for it."""
    with psycopg.connect(demo, autocommit=True) as conn:
        rows = conn.execute("SELECT dataset_id::text, namespace, name FROM lineage_datasets WHERE alias_of IS NULL "
                            "AND NOT is_placeholder ORDER BY name LIMIT 15").fetchall()
        assert len(rows) == 15
        for did, _ns, name in rows:
            top = search(conn, name, types=["dataset"]).results
            assert top[0].score == 4.0 and did in {h.id for h in top if h.score == 4.0}, name
        did, ns, name = conn.execute(
            "SELECT d.dataset_id::text, d.namespace, d.name FROM lineage_datasets d JOIN lineage_quality q "
            "ON q.node_id = d.dataset_id GROUP BY 1, 2, 3 ORDER BY count(*) DESC LIMIT 1").fetchone()
        d = show(conn, f"{ns}/{name}")
        versions = conn.execute("SELECT count(*) FROM lineage_dataset_versions WHERE dataset_id = %s", (did,)).fetchone()
        assert len(d["versions"]) == min(versions[0], 20) and d["quality"] and d["runs"]
        assert all(r["state"] in ("START", "RUNNING", "COMPLETE", "FAIL", "ABORT", "OTHER") for r in d["runs"])
        job = conn.execute("SELECT j.namespace, j.name FROM lineage_jobs j JOIN lineage_job_versions v "
                           "ON v.job_id = j.job_id WHERE v.sql IS NOT NULL ORDER BY j.name LIMIT 1").fetchone()
        j = show(conn, f"job:{job[0]}/{job[1]}")
        assert j["sql"] and j["source_code_location"]["url"].startswith("https://") and j["runs"]


def test_cli_search_and_show(warehouse, monkeypatch, tmp_path, capsys) -> None:
    dsn, ids = warehouse
    monkeypatch.setenv("LINEAGE_POSTGRES_DSN", dsn)
    monkeypatch.setenv("LINEAGE_DATA_DIR", str(tmp_path / "no-lineage-up"))
    assert main(["search", "orders", "--limit", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["4.00", "dataset", "kafka://bus/orders"] and out[-1] == "... more: --offset 2"
    assert main(["search", "revenue", "--type", "job", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["label"] for r in doc["results"]} == {"job:airflow/revenue", "job:airflow/quick_revenue"}
    assert doc["results"][0]["id"] == job_id("airflow", "revenue")
    assert main(["show", f"{NS}/raw.orders"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"dataset {NS}/raw.orders\n") and "  aliases: hive/warehouse.orders" in out
    assert "  foreign key fk_customer (customer_id) -> postgres://warehouse:5432/raw.customers (id)" in out
    assert main(["show", f"job:{DDL_JOB[0]}/{DDL_JOB[1]}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_code_location"]["path"] == "ddl/schema.sql"
    assert main(["show", f"{NS}/nope"]) == 1
    assert capsys.readouterr().err.startswith("lineage show: no dataset named")
    with pytest.raises(SystemExit) as exc:
        main(["search", "x", "--type", "table"])
    assert exc.value.code == 2
    assert main(["search", "   "]) == 2
    assert dataset_id(NS, "raw.orders") == ids["A"]
