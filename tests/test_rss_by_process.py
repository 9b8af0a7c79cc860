"""benchmarks/rss_by_process.py: peak RSS / PSS of a command's process tree, per kind of process."""

from __future__ import annotations

import sys

import pytest

from benchmarks.rss_by_process import measure

pytestmark = pytest.mark.unit


def test_peaks_of_a_command_and_its_child_are_counted_by_kind():
    # the command (kind "driver") touches 150 MB, its Python child (kind "python") 100 MB, both hold it 2.5 s
    child = "import time; b = bytearray(100 * 2**20); time.sleep(2.5)"
    parent = (f"import subprocess, sys, time; b = bytearray(150 * 2**20); "
              f"p = subprocess.Popen([sys.executable, '-c', {child!r}]); p.wait()")
    result = measure([sys.executable, "-c", parent], interval=0.2)
    assert result["exit_code"] == 0
    mib = 2**20
    assert 150 * mib <= result["rss_by_kind"]["driver"] < 400 * mib
    assert 100 * mib <= result["pss_by_kind"]["python"] < 300 * mib
    assert result["processes_by_kind"] == {"driver": 1, "python": 1}
    assert result["peak_rss_bytes"] >= 250 * mib
    assert result["peak_pss_bytes"] <= result["peak_rss_bytes"]
