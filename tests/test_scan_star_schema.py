"""SELECT * and t.* expanded against schemas known from DDL in the scanned code or from a schema file;
without a schema, a star maps ``table.*`` to ``*``. (A CREATE TABLE statement outputs its table.)"""

from __future__ import annotations

import json

import pytest

from scanner.catalog import Catalog, load_schema_file
from scanner.files import statements_of
from scanner.score import assert_case
from scanner.sql import SqlContext

pytestmark = pytest.mark.unit

DDL = ("CREATE TABLE shop.customers (id INT NOT NULL, name VARCHAR(50), country CHAR(2));\n"
       "CREATE TABLE shop.orders (id INT, customer_id INT, amount DECIMAL(10,2));\n")

CASES = [
    dict(name="star against ddl", dialect="postgres",
         sql=DDL + "INSERT INTO mart.c SELECT * FROM shop.customers",
         inputs=["shop.customers"], outputs=["mart.c", "shop.customers", "shop.orders"],
         columns=["shop.customers.id -> mart.c.id", "shop.customers.name -> mart.c.name",
                  "shop.customers.country -> mart.c.country"]),
    dict(name="qualified star in join", dialect="mysql",
         sql=DDL + "CREATE TABLE mart.co AS SELECT o.*, c.name FROM shop.orders o JOIN shop.customers c "
                   "ON c.id = o.customer_id",
         inputs=["shop.customers", "shop.orders"], outputs=["mart.co", "shop.customers", "shop.orders"],
         columns=["shop.orders.id -> mart.co.id", "shop.orders.customer_id -> mart.co.customer_id",
                  "shop.orders.amount -> mart.co.amount", "shop.customers.name -> mart.co.name"]),
    dict(name="star through cte", dialect="snowflake",
         sql=DDL + "INSERT INTO mart.big SELECT * FROM (WITH x AS (SELECT * FROM shop.orders WHERE amount > 10) "
                   "SELECT id, amount FROM x)",
         inputs=["shop.orders"], outputs=["mart.big", "shop.customers", "shop.orders"],
         columns=["shop.orders.id -> mart.big.id", "shop.orders.amount -> mart.big.amount"]),
    dict(name="star without schema", dialect="hive",
         sql="INSERT INTO t1 SELECT * FROM t2",
         inputs=["t2"], outputs=["t1"], columns=["t2.* -> t1.*"]),
    dict(name="insert without column list maps to ddl columns by position", dialect="tsql",
         sql="CREATE TABLE dbo.target (k INT, label VARCHAR(10));\nINSERT INTO dbo.target SELECT id, name FROM dbo.src",
         inputs=["dbo.src"], outputs=["dbo.target"],

         columns=["dbo.src.id -> dbo.target.k", "dbo.src.name -> dbo.target.label"]),
    dict(name="unqualified column resolved by schema", dialect="postgres",
         sql=DDL + "INSERT INTO r SELECT name, amount FROM shop.orders o JOIN shop.customers c ON c.id = o.customer_id",
         inputs=["shop.customers", "shop.orders"], outputs=["r", "shop.customers", "shop.orders"],
         columns=["shop.customers.name -> r.name", "shop.orders.amount -> r.amount"]),
    dict(name="partially qualified name finds the ddl", dialect="postgres",
         sql="CREATE TABLE analytics.public.events (id INT, kind TEXT);\nINSERT INTO s SELECT * FROM public.events",
         inputs=["public.events"], outputs=["s", "analytics.public.events"],
         columns=["public.events.id -> s.id", "public.events.kind -> s.kind"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict) -> None:
    assert_case(case)


def test_schema_file_expands_star(tmp_path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"wh.sales.orders": {"id": "INT", "total": "DECIMAL"}}))
    ctx = SqlContext("snowflake", load_schema_file(path))
    [st], _ = statements_of("INSERT INTO wh.mart.o SELECT * FROM wh.sales.orders", ctx)
    assert [c.column for c in st.columns] == ["id", "total"]


def test_ddl_in_another_statement_order_does_not_matter_in_a_codebase(tmp_path) -> None:
    from scanner import scan
    (tmp_path / "a_use.sql").write_text("INSERT INTO r SELECT * FROM s.t;")
    (tmp_path / "z_ddl.sql").write_text("CREATE TABLE s.t (a INT, b INT);")
    result = scan([tmp_path], dialect="postgres", jobs=1, event_time="2024-01-01T00:00:00Z")
    [unit] = result.units
    assert [c.column for c in unit.statements[0].columns] == ["a", "b"]
    assert Catalog(result.tables).lookup(unit.statements[0].inputs[0]) is not None
