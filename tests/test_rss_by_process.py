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
    # the breakdown of the sample where the tree peaked: both processes alive then, and it sums to the peak
    at_peak = result["rss_at_peak_by_kind"]
    assert set(at_peak) == {"driver", "python"} and sum(at_peak.values()) == result["peak_rss_bytes"]
    assert 0 < result["peak_at_seconds"] <= result["wall_seconds"]


def test_pss_is_read_where_the_rss_peaks_not_at_every_sample(monkeypatch):
    # smaps_rollup costs the kernel a page-table walk (~37 ms per sample of a bench's tree): read at new RSS peaks
    # and every PSS_EVERY-th sample only; RSS (statm) at every sample
    import benchmarks.rss_by_process as rbp

    reads: list[int] = []
    real = rbp._rss_pss

    def counting(pid: int) -> tuple[int, int] | None:
        reads.append(pid)
        return real(pid)

    monkeypatch.setattr(rbp, "_rss_pss", counting)
    # 100 MB allocated after 1 s, then held 2 s: flat RSS but for one step up
    command = "import time; time.sleep(1.0); b = bytearray(100 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(2.0)"
    samples = 0
    real_sample = rbp.sample

    def counted_sample(root: int, kinds: dict[int, str], pss: bool = True,
                       pids: list[int] | None = None) -> dict[str, tuple[int, int, int]]:
        nonlocal samples
        samples += not pss
        return real_sample(root, kinds, pss, pids)

    monkeypatch.setattr(rbp, "sample", counted_sample)
    # -I -S: no site-packages (.pth files of editable installs): the interpreter's own start, whose RSS grows in
    # steps the sampler sees as new peaks, is short; on a slow machine it still spans a few samples (CI, 2026-12-01:
    # 10 reads of 57 samples against a bound of 9 with site-packages), hence the slack
    result = rbp.measure([sys.executable, "-I", "-S", "-c", command], interval=0.05)
    assert result["exit_code"] == 0
    assert samples >= 30
    # periodic reads, the start's few peaks and the step up: far fewer than one per sample (57 here)
    assert 0 < len(reads) <= samples // rbp.PSS_EVERY + 8
    assert result["pss_by_kind"]["driver"] >= 100 * 2**20   # the step up was read
