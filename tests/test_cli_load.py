"""`lineage load FILE|DIR...` against a real PostgreSQL: good lines loaded, bad lines reported with line numbers.

Both engines (``--engine spark``, the default, and ``--engine local``) keep the same contract; the batch
pipeline itself is tested in tests/test_load_spark.py."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from lineage.cli import main
from tests.test_derive import ds, run_event

pytestmark = pytest.mark.integration


def _count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchone()[0]


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_load_jsonl_array_and_evo_document(engine, tmp_path, pg_dsn, capsys):
    rid = str(uuid.uuid4())
    start = run_event("START", "2024-05-01T10:00:00+02:00", rid, inputs=[ds("a")], outputs=[ds("b")])
    complete = run_event("COMPLETE", "2024-05-01T10:05:00+02:00", rid, inputs=[ds("a")], outputs=[ds("b")])
    no_run_id = run_event("START", "2024-05-01T10:00:00Z", rid)
    del no_run_id["run"]["runId"]
    lines = [json.dumps(start), "", "{not json", json.dumps(complete), json.dumps(no_run_id), json.dumps(start)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    other = run_event("COMPLETE", "2024-05-02T00:00:00Z", str(uuid.uuid4()), inputs=[ds("b")], outputs=[ds("c")])
    sub = tmp_path / "more"
    sub.mkdir()
    (sub / "array.json").write_text(json.dumps([other]), encoding="utf-8")
    evo_event = run_event("COMPLETE", "2024-05-03T00:00:00Z", str(uuid.uuid4()), inputs=[ds("c")], outputs=[ds("d")])
    (sub / "evo.json").write_text(json.dumps({"events": [evo_event]}, indent=2), encoding="utf-8")

    code = main(["load", str(tmp_path), "--postgres-dsn", pg_dsn, "--batch-size", "2", "--engine", engine])
    out, err = capsys.readouterr()
    assert code == 1
    err_lines = err.strip().splitlines()
    assert len(err_lines) == 2
    assert err_lines[0].startswith(f"{tmp_path / 'events.jsonl'}:3: ")
    assert err_lines[1].startswith(f"{tmp_path / 'events.jsonl'}:5: ") and "run.runId" in err_lines[1]
    assert "4 new" in out and "1 duplicate" in out and "2 rejected" in out
    assert _count(pg_dsn, "SELECT count(*) FROM lineage_events") == 4
    assert _count(pg_dsn, "SELECT count(*) FROM lineage_runs WHERE state = 'COMPLETE'") == 3
    assert _count(pg_dsn, "SELECT count(*) FROM lineage_events WHERE event_time = '2024-05-01T08:05:00Z'") == 1

    # loading again is a no-op (same content-derived batch ids) and only the same errors are reported
    code = main(["load", str(tmp_path), "--postgres-dsn", pg_dsn, "--batch-size", "2", "--engine", engine])
    out, err = capsys.readouterr()
    assert code == 1 and "0 new" in out
    assert _count(pg_dsn, "SELECT count(*) FROM lineage_events") == 4


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_load_all_good_exits_zero_and_bad_usage(engine, tmp_path, pg_dsn, capsys, monkeypatch):
    event = run_event("COMPLETE", "2024-05-01T10:00:00Z", str(uuid.uuid4()), outputs=[ds("x")])
    path = tmp_path / "one.json"
    path.write_text(json.dumps(event, indent=2), encoding="utf-8")
    monkeypatch.setenv("LINEAGE_ENGINE", engine)
    assert main(["load", str(path), "--postgres-dsn", pg_dsn]) == 0
    out, _ = capsys.readouterr()
    assert "1 new" in out and "0 rejected" in out and f"[{engine}]" in out
    assert main(["load", str(path), "--postgres-dsn", pg_dsn, "--batch-size", "0"]) == 2
    assert main(["load", str(path), "--data-dir", str(tmp_path / "nothing")]) == 2
    with pytest.raises(SystemExit) as exited:  # argparse rejects an unknown --engine
        main(["load", str(path), "--postgres-dsn", pg_dsn, "--engine", "jvm"])
    assert exited.value.code == 2
    monkeypatch.setenv("LINEAGE_ENGINE", "jvm")
    assert main(["load", str(path), "--postgres-dsn", pg_dsn]) == 2
