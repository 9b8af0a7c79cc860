"""benchmarks/drain_cpu.py: the drain's window from the streaming query's progress events (pure)."""

from __future__ import annotations

import pytest

from benchmarks.drain_cpu import drain_window


def _progress(run: str, batch: int, at: str, ms: int, rows: int) -> dict:
    return {"Event": "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",
            "progress": {"runId": run, "batchId": batch, "timestamp": at, "durationMs": {"triggerExecution": ms},
                         "sources": [{"numInputRows": rows}]}}


def test_the_window_is_the_first_querys_large_batches_after_its_first():
    events = [
        {"Event": "SparkListenerJobStart"},
        _progress("a", 0, "2026-11-26T08:00:00.000Z", 9_000, 5_000),   # warm-up: left out
        _progress("a", 1, "2026-11-26T08:00:09.000Z", 4_000, 5_200),
        _progress("a", 2, "2026-11-26T08:00:13.000Z", 3_500, 5_100),
        _progress("a", 3, "2026-11-26T08:00:16.500Z", 100, 0),          # an empty tick: left out
        _progress("b", 0, "2026-11-26T08:01:00.000Z", 1_000, 5_000),    # the latency phase's query: left out
    ]
    start, end, rows, batches = drain_window(events, 1000)
    assert (end - start, rows, batches) == (pytest.approx(7.5), 10_300, 2)


def test_one_batch_has_nothing_to_measure():
    with pytest.raises(SystemExit, match="warm-up"):
        drain_window([_progress("a", 0, "2026-11-26T08:00:00.000Z", 9_000, 5_000)], 1000)
