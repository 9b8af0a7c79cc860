"""benchmarks/driver_memory.py: the figures it prints are read right (no server: the process's own memory)."""

from __future__ import annotations

import pytest

from benchmarks.driver_memory import _mallinfo, sample

pytestmark = pytest.mark.unit


def test_glibc_in_use_counts_what_is_allocated_and_free_what_is_freed() -> None:
    """A wrong ``mallinfo2`` layout would read other fields: 20 MB in 2 kB buffers must show in ``glibc_in_use``, and
    freed below a live buffer, in ``glibc_free``."""
    before = _mallinfo()
    if not before:
        pytest.skip("not glibc >= 2.33: no mallinfo2")
    buffers = [bytearray(2048) for _ in range(10_000)]
    held = _mallinfo()
    assert held["glibc_in_use"] - before["glibc_in_use"] >= 19 * 2**20
    kept = buffers[-1]                   # keeps the freed ones below it inside the arena
    del buffers
    freed = _mallinfo()
    assert freed["glibc_in_use"] <= held["glibc_in_use"] - 19 * 2**20
    assert freed["glibc_free"] >= 19 * 2**20
    assert len(kept) == 2048


def test_a_sample_has_every_figure() -> None:
    line = sample(3)
    assert line["batch"] == 3
    assert line["rss"] > 10 * 2**20
    assert line["threads"] >= 1
    assert line["java_objects"] >= 0 and line["arrow"] >= 0
