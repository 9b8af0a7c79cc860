"""CTEs (unwrapped to their sources), subqueries, UNION, window functions, lateral views, table functions."""

from __future__ import annotations

import pytest

from scanner.score import analyze_case, assert_case

pytestmark = pytest.mark.unit

CASES = [
    dict(name="cte chain", dialect="postgres",
         sql="WITH a AS (SELECT id, amount FROM raw.payments), b AS (SELECT id, SUM(amount) AS total FROM a GROUP BY id) "
             "INSERT INTO mart.totals SELECT id, total FROM b",
         inputs=["raw.payments"], outputs=["mart.totals"],
         columns=["raw.payments.id -> mart.totals.id", "raw.payments.amount -> mart.totals.total"]),
    dict(name="cte inside insert select", dialect="sparksql",
         sql="INSERT INTO db.t SELECT * FROM (WITH x AS (SELECT k, v FROM db.src) SELECT k, v FROM x) q",
         inputs=["db.src"], outputs=["db.t"], columns=["db.src.k -> db.t.k", "db.src.v -> db.t.v"]),
    dict(name="derived table", dialect="mysql",
         sql="INSERT INTO r SELECT s.c, s.n FROM (SELECT c, COUNT(*) AS n FROM ev GROUP BY c) s",
         inputs=["ev"], outputs=["r"], columns=["ev.c -> r.c", "ev.* -> r.n"]),
    dict(name="scalar subquery in projection", dialect="tsql",
         sql="INSERT INTO dbo.r (id, mx) SELECT o.id, (SELECT MAX(p.v) FROM dbo.p p WHERE p.oid = o.id) FROM dbo.o o",
         inputs=["dbo.o", "dbo.p"], outputs=["dbo.r"], columns=["dbo.o.id -> dbo.r.id", "dbo.p.v -> dbo.r.mx"]),
    dict(name="exists subquery is an input", dialect="snowflake",
         sql="INSERT INTO a.t SELECT x FROM a.s WHERE EXISTS (SELECT 1 FROM a.flags f WHERE f.x = s.x)",
         inputs=["a.s", "a.flags"], outputs=["a.t"], columns=["a.s.x -> a.t.x"]),
    dict(name="union all by position", dialect="bigquery",
         sql="CREATE TABLE ds.all_users AS SELECT id, name FROM ds.us UNION ALL SELECT uid, full_name FROM ds.eu",
         inputs=["ds.us", "ds.eu"], outputs=["ds.all_users"],
         columns=["ds.us.id -> ds.all_users.id", "ds.eu.uid -> ds.all_users.id",
                  "ds.us.name -> ds.all_users.name", "ds.eu.full_name -> ds.all_users.name"]),
    dict(name="cte union", dialect="ansi",
         sql="WITH c1 AS (SELECT col1 FROM tab1), c2 AS (SELECT col1 FROM tab2) "
             "INSERT INTO tab3 SELECT col1 FROM c1 UNION SELECT col1 FROM c2",
         inputs=["tab1", "tab2"], outputs=["tab3"], columns=["tab1.col1 -> tab3.col1", "tab2.col1 -> tab3.col1"]),
    dict(name="window rank", dialect="snowflake",
         sql="CREATE TABLE s.ranked AS SELECT id, ROW_NUMBER() OVER (PARTITION BY grp ORDER BY ts DESC) AS rn FROM s.ev",
         inputs=["s.ev"], outputs=["s.ranked"],
         columns=["s.ev.id -> s.ranked.id", "s.ev.grp -> s.ranked.rn", "s.ev.ts -> s.ranked.rn"]),
    dict(name="qualify", dialect="snowflake",
         sql="INSERT INTO s.latest SELECT id, v FROM s.ev QUALIFY ROW_NUMBER() OVER (PARTITION BY id ORDER BY ts) = 1",
         inputs=["s.ev"], outputs=["s.latest"], columns=["s.ev.id -> s.latest.id", "s.ev.v -> s.latest.v"]),
    dict(name="hive lateral view explode", dialect="hive",
         sql="INSERT OVERWRITE TABLE dw.tags SELECT t.id, tag FROM ods.items t LATERAL VIEW explode(t.tags) x AS tag",
         inputs=["ods.items"], outputs=["dw.tags"],
         columns=["ods.items.id -> dw.tags.id", "ods.items.tags -> dw.tags.tag"]),
    dict(name="bigquery unnest", dialect="bigquery",
         sql="CREATE TABLE ds.flat AS SELECT o.id, item FROM ds.orders o, UNNEST(o.items) AS item",
         inputs=["ds.orders"], outputs=["ds.flat"],
         columns=["ds.orders.id -> ds.flat.id", "ds.orders.items -> ds.flat.item"]),
    dict(name="postgres lateral subquery", dialect="postgres",
         sql="INSERT INTO t SELECT u.id, x.v FROM users u CROSS JOIN LATERAL "
             "(SELECT max(v) AS v FROM ev WHERE ev.uid = u.id) x",
         inputs=["users", "ev"], outputs=["t"], columns=["users.id -> t.id", "ev.v -> t.v"]),
    dict(name="trino unnest with column alias", dialect="trino",
         sql="INSERT INTO t SELECT id, val FROM src CROSS JOIN UNNEST(arr) AS u(val)",
         inputs=["src"], outputs=["t"], columns=["src.id -> t.id", "src.arr -> t.val"]),
    dict(name="nested subqueries with aliases", dialect="postgres",
         sql="INSERT INTO out_t SELECT z.a2 AS a3 FROM (SELECT y.a1 AS a2 FROM (SELECT a AS a1 FROM in_t) y) z",
         inputs=["in_t"], outputs=["out_t"], columns=["in_t.a -> out_t.a3"]),
    dict(name="join on derived and table", dialect="duckdb",
         sql="CREATE TABLE r AS SELECT u.name, t.cnt FROM users u JOIN (SELECT uid, COUNT(*) AS cnt FROM ev GROUP BY uid) t "
             "ON t.uid = u.id",
         inputs=["users", "ev"], outputs=["r"], columns=["users.name -> r.name", "ev.* -> r.cnt"]),
    dict(name="recursive cte", dialect="postgres",
         sql="WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 5) "
             "INSERT INTO nums SELECT n FROM t",
         inputs=[], outputs=["nums"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict) -> None:
    assert_case(case)


def test_cte_filters_reach_the_output_as_dataset_level_indirect() -> None:
    [st] = analyze_case(dict(dialect="postgres", sql=(
        "WITH a AS (SELECT id FROM raw.p WHERE status = 'ok') INSERT INTO m SELECT id FROM a")))
    assert {(s.table.qualified, s.column, s.subtype) for s in st.dataset_indirect} == {("raw.p", "status", "FILTER")}
