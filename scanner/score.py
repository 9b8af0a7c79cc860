"""Score the scanner on a corpus of cases: table-level and column-level precision / recall per dialect.

A case is ``{"dialect", "sql", "inputs": [...], "outputs": [...], "columns": ["src.tbl.col -> tgt.tbl.col"]}``
(names compared case-insensitively). Facts of a multi-statement case are the union over statements;
column facts are each statement's (source column -> output column) pairs, DIRECT and INDIRECT
field-level ones (the pairs a reader of the SQL would draw), never dataset-level INDIRECT ones.

``python -m scanner.score CASES.json`` prints the table; tests use :func:`score`.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scanner.catalog import Catalog
from scanner.dialects import canonical_dialect
from scanner.files import statements_of
from scanner.model import StatementLineage
from scanner.sql import SqlContext

__all__ = ["facts", "score", "Score", "format_scores", "analyze_case", "assert_case"]


def facts(statements: Iterable[StatementLineage]) -> tuple[set[str], set[str], set[str]]:
    """(inputs, outputs, column pairs) of analysed statements, lower-cased."""
    ins: set[str] = set()
    outs: set[str] = set()
    cols: set[str] = set()
    for st in statements:
        ins |= {t.qualified.lower() for t in st.inputs}
        outs |= {t.qualified.lower() for t in st.outputs}
        for target in st.outputs[:1]:
            for c in st.columns:
                for s in c.sources:
                    cols.add(f"{s.table.qualified}.{s.column} -> {target.qualified}.{c.column}".lower())
    return ins, outs, cols


def assert_case(case: Mapping) -> None:
    """Assert that a case's facts are exactly the expected ones (tests' helper)."""
    ins, outs, cols = facts(analyze_case(case))
    assert ins == {t.lower() for t in case["inputs"]}, (sorted(ins), case["inputs"])
    assert outs == {t.lower() for t in case["outputs"]}, (sorted(outs), case["outputs"])
    if "columns" in case:
        expected = {" -> ".join(p.strip() for p in c.lower().split("->")) for c in case["columns"]}
        assert cols == expected, (sorted(cols - expected), sorted(expected - cols))


def analyze_case(case: Mapping, catalog: Catalog | None = None) -> list[StatementLineage]:
    ctx = SqlContext(canonical_dialect(case.get("dialect", "")), catalog if catalog is not None else Catalog(),
                     case.get("default_database", ""), case.get("default_schema", ""))
    results, _issues = statements_of(case["sql"], ctx)
    return results


@dataclass
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    cases: int = 0
    exact: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, expected: set[str], actual: set[str], label: str) -> None:
        self.tp += len(expected & actual)
        self.fp += len(actual - expected)
        self.fn += len(expected - actual)
        self.cases += 1
        self.exact += expected == actual
        if expected != actual:
            self.misses.append(f"{label}: missing {sorted(expected - actual)} extra {sorted(actual - expected)}")

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def score(cases: Iterable[Mapping]) -> dict[tuple[str, str], Score]:
    """``{(level, dialect): Score}`` for level ``table`` and ``column``."""
    out: dict[tuple[str, str], Score] = defaultdict(Score)
    for i, case in enumerate(cases):
        dialect = canonical_dialect(case.get("dialect", "")) or "ansi"
        label = case.get("name") or f"case {i}"
        ins, outs, cols = facts(analyze_case(case))
        expected_tables = {f"in:{t.lower()}" for t in case.get("inputs", [])} | \
            {f"out:{t.lower()}" for t in case.get("outputs", [])}
        out[("table", dialect)].add(expected_tables, {f"in:{t}" for t in ins} | {f"out:{t}" for t in outs}, label)
        if "columns" in case:
            expected_cols = {" -> ".join(p.strip() for p in c.lower().split("->")) for c in case["columns"]}
            out[("column", dialect)].add(expected_cols, cols, label)
    return dict(out)


def format_scores(scores: Mapping[tuple[str, str], Score]) -> str:
    lines = [f"{'level':7} {'dialect':12} {'cases':>5} {'exact':>5} {'precision':>9} {'recall':>7}"]
    totals: dict[str, Score] = defaultdict(Score)
    for (level, dialect), s in sorted(scores.items()):
        lines.append(f"{level:7} {dialect:12} {s.cases:5} {s.exact:5} {s.precision:9.3f} {s.recall:7.3f}")
        t = totals[level]
        t.tp, t.fp, t.fn, t.cases, t.exact = t.tp + s.tp, t.fp + s.fp, t.fn + s.fn, t.cases + s.cases, t.exact + s.exact
    for level, t in sorted(totals.items()):
        lines.append(f"{level:7} {'ALL':12} {t.cases:5} {t.exact:5} {t.precision:9.3f} {t.recall:7.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    cases: list = []
    for path in args:
        with open(path, encoding="utf-8") as fh:
            cases.extend(json.load(fh))
    scores = score(cases)
    print(format_scores(scores))
    for s in scores.values():
        for miss in s.misses:
            print("  ", miss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
