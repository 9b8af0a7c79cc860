"""MERGE, UPDATE ... FROM / JOIN, DELETE ... USING, TRUNCATE, COPY, ALTER RENAME.

A target column's own old value (``SET q = q + s.q``) is not listed as a source: the target is not an
input of the statement at table level either.
"""

from __future__ import annotations

import pytest

from scanner.score import assert_case

pytestmark = pytest.mark.unit

CASES = [
    dict(name="merge snowflake", dialect="snowflake",
         sql="MERGE INTO dw.customers t USING stage.customers s ON t.id = s.id "
             "WHEN MATCHED THEN UPDATE SET t.name = s.name, t.updated = CURRENT_TIMESTAMP() "
             "WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.name)",
         inputs=["stage.customers"], outputs=["dw.customers"],
         columns=["stage.customers.name -> dw.customers.name", "stage.customers.id -> dw.customers.id"]),
    dict(name="merge tsql using subquery", dialect="tsql",
         sql="MERGE dbo.Target AS t USING (SELECT Id, SUM(Qty) AS Qty FROM dbo.Moves GROUP BY Id) AS s ON t.Id = s.Id "
             "WHEN MATCHED THEN UPDATE SET t.Qty = t.Qty + s.Qty "
             "WHEN NOT MATCHED BY TARGET THEN INSERT (Id, Qty) VALUES (s.Id, s.Qty);",
         inputs=["dbo.Moves"], outputs=["dbo.Target"],
         columns=["dbo.Moves.Qty -> dbo.Target.Qty", "dbo.Moves.Id -> dbo.Target.Id"]),
    dict(name="merge databricks", dialect="databricks",
         sql="MERGE INTO main.t USING main.u ON main.t.k = main.u.k WHEN MATCHED THEN UPDATE SET v = main.u.v",
         inputs=["main.u"], outputs=["main.t"], columns=["main.u.v -> main.t.v"]),
    dict(name="update from postgres", dialect="postgres",
         sql="UPDATE accounts a SET balance = a.balance + t.amount FROM txns t WHERE t.account_id = a.id",
         inputs=["txns"], outputs=["accounts"],
         columns=["txns.amount -> accounts.balance"]),
    dict(name="update tsql alias target", dialect="tsql",
         sql="UPDATE sr SET sr.Name += ' - tool malfunction' FROM Production.ScrapReason AS sr "
             "JOIN Production.WorkOrder AS wo ON sr.ScrapReasonID = wo.ScrapReasonID AND wo.ScrappedQty > 300",
         inputs=["Production.WorkOrder"], outputs=["Production.ScrapReason"],
         columns=[]),
    dict(name="update mysql join", dialect="mysql",
         sql="UPDATE t1 a JOIN t2 b ON a.id = b.id SET a.c = b.c",
         inputs=["t2"], outputs=["t1"], columns=["t2.c -> t1.c"]),
    dict(name="update with subquery", dialect="oracle",
         sql="UPDATE hr.emp e SET sal = (SELECT AVG(sal) FROM hr.emp2 x WHERE x.dept = e.dept)",
         inputs=["hr.emp2"], outputs=["hr.emp"], columns=["hr.emp2.sal -> hr.emp.sal"]),
    dict(name="delete using", dialect="postgres",
         sql="DELETE FROM orders o USING blacklist b WHERE o.customer_id = b.customer_id",
         inputs=["blacklist"], outputs=["orders"]),
    dict(name="delete where in", dialect="redshift",
         sql="DELETE FROM s.t WHERE id IN (SELECT id FROM s.gone)",
         inputs=["s.gone"], outputs=["s.t"]),
    dict(name="truncate", dialect="tsql", sql="TRUNCATE TABLE dbo.Stage", inputs=[], outputs=["dbo.Stage"]),
    dict(name="copy into snowflake", dialect="snowflake",
         sql="COPY INTO raw.events FROM @stage/events FILE_FORMAT = (TYPE = 'JSON')", inputs=[],
         outputs=["raw.events"]),
    dict(name="alter rename", dialect="postgres", sql="ALTER TABLE s.old_t RENAME TO new_t",
         inputs=["s.old_t"], outputs=["new_t"]),
    dict(name="create table like", dialect="mysql", sql="CREATE TABLE t_copy LIKE t_src",
         inputs=["t_src"], outputs=["t_copy"]),
    dict(name="snowflake insert all", dialect="snowflake",
         sql="INSERT ALL INTO t1 (a) VALUES (x) INTO t2 (b) VALUES (y) SELECT x, y FROM src",
         inputs=["src"], outputs=["t1", "t2"], columns=["src.x -> t1.a", "src.y -> t2.b"]),
    dict(name="hive multi insert", dialect="hive",
         sql="FROM src INSERT OVERWRITE TABLE a SELECT k, v INSERT OVERWRITE TABLE b SELECT k",
         inputs=["src"], outputs=["a", "b"], columns=["src.k -> a.k", "src.v -> a.v", "src.k -> b.k"]),
    dict(name="tsql insert exec and output into", dialect="tsql",
         sql="INSERT INTO dbo.t (a) EXEC dbo.p\nUPDATE dbo.u SET a = 1 OUTPUT inserted.a INTO dbo.audit(a) WHERE b = 2",
         inputs=[], outputs=["dbo.t", "dbo.u"]),
    dict(name="mysql replace into", dialect="mysql", sql="REPLACE INTO t (a) SELECT b FROM s",
         inputs=["s"], outputs=["t"], columns=["s.b -> t.a"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict) -> None:
    assert_case(case)

