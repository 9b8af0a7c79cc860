"""benchmarks/soak.py's verdicts (pure): what counts as growing without bound."""

from __future__ import annotations

import pytest

from benchmarks.soak import verdicts

pytestmark = pytest.mark.unit


def _samples(series: dict[str, list[float]]) -> list[dict[str, float]]:
    n = len(next(iter(series.values())))
    return [{"t": 10.0 * i, **{k: v[i] for k, v in series.items()}} for i in range(n)]


def test_a_lag_of_a_few_records_is_not_a_backlog() -> None:
    """The 25-minute soak of 2026-11-26: lag quarter means 1.6 and 6.7 records at 200 msg/s."""
    lag = [0.0] * 60 + [0.0, 119.0, 0.0, 67.0] * 10
    out = verdicts(_samples({"lag": lag}), lag_floor=200 * 10)
    assert out["lag"]["q4_mean"] > 1.2 * out["lag"]["ref_mean"] and out["lag"]["slope_per_hour"] > 0
    assert out["lag"]["grows_without_bound"] is False
    assert verdicts(_samples({"lag": lag}))["lag"]["grows_without_bound"] is True   # without the floor


def test_a_growing_backlog_and_a_growing_rss_still_grow() -> None:
    ramp = [float(i * i) * 10 for i in range(100)]
    out = verdicts(_samples({"lag": ramp, "rss_driver_py": [300.0 + i * i / 10 for i in range(100)]}), lag_floor=2000)
    assert out["lag"]["grows_without_bound"] is True
    assert out["rss_driver_py"]["grows_without_bound"] is True


def test_a_flat_rss_is_bounded_whatever_the_floor() -> None:
    out = verdicts(_samples({"rss_driver_py": [400.0 + (i % 7) for i in range(100)]}), lag_floor=2000)
    assert out["rss_driver_py"]["grows_without_bound"] is False


def test_the_jvm_committed_total_is_read_from_jcmd() -> None:
    """``jcmd PID VM.native_memory summary`` as JDK 17 printed it in session 19's soak, and with NMT off."""
    from benchmarks.soak import nmt_committed_mib

    summary = """18131:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=2719216KB, committed=745312KB
       mmap:   reserved=2641396KB, committed=667492KB
-                 Java Heap (reserved=1048576KB, committed=412672KB)
                            (mmap: reserved=1048576KB, committed=412672KB)
"""
    assert nmt_committed_mib(summary) == 727.8        # 745,312 KiB
    assert nmt_committed_mib("18131:\nNative memory tracking is not enabled\n") is None
    assert nmt_committed_mib("") is None


def test_native_memory_beyond_what_the_jvm_committed_grows_only_past_rocksdb_bound() -> None:
    """Session 19's 150-second soak: the RSS beyond NMT's committed total went -30 -> +20 MiB (RocksDB warming up)."""
    noise = [-30.0 + 0.5 * i for i in range(100)]   # -30 -> +20 MiB
    assert verdicts(_samples({"rss_jvm_beyond_committed": noise}), native_floor=256)[
        "rss_jvm_beyond_committed"]["grows_without_bound"] is False
    assert verdicts(_samples({"rss_jvm_beyond_committed": noise}))["rss_jvm_beyond_committed"]["grows_without_bound"]
    leak = [100.0 + 6 * i for i in range(100)]   # 100 -> 694 MiB: past the bound
    assert verdicts(_samples({"rss_jvm_beyond_committed": leak}), native_floor=256)[
        "rss_jvm_beyond_committed"]["grows_without_bound"] is True


def test_a_series_still_filling_in_the_second_quarter_is_compared_after_it_settled() -> None:
    """Session 32's 50-minute soak (dedupe window 600 s, samples every 30 s): the JVM's memory beyond what NMT sees
    rose from ~60 to ~97 MiB until t ~2,000 s, then stayed level; the second quarter (750-1,500 s) held the rise."""
    from benchmarks.soak import reference_window

    filling = [60.0 + min(0.55 * i, 37.0) + (i % 3) for i in range(101)]   # 60 -> 97 MiB by t ~2,000 s, then level
    samples = [{"t": 30.0 * i, "state_memory": y} for i, y in enumerate(filling)]
    assert verdicts(samples)["state_memory"]["grows_without_bound"] is True          # the second quarter's rule
    settled = verdicts(samples, settle_seconds=1200)["state_memory"]
    assert settled["grows_without_bound"] is False and settled["ref_window_s"] == [1200, 1950]
    assert reference_window(3000, 0) == (750, 1500) and reference_window(3000, 5000) == (1500, 2250)
    leak = [{"t": 30.0 * i, "state_memory": 100.0 + 6 * i} for i in range(101)]     # linear growth: still caught
    assert verdicts(leak, settle_seconds=1200)["state_memory"]["grows_without_bound"] is True
    assert verdicts(leak, settle_seconds=10_000)["state_memory"]["grows_without_bound"] is True   # the third quarter


def test_a_committed_heap_growing_within_xmx_is_bounded_and_so_is_what_the_jvm_committed() -> None:
    """Session 34's hour at 640 MiB -Xmx: G1 committed 293 -> 418 MiB of heap, and NMT's total rose with it (636 ->
    767 MiB) while the rest of what the JVM committed stayed level; the 1.2x test called both growing."""
    from benchmarks.soak import java_size_mib

    heap = [250.0 + 3.0 * i for i in range(100)]                      # 250 -> 547 MiB: the 1.2x test fires
    rest = [343.0 + (i % 5) for i in range(100)]                      # level
    series = {"jvm_heap_committed": heap, "jvm_committed_beyond_heap": rest,
              "jvm_committed": [h + r for h, r in zip(heap, rest, strict=True)]}
    uncapped = verdicts(_samples(series))
    assert uncapped["jvm_heap_committed"]["grows_without_bound"] is True
    assert uncapped["jvm_committed"]["grows_without_bound"] is True
    capped = verdicts(_samples(series), heap_cap=java_size_mib("640m"))
    assert capped["jvm_heap_committed"]["grows_without_bound"] is False
    assert capped["jvm_heap_committed"]["verdict"] == "bounded by -Xmx (640 MiB)"
    assert capped["jvm_committed"]["grows_without_bound"] is False
    assert verdicts(_samples(series), heap_cap=400)["jvm_heap_committed"]["grows_without_bound"] is True  # past it
    leak = dict(series, jvm_committed_beyond_heap=[343.0 + 3 * i for i in range(100)])   # the rest grows: a leak
    leak["jvm_committed"] = [h + r for h, r in zip(heap, leak["jvm_committed_beyond_heap"], strict=True)]
    out = verdicts(_samples(leak), heap_cap=640)
    assert out["jvm_committed_beyond_heap"]["grows_without_bound"] is True
    assert out["jvm_committed"]["grows_without_bound"] is True


def test_java_sizes_in_mib() -> None:
    from benchmarks.soak import java_size_mib

    assert [java_size_mib(s) for s in ("640m", "1g", "1G", "524288k", "2048mb", str(64 * 1024 * 1024))] == [
        640, 1024, 1024, 512, 2048, 64]
