"""Our corpus, scored per dialect: table-level and column-level precision / recall over every case of the
test_scan_* construct families (run with -s to see the table). Each family's own test asserts its cases
exactly; this one guards the totals and prints them."""

from __future__ import annotations

import pytest

from scanner.score import format_scores, score
from tests import (
    test_scan_cte_subquery_union,
    test_scan_merge_update_delete,
    test_scan_realworld,
    test_scan_select_insert,
    test_scan_star_schema,
    test_scan_tsql_procedures,
)

pytestmark = pytest.mark.unit

FAMILIES = (test_scan_select_insert, test_scan_cte_subquery_union, test_scan_merge_update_delete,
            test_scan_star_schema, test_scan_tsql_procedures, test_scan_realworld)


def test_corpus_scores_per_dialect() -> None:
    cases = [c for family in FAMILIES for c in family.CASES]
    scores = score(cases)
    print("\n" + format_scores(scores))
    dialects = {d for _level, d in scores}
    assert {"tsql", "snowflake", "bigquery", "spark", "hive", "databricks", "postgres", "mysql", "redshift",
            "oracle", "duckdb", "ansi"} <= dialects
    for (level, dialect), s in scores.items():
        assert s.precision == 1.0 and s.recall == 1.0, (level, dialect, s.misses)
