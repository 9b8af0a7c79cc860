"""Deduplication by event identity within an event-time window held in Spark state.

Spark's ``dropDuplicatesWithinWatermark`` keeps each ``event_hash`` in state until the
watermark passes it, and silently DROPS rows whose event time is behind the watermark. Fed
with raw ``eventTime`` that would lose late events (a replay days later) and let one
far-future ``eventTime`` push the watermark and make everything after it "late".

So the operator runs on a derived column, clamped into the window that ends at the current
micro-batch's timestamp ``now`` (``current_timestamp()`` is the batch timestamp in streaming)::

    dedupe_time = least(greatest(event_time, now - window + 1 s), now)

The watermark is ``max(dedupe_time of earlier batches) - window <= now_prev - window``,
strictly below ``now - window + 1 s <= dedupe_time``: no row is ever behind the watermark,
and no timestamp can move it past ``now - window``. Rows older than the window still get a
``dedupe_time`` inside it (so a replay within roughly one window is dropped here); anything the
state no longer remembers reaches the sink, which deduplicates durably by ``event_hash``.
Rejected rows carry a unique ``event_hash`` and pass through. Verified by
``tests/test_pipeline_dedupe.py`` (an event a week old and one a year in the future both arrive).
"""

from __future__ import annotations

from typing import Any

__all__ = ["dedupe_within_window", "DEDUPE_TIME_COLUMN"]

DEDUPE_TIME_COLUMN = "dedupe_time"


def dedupe_within_window(df: Any, window_seconds: int) -> Any:
    """``df`` without rows whose ``event_hash`` was seen within the window (see module docs)."""
    from pyspark.sql import functions as F

    now = F.current_timestamp()
    lower = now - F.expr(f"INTERVAL {max(int(window_seconds) - 1, 0)} SECONDS")
    clamped = F.least(F.greatest(F.coalesce(F.col("event_time"), now), lower), now)
    return (df.withColumn(DEDUPE_TIME_COLUMN, clamped)
              .withWatermark(DEDUPE_TIME_COLUMN, f"{int(window_seconds)} seconds")
              .dropDuplicatesWithinWatermark(["event_hash"]))
