"""A 5 MB event split by the emitter arrives whole in the graph; a group with a lost chunk reaches the DLQ."""

from __future__ import annotations

import json

import psycopg
import pytest

from producers.chunking import CHUNK_ID_HEADER, split_message
from producers.emitter import LineageEmitter
from producers.settings import EmitterSettings
from schemas.codec import encode_single_object
from stream_processor.consumer import DeadLetter, EnrichedRecord, GraphChange, read_records
from stream_processor.testing import StreamHarness, produce, run_event, test_settings
from tests.test_chunking import raw_messages, wide_event

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def broken_group(job: str, missing: int) -> list[tuple[bytes, list, bytes]]:
    """The chunks (value, headers, key) of a ~250 kB event split at 100 kB, chunk ``missing`` left out."""
    event = run_event(job=job)
    event["run"]["facets"] = {"padding": {"_producer": "https://example.com/tests",
                                          "_schemaURL": "https://example.com/padding.json", "text": "p" * 250_000}}
    chunks = split_message(encode_single_object(event), [("case", job.encode())], 100_000)
    assert len(chunks) == 3
    return [(value, headers, job.encode()) for i, (value, headers) in enumerate(chunks) if i != missing]


def test_large_event_whole_in_graph_and_lost_chunk_in_dlq(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    topic = topic_names["events"]
    before, after = run_event(job="before"), run_event(job="after")
    produce(kafka_bootstrap, topic, [(encode_single_object(before), None, b"lost-last")])
    emitter_settings = EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic, message_max_bytes=1_000_000)
    with LineageEmitter(emitter_settings) as emitter:
        emitter.emit(wide_event())
    lost_last, lost_middle = broken_group("lost-last", missing=2), broken_group("lost-middle", missing=1)
    produce(kafka_bootstrap, topic, lost_last + lost_middle + [(encode_single_object(after), None, b"lost-last")])
    stored = raw_messages(kafka_bootstrap, topic, 2 + 5 + 4)
    chunks = [m for m in stored if any(k == CHUNK_ID_HEADER for k, _ in m.headers() or [])]
    assert len(chunks) > 4 + 1  # the wide event went as several messages
    first_chunk = {m.key(): m for m in chunks if dict(m.headers()).get("lineage.chunk.index") == b"0"}

    # the graph change and the enriched record of the 20,000-field dataset are over message.max.bytes:
    # RecordPublisher sends them in chunks (test_graph_change_over_the_limit_reaches_the_graph_topic below)
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"), chunk_timeout_seconds=5.0)
    with StreamHarness(spark, settings) as h:
        h.drain()
        assert h.total("rejected") == 2
        produce(kafka_bootstrap, topic, [(encode_single_object(run_event(job="next")), None, b"lost-last")])
        h.drain()  # the stream goes on after the chunk groups

    with psycopg.connect(pg_dsn) as conn:
        names = sorted(r[0] for r in conn.execute("SELECT job_name FROM lineage_events"))
        fields = conn.execute("SELECT jsonb_array_length(fields), fields->19999->>'name' FROM lineage_datasets "
                              "WHERE name = 'wide_table'").fetchone()
    assert names == ["after", "before", "next", "wide"]
    assert fields == (20_000, "column_19999")
    assert h.total("enriched_chunked") == 1  # the wide event's enriched record went in chunks

    enriched = [r for r in read_records(kafka_bootstrap, topic_names["enriched"], idle_timeout_seconds=10)
                if isinstance(r, EnrichedRecord)]
    assert sorted(r.job_name for r in enriched) == ["after", "before", "next", "wide"]
    wide_changes = [c for c in read_records(kafka_bootstrap, topic_names["graph"], idle_timeout_seconds=10)
                    if isinstance(c, GraphChange) and c.table == "lineage_nodes"
                    and (c.payload or {}).get("name") == "wide_table"]
    assert wide_changes and len(json.loads(wide_changes[-1].payload["fields"])) == 20_000

    dead = list(read_records(kafka_bootstrap, topic_names["dlq"], max_records=2, idle_timeout_seconds=15))
    assert len(dead) == 2 and all(isinstance(d, DeadLetter) for d in dead)
    by_case = {dict(d.headers)["case"].decode(): d for d in dead}
    assert set(by_case) == {"lost-last", "lost-middle"}
    for case, d in by_case.items():
        assert d.error_code == "chunk.incomplete" and d.error_class == "ChunkError"
        head = first_chunk[case.encode()]
        assert (d.topic, d.partition, d.offset) == (topic, head.partition(), head.offset())
        assert d.value == head.value()  # the first chunk's bytes
    assert "timeout 5s" in by_case["lost-last"].message or "log ended" in by_case["lost-last"].message
    assert "chunk 1 is lost" in by_case["lost-middle"].message


def test_graph_change_over_the_limit_reaches_the_graph_topic(kafka_bootstrap, topic_names):
    from stream_processor.consumer import GraphChange
    from stream_processor.publish import RecordPublisher, encode_record, graph_change

    row = {"dataset_id": "d1", "name": "wide_table",
           "fields": [{"name": f"column_{i:05d}", "type": "varchar", "description": "d" * 200} for i in range(20_000)]}
    publisher = RecordPublisher({"bootstrap.servers": kafka_bootstrap})
    publisher.publish(topic_names["graph"], b"d1", encode_record("graph_change", graph_change("lineage_datasets",
                                                                                              "d1", row, 7)))
    publisher.flush(30)
    (change,) = read_records(kafka_bootstrap, topic_names["graph"], max_records=1, idle_timeout_seconds=10)
    assert isinstance(change, GraphChange) and len(change.payload["fields"]) == 20_000
