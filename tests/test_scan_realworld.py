"""Real-world shaped SQL, written after public test fixtures: TPC-H queries (as sqlglot's optimizer fixtures
use them), lineage-parser suites (sqllineage's INSERT/CTE/MERGE/procedure cases, OpenLineage's SQL parser
cases), and dbt's jaffle_shop example project (tests/fixtures/scan/jaffle)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scanner import scan
from scanner.score import assert_case

pytestmark = pytest.mark.unit

CASES = [
    dict(name="tpch q1 as ctas", dialect="duckdb",
         sql="CREATE TABLE q1 AS SELECT l_returnflag, l_linestatus, SUM(l_quantity) AS sum_qty, "
             "SUM(l_extendedprice * (1 - l_discount)) AS sum_disc_price, AVG(l_quantity) AS avg_qty, "
             "COUNT(*) AS count_order FROM lineitem WHERE l_shipdate <= CAST('1998-12-01' AS DATE) - INTERVAL '90' DAY "
             "GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus",
         inputs=["lineitem"], outputs=["q1"],
         columns=["lineitem.l_returnflag -> q1.l_returnflag", "lineitem.l_linestatus -> q1.l_linestatus",
                  "lineitem.l_quantity -> q1.sum_qty", "lineitem.l_extendedprice -> q1.sum_disc_price",
                  "lineitem.l_discount -> q1.sum_disc_price", "lineitem.l_quantity -> q1.avg_qty",
                  "lineitem.* -> q1.count_order"]),
    dict(name="tpch q3 as insert", dialect="postgres",
         sql="INSERT INTO q3 SELECT l.l_orderkey, SUM(l.l_extendedprice * (1 - l.l_discount)) AS revenue, "
             "o.o_orderdate, o.o_shippriority FROM customer c, orders o, lineitem l "
             "WHERE c.c_mktsegment = 'BUILDING' AND c.c_custkey = o.o_custkey AND l.l_orderkey = o.o_orderkey "
             "GROUP BY l.l_orderkey, o.o_orderdate, o.o_shippriority ORDER BY revenue DESC LIMIT 10",
         inputs=["customer", "orders", "lineitem"], outputs=["q3"],
         columns=["lineitem.l_orderkey -> q3.l_orderkey", "lineitem.l_extendedprice -> q3.revenue",
                  "lineitem.l_discount -> q3.revenue", "orders.o_orderdate -> q3.o_orderdate",
                  "orders.o_shippriority -> q3.o_shippriority"]),
    dict(name="tpch q18 nested in", dialect="snowflake",
         sql="INSERT INTO q18 SELECT c_name, o_orderkey, SUM(l_quantity) AS qty FROM customer, orders, lineitem "
             "WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING SUM(l_quantity) > 300) "
             "AND c_custkey = o_custkey AND o_orderkey = l_orderkey GROUP BY c_name, o_orderkey",
         inputs=["customer", "orders", "lineitem"], outputs=["q18"]),
    dict(name="hive insert overwrite from join with partition", dialect="hive",
         sql="INSERT OVERWRITE TABLE tab1 PARTITION (par1=1) SELECT a.col1, b.col2 FROM tab2 a JOIN tab3 b "
             "ON a.id = b.id",
         inputs=["tab2", "tab3"], outputs=["tab1"], columns=["tab2.col1 -> tab1.col1", "tab3.col2 -> tab1.col2"]),
    dict(name="insert with cte and case", dialect="ansi",
         sql="WITH cte1 AS (SELECT col1, col2 FROM tab1 WHERE col3 = 1) INSERT INTO tab2 "
             "SELECT CASE WHEN col1 > 0 THEN col2 ELSE 0 END AS col4 FROM cte1",
         inputs=["tab1"], outputs=["tab2"], columns=["tab1.col1 -> tab2.col4", "tab1.col2 -> tab2.col4"]),
    dict(name="bigquery merge with subquery", dialect="bigquery",
         sql="MERGE dataset.DetailedInventory T USING (SELECT product, quantity FROM dataset.Inventory "
             "WHERE quantity > 0) S ON T.product = S.product WHEN NOT MATCHED THEN INSERT (product, quantity) "
             "VALUES (S.product, S.quantity)",
         inputs=["dataset.Inventory"], outputs=["dataset.DetailedInventory"],
         columns=["dataset.Inventory.product -> dataset.DetailedInventory.product",
                  "dataset.Inventory.quantity -> dataset.DetailedInventory.quantity"]),
    dict(name="snowflake three part with lateral flatten", dialect="snowflake",
         sql="CREATE TABLE db.s.flat AS SELECT e.id, f.value::STRING AS tag FROM db.s.events e, "
             "LATERAL FLATTEN(input => e.tags) f",
         inputs=["db.s.events"], outputs=["db.s.flat"],
         columns=["db.s.events.id -> db.s.flat.id", "db.s.events.tags -> db.s.flat.tag"]),
    dict(name="redshift unload-free ctas with distkey", dialect="redshift",
         sql="CREATE TABLE mart.sales DISTKEY(id) SORTKEY(day) AS SELECT id, day, SUM(amt) AS amt "
             "FROM stage.sales GROUP BY id, day",
         inputs=["stage.sales"], outputs=["mart.sales"],
         columns=["stage.sales.id -> mart.sales.id", "stage.sales.day -> mart.sales.day",
                  "stage.sales.amt -> mart.sales.amt"]),
    dict(name="spark insert into with table-valued subquery", dialect="spark",
         sql="INSERT INTO TABLE db.target SELECT k, v FROM (SELECT key AS k, value AS v FROM db.src "
             "WHERE key IS NOT NULL) t",
         inputs=["db.src"], outputs=["db.target"], columns=["db.src.key -> db.target.k",
                                                             "db.src.value -> db.target.v"]),
    dict(name="oracle merge", dialect="oracle",
         sql="MERGE INTO bonuses D USING (SELECT employee_id, salary FROM employees WHERE department_id = 80) S "
             "ON (D.employee_id = S.employee_id) WHEN MATCHED THEN UPDATE SET D.bonus = S.salary * .01 "
             "WHEN NOT MATCHED THEN INSERT (D.employee_id, D.bonus) VALUES (S.employee_id, S.salary * .01)",
         inputs=["employees"], outputs=["bonuses"],
         columns=["employees.salary -> bonuses.bonus", "employees.employee_id -> bonuses.employee_id"]),
    dict(name="mysql insert select with backticks", dialect="mysql",
         sql="INSERT INTO `db`.`t2` (`a`, `b`) SELECT `x`, `y` FROM `db`.`t1` WHERE `z` > 0",
         inputs=["db.t1"], outputs=["db.t2"], columns=["db.t1.x -> db.t2.a", "db.t1.y -> db.t2.b"]),
    dict(name="tsql bracket identifiers", dialect="tsql",
         sql="INSERT INTO [dw].[dbo].[Fact Sales] ([Sale Id], [Amount]) SELECT s.[Id], s.[Amt] FROM [stage].[Sales] s",
         inputs=["stage.Sales"], outputs=["dw.dbo.Fact Sales"],
         columns=["stage.Sales.Id -> dw.dbo.Fact Sales.Sale Id", "stage.Sales.Amt -> dw.dbo.Fact Sales.Amount"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict) -> None:
    assert_case(case)


def test_dbt_jaffle_shop_models() -> None:
    result = scan([Path(__file__).parent / "fixtures/scan/jaffle"], dialect="duckdb", jobs=1,
                  event_time="2024-01-01T00:00:00Z")
    assert result.issues == []
    units = {u.name: u for u in result.units}
    assert set(units) == {"models/customers.sql::customers", "models/staging/stg_customers.sql::stg_customers",
                          "models/staging/stg_orders.sql::stg_orders"}
    customers = units["models/customers.sql::customers"]
    assert (customers.integration, customers.job_type) == ("DBT", "MODEL")
    assert {str(t) for t in customers.inputs} == {"stg_customers", "stg_orders"}
    cols = {c.column: {(s.table.qualified, s.column, s.subtype) for s in c.sources}
            for c in customers.statements[0].columns}
    assert cols["number_of_orders"] == {("stg_orders", "order_id", "AGGREGATION")}
    staged = units["models/staging/stg_customers.sql::stg_customers"].statements[0]
    assert {(c.column, s.table.qualified, s.column) for c in staged.columns for s in c.sources} == {
        ("customer_id", "raw.customers", "id"), ("first_name", "raw.customers", "first_name"),
        ("last_name", "raw.customers", "last_name")}
