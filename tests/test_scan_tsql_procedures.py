"""T-SQL scripts: GO batches, statements without semicolons, procedures with temp tables (#t, @t), and
procedures of other dialects (BEGIN ... END, dollar-quoted bodies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scanner.catalog import Catalog
from scanner.files import units_of_sql
from scanner.score import assert_case
from scanner.sql import SqlContext

pytestmark = pytest.mark.unit

PROC = """
CREATE PROCEDURE etl.LoadSales
AS
BEGIN
    SET NOCOUNT ON
    DECLARE @cutoff DATE = GETDATE()
    DECLARE @ids TABLE (Id INT PRIMARY KEY)

    IF OBJECT_ID('tempdb..#src') IS NOT NULL DROP TABLE #src

    INSERT INTO @ids (Id) SELECT Id FROM dbo.ActiveCustomers

    SELECT o.OrderId, o.CustomerId, o.Amount * r.Rate AS AmountUsd
    INTO #src
    FROM dbo.Orders o
    JOIN dbo.Rates r ON r.Currency = o.Currency
    WHERE o.CustomerId IN (SELECT Id FROM @ids)

    IF EXISTS (SELECT 1 FROM dbo.Holidays WHERE Day = @cutoff)
        RETURN

    UPDATE s SET s.AmountUsd = 0 FROM #src s WHERE s.AmountUsd < 0

    BEGIN TRY
        BEGIN TRANSACTION
        DELETE FROM mart.Sales WHERE SaleDate >= @cutoff
        INSERT INTO mart.Sales (OrderId, CustomerId, AmountUsd)
        SELECT OrderId, CustomerId, AmountUsd FROM #src
        COMMIT
    END TRY
    BEGIN CATCH
        ROLLBACK
    END CATCH
END
GO
"""

CASES = [
    dict(name="procedure with temp table and table variable", dialect="tsql", sql=PROC,
         inputs=["dbo.ActiveCustomers", "dbo.Orders", "dbo.Rates", "dbo.Holidays"], outputs=["mart.Sales"],
         columns=["dbo.Orders.OrderId -> mart.Sales.OrderId", "dbo.Orders.CustomerId -> mart.Sales.CustomerId",
                  "dbo.Orders.Amount -> mart.Sales.AmountUsd", "dbo.Rates.Rate -> mart.Sales.AmountUsd"]),
    dict(name="no semicolons", dialect="tsql",
         sql="SELECT a INTO #t FROM dbo.x\nINSERT INTO dbo.y (a) SELECT a FROM #t\nSELECT * FROM dbo.y",
         inputs=["dbo.x", "dbo.y"], outputs=["dbo.y"], columns=["dbo.x.a -> dbo.y.a"]),
    dict(name="go batches", dialect="tsql",
         sql="INSERT INTO a.t1 SELECT c FROM a.s1\nGO\nINSERT INTO a.t2 SELECT c FROM a.t1\ngo\n",
         inputs=["a.s1", "a.t1"], outputs=["a.t1", "a.t2"],
         columns=["a.s1.c -> a.t1.c", "a.t1.c -> a.t2.c"]),
    dict(name="create temp table then insert", dialect="postgres",
         sql="CREATE TEMP TABLE tmp AS SELECT id, v FROM src; INSERT INTO dst SELECT id, v * 2 AS v FROM tmp",
         inputs=["src"], outputs=["dst"], columns=["src.id -> dst.id", "src.v -> dst.v"]),
    dict(name="spark temporary view", dialect="sparksql",
         sql="CREATE OR REPLACE TEMPORARY VIEW v AS SELECT k, v FROM db.raw; INSERT INTO db.out SELECT k, v FROM v",
         inputs=["db.raw"], outputs=["db.out"], columns=["db.raw.k -> db.out.k", "db.raw.v -> db.out.v"]),
    dict(name="bigquery procedure", dialect="bigquery",
         sql="CREATE PROCEDURE ds.p() BEGIN INSERT INTO ds.t2 (c) SELECT c FROM ds.t1; END",
         inputs=["ds.t1"], outputs=["ds.t2"], columns=["ds.t1.c -> ds.t2.c"]),
    dict(name="snowflake dollar-quoted procedure", dialect="snowflake",
         sql="CREATE OR REPLACE PROCEDURE s.p() RETURNS VARCHAR LANGUAGE SQL AS $$ BEGIN "
             "INSERT INTO s.t2 SELECT a FROM s.t1; RETURN 'ok'; END $$",
         inputs=["s.t1"], outputs=["s.t2"], columns=["s.t1.a -> s.t2.a"]),
    dict(name="postgres plpgsql function", dialect="postgres",
         sql="CREATE OR REPLACE FUNCTION refresh() RETURNS void AS $$ BEGIN DELETE FROM agg; "
             "INSERT INTO agg SELECT k, count(*) AS n FROM facts GROUP BY k; END; $$ LANGUAGE plpgsql;",
         inputs=["facts"], outputs=["agg"], columns=["facts.k -> agg.k", "facts.* -> agg.n"]),
    dict(name="mysql procedure", dialect="mysql",
         sql="CREATE PROCEDURE p() BEGIN INSERT INTO t2 SELECT a FROM t1; UPDATE t3 SET b = 1; END",
         inputs=["t1"], outputs=["t2", "t3"], columns=["t1.a -> t2.a"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict) -> None:
    assert_case(case)


def test_procedure_is_one_job_named_after_it_with_its_line_range() -> None:
    units, issues, _count = units_of_sql(PROC, SqlContext("tsql", Catalog()), "etl/load_sales.sql")
    assert [i for i in issues if i.kind == "error"] == []
    [unit] = units
    assert unit.name == "etl/load_sales.sql::etl.LoadSales"
    assert unit.job_type == "PROCEDURE"
    assert (unit.line, unit.end_line) == (2, 34)
    assert not any(t.name.startswith(("#", "@")) for t in unit.inputs + unit.outputs)


def test_warehouse_fixture_procedure_reads_view_and_rate_table() -> None:
    text = (Path(__file__).parent / "fixtures/scan/warehouse/spLoadCadenceBudgetData.sql").read_text()
    units, _issues, _n = units_of_sql(text, SqlContext("tsql", Catalog()), "sp.sql")
    [unit] = units
    assert {str(t) for t in unit.inputs} == {"DBO.vFull_Departmental_Map",
                                             "CONSUMPTION_PRIMA.MonthlyAverageCurrencyExchangeRate"}
    assert {str(t) for t in unit.outputs} == {"CONSUMPTION_ClinOpsFinance.CadenceBudgetData", "ADMIN.Logs"}
