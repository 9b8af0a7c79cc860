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
