"""LineageEmitter against the real (embedded) broker: round trips per encoding, keys, headers, failures."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from producers.builder import lineage_run
from producers.emitter import SUBJECT_HEADER, LineageEmitter
from producers.evo import publish_object_lineage, split_object_outputs
from producers.keys import message_key
from producers.metrics import ProducerMetrics
from producers.models import parent_run_facet
from producers.settings import EmitterSettings
from schemas.codec import decode_message
from schemas.errors import DeliveryError

pytestmark = pytest.mark.integration


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[Any]:
    """Every message of ``topic`` (all partitions, from the start) once ``expected`` have arrived."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=15).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
        # a short grace period shows there is nothing beyond what was expected
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
        return out
    finally:
        consumer.close()


def event(job: str = "job", event_type: str = "START", **extra: Any) -> dict[str, Any]:
    doc = {"eventTime": "2024-05-01T10:00:00.5+02:00", "eventType": event_type,
           "producer": "https://example.com/test", "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json",
           "run": {"runId": str(uuid.uuid4()), "facets": {"x": {"n": 1.0, "big": 2**70, "u": "héllo", "z": None}}},
           "job": {"namespace": "ns", "name": job, "facets": {}},
           "inputs": [{"namespace": "pg", "name": "in", "facets": {}, "inputFacets": {}}],
           "outputs": [{"namespace": "s3", "name": "out", "facets": {}, "outputFacets": {}}]}
    doc.update(extra)
    return doc


@pytest.mark.parametrize("encoding", ["avro", "confluent", "json"])
def test_round_trip_per_encoding(kafka_bootstrap: str, topic_names: dict[str, str], encoding: str) -> None:
    topic = topic_names["events"]
    child = event("child")
    child["run"]["facets"]["parent"] = parent_run_facet(str(uuid.uuid4()), "dagns", "dag")
    dataset_event = {"eventTime": "2024-05-01T10:00:00Z", "producer": "p", "schemaURL": "s",
                     "dataset": {"namespace": "pg", "name": "public.t", "facets": {}}}
    job_event = {"eventTime": "2024-05-01T10:00:00Z", "producer": "p", "schemaURL": "s",
                 "job": {"namespace": "ns", "name": "j", "facets": {}}, "inputs": [], "outputs": []}
    sent = [event(), child, dataset_event, job_event]
    metrics = ProducerMetrics()
    settings = EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic, encoding=encoding,
                               confluent_schema_id=7 if encoding == "confluent" else None)
    with LineageEmitter(settings, metrics=metrics) as emitter:
        for doc in sent:
            emitter.emit(doc)
    assert metrics.value("lineage_producer_messages_sent_total", topic=topic, encoding=encoding) == 4
    messages = consume_all(kafka_bootstrap, topic, 4)
    assert len(messages) == 4
    by_key = {m.key().decode(): m for m in messages}
    assert set(by_key) == {"run:ns/job", "run:dagns/dag", "dataset:pg/public.t", "job:ns/j"}
    for doc in sent:
        msg = by_key[message_key(doc)]
        if encoding == "confluent":
            from schemas.avro import latest
            registry = {7: latest("openlineage_envelope").json}
            decoded = decode_message(msg.value(), msg.headers(), registry=registry)
        else:
            decoded = decode_message(msg.value(), msg.headers())
        assert [d.encoding for d in decoded] == [encoding]
        assert decoded[0].document == doc
    first = by_key["run:ns/job"].value()
    assert first[:2] == {"avro": b"\xc3\x01", "confluent": b"\x00\x00", "json": b'{"'}[encoding]


