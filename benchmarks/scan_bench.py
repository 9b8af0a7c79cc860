"""Benchmark `lineage scan`: a generated codebase of N statements (mixed dialects, CTEs, joins, windows,
MERGE / UPDATE, stars expanded against DDL), scanned with --jobs J, beside sqlglot's bare parse of the same
statements in the same run.

    python benchmarks/scan_bench.py [--statements 5000] [--jobs 2] [--pure]

``--pure`` also times the bare parse with sqlglot's pure-Python modules (a copy of the package without the
compiled ``sqlglotc`` extensions), to show what the ``sqlglot[c]`` extensions buy.
Prints figures; asserts nothing (tests never assert on wall time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DIALECTS = ["postgres", "snowflake", "bigquery", "spark", "tsql", "redshift", "mysql", "duckdb"]
TABLES = 40
COLUMNS = 12

TEMPLATES = [
    "WITH recent AS (SELECT c0, c1, c2 FROM {s}.t{a} WHERE c3 > {n}), agg AS (SELECT c0, SUM(c2) AS total "
    "FROM recent GROUP BY c0) INSERT INTO {s}.out{n} SELECT a.c0, a.total, b.c5 FROM agg a JOIN {s}.t{b} b "
    "ON b.c0 = a.c0",
    "INSERT INTO {s}.wide{n} SELECT * FROM {s}.t{a}",
    "CREATE TABLE {s}.ranked{n} AS SELECT c0, c4, ROW_NUMBER() OVER (PARTITION BY c1 ORDER BY c2 DESC) AS rn "
    "FROM {s}.t{a} WHERE c6 IS NOT NULL",
    "INSERT INTO {s}.u{n} SELECT c0, UPPER(c1) AS c1 FROM {s}.t{a} UNION ALL SELECT c0, LOWER(c1) FROM {s}.t{b}",
    "MERGE INTO {s}.t{a} AS t USING {s}.t{b} AS s ON t.c0 = s.c0 WHEN MATCHED THEN UPDATE SET c1 = s.c1, "
    "c2 = s.c2 + 1 WHEN NOT MATCHED THEN INSERT (c0, c1) VALUES (s.c0, s.c1)",
    "INSERT INTO {s}.joined{n} SELECT x.*, y.c7 AS y7, CASE WHEN y.c8 > 0 THEN y.c9 ELSE x.c9 END AS c9b "
    "FROM {s}.t{a} x LEFT JOIN (SELECT c0, c7, c8, c9 FROM {s}.t{b} WHERE c10 = 'k') y ON y.c0 = x.c0",
    "DELETE FROM {s}.t{a} WHERE c0 IN (SELECT c0 FROM {s}.t{b} WHERE c11 < {n})",
]
UPDATE_FROM = "UPDATE {s}.t{a} SET c1 = s.c1 FROM {s}.t{b} s WHERE s.c0 = {s}.t{a}.c0"


def generate(root: Path, statements: int) -> list[tuple[str, str]]:
    """Write the codebase; return every (dialect, statement) for the bare-parse comparison."""
    per_file = 50
    out: list[tuple[str, str]] = []
    for d in DIALECTS:
        (root / d).mkdir(parents=True)
        (root / d / "lineage-scan.toml").write_text(f'dialect = "{d}"\n')
        cols = ", ".join(f"c{i} INT" for i in range(COLUMNS))
        ddl = "".join(f"CREATE TABLE s.t{i} ({cols});\n" for i in range(TABLES))
        (root / d / "ddl.sql").write_text(ddl)
    n = 0
    file_no = 0
    while n < statements:
        d = DIALECTS[file_no % len(DIALECTS)]
        lines = []
        for _ in range(min(per_file, statements - n)):
            templates = TEMPLATES + ([UPDATE_FROM] if d in ("postgres", "redshift", "snowflake", "duckdb") else [])
            sql = templates[n % len(templates)].format(s="s", a=n % TABLES, b=(n * 7 + 3) % TABLES, n=n)
            lines.append(sql + ";")
            out.append((d, sql))
            n += 1
        (root / d / f"etl_{file_no:04d}.sql").write_text("\n".join(lines) + "\n")
        file_no += 1
    return out


def bare_parse(pairs: list[tuple[str, str]]) -> float:
    import sqlglot
    started = time.perf_counter()
    for d, sql in pairs:
        sqlglot.parse_one(sql, read=d)
    return time.perf_counter() - started


def pure_parse_seconds(pairs_file: Path) -> float:
    """The bare parse in a child process that imports a copy of sqlglot without compiled extensions."""
    import sqlglot
    src = Path(sqlglot.__file__).parent
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(src, Path(tmp) / "sqlglot", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        code = ("import json,sys,time; import sqlglot; assert sqlglot.__file__.startswith(sys.argv[1]);"
                "pairs=json.load(open(sys.argv[2])); t=time.perf_counter();"
                "[sqlglot.parse_one(s, read=d) for d, s in pairs]; print(time.perf_counter()-t)")
        env = {**os.environ, "PYTHONPATH": tmp}
        out = subprocess.run([sys.executable, "-c", code, tmp, str(pairs_file)], env=env, capture_output=True,
                             text=True, check=True)
        return float(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--pure", action="store_true", help="also time sqlglot's pure-Python parse")
    args = parser.parse_args()

    import json

    import sqlglot
    from sqlglot import tokens

    from scanner import scan

    with tempfile.TemporaryDirectory(prefix="scan-bench-") as tmp:
        root = Path(tmp) / "code"
        pairs = generate(root, args.statements)
        print(f"sqlglot {sqlglot.__version__}, compiled extensions (sqlglotc): {tokens.SQLGLOTC_INSTALLED}; "
              f"{len(pairs)} statements in {len(list(root.rglob('*.sql')))} files, {len(DIALECTS)} dialects, "
              f"cores {os.cpu_count()}, --jobs {args.jobs}")
        parse_s = bare_parse(pairs)
        print(f"sqlglot bare parse (1 process):     {parse_s:7.2f} s  ({len(pairs) / parse_s:7.0f} statements/s)")
        if args.pure:
            pf = Path(tmp) / "pairs.json"
            pf.write_text(json.dumps(pairs))
            pure = pure_parse_seconds(pf)
            print(f"sqlglot bare parse, pure Python:     {pure:7.2f} s  ({len(pairs) / pure:7.0f} statements/s)")
        started = time.perf_counter()
        result = scan([root], jobs=args.jobs, progress=False, event_time="2024-01-01T00:00:00Z")
        scan_s = time.perf_counter() - started
        columns = sum(len(st.columns) for u in result.units for st in u.statements)
        print(f"lineage scan (--jobs {args.jobs}):            {scan_s:7.2f} s  "
              f"({result.statements / scan_s:7.0f} statements/s); {result.statements} statements, "
              f"{len(result.units)} jobs, {columns} output columns traced, {len(result.events)} events, "
              f"{result.failed} failed")
        started = time.perf_counter()
        scan([root], jobs=1, progress=False, event_time="2024-01-01T00:00:00Z")
        print(f"lineage scan (--jobs 1):            {time.perf_counter() - started:7.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
