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


class _Paced:
    """The real emitter with publish_demo's clock (:meth:`monotonic`): time moves only while publish_demo waits, by
    the ``timeout`` of each ``poll``, so the send times its pacing chose are exact whatever the machine's load (a
    wall-clock version of the burst test failed in a CI run when one burst's sends were late)."""

    START = 1000.0

    def __init__(self, emitter: LineageEmitter) -> None:
        self.emitter = emitter
        self.now = self.START
        self.times: list[float] = []   # the clock when each message was handed over

    def __getattr__(self, name: str) -> object:
        return getattr(self.emitter, name)

    def monotonic(self) -> float:
        return self.now

    def _note(self) -> None:
        self.times.append(self.now)

    def emit(self, *args: object, **kwargs: object) -> object:
        self._note()
        return self.emitter.emit(*args, **kwargs)

    def emit_raw(self, *args: object, **kwargs: object) -> object:
        self._note()
        return self.emitter.emit_raw(*args, **kwargs)

    def poll(self, timeout: float = 0.0) -> object:
        self.now += timeout
        return self.emitter.poll(0)


def test_publish_demo_in_bursts_keeps_the_rate(kafka_bootstrap: str, topic_names: dict[str, str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Bursts of rate * burst_seconds messages, one burst per burst_seconds: the rate is kept, and within a burst
    the messages leave back to back (so a producer's linger puts each partition's share in one record batch)."""
    import types

    import producers.demo as demo

    with LineageEmitter(EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic_names["events"],
                                        encoding="json")) as real:
        emitter = _Paced(real)
        monkeypatch.setattr(demo, "time", types.SimpleNamespace(monotonic=emitter.monotonic))
        stats = publish_demo(emitter, rate=100, max_messages=150, seed=2, burst_seconds=0.5)
        assert real.failed == 0
    assert stats.messages == 150 and len(emitter.times) >= 150   # JSON: one hand-over per message, Evo ones too
    t0 = emitter.times[0]
    offsets = sorted({round(t - t0, 9) for t in emitter.times})
    assert offsets == [0.0, 0.5, 1.0]        # three bursts, each sent back to back, none early, none late
    per_burst = [sum(1 for t in emitter.times if round(t - t0, 9) == k * 0.5) for k in range(3)]
    assert all(n >= 50 for n in per_burst) and sum(per_burst) == len(emitter.times)
    assert emitter.now - _Paced.START == pytest.approx(1.0)   # it waited for the second and the third burst only
    # every message reached the broker (JSON encoding: an Evo document is one message, whatever its events)
    assert len(consume_all(kafka_bootstrap, topic_names["events"], stats.messages)) == stats.messages


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
