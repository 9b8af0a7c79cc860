"""`lineage emit` as a user runs it: validation per line, publishing of the valid ones, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode_message
from tests.conftest import ROOT
from tests.test_emitter import consume_all

pytestmark = pytest.mark.integration


def good(job: str) -> dict[str, Any]:
    return {"eventTime": "2024-05-01T10:00:00+02:00", "eventType": "COMPLETE", "producer": "https://example.com/p",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json",
            "run": {"runId": str(uuid.uuid4())}, "job": {"namespace": "cli", "name": job},
            "inputs": [], "outputs": [{"namespace": "pg", "name": "t"}]}


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINEAGE_")}
    return subprocess.run([sys.executable, "-m", "lineage", "emit", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, input=stdin, timeout=120)


def test_emit_jsonl_with_good_and_bad_lines(kafka_bootstrap: str, topic_names: dict[str, str],
                                            tmp_path: Path) -> None:
    topic = topic_names["events"]
    bad_run_id = good("bad1")
    bad_run_id["run"]["runId"] = "42"
    no_offset = good("bad2")
    no_offset["eventTime"] = "2024-05-01T10:00:00"
    evo_start, evo_complete = good("evo"), good("evo")
    evo_start["eventType"] = "START"
    evo_complete["outputs"] = [{"namespace": "evogeoscienceobject://hub/ws/i", "name": "$self"}]
    evo_complete["run"] = evo_start["run"]
    lines = [json.dumps(good("ok1")),                                               # line 1
             json.dumps(bad_run_id),                                                # line 2
             "",                                                                    # line 3 (blank)
             "{not json",                                                           # line 4
             json.dumps(good("ok2")),                                               # line 5
             json.dumps(no_offset),                                                 # line 6
             json.dumps({"events": [evo_start, evo_complete], "self_link": "/events/1/outputs/0"})]  # line 7
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli(str(path), "--bootstrap-servers", kafka_bootstrap, "--topic", topic,
                     "--subject-namespace", "evogeoscienceobject://hub/ws/i", "--subject-name", "obj:1")
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith(str(path))]
    assert [e.split(": ")[1] for e in errors] == ["line 2", "line 4", "line 6"]
    assert "run.runId" in errors[0] and "not JSON" in errors[1] and "eventTime" in errors[2]
    assert "Traceback" not in result.stderr
    assert "published 4 event(s)" in result.stdout and "3 of 6 item(s) rejected" in result.stdout

    messages = consume_all(kafka_bootstrap, topic, 4)
    decoded = [d for m in messages for d in decode_message(m.value(), m.headers())]
    assert sorted(d.document["job"]["name"] for d in decoded) == ["evo", "evo", "ok1", "ok2"]
    subjects = [d.subject for d in decoded if d.document["job"]["name"] == "evo"]
    assert subjects == [{"namespace": "evogeoscienceobject://hub/ws/i", "name": "obj:1"}] * 2


def test_emit_array_from_stdin_using_endpoints_json(kafka_bootstrap: str, topic_names: dict[str, str],
                                                    tmp_path: Path) -> None:
    (tmp_path / "endpoints.json").write_text(json.dumps({
        "kafka_bootstrap": kafka_bootstrap, "topics": {"events": topic_names["events"]}}), encoding="utf-8")
    result = run_cli("-", "--data-dir", str(tmp_path), "--encoding", "json",
                     stdin=json.dumps([good("a"), good("b"), good("c")]))
    assert result.returncode == 0, result.stderr
    assert "published 3 event(s)" in result.stdout
    messages = consume_all(kafka_bootstrap, topic_names["events"], 3)
    assert sorted(json.loads(m.value())["job"]["name"] for m in messages) == ["a", "b", "c"]


def test_emit_without_a_broker_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(good("x")), encoding="utf-8")
    result = run_cli(str(path), "--data-dir", str(tmp_path / "nothing"))
    assert result.returncode == 2
    assert "--bootstrap-servers" in result.stderr and "Traceback" not in result.stderr
