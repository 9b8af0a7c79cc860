"""The staging pass hands each event's annotation keys to the enrich pass (migration 006).

Pure part: the keys built from the rows ``BatchDeriver.add(on_event=...)`` hands over equal the keys of
:func:`sink.annotations_lookup.event_keys` (which derives the event alone), for the demo generator's
events, and survive their text form. Store part (real PostgreSQL): ``stage_partition(with_keys=True)``
stages one row per stored event, and ``take_staged_keys`` returns and removes them.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from producers.demo import DemoTraffic
from schemas.codec import SUBJECT_HEADER, decode_message
from schemas.identity import canonical_json, event_hash
from schemas.validate import validate_message
from sink.annotations_lookup import event_keys, keys_from_rows, keys_from_text, keys_to_text, take_staged_keys
from sink.derive import BatchDeriver
from sink.model import StoredEvent
from sink.postgres import GraphStore


def _demo_events(n: int) -> list[StoredEvent]:
    """Demo traffic (Evo documents with ``$self`` included) as the stream's decoder hands it to the store."""
    out = []
    for i, message in enumerate(DemoTraffic(seed=11).take(n)):
        headers = [(SUBJECT_HEADER, json.dumps(message.subject).encode())] if message.subject else None
        for decoded in decode_message(json.dumps(message.value).encode(), headers):
            event = validate_message(decoded)
            out.append(StoredEvent(event, event_hash(event), f"demo[0]@{i}", text=canonical_json(event)))
    return out


@pytest.fixture(scope="module")
def demo_events() -> list[StoredEvent]:
    return _demo_events(300)


def test_handed_over_keys_equal_the_keys_derived_alone(demo_events):
    handed: dict[str, object] = {}
    deriver = BatchDeriver()
    deriver.add(demo_events, lambda stored, rows: handed.setdefault(stored.event_hash,
                                                                    keys_from_rows(stored.event_hash, rows)))
    assert len(handed) == len({e.event_hash for e in demo_events})
    with_outputs = 0
    for stored in demo_events:
        alone = event_keys(stored)
        assert handed[stored.event_hash] == alone
        assert keys_from_text(stored.event_hash, keys_to_text(alone)) == alone
        with_outputs += bool(alone.outputs and alone.provenance_ids)
    assert with_outputs > 50  # the comparison covered events with quality and provenance keys


def test_a_rejected_event_hands_over_nothing(demo_events):
    bad = StoredEvent(event={"eventType": "COMPLETE", "eventTime": "2024-01-01T00:00:00Z", "run": {"runId": "r"},
                             "job": {"namespace": "n\x00", "name": "j"}},   # NUL: PostgreSQL cannot store it
                      event_hash="bad", source="test", text=None)
    handed: list[str] = []
    deriver = BatchDeriver()
    deriver.add([bad, demo_events[0]], lambda stored, rows: handed.append(stored.event_hash))
    assert [source for source, _exc in deriver.rows.rejected] == ["test"]
    assert handed == [demo_events[0].event_hash]


@pytest.mark.integration
def test_staged_keys_are_taken_once(pg_dsn, demo_events):
    GraphStore(pg_dsn).migrate()
    events = demo_events[:40]
    staged = GraphStore.stage_partition(pg_dsn, 7_000_001, 0, events, with_keys=True)
    assert staged > len(events)
    hashes = {e.event_hash for e in events}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM stg_event_keys WHERE batch_id = 7000001").fetchone()[0] == len(hashes)
        taken = take_staged_keys(conn, 7_000_001, hashes)
        assert set(taken) == hashes
        assert all(taken[e.event_hash] == event_keys(e) for e in events)
        assert take_staged_keys(conn, 7_000_001, hashes) == {}   # removed as they were read
        conn.execute("DELETE FROM stg_events WHERE batch_id = 7000001")
