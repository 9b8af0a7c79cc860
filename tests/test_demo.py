"""The demo publisher against the real broker: paced traffic that decodes and validates."""

from __future__ import annotations

import json

import pytest

from producers.demo import DemoTraffic, publish_demo
from producers.emitter import SUBJECT_HEADER, LineageEmitter
from producers.models import parse_event
from producers.settings import EmitterSettings
from schemas.codec import decode_message
from tests.test_emitter import consume_all

pytestmark = pytest.mark.integration


def test_publish_demo_sends_decodable_events(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    topic = topic_names["events"]
    seen: list[int] = []
    with LineageEmitter(EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic)) as emitter:
        stats = publish_demo(emitter, rate=0, max_messages=300, seed=3, on_progress=lambda s: seen.append(s.messages))
        assert emitter.failed == 0
    assert stats.messages == 300 and seen[-1] == 300
    assert stats.events >= 300 and stats.kinds.get("evo", 0) > 0
    messages = consume_all(kafka_bootstrap, topic, stats.events)
    assert len(messages) == stats.events  # Avro: one message per event, Evo documents split per event
    with_subject = 0
    for msg in messages:
        decoded = decode_message(msg.value(), msg.headers())
        assert len(decoded) == 1
        parse_event(decoded[0].document)
        headers = dict(msg.headers() or [])
        if SUBJECT_HEADER in headers:
            with_subject += 1
            assert decoded[0].subject == json.loads(headers[SUBJECT_HEADER])
            assert any(o["name"] == "$self" for o in decoded[0].document["outputs"])
    expected = DemoTraffic(3).take(300)  # the same seed gives the same traffic (times aside)
    assert with_subject == sum(len(m.value["events"]) for m in expected if m.subject) > 0


def test_publish_demo_keeps_the_rate(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    with LineageEmitter(EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic_names["events"],
                                        encoding="json")) as emitter:
        stats = publish_demo(emitter, rate=200, duration_seconds=1.5, seed=1)
    # pacing: message i is sent no earlier than i / rate, so at most rate * duration + 1 messages
    assert 0 < stats.messages <= 200 * 1.5 + 1


class _Timed:
    """The real emitter, noting when each event is handed to it (publish_demo's pacing decides those times)."""

    def __init__(self, emitter: LineageEmitter) -> None:
        self.emitter = emitter
        self.times: list[float] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.emitter, name)

    def emit(self, *args: object, **kwargs: object) -> object:
        import time

        self.times.append(time.monotonic())
        return self.emitter.emit(*args, **kwargs)

    def emit_raw(self, *args: object, **kwargs: object) -> object:
        import time

        self.times.append(time.monotonic())
        return self.emitter.emit_raw(*args, **kwargs)


def test_publish_demo_in_bursts_keeps_the_rate(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    """Bursts of rate * burst_seconds messages, one burst per burst_seconds: the rate is kept, and within a burst
    the messages leave back to back (so a producer's linger puts each partition's share in one record batch)."""
    with LineageEmitter(EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic_names["events"],
                                        encoding="json")) as real:
        emitter = _Timed(real)
        stats = publish_demo(emitter, rate=100, max_messages=150, seed=2, burst_seconds=0.5)
    assert stats.messages == 150 and len(emitter.times) >= 150   # an Evo document hands over several events
    t0 = emitter.times[0]
    bursts = [[t - t0 for t in emitter.times if k * 0.5 - 0.05 <= t - t0 < k * 0.5 + 0.25] for k in range(3)]
    assert sum(map(len, bursts)) == len(emitter.times)   # every message left within 0.25 s of its burst's start
    assert all(len(b) >= 50 for b in bursts)             # 50 messages a burst (more events: Evo documents)
    assert bursts[1][0] >= 0.45 and bursts[2][0] >= 0.95  # no burst early (t0: the first send): the rate is kept


def test_lineage_demo_command(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("LINEAGE_")}
    result = subprocess.run([sys.executable, "-m", "lineage", "demo", "--rate", "0", "--max-messages", "50",
                             "--seed", "5", "--bootstrap-servers", kafka_bootstrap, "--topic", topic_names["events"]],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "published 50 messages" in result.stdout
    events = sum(len(m.value["events"]) if m.subject else 1 for m in DemoTraffic(5).take(50))
    assert len(consume_all(kafka_bootstrap, topic_names["events"], events)) == events