@pytest.mark.parametrize("encoding", ["avro", "json"])
def test_self_publish_carries_subject_header_and_self_link(kafka_bootstrap: str, topic_names: dict[str, str],
                                                           encoding: str) -> None:
    topic = topic_names["events"]
    run_id = str(uuid.uuid4())
    objects = [{"namespace": "evogeoscienceobject://hub1/w/s", "name": f"obj{i}:17", "facets": {}} for i in range(2)]
    start = event("parser", "START", run={"runId": run_id, "facets": {}}, outputs=[])
    complete = event("parser", "COMPLETE", run={"runId": run_id, "facets": {}},
                     eventTime="2024-05-01T10:00:05+02:00",
                     outputs=[*objects, {"namespace": "s3", "name": "side", "facets": {}}])
    split = split_object_outputs(complete, lambda o: o["namespace"].startswith("evogeoscienceobject://"))
    assert [s for s, _ in split] == [{"namespace": o["namespace"], "name": o["name"]} for o in objects]
    assert [[o["name"] for o in e["outputs"]] for _, e in split] == [["$self", "side"], ["$self", "side"]]
    settings = EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic, encoding=encoding)
    documents = []
    with LineageEmitter(settings) as emitter:
        for subject, part in split:
            documents.append(publish_object_lineage(emitter, [start, part], subject))
    assert [d["self_link"] for d in documents] == ["/events/1/outputs/0"] * 2
    per_doc = 1 if encoding == "json" else 2
    messages = consume_all(kafka_bootstrap, topic, 2 * per_doc)
    assert len(messages) == 2 * per_doc
    subjects = set()
    for msg in messages:
        headers = dict(msg.headers())
        subject = json.loads(headers[SUBJECT_HEADER])
        subjects.add(subject["name"])
        assert msg.key() == b"run:ns/parser"
        for decoded in decode_message(msg.value(), msg.headers()):
            assert decoded.subject == subject
            if decoded.document["eventType"] == "COMPLETE":
                assert decoded.self_link in ("/outputs/0", "/events/1/outputs/0")
    assert subjects == {"obj0:17", "obj1:17"}


def test_oversized_message_is_reported_on_flush(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    metrics = ProducerMetrics()
    settings = EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic_names["events"], encoding="json",
                               message_max_bytes=2000, compression_type="none")
    emitter = LineageEmitter(settings, metrics=metrics)
    emitter.emit(event("small"))
    emitter.emit(event("big", run={"runId": str(uuid.uuid4()), "facets": {"blob": {"x": "a" * 5000}}}))
    with pytest.raises(DeliveryError) as info:
        emitter.flush()
    failures = info.value.failures  # type: ignore[attr-defined]
    assert [(f.key, f.reason) for f in failures] == [("run:ns/big", "MSG_SIZE_TOO_LARGE")]
    assert info.value.code == "delivery.msg_size_too_large"
    assert metrics.value("lineage_producer_delivery_failures_total", topic=topic_names["events"],
                         reason="MSG_SIZE_TOO_LARGE") == 1
    emitter.flush()  # failures are reported once; the small one was delivered
    assert emitter.delivered == 1
    assert [m.key() for m in consume_all(kafka_bootstrap, topic_names["events"], 1)] == [b"run:ns/small"]


def test_unreachable_broker_is_reported_not_silent() -> None:
    from lineage.embedded.ports import free_port

    settings = EmitterSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", topic="t", delivery_timeout_ms=1500)
    emitter = LineageEmitter(settings)
    emitter.emit(event())
    with pytest.raises(DeliveryError) as info:
        emitter.flush(timeout_seconds=20)
    assert [f.reason for f in info.value.failures] == ["_MSG_TIMED_OUT"]  # type: ignore[attr-defined]


def test_builder_through_the_broker(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    topic = topic_names["events"]
    settings = EmitterSettings(bootstrap_servers=kafka_bootstrap, topic=topic)
    with LineageEmitter(settings) as emitter:
        with pytest.raises(RuntimeError), lineage_run(emitter, "etl", "nightly", inputs=[("pg", "a")]) as run:
            run.add_output("s3", "b")
            raise RuntimeError("disk full")
    messages = consume_all(kafka_bootstrap, topic, 2)
    decoded = [decode_message(m.value(), m.headers())[0].document for m in messages]
    assert sorted(d["eventType"] for d in decoded) == ["FAIL", "START"]
    fail = next(d for d in decoded if d["eventType"] == "FAIL")
    assert fail["run"]["facets"]["errorMessage"]["message"] == "RuntimeError: disk full"
    assert fail["outputs"][0]["name"] == "b"
    assert {m.key() for m in messages} == {b"run:etl/nightly"}
    assert len({m.partition() for m in messages}) == 1
