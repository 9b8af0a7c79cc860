"""The staging pass hands each event's annotation keys to the enrich pass (migration 006).

Pure part: the keys built from the rows ``BatchDeriver.add(on_event=...)`` hands over equal the keys of
:func:`sink.annotations_lookup.event_keys` (which derives the event alone), for the demo generator's
events, and survive their text form. Store part (real PostgreSQL and Kafka): ``stage_partition(..., handover)``
stages one row per event, and the enrich step (stream_processor/enrich.py) makes the records from them.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from producers.demo import DemoTraffic
from schemas.codec import SUBJECT_HEADER, decode_message
from schemas.identity import canonical_json, event_hash
from schemas.validate import validate_message
from sink.annotations_lookup import event_keys, keys_from_rows, keys_from_text, keys_to_text
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


def _handover(events: list[StoredEvent]) -> dict[str, tuple[bytes | None, str]]:
    """What the staging pass hands over per event (writer.py): a Kafka key and the record without the event."""
    from stream_processor.publish import handover_record

    return {e.event_hash: (f"key-{n}".encode(), handover_record({
        "event_json": e.text, "event_hash": e.event_hash, "kind": "run", "event_type": e.event.get("eventType"),
        "event_time": None, "run_id": (e.event.get("run") or {}).get("runId"), "job_namespace": None,
        "job_name": None, "revision": 0, "source_topic": "demo", "source_partition": 0, "source_offset": n,
        "subject": None})) for n, e in enumerate(events)}


@pytest.mark.integration
def test_the_handover_makes_the_enriched_records(pg_dsn, kafka_bootstrap, topic_names, demo_events):
    """Stage events with their handover, merge, enrich from PostgreSQL (stream_processor/enrich.py): one record
    per new event with the event text, the Kafka key and the annotations; a rejected event is published bare;
    a re-run finds nothing left; a later batch's copy of a stored event gets no record."""
    from stream_processor.consumer import EnrichedRecord, read_records
    from stream_processor.enrich import enrich_batch
    from stream_processor.publish import RecordPublisher

    bad = StoredEvent(event={"eventType": "COMPLETE", "eventTime": "2024-01-01T00:00:00Z", "run": {"runId": "r"},
                             "job": {"namespace": "n\x00", "name": "j"}}, event_hash="bad", source="test",
                      text='{"job":{"namespace":"n\\u0000"}}')
    events = demo_events[:40]
    store = GraphStore(pg_dsn)
    store.migrate()
    staged = GraphStore.stage_partition(pg_dsn, 7_000_001, 0, [*events, bad], _handover([*events, bad]))
    assert staged > len(events)
    # three of the events staged by a second part too: one record each all the same
    GraphStore.stage_partition(pg_dsn, 7_000_001, 1, events[:3], _handover(events[:3]))
    hashes = {e.event_hash for e in events}
    counts: dict[str, int] = {}

    def bump(metric: str, n: int) -> None:
        counts[metric] = counts.get(metric, 0) + n

    publisher = RecordPublisher({"bootstrap.servers": kafka_bootstrap})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*), count(keys) FROM stg_event_keys WHERE batch_id = 7000001"
                            ).fetchone() == (len(hashes) + 4, len(hashes) + 3)
        store.merge(7_000_001)
        assert enrich_batch(conn, 7_000_001, publisher, topic_names["enriched"], bump) == len(hashes) + 1
        assert counts == {"enriched": len(hashes) + 1, "enriched_unannotated": 1}
        assert conn.execute("SELECT count(*) FROM stg_event_keys").fetchone()[0] == 0   # deleted once delivered
        assert enrich_batch(conn, 7_000_001, publisher, topic_names["enriched"], bump) == 0   # a re-run: nothing
        # the same events again in a later batch: stored already, so no record
        GraphStore.stage_partition(pg_dsn, 7_000_002, 0, events[:5], _handover(events[:5]))
        store.merge(7_000_002)
        assert enrich_batch(conn, 7_000_002, publisher, topic_names["enriched"], bump) == 0
        assert counts["enriched_duplicates"] == 5
    store.close()
    records = [r for r in read_records(kafka_bootstrap, topic_names["enriched"], idle_timeout_seconds=5)
               if isinstance(r, EnrichedRecord)]
    assert len(records) == len(hashes) + 1
    by_hash = {r.event_hash: r for r in records}
    keys = _handover([*events, bad])
    with_annotations = 0
    for e in events:
        record = by_hash[e.event_hash]
        assert record.event == json.loads(e.text)
        assert record.key == keys[e.event_hash][0]
        expected = event_keys(e)
        assert [q["version_id"] for q in record.quality] == [o.version_id for o in expected.outputs
                                                             if any(q["version_id"] == o.version_id
                                                                    for q in record.quality)]
        assert {p["provenance_id"] for p in record.provenance} == set(expected.provenance_ids)
        with_annotations += bool(record.quality and record.provenance)
    assert with_annotations > 5
    assert by_hash["bad"].quality is None and by_hash["bad"].provenance is None
    assert by_hash["bad"].event == {"job": {"namespace": "n\x00"}}


def test_the_handover_keeps_one_row_per_event_from_its_lowest_part():
    from stream_processor.enrich import _handed_over

    rows = [("b", 1, "kb1", b"k", "r-b1"), ("a", 0, "ka", b"k", "r-a"), ("b", 0, "kb0", b"k", "r-b0"),
            ("c", 2, "kc", None, "r-c"), ("b", 2, "kb2", b"k", "r-b2")]
    assert _handed_over(rows) == [("b", "kb0", b"k", "r-b0"), ("a", "ka", b"k", "r-a"), ("c", "kc", None, "r-c")]
    assert _handed_over([]) == []


def test_the_exported_texts_make_the_same_records(pg_dsn, kafka_bootstrap, topic_names, demo_events):
    """The finisher hands the enrich step the new events' texts from the Parquet export (writer._event_texts):
    the records are those it makes reading the texts from lineage_events itself."""
    from dataclasses import replace

    from sink.parquet import changed_rows
    from stream_processor.consumer import EnrichedRecord, read_records
    from stream_processor.enrich import enrich_batch
    from stream_processor.publish import RecordPublisher
    from stream_processor.writer import _event_texts

    events, batch = demo_events[40:70], 7_000_003
    store = GraphStore(pg_dsn)
    store.migrate()
    publisher = RecordPublisher({"bootstrap.servers": kafka_bootstrap})
    made = {}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for topic, texts in ((topic_names["enriched"], False), (topic_names["graph"], True)):
            # staged again for the second run (the merge is then a no-op: the batch is committed)
            GraphStore.stage_partition(pg_dsn, batch, 0, events, _handover(events))
            store.merge(batch)
            payloads = _event_texts(changed_rows(pg_dsn, batch, ["lineage_events"])) if texts else None
            made[texts] = enrich_batch(conn, batch, publisher, topic, lambda *_: None, payloads)
    store.close()
    assert made == {False: len(events), True: len(events)}

    def records(topic: str) -> dict[str, EnrichedRecord]:
        return {r.event_hash: replace(r, processed_at=None) for r in read_records(kafka_bootstrap, topic,
                                                                                 idle_timeout_seconds=5)
                if isinstance(r, EnrichedRecord)}

    from_store = records(topic_names["enriched"])
    assert len(from_store) == len(events) and records(topic_names["graph"]) == from_store
