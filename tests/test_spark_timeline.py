"""benchmarks/spark_timeline.py reads a Spark event log into a time line (pure: a hand-written log)."""

from __future__ import annotations

import json

from benchmarks.spark_timeline import main, read_events, timeline


def _log(tmp_path):
    events = [
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Submission Time": 1_000, "Stage IDs": [0, 1]},
        {"Event": "SparkListenerTaskEnd", "Stage ID": 0, "Task Info": {"Launch Time": 1_000, "Finish Time": 1_900},
         "Task Metrics": {"Executor CPU Time": 200_000_000}},
        {"Event": "SparkListenerStageCompleted", "Stage Info": {"Stage ID": 0, "Stage Name": "run at x:0",
                                                                "Submission Time": 1_000, "Completion Time": 1_950}},
        {"Event": "SparkListenerStageCompleted", "Stage Info": {"Stage ID": 1, "Stage Name": "call at y:1",
                                                                "Submission Time": None, "Completion Time": None}},
        {"Event": "SparkListenerJobEnd", "Job ID": 0, "Completion Time": 2_000},
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Submission Time": 2_500, "Stage IDs": [2]},
        {"Event": "SparkListenerJobEnd", "Job ID": 1, "Completion Time": 2_550},
    ]
    app = tmp_path / "eventlog_v2_local-1"
    app.mkdir()
    (app / "events_1_local-1").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (app / "appstatus_local-1").write_text("")
    return tmp_path


def test_jobs_stages_and_tasks_on_one_time_line(tmp_path):
    lines = timeline(read_events(_log(tmp_path)), min_ms=200)
    assert lines[0].startswith("job     0 at     0.00 s") and "1.00 s" in lines[0]
    assert len(lines) == 2   # the skipped stage 1 and the 50 ms job 1 are left out
    assert "run" in lines[1] and "0.95 s" in lines[1] and "0.90/0.20" in lines[1]


def test_short_jobs_are_shown_below_the_threshold(tmp_path, capsys):
    assert main([str(_log(tmp_path)), "--min-ms", "10"]) == 0
    assert "job     1 at     1.50 s    0.05 s" in capsys.readouterr().out
