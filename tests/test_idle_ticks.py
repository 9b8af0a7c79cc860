"""An idle query runs an empty micro-batch once per tick, not on every trigger, and `$self` groups still time out.

Up to session 10, Spark ran a no-data micro-batch on every trigger while the `$self` operator had
processing-time timeouts, which kept an idle processor at ~40 % of a core. The processor turns those off and
lets the ``lineage_kafka`` source tick instead (kafka_source.py module doc: ticks); since the groups wait in
the store (recombine.py), a tick's empty batch is what emits a due group of an idle topic.
"""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.kafka_source import KafkaStreamReader
from stream_processor.settings import ProcessorSettings
from stream_processor.testing import StreamHarness, produce, run_event, test_settings, utc

NS = "evogeoscienceobject://hub1/inst/ws"


@pytest.mark.unit
def test_tick_interval_defaults_to_half_the_quiet_period_and_never_below_the_trigger():
    base = {"bootstrap_servers": "b", "postgres_dsn": "postgresql://x/y"}
    assert ProcessorSettings(**base, recombine_quiet_seconds=10.0, trigger_interval_seconds=1.0).tick_interval() == 5.0
    assert ProcessorSettings(**base, recombine_quiet_seconds=1.0, trigger_interval_seconds=2.0).tick_interval() == 2.0
    assert ProcessorSettings(**base, tick_seconds=0.0).tick_interval() == 0.0  # no ticks
    assert ProcessorSettings(**base, tick_seconds=7.0).tick_interval() == 7.0
    # as fast as possible (a backfill, the bench): still ticks, or its last `$self` groups would wait for data
    assert ProcessorSettings(**base, recombine_quiet_seconds=4.0, trigger_interval_seconds=0.0).tick_interval() == 2.0


@pytest.mark.integration
def test_a_tick_changes_the_end_offset_but_plans_no_range(kafka_bootstrap, topic_names):
    topic = topic_names["events"]
    produce(kafka_bootstrap, topic, [b"one", b"two"])
    ticking = KafkaStreamReader({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic,
                                 "tickSeconds": "0.2"})
    plain = KafkaStreamReader({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic})
    try:
        start = ticking.initialOffset()
        first = ticking.latestOffset(start, None)
        assert "$tick" not in plain.latestOffset(plain.initialOffset(), None)
        assert sum(r.end - r.start for r in ticking.partitions(start, first)) == 2
        time.sleep(0.5)
        second = ticking.latestOffset(first, None)
        assert second["$tick"] > first["$tick"]  # a new end offset: Spark runs a batch ...
        assert {k: v for k, v in second.items() if k != "$tick"} == {k: v for k, v in first.items() if k != "$tick"}
        assert ticking.partitions(first, second) == []  # ... that reads nothing
    finally:
        ticking.stop()
        plain.stop()


def _part(run_id: str, name: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    event = run_event(run_id, "COMPLETE", utc(-0.001), job="evo.publish", inputs=["source"], outputs=["$self"],
                      namespace=NS)
    return encode_single_object(event), [("lineage.subject", json.dumps({"namespace": NS, "name": name}).encode())]


@pytest.mark.integration
@pytest.mark.slow
def test_idle_query_batches_once_per_tick_and_self_groups_still_time_out(spark, kafka_bootstrap, topic_names,
                                                                         pg_dsn, tmp_path):
    run_id = str(uuid.uuid4())
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"),
                             trigger_interval_seconds=0.5, recombine_quiet_seconds=1.0, tick_seconds=4.0)

    def recombined() -> list[int]:
        with psycopg.connect(pg_dsn) as conn:
            return [r for (r,) in conn.execute("SELECT revision FROM lineage_events WHERE run_id = %s",
                                                (run_id,)).fetchall()]

    with StreamHarness(spark, settings) as h:
        produce(kafka_bootstrap, topic_names["events"], [_part(run_id, "obj1:1"), _part(run_id, "obj2:1")])
        h.drain()
        # nothing arrives any more: the group's timeout fires in a tick's batch
        assert h.wait_for(recombined, message="the recombined record of an idle topic") == [1]
        commits = tmp_path / "ck" / "commits"

        def committed() -> int:
            return sum(1 for f in commits.iterdir() if f.name.isdigit())

        before = committed()
        h.wait_for(lambda: committed() > before, message="a tick's batch")  # ticks keep coming
        before = committed()
        time.sleep(8.0)
        # Spark's no-data batches: one per trigger (0.5 s) or as fast as they run (~1 s each on a loaded
        # 2-core machine), 8-16 here; ticks every 4 s: 2 or 3
        assert committed() - before <= 3, committed() - before
        assert h.total("rejected") == 0
