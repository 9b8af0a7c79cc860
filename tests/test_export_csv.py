"""The export reads rows through CSV with control characters as quote and delimiter: every value reads back."""

from __future__ import annotations

import psycopg
import pyarrow as pa
import pytest

from sink.parquet import ParquetTable, _b, _i, _s, _t, table_rows

pytestmark = pytest.mark.integration

VALUES = [
    '{"a":"b, c","d":["e","f"],"g":"say \\"hi\\""}',   # JSON: quotes and commas, written as it is
    "",                                                  # an empty string is not NULL
    None,
    "quote \x01 and delimiter \x02 inside",              # the new quote and delimiter: quoted and doubled
    'csv\'s own " and , and \\N',
    "line\nbreak\r\nand\ttab",
    "日本語 🚀",
    "\\.",
]


def test_values_read_back_exactly(pg_dsn):
    table = ParquetTable("probe", "id", "export_probe", (
        _s("id"), _s("doc"), _i("n"), _b("flag"), _t("at")))
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("CREATE TEMP TABLE export_probe (id text, doc text, n bigint, flag boolean, at timestamptz, "
                     "last_batch_id bigint)")
        for i, value in enumerate(VALUES):
            conn.execute("INSERT INTO export_probe VALUES (%s, %s, %s, %s, '2024-05-01T10:00:00Z', 7)",
                         (f"id{i}", value, i if i % 3 else None, i % 2 == 0 if i % 4 else None))
        got = table_rows(conn, table, "last_batch_id = %(b)s", {"b": 7}, 7)
    assert got.column("doc").to_pylist() == VALUES
    assert got.column("id").to_pylist() == [f"id{i}" for i in range(len(VALUES))]
    assert got.column("n").to_pylist() == [i if i % 3 else None for i in range(len(VALUES))]
    assert got.column("flag").to_pylist() == [i % 2 == 0 if i % 4 else None for i in range(len(VALUES))]
    assert got.column("at").type == pa.timestamp("us", tz="UTC")
    assert got.column("_batch_id").to_pylist() == [7] * len(VALUES)
