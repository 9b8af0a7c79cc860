"""End to end: `lineage scan --publish` of a small mixed codebase into the real broker, the stream
puts it in the graph, and a runtime RunEvent on the same table joins it on one dataset node."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from stream_processor.testing import StreamHarness, json_bytes, produce, run_event, test_settings

MIXED = Path(__file__).parent / "fixtures/scan/mixed"


@pytest.mark.integration
@pytest.mark.slow
def test_scanned_lineage_joins_runtime_lineage_in_the_graph(spark, kafka_bootstrap, topic_names, pg_dsn,
                                                            tmp_path):
    code = tmp_path / "code"
    shutil.copytree(MIXED, code)
    proc = subprocess.run([sys.executable, "-m", "lineage", "scan", str(code), "--publish", "--jobs", "1",
                           "--bootstrap-servers", kafka_bootstrap, "--topic", topic_names["events"],
                           "--namespace", "warehouse", "--data-dir", str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "published 6 event(s)" in proc.stderr
    runtime = run_event(job="nightly_report", inputs=["mart.daily_revenue"], outputs=["bi.revenue_dashboard"],
                        namespace="warehouse")
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"))
    with StreamHarness(spark, settings) as h:
        produce(kafka_bootstrap, topic_names["events"], [json_bytes(runtime)])
        h.drain()
    _assert_joined_graph(pg_dsn)


@pytest.mark.integration
def test_scan_load_through_the_batch_path_joins_a_loaded_runtime_event(pg_dsn, tmp_path):
    """`--load` writes through the library function `lineage load` uses (local engine, no JVM)."""
    code = tmp_path / "code"
    shutil.copytree(MIXED, code)
    common = ["--postgres-dsn", pg_dsn, "--data-dir", str(tmp_path / "data")]
    proc = subprocess.run([sys.executable, "-m", "lineage", "scan", str(code), "--load", "--jobs", "1",
                           "--namespace", "warehouse", *common], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "loaded 6 event(s), 6 new" in proc.stderr
    runtime = tmp_path / "runtime.jsonl"
    runtime.write_text(json.dumps(run_event(job="nightly_report", inputs=["mart.daily_revenue"],
                                            outputs=["bi.revenue_dashboard"], namespace="warehouse")) + "\n")
    proc = subprocess.run([sys.executable, "-m", "lineage", "load", str(runtime), "--engine", "local", *common],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    _assert_joined_graph(pg_dsn)
    again = subprocess.run([sys.executable, "-m", "lineage", "scan", str(code), "--load", "--jobs", "1",
                            "--namespace", "warehouse", "--state", str(tmp_path / "state.json"), *common],
                           capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    # a vanished file is retracted: its jobs' edges stop being current (valid_to), the others' stay
    (code / "etl" / "daily.sql").unlink()
    gone = subprocess.run([sys.executable, "-m", "lineage", "scan", str(code), "--load", "--jobs", "1",
                           "--namespace", "warehouse", "--state", str(tmp_path / "state.json"), *common],
                          capture_output=True, text=True, timeout=180)
    assert gone.returncode == 0, gone.stderr
    assert "retract" in gone.stderr, gone.stderr
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT j.name, e.valid_to IS NULL FROM lineage_edges e "
                            "JOIN lineage_jobs j ON j.job_id = e.job_id").fetchall()
    retracted = {name for name, current in rows if "daily.sql" in name}
    assert retracted, rows
    assert all(not current for name, current in rows if "daily.sql" in name), rows
    assert any(current for name, current in rows if "daily.sql" not in name)


def _assert_joined_graph(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        datasets = conn.execute("SELECT dataset_id, fields FROM lineage_datasets WHERE namespace = 'warehouse' "
                                "AND name = 'mart.daily_revenue'").fetchall()
        assert len(datasets) == 1                         # one node: static and runtime share its identity
        revenue = datasets[0][0]
        writers = conn.execute(
            "SELECT j.name, j.job_type FROM lineage_edges e JOIN lineage_jobs j ON j.job_id = e.source_node_id "
            "WHERE e.kind = 'writes' AND e.target_node_id = %s", (revenue,)).fetchall()
        readers = conn.execute(
            "SELECT j.name FROM lineage_edges e JOIN lineage_jobs j ON j.job_id = e.target_node_id "
            "WHERE e.kind = 'reads' AND e.source_node_id = %s", (revenue,)).fetchall()
        columns = conn.execute(
            "SELECT source_table, source_column, target_column FROM lineage_column_lineage "
            "WHERE target_dataset_id = %s", (revenue,)).fetchall()
        orders = conn.execute("SELECT fields FROM lineage_datasets WHERE namespace = 'warehouse' "
                              "AND name = 'shop.orders'").fetchone()
    assert writers == [("etl/daily.sql::statement_1", "BATCH/SQL/QUERY")]
    assert readers == [("nightly_report",)]
    assert ("warehouse/shop.orders", "amount", "revenue") in {tuple(c) for c in columns}
    fields = orders[0] if isinstance(orders[0], list) else json.loads(orders[0])
    assert {f["name"] for f in fields} == {"id", "customer_id", "amount", "created_at"}
