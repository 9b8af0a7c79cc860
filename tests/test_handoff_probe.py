"""benchmarks/handoff_probe.py: both hand-offs from decode to the staging pass, on the same messages (no server)."""

from __future__ import annotations

import pytest

from benchmarks.handoff_probe import _messages, decode, one, stage

pytestmark = pytest.mark.unit


def test_both_ways_stage_the_same_events_and_only_one_parses_in_staging():
    messages = _messages("demo", 120, 0)
    once, twice = decode(messages, derive=True), decode(messages, derive=False)
    accepted_once, parses_once = stage(once)
    accepted_twice, parses_twice = stage(twice)
    assert accepted_once == accepted_twice > 100   # a few demo messages are `$self` parts: left out of both
    assert parses_once == 0 and parses_twice == accepted_twice
    # the graph rows ride in the packed values: larger than the texts alone
    assert sum(b.column("packed").nbytes for b in once) > 1.5 * sum(b.column("packed").nbytes for b in twice)
    figures = one(messages, derive=False)
    assert figures["staging_parses"] == 1.0 and figures["total_us"] > figures["decode_us"] > 0
