"""Python via ast: SQL strings in spark.sql / read_sql / cursor.execute / text(), table reads and writes,
DataFrame tracing; what cannot be resolved statically is reported, not guessed."""

from __future__ import annotations

import pytest

from scanner.catalog import Catalog
from scanner.model import ColumnDef, TableName, TableSchema
from scanner.python_code import units_of_python
from scanner.sql import SqlContext

pytestmark = pytest.mark.unit

CODE = '''
import pandas as pd
import polars as pl
from pyspark.sql import functions as F
from sqlalchemy import text

SCHEMA = "mart"


def sql_strings(spark, conn, cursor, day):
    table = "raw.events"
    spark.sql(f"INSERT INTO {SCHEMA}.daily SELECT user_id, COUNT(*) AS n FROM {table} GROUP BY user_id")
    pd.read_sql("SELECT id, email FROM crm.users", conn)
    cursor.execute("UPDATE crm.users SET email = LOWER(email)")
    conn.execute(text("DELETE FROM crm.sessions WHERE ended < now()"))
    pl.read_database("SELECT * FROM crm.accounts", conn)
    spark.sql("SELECT * FROM raw.log WHERE day = '" + day + "'")


def frames(spark):
    orders = spark.read.table("shop.orders")
    people = spark.table("shop.people").withColumnRenamed("id", "person_id")
    joined = orders.join(people, "person_id").filter(F.col("status") == "paid")
    shaped = (joined.withColumn("amount_eur", F.col("amount") * 0.9)
                    .select("person_id", F.col("name").alias("customer"), "amount_eur")
                    .drop("person_id"))
    shaped.write.mode("append").saveAsTable("mart.paid")
    agg = joined.groupBy("country").agg(F.sum("amount").alias("total"))
    agg.write.insertInto("mart.by_country")


def pandas_write(conn, df_name):
    df = pd.read_sql_table("stage.items", conn)
    df.to_sql("items_copy", conn, schema="mart")
    df.to_sql(df_name, conn)
'''


def _units() -> tuple[dict, list]:
    catalog = Catalog([
        TableSchema(TableName("", "shop", "orders"), tuple(ColumnDef(c) for c in ("id", "person_id", "amount", "status"))),
        TableSchema(TableName("", "shop", "people"), tuple(ColumnDef(c) for c in ("id", "name", "country"))),
    ])
    ctx = SqlContext("spark", catalog)
    units, issues, _n = units_of_python(CODE, ctx, "jobs/etl.py")
    return {u.name: u for u in units}, issues


def test_sql_strings_are_resolved_through_constants_f_strings_and_text() -> None:
    units, issues = _units()
    u = units["jobs/etl.py::sql_strings"]
    assert u.integration == "PYTHON" and u.job_type == "FUNCTION"
    assert {str(t) for t in u.inputs} == {"raw.events", "crm.users", "crm.accounts"}
    assert {str(t) for t in u.outputs} == {"mart.daily", "crm.users", "crm.sessions"}
    first = u.statements[0]
    assert first.line == 12
    assert {(c.column, s.table.qualified, s.column) for c in first.columns for s in c.sources} == {
        ("user_id", "raw.events", "user_id"), ("n", "raw.events", "*")}
    warnings = [str(i) for i in issues if i.kind == "warning"]
    assert any("jobs/etl.py:17:" in w and "not a constant" in w for w in warnings)


def test_dataframe_tracing_select_withcolumn_join_filter_drop_groupby() -> None:
    """Columns resolve through the known schemas of the two tables (DDL elsewhere in the codebase)."""
    units, _ = _units()
    u = units["jobs/etl.py::frames"]
    paid = next(st for st in u.statements if st.outputs and st.outputs[0].name == "paid")
    assert {str(t) for t in paid.inputs} == {"shop.orders", "shop.people"}
    cols = {c.column: {(s.table.qualified, s.column, s.subtype) for s in c.sources} for c in paid.columns}
    assert set(cols) == {"customer", "amount_eur"}
    assert cols["amount_eur"] == {("shop.orders", "amount", "TRANSFORMATION")}
    assert ("shop.orders", "status", "FILTER") in {(s.table.qualified, s.column, s.subtype)
                                                   for s in paid.dataset_indirect}
    by_country = next(st for st in u.statements if st.outputs and st.outputs[0].name == "by_country")
    assert {c.column for c in by_country.columns} == {"country", "total"}
    total = next(c for c in by_country.columns if c.column == "total")
    assert [s.subtype for s in total.sources] == ["AGGREGATION"]


def test_unresolvable_write_target_is_reported_not_guessed() -> None:
    units, _ = _units()
    u = units["jobs/etl.py::pandas_write"]
    assert {str(t) for t in u.inputs} == {"stage.items"}
    assert {str(t) for t in u.outputs} == {"mart.items_copy"}
    assert any("to_sql() target not resolvable" in x for x in u.unresolved)
