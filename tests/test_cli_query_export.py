"""`lineage upstream|downstream|route|impact|ancestors|export` against a real PostgreSQL: output and exit codes."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from lineage.cli import main
from sink.validation import validate_object_array
from tests.graph_rows import NS, GraphRows, sample_warehouse

pytestmark = pytest.mark.integration


@pytest.fixture
def dsn(pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> str:
    g = GraphRows(pg_dsn)
    sample_warehouse(g)
    g.close()
    monkeypatch.setenv("LINEAGE_POSTGRES_DSN", pg_dsn)
    monkeypatch.setenv("LINEAGE_DATA_DIR", str(tmp_path / "no-lineage-up"))
    return pg_dsn


def test_upstream_tree_and_json(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upstream", f"{NS}/mart.revenue", "--depth", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"upstream of {NS}/mart.revenue (depth 2)"
    assert out[1] == f"{NS}/mart.revenue"
    assert "├── job:airflow/quick_revenue" in out and "└── job:airflow/revenue" in out
    assert f"│   └── {NS}/raw.orders" in out
    assert out[-1] == "3 dataset(s), 5 job(s)"
    assert main(["upstream", f"{NS}/mart.revenue", "--depth", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {n["node"]["label"] for n in doc["nodes"]} == {
        "job:airflow/revenue", f"{NS}/stg.orders", "job:airflow/quick_revenue", f"{NS}/raw.orders"}


def test_downstream_terminal_and_columns(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["downstream", f"{NS}:mart.revenue"]) == 0
    out = capsys.readouterr().out
    assert "└── job:airflow/anonymise [terminal]" in out and "revenue_anon" not in out
    assert main(["downstream", f"{NS}:mart.revenue", "--through-terminal"]) == 0
    assert "s3://reports/revenue.csv" in capsys.readouterr().out
    assert main(["upstream", f"{NS}/mart.revenue#total"]) == 0
    out = capsys.readouterr().out
    assert f"<- level 2: {NS}/raw.orders#amount" in out and out.rstrip().endswith("2 column(s)")


def test_route_impact_ancestors(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", f"{NS}/raw.orders", f"{NS}/mart.revenue"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": 2")
    assert out[1] == f"  1. {NS}/raw.orders -> job:airflow/quick_revenue -> {NS}/mart.revenue"
    assert main(["route", f"{NS}/raw.orders", f"{NS}/mart.revenue", "--json", "--max-length", "2"]) == 0
    assert len(json.loads(capsys.readouterr().out)["routes"]) == 1
    assert main(["impact", f"{NS}/stg.orders"]) == 0
    out = capsys.readouterr().out
    assert "owners:" in out and "  team-mart: postgres://warehouse:5432/mart.revenue" in out
    assert main(["ancestors", f"{NS}/mart.revenue", "--within", f"{NS}/raw.orders", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ancestors"] == []      # no runs recorded in this graph


def test_exit_codes(dsn: str, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main(["upstream", f"{NS}/nope"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lineage upstream: no dataset named")
    assert main(["downstream", "job:airflow/nope"]) == 1
    assert main(["upstream", f"{NS}/mart.revenue", "--as-of", "2026-01-01T00:00:00"]) == 2
    assert "time zone" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["upstream", f"{NS}/mart.revenue", "--depth", "0"])
    assert exc.value.code == 2
    assert main(["upstream", f"{NS}/mart.revenue", "--postgres-dsn",
                 "postgresql://postgres@127.0.0.1:1/none?connect_timeout=2"]) == 1
    assert "cannot connect" in capsys.readouterr().err


def test_no_dsn_is_bad_usage(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("LINEAGE_POSTGRES_DSN", raising=False)
    assert main(["upstream", "a/b", "--data-dir", str(tmp_path)]) == 2
    assert "--postgres-dsn" in capsys.readouterr().err


def test_export_formats(dsn: str, capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    out = tmp_path / "g.json"
    assert main(["export", "--format", "wia-json", "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert "1 violation(s) of WIA-DATA-008 §7 (reported, not fatal):" in captured.err
    assert "dag: $.edges: cycle through 1 node(s)" in captured.err
    assert captured.out.startswith(f"exported wia-json to {out}: nodes 6, edges 7")
    assert len(json.loads(out.read_text())["nodes"]) == 6
    gz = tmp_path / "objects.json.gz"
    assert main(["export", "--format", "object-array", "-o", str(gz), "--gzip"]) == 0
    with gzip.open(gz, "rt") as fh:
        assert validate_object_array(json.load(fh))
    assert capsys.readouterr().out.startswith("exported object-array to ")
    assert main(["export", "--format", "graphml"]) == 0
    captured = capsys.readouterr()
    assert captured.out.lstrip().startswith("<?xml") and "exported graphml to -" in captured.err
    assert main(["export", "--format", "parquet", "-o", str(tmp_path / "pq"), "--as-of", "2026-06-01T00:00:00Z"]) == 0
    assert (tmp_path / "pq" / "lineage_edges").is_dir()
    assert main(["export", "--format", "parquet"]) == 2
    assert "--output DIR" in capsys.readouterr().err


def test_console_script_subprocess(dsn: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "lineage", "downstream", "job:airflow/clean_orders", "--depth", "1",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [n["node"]["name"] for n in json.loads(proc.stdout)["nodes"]] == ["stg.orders"]
