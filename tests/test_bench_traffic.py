"""``lineage bench --traffic real``: the real-producer corpus replayed with fresh run ids (benchmarks/e2e_bench.py)."""

from __future__ import annotations

import pytest

from benchmarks.e2e_bench import REAL_PRODUCERS, _fresh_run_ids, _real_values
from schemas.codec import decode_message
from schemas.identity import event_hash
from schemas.validate import validate_message
from tests.test_real_producers import VALID_EVENTS


@pytest.mark.unit
def test_run_ids_are_fresh_per_cycle_and_consistent_within_one() -> None:
    event = {"run": {"runId": "a", "facets": {"parent": {"run": {"runId": "p"}}}},
             "inputs": [{"facets": {"x": {"runId": "a"}}}], "eventType": "START"}
    first, again, second = (_fresh_run_ids(event, c) for c in (0, 0, 1))
    assert first == again                                   # deterministic
    assert first["run"]["runId"] == first["inputs"][0]["facets"]["x"]["runId"] != "a"
    assert first["run"]["facets"]["parent"]["run"]["runId"] not in ("p", first["run"]["runId"])
    assert second["run"]["runId"] != first["run"]["runId"]
    assert event["run"]["runId"] == "a"                     # the corpus event is not changed


@pytest.mark.unit
def test_real_traffic_is_valid_new_events_of_the_four_producers() -> None:
    corpus = [e for e in VALID_EVENTS if e.producer in REAL_PRODUCERS]
    assert {e.producer for e in corpus} == set(REAL_PRODUCERS)
    n = 2 * len(corpus) + 3
    events = [validate_message(decode_message(value, headers)[0]) for value, headers in _real_values(n)]
    assert len(events) == n
    assert len({event_hash(e) for e in events}) == n       # every replay is a new event (fresh run ids)
    producers = {e["producer"] for e in events}
    assert any("spark" in p for p in producers) and any("dbt" in p for p in producers)


@pytest.mark.unit
def test_latency_parts_add_up_to_the_oldest_records_latency() -> None:
    from benchmarks.e2e_bench import latency_parts
    from sink.model import BatchResult
    from stream_processor.writer import BatchReport

    def report(start: float, oldest_ms: int, stage: float, merge: float, queue: float, events: int) -> BatchReport:
        counts = {("ts_bucket", str(oldest_ms), ""): 1, ("ts_bucket", str(oldest_ms + 500), ""): events - 1,
                  ("consumed", "", ""): events}
        return BatchReport(1, BatchResult(1), counts, committed_at=start + stage + queue + merge, started_at=start,
                           timings={"stage": stage, "recombine": 0.0, "merge": merge, "enrich": 9.0})

    parts = latency_parts([report(100.0, 99_000, 0.5, 0.2, 0.1, 10), report(200.0, 198_500, 0.7, 0.3, 0.4, 30),
                           BatchReport(3, BatchResult(3), {}, committed_at=1.0, started_at=0.5)])  # no records: left out
    assert parts["batches"] == 2
    worst = parts["p95_batch"]
    assert worst["events"] == 30
    assert worst["waited"] == pytest.approx(1.495)          # 200 - 198.5 - half a 10 ms bucket
    assert worst["queue"] == pytest.approx(0.4)
    assert worst["oldest"] == pytest.approx(worst["waited"] + 0.7 + 0.4 + 0.3)
    assert parts["median"]["stage"] in (0.5, 0.7)
    assert latency_parts([]) == {}


@pytest.mark.unit
def test_drain_batches_list_each_batch_from_the_sustained_windows_start() -> None:
    from benchmarks.e2e_bench import drain_batches
    from sink.model import BatchResult
    from stream_processor.writer import BatchReport

    def report(batch: int, consumed: int, staged: int, started: float, merged: float) -> BatchReport:
        return BatchReport(batch, BatchResult(batch), {("consumed", "", ""): consumed, ("staged", "", ""): staged},
                           committed_at=merged, started_at=started, timings={"stage": 1.23456, "merge": 0.5})

    rows = drain_batches([report(0, 5000, 40000, 10.0, 14.0), report(1, 5000, 41000, 13.5, 16.25),
                          report(2, 0, 0, 17.0, 17.5)])
    assert [r["batch_id"] for r in rows] == [0, 1, 2]
    assert [r["counted"] for r in rows] == [True, True, False]      # a batch that staged nothing is not counted
    assert rows[0]["merged_s"] == 0.0 and rows[0]["started_s"] == -4.0
    assert rows[1] == {"batch_id": 1, "consumed": 5000, "staged": 41000, "recombined": 0, "counted": True,
                       "started_s": -0.5, "merged_s": 2.25, "timings_s": {"stage": 1.235, "merge": 0.5}}
    assert drain_batches([]) == []


@pytest.mark.unit
def test_latency_messages_spooled_to_a_file_come_back_in_order(tmp_path) -> None:
    from benchmarks.e2e_bench import _demo_values, spool, unspool

    messages = list(_demo_values(300))
    assert any(headers for _value, headers in messages)      # `$self` parts travel with their subject header
    assert spool(iter(messages), tmp_path / "m") == 300
    assert list(unspool(tmp_path / "m")) == messages
    assert spool(iter(()), tmp_path / "empty") == 0 and list(unspool(tmp_path / "empty")) == []


@pytest.mark.unit
def test_bench_producers_compress_as_the_producer_library_does() -> None:
    from typing import get_args

    from benchmarks.e2e_bench import COMPRESSION, COMPRESSIONS, BenchConfig
    from lineage.commands import bench
    from producers.settings import Compression, EmitterSettings

    assert COMPRESSION == bench.COMPRESSION == EmitterSettings.model_fields["compression_type"].default == "lz4"
    assert COMPRESSIONS == bench.COMPRESSIONS == get_args(Compression)
    assert BenchConfig().compression == "lz4" and BenchConfig(compression="none").compression == "none"
    with pytest.raises(ValueError, match="compression"):
        BenchConfig(compression="brotli")
