"""SELECT / INSERT / INSERT OVERWRITE / CTAS / CREATE VIEW / SELECT INTO / VALUES, in several dialects.

Each case: the SQL beside its expected input and output tables and its column pairs
(``source table.column -> output table.column``).
"""

from __future__ import annotations

import pytest

from scanner.score import analyze_case, assert_case

pytestmark = pytest.mark.unit

CASES = [
    dict(name="insert select expression", dialect="hive",
         sql="INSERT INTO tab1 SELECT col1 + col2 AS col3, UPPER(name) AS name FROM tab2",
         inputs=["tab2"], outputs=["tab1"],
         columns=["tab2.col1 -> tab1.col3", "tab2.col2 -> tab1.col3", "tab2.name -> tab1.name"]),
    dict(name="insert column list by position", dialect="postgres",
         sql="INSERT INTO sales.summary (region, total) SELECT r.name, SUM(o.amount) FROM sales.orders o "
             "JOIN sales.regions r ON r.id = o.region_id GROUP BY r.name",
         inputs=["sales.orders", "sales.regions"], outputs=["sales.summary"],
         columns=["sales.regions.name -> sales.summary.region", "sales.orders.amount -> sales.summary.total"]),
    dict(name="insert overwrite partition", dialect="hive",
         sql="INSERT OVERWRITE TABLE dw.daily PARTITION (dt='2024-01-01') SELECT user_id, count(1) AS n "
             "FROM ods.events WHERE dt = '2024-01-01' GROUP BY user_id",
         inputs=["ods.events"], outputs=["dw.daily"],
         columns=["ods.events.user_id -> dw.daily.user_id"]),
    dict(name="insert overwrite spark", dialect="sparksql",
         sql="INSERT OVERWRITE TABLE db.t2 SELECT a.id, b.v FROM db.a a LEFT JOIN db.b b ON a.id = b.id",
         inputs=["db.a", "db.b"], outputs=["db.t2"],
         columns=["db.a.id -> db.t2.id", "db.b.v -> db.t2.v"]),
    dict(name="ctas snowflake three-part", dialect="snowflake",
         sql="CREATE OR REPLACE TABLE analytics.public.users_clean AS "
             "SELECT id, LOWER(email) AS email FROM raw.public.users WHERE email IS NOT NULL",
         inputs=["raw.public.users"], outputs=["analytics.public.users_clean"],
         columns=["raw.public.users.id -> analytics.public.users_clean.id",
                  "raw.public.users.email -> analytics.public.users_clean.email"]),
    dict(name="create view with column list", dialect="postgres",
         sql="CREATE VIEW v_sales (region, amount) AS SELECT region, amount * 1.2 FROM sales",
         inputs=["sales"], outputs=["v_sales"],
         columns=["sales.region -> v_sales.region", "sales.amount -> v_sales.amount"]),
    dict(name="bigquery backticked project", dialect="bigquery",
         sql="CREATE TABLE `proj.ds.out` AS SELECT x.a, y.b FROM `proj.ds.x` x JOIN proj.ds.y y USING (k)",
         inputs=["proj.ds.x", "proj.ds.y"], outputs=["proj.ds.out"],
         columns=["proj.ds.x.a -> proj.ds.out.a", "proj.ds.y.b -> proj.ds.out.b"]),
    dict(name="select into tsql", dialect="tsql",
         sql="SELECT c.CustomerId, c.Name INTO dbo.CustomerCopy FROM dbo.Customers c WHERE c.Active = 1",
         inputs=["dbo.Customers"], outputs=["dbo.CustomerCopy"],
         columns=["dbo.Customers.CustomerId -> dbo.CustomerCopy.CustomerId",
                  "dbo.Customers.Name -> dbo.CustomerCopy.Name"]),
    dict(name="select into postgres union", dialect="postgres",
         sql="SELECT * INTO films_all FROM films UNION ALL SELECT * FROM films_backup",
         inputs=["films", "films_backup"], outputs=["films_all"],
         columns=["films.* -> films_all.*", "films_backup.* -> films_all.*"]),
    dict(name="insert values reads nothing", dialect="mysql",
         sql="INSERT INTO shop.log (id, msg) VALUES (1, 'x'), (2, 'y')",
         inputs=[], outputs=["shop.log"], columns=[]),
    dict(name="plain select reads", dialect="duckdb",
         sql="SELECT a, b FROM main.t1 WHERE a IN (SELECT a FROM main.t2)",
         inputs=["main.t1", "main.t2"], outputs=[], columns=[]),
    dict(name="redshift insert", dialect="redshift",
         sql="INSERT INTO mart.f SELECT DATE_TRUNC('month', ts) AS m, COUNT(*) AS n FROM stage.events GROUP BY 1",
         inputs=["stage.events"], outputs=["mart.f"],
         columns=["stage.events.ts -> mart.f.m", "stage.events.* -> mart.f.n"]),
    dict(name="oracle insert", dialect="oracle",
         sql="INSERT INTO hr.emp_copy (empno, ename) SELECT empno, UPPER(ename) FROM hr.emp WHERE deptno = 10",
         inputs=["hr.emp"], outputs=["hr.emp_copy"],
         columns=["hr.emp.empno -> hr.emp_copy.empno", "hr.emp.ename -> hr.emp_copy.ename"]),
    dict(name="databricks three-part", dialect="databricks",
         sql="INSERT INTO main.gold.revenue SELECT region, SUM(amount) AS amount FROM main.silver.orders GROUP BY region",
         inputs=["main.silver.orders"], outputs=["main.gold.revenue"],
         columns=["main.silver.orders.region -> main.gold.revenue.region",
                  "main.silver.orders.amount -> main.gold.revenue.amount"]),
    dict(name="ansi alias", dialect="ansi",
         sql="INSERT INTO t2 (x) SELECT CAST(a AS INT) FROM t1",
         inputs=["t1"], outputs=["t2"], columns=["t1.a -> t2.x"]),
    dict(name="use database", dialect="sparksql",
         sql="USE staging; INSERT INTO t_out SELECT id FROM t_in",
         inputs=["staging.t_in"], outputs=["staging.t_out"], columns=["staging.t_in.id -> staging.t_out.id"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict) -> None:
    assert_case(case)


def test_transformation_types_and_expression_text() -> None:
    [st] = analyze_case(dict(dialect="spark", sql="INSERT INTO o SELECT id, UPPER(name) AS n, SUM(v) AS s, "
                                                  "SUM(v) OVER (PARTITION BY k ORDER BY ts) AS w FROM i GROUP BY id, name"))
    by = {c.column: c for c in st.columns}
    assert [(s.column, s.type, s.subtype) for s in by["id"].sources] == [("id", "DIRECT", "IDENTITY")]
    assert by["n"].expression == "UPPER(name)"
    assert [(s.column, s.subtype) for s in by["n"].sources] == [("name", "TRANSFORMATION")]
    assert [(s.column, s.subtype) for s in by["s"].sources] == [("v", "AGGREGATION")]
    assert {(s.column, s.type, s.subtype) for s in by["w"].sources} == {
        ("v", "DIRECT", "AGGREGATION"), ("k", "INDIRECT", "WINDOW"), ("ts", "INDIRECT", "WINDOW")}
    assert {(s.column, s.subtype) for s in st.dataset_indirect} == {("id", "GROUP_BY"), ("name", "GROUP_BY")}


def test_case_when_condition_is_indirect_and_filter_join_are_dataset_level() -> None:
    [st] = analyze_case(dict(dialect="postgres", sql=(
        "INSERT INTO o SELECT CASE WHEN a.flag THEN a.x ELSE b.y END AS z FROM a JOIN b ON a.id = b.id "
        "WHERE b.ok ORDER BY a.x")))
    [z] = st.columns
    assert {(s.table.name, s.column, s.type, s.subtype) for s in z.sources} == {
        ("a", "x", "DIRECT", "TRANSFORMATION"), ("b", "y", "DIRECT", "TRANSFORMATION"),
        ("a", "flag", "INDIRECT", "CONDITIONAL")}
    assert {(s.table.name, s.column, s.subtype) for s in st.dataset_indirect} == {
        ("a", "id", "JOIN"), ("b", "id", "JOIN"), ("b", "ok", "FILTER"), ("a", "x", "SORT")}


def test_masking_functions_are_marked() -> None:
    [st] = analyze_case(dict(dialect="snowflake", sql="INSERT INTO o SELECT SHA2(email) AS e FROM i"))
    assert [s.masking for s in st.columns[0].sources] == [True]


def test_names_keep_the_spelling_of_the_code() -> None:
    [st] = analyze_case(dict(dialect="snowflake", sql="INSERT INTO Mart.Daily SELECT CustomerId FROM Raw.Orders"))
    assert [str(t) for t in st.inputs] == ["Raw.Orders"]
    assert st.columns[0].column == "CustomerId"
    assert st.columns[0].sources[0].column == "CustomerId"


def test_default_database_and_schema_fill_missing_parts() -> None:
    [st] = analyze_case(dict(dialect="tsql", sql="INSERT INTO t SELECT a FROM s.x", default_database="DW",
                             default_schema="dbo"))
    assert [str(t) for t in st.outputs] == ["DW.dbo.t"]
    assert [str(t) for t in st.inputs] == ["DW.s.x"]
