"""benchmarks/goals_runs.py: one run's figures from its files, and the per-checkout medians with the goals met."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.goals_runs import command, figures, summary


def _write(stem: Path, sustained: float, naive: float, copy: float, p95: float, rss: int, drain: float) -> None:
    Path(f"{stem}.b.json").write_text(json.dumps({"e2e_sustained_events_per_s": sustained, "naive_events_per_s": naive,
                                                  "pg_copy_rows_per_s": copy, "latency_p95_s": p95}))
    Path(f"{stem}.r.json").write_text(json.dumps({"peak_rss_bytes": rss}))
    Path(f"{stem}.d.json").write_text(json.dumps({"ms_cpu_per_event": drain, "utilisation": 0.9,
                                                  "ms_per_event_by_kind": {"postgres": 0.25, "jvm": 0.08}}))


@pytest.mark.unit
def test_figures_of_one_run(tmp_path: Path) -> None:
    _write(tmp_path / "a-1", 2000.0, 1000.0, 16000.0, 1.5, 2_800_000_000, 0.82)
    f = figures(tmp_path / "a-1")
    assert f["sustained"] == 2000.0 and f["x_naive"] == 2.0 and f["x_copy"] == 0.125
    assert f["p95_s"] == 1.5 and f["rss_gb"] == 2.8 and f["drain_ms"] == 0.82
    assert f["by_kind"] == {"postgres": 0.25, "jvm": 0.08}
    assert figures(tmp_path / "missing") == {}           # a run that wrote nothing has no figures


@pytest.mark.unit
def test_summary_counts_the_runs_that_meet_each_goal(tmp_path: Path) -> None:
    _write(tmp_path / "a-1", 2600.0, 1000.0, 16000.0, 1.5, 2_800_000_000, 0.70)
    _write(tmp_path / "a-2", 2000.0, 1100.0, 16000.0, 2.5, 3_100_000_000, 0.80)
    _write(tmp_path / "b-1", 1800.0, 1000.0, 10000.0, 1.0, 2_500_000_000, 0.90)
    runs = [("a", figures(tmp_path / "a-1")), ("b", figures(tmp_path / "b-1")), ("a", figures(tmp_path / "a-2"))]
    text = "\n".join(summary(runs))
    assert "a: 2 run(s)" in text and "b: 1 run(s)" in text
    a = text.split("b: 1 run(s)")[0]
    assert "sustained  median     2,300  (2,000-2,600)   goal >= 2500: 1 of 2 runs" in a
    assert "x_naive    median      2.21  (1.82-2.60)   goal >= 2: 1 of 2 runs" in a
    assert "p95_s      median      2.00  (1.50-2.50)   goal <= 2: 1 of 2 runs" in a
    assert "rss_gb     median      2.95  (2.80-3.10)   goal <= 3: 1 of 2 runs" in a
    assert "x_copy     median     0.144  (0.125-0.163)   goal >= 0.15: 1 of 2 runs" in a


@pytest.mark.unit
def test_command_is_the_goals_command(tmp_path: Path) -> None:
    cmd = command(Path("/src"), tmp_path / "x-1", ["--max-batch-events", "5000"])
    assert cmd[1] == "/src/benchmarks/drain_cpu.py" and "--tree" in cmd
    tail = cmd[cmd.index("lineage"):]
    assert tail == ["lineage", "bench", "--events", "40000", "--rate", "1000", "--latency-seconds", "20",
                    "--max-batch-events", "5000", "--json", f"{tmp_path / 'x-1'}.b.json"]
