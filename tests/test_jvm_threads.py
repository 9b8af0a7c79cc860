"""benchmarks/jvm_threads.py: thread kinds, /proc stat lines, and the wrapper's exit code."""

from __future__ import annotations

import os
import sys

import pytest

from benchmarks.jvm_threads import main, parse_stat, thread_kind


@pytest.mark.unit
def test_thread_kind_folds_numbers():
    assert thread_kind("GC Thread#1") == "GC Thread##"
    assert thread_kind("Executor task l") == "Executor task l"
    assert thread_kind("Thread-12") == thread_kind("Thread-3") == "Thread-#"


@pytest.mark.unit
def test_parse_stat_reads_names_with_spaces_and_parentheses():
    ticks = os.sysconf("SC_CLK_TCK")
    raw = (b"1052 (weird) name (x)) S 1 2 3 4 5 6 7 8 9 10 " + str(3 * ticks).encode() + b" "
           + str(ticks).encode() + b" 0 0 20 0 1 0")
    assert parse_stat(raw) == ("weird) name (x)", 4.0)


@pytest.mark.unit
def test_main_returns_the_commands_exit_code_and_writes_a_series(tmp_path, capsys):
    series = tmp_path / "s.jsonl"
    assert main(["--interval", "0.05", "--series", str(series), "--",
                 sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    assert "wall" in capsys.readouterr().out
    assert series.read_text().count("\n") >= 1
