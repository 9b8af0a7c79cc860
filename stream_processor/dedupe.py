"""Deduplication by event identity within an event-time window held in Spark state.

Spark's ``dropDuplicatesWithinWatermark`` keeps each ``event_hash`` in state until the
watermark passes it, and silently DROPS rows whose event time is behind the watermark. Fed
with raw ``eventTime`` that would lose late events (a replay days later) and let one
far-future ``eventTime`` push the watermark and make everything after it "late".

So the operator runs on a derived column, clamped into the window that ends at the current
micro-batch's time ``now``::

    dedupe_time = least(greatest(event_time, now - window + 1 s), now)

The watermark is ``max(dedupe_time of earlier batches) - window <= now_prev - window``,
strictly below ``now - window + 1 s <= dedupe_time``: no row is ever behind the watermark,
and no timestamp can move it past ``now - window``. Rows older than the window still get a
``dedupe_time`` inside it (so a replay within roughly one window is dropped here); anything the
state no longer remembers reaches the sink, which deduplicates durably by ``event_hash``.
Rejected rows carry a unique ``event_hash`` and pass through.

``now`` is, with ``lineage_kafka``'s decoding reader, the ``planned_at`` column it adds: when the source planned
the batch's ranges (the driver's clock, read once per batch, so later batches have later times; a batch
planned again after a restart gets a later one, which keeps every row inside the window). Otherwise it is
``current_timestamp()``, the batch timestamp. Why not always the latter: Spark writes the batch timestamp into
the generated code as a constant, so the whole stage holding the clamp was compiled anew every micro-batch
(two compilations of ~15-45 ms each, plus the class look-ups the compiler makes; ``CodegenMetrics``:
3 compilations per batch, 1 with the column: Spark's own watermark predicate). A column is the same code every
batch. Verified by
``tests/test_pipeline_dedupe.py`` (an event a week old and one a year in the future both arrive).
"""

from __future__ import annotations

from typing import Any

__all__ = ["dedupe_within_window", "DEDUPE_TIME_COLUMN"]

DEDUPE_TIME_COLUMN = "dedupe_time"


def dedupe_within_window(df: Any, window_seconds: int) -> Any:
    """``df`` without rows whose ``event_hash`` was seen within the window (see module docs). ``now`` is ``df``'s
    ``planned_at`` column where it has one (dropped here), else the batch timestamp."""
    from pyspark.sql import functions as F

    from .decode import PLANNED_AT_COLUMN

    planned = PLANNED_AT_COLUMN in df.columns
    now = F.col(PLANNED_AT_COLUMN) if planned else F.current_timestamp()
    lower = now - F.expr(f"INTERVAL {max(int(window_seconds) - 1, 0)} SECONDS")
    clamped = F.least(F.greatest(F.coalesce(F.col("event_time"), now), lower), now)
    df = df.withColumn(DEDUPE_TIME_COLUMN, clamped)
    if planned:
        df = df.drop(PLANNED_AT_COLUMN)
    return (df.withWatermark(DEDUPE_TIME_COLUMN, f"{int(window_seconds)} seconds")
              .dropDuplicatesWithinWatermark(["event_hash"]))
