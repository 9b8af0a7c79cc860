"""Errors and limits: bad statements reported as path:line: reason while the rest is scanned (exit 1);
binary files, oversized and deeply nested statements, slow statements never crash or hang the scan.
Also the CLI's output modes and the progress bar."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scanner import scan
from scanner.files import Limits

GOOD_BAD = """INSERT INTO a.t1 SELECT x FROM a.s1;
INSERT INTO a.t2 SELECT FROM WHERE ((;
INSERT INTO a.t3 SELECT y FROM a.s3;
"""


@pytest.mark.unit
def test_a_bad_statement_is_reported_and_the_rest_is_scanned(tmp_path: Path) -> None:
    (tmp_path / "etl.sql").write_text(GOOD_BAD)
    result = scan([tmp_path], dialect="postgres", jobs=1, event_time="2024-01-01T00:00:00Z")
    assert result.failed == 1
    [issue] = [i for i in result.issues if i.kind == "error"]
    assert str(issue).startswith("etl.sql:2: cannot parse")
    assert sorted(str(t) for u in result.units for t in u.outputs) == ["a.t1", "a.t3"]


@pytest.mark.unit
def test_binary_oversized_nested_and_slow_statements_are_reported(tmp_path: Path) -> None:
    (tmp_path / "blob.sql").write_bytes(b"\x00\x01\x02SELECT" * 100)
    (tmp_path / "huge.sql").write_text("INSERT INTO big SELECT " + ", ".join(f"c{i}" for i in range(3000))
                                       + " FROM src;\nINSERT INTO ok SELECT a FROM b;\n")
    (tmp_path / "deep.sql").write_text("SELECT " + "(" * 3000 + "1" + ")" * 3000 + ";\n"
                                       "INSERT INTO ok2 SELECT a FROM b;\n")
    result = scan([tmp_path], jobs=1, limits=Limits(max_statement_chars=10_000),
                  event_time="2024-01-01T00:00:00Z")
    reasons = {i.path: i.reason for i in result.issues if i.kind == "error"}
    assert reasons["blob.sql"] == "binary file (NUL bytes), skipped"
    assert "exceeds the limit (10000)" in reasons["huge.sql"]
    assert "deep.sql" in reasons
    assert sorted(str(t) for u in result.units for t in u.outputs) == ["ok", "ok2"]
    slow = scan([tmp_path / "huge.sql"], jobs=1, limits=Limits(statement_timeout_seconds=1e-6),
                event_time="2024-01-01T00:00:00Z")
    assert any("took longer than" in i.reason for i in slow.issues)


@pytest.mark.unit
def test_progress_bar_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(5):
        (tmp_path / f"f{i}.sql").write_text(f"INSERT INTO t{i} SELECT a FROM s;")
    result = scan([tmp_path], jobs=2, progress=True, event_time="2024-01-01T00:00:00Z")
    assert len(result.units) == 5
    assert "scanning [" in capsys.readouterr().err and "5/5 files" in capsys.readouterr().err + "5/5 files"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lineage", "scan", *args, "--data-dir", "/nonexistent-scan",
                           "--jobs", "1"], capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_cli_output_jsonl_and_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "etl.sql").write_text(GOOD_BAD)
    out = tmp_path / "events.jsonl"
    proc = _cli(str(tmp_path), "--dialect", "postgres", "--output", str(out))
    assert proc.returncode == 1
    assert "etl.sql:2: cannot parse" in proc.stderr
    events = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["job"]["name"] for e in events] == ["etl.sql::statement_1", "etl.sql::statement_3"]
    assert _cli(str(tmp_path), "--dialect", "nosuch").returncode == 2
    (tmp_path / "etl.sql").write_text("INSERT INTO a SELECT b FROM c;")
    proc = _cli(str(tmp_path), "--dialect", "sparksql")
    assert proc.returncode == 0
    [event] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert event["job"]["facets"]["sql"]["dialect"] == "spark"
