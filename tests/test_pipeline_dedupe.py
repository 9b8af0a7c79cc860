"""Dedupe across micro-batches, late and future events (the clamped watermark), out-of-order runs."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.testing import StreamHarness, produce, run_event, test_settings, utc

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_duplicates_late_future_and_out_of_order(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    topic = topic_names["events"]
    run_id = str(uuid.uuid4())
    start = run_event(run_id, "START", utc(-0.01), job="ooo")
    complete = run_event(run_id, "COMPLETE", utc(-0.005), job="ooo")
    week_old = run_event(when=utc(-7), job="week_old")
    future = run_event(when=utc(365), job="future")
    after_future = run_event(job="after_future")
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"))
    with StreamHarness(spark, settings) as h:
        # batch A: COMPLETE first, a producer retry of it (same event, other encoding), the far future event
        produce(kafka_bootstrap, topic, [encode_single_object(complete), json.dumps(complete).encode(),
                                         encode_single_object(future)])
        h.drain()
        # batch B: the late START, the COMPLETE again (duplicate across batches), a week-old and a normal event
        produce(kafka_bootstrap, topic, [encode_single_object(start), encode_single_object(complete),
                                         encode_single_object(week_old), encode_single_object(after_future)])
        h.drain()
        # batch C: the week-old event replayed: the state or the sink drops it
        produce(kafka_bootstrap, topic, [json.dumps(week_old).encode()])
        h.drain()
        assert h.metrics.totals["sink_duplicates"] + _state_dropped(h) == 3

    with psycopg.connect(pg_dsn) as conn:
        jobs = sorted(r[0] for r in conn.execute("SELECT job_name FROM lineage_events"))
        state = conn.execute("SELECT state FROM lineage_runs WHERE run_id = %s", (run_id,)).fetchone()
    # every distinct event once: neither the week-old nor the one after a far-future event was dropped as late
    assert jobs == sorted(["ooo", "ooo", "week_old", "future", "after_future"])
    # the START that arrived after COMPLETE did not overwrite the terminal state
    assert state == ("COMPLETE",)


def _state_dropped(h: StreamHarness) -> int:
    total = 0
    for p in h.query.recentProgress:
        for op in p.get("stateOperators", []):
            total += int((op.get("customMetrics") or {}).get("numDroppedDuplicateRows", 0))
    return total
