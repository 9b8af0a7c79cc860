"""benchmarks/gc_pauses.py: the collector's pauses of a command's Python processes, by generation and thread."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.gc_pauses import main, summarise


@pytest.mark.unit
def test_full_collections_of_a_child_process_are_counted_by_thread(tmp_path) -> None:
    script = ("import gc, threading\n"
              "t = threading.Thread(target=lambda: [gc.collect() for _ in range(2)], name='collector')\n"
              "t.start(); t.join(); gc.collect(); gc.collect(0)\n")
    (tmp_path / "collects.py").write_text(script)
    out = tmp_path / "gc.json"
    assert main(["--json", str(out), "--only", "collects.py", "--", sys.executable, str(tmp_path / "collects.py")]) == 0
    (proc,) = json.loads(out.read_text())["processes"]
    assert proc["full_by_thread"] == {"collector": 2, "MainThread": 1}
    assert proc["generations"]["2"]["count"] == 3 and proc["generations"]["0"]["count"] >= 1
    assert proc["generations"]["2"]["seconds"] > 0


@pytest.mark.unit
def test_summary_keeps_the_named_processes_longest_first() -> None:
    def rec(argv: str, seconds: float) -> dict:
        return {"argv": argv, "generations": {"2": {"count": 1, "seconds": seconds, "max_ms": 1.0}}}
    kept = summarise([rec("lineage bench a", 0.1), rec("other", 9.0), rec("lineage bench b", 0.5)], "lineage bench")
    assert [r["argv"] for r in kept] == ["lineage bench b", "lineage bench a"]
