"""A small consumer API for the processor's output topics, as typed records.

``read_records(bootstrap, topic)`` reads a topic with a group-less consumer (``assign()`` to
every partition) from the beginning, or only new records, and yields
:class:`EnrichedRecord` / :class:`DeadLetter` / :class:`GraphChange` decoded from the Avro
single-object values the processor writes (:mod:`stream_processor.publish`).

Records split into chunks by their producer (:mod:`producers.chunking`, for records over
``message.max.bytes``) are reassembled before decoding. A group that cannot be reassembled is
logged as a WARNING with its reason and chunk offsets and not yielded (a viewer must not stop on
it); so is a group still open when reading stops.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["EnrichedRecord", "DeadLetter", "GraphChange", "read_records", "to_typed"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EnrichedRecord:
    """One record of ``openlineage.events.enriched``; ``event`` is the parsed canonical event.

    ``quality``: list of WIA §4 objects, one per output dataset version with a quality annotation
    (``dataset``, ``version``, ``version_id`` added); ``provenance``: list of WIA §3 records, one per
    dataset the event touched (``dataset``, ``tracing`` added); see :mod:`sink.annotations_lookup`.
    Both are None only in records of an event the graph could not store.
    """

    event: dict[str, Any]
    event_hash: str
    kind: str
    event_type: str | None
    event_time: str | None
    run_id: str | None
    job_namespace: str | None
    job_name: str | None
    revision: int
    source: dict[str, Any] | None
    subject: dict[str, Any] | None
    quality: Any
    provenance: Any
    processed_at: datetime | None
    key: bytes | None = None


@dataclass(frozen=True)
class DeadLetter:
    """One record of ``openlineage.events.dlq``: the original bytes and why they were rejected."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    topic: str
    partition: int
    offset: int
    error_class: str
    error_code: str
    message: str
    field: str | None
    failed_at: datetime | None


@dataclass(frozen=True)
class GraphChange:
    """One record of ``openlineage.graph``: an upsert (payload) or delete (payload None) of a graph row."""

    op: str
    table: str
    id: str
    payload: dict[str, Any] | None
    batch_id: int


def to_typed(value: bytes, key: bytes | None = None) -> EnrichedRecord | DeadLetter | GraphChange:
    """Decode one output record (Avro single-object) into its typed model."""
    from .publish import decode_record

    name, rec = decode_record(value)
    if name == "enriched_record":
        return EnrichedRecord(
            event=json.loads(rec["event"]), event_hash=rec["event_hash"], kind=rec["kind"],
            event_type=rec.get("event_type"), event_time=rec.get("event_time"), run_id=rec.get("run_id"),
            job_namespace=rec.get("job_namespace"), job_name=rec.get("job_name"), revision=int(rec.get("revision") or 0),
            source=rec.get("source"), subject=rec.get("subject"),
            quality=json.loads(rec["quality"]) if rec.get("quality") else None,
            provenance=json.loads(rec["provenance"]) if rec.get("provenance") else None,
            processed_at=rec.get("processed_at"), key=key)
    if name == "dead_letter":
        return DeadLetter(key=rec.get("key"), value=rec.get("value"),
                          headers=[(h["key"], h["value"]) for h in rec.get("headers") or []],
                          topic=rec["topic"], partition=rec["partition"], offset=rec["offset"],
                          error_class=rec["error_class"], error_code=rec["error_code"], message=rec["message"],
                          field=rec.get("field"), failed_at=rec.get("failed_at"))
    if name == "graph_change":
        return GraphChange(op=rec["op"], table=rec["table"], id=rec["id"],
                           payload=json.loads(rec["payload"]) if rec.get("payload") else None,
                           batch_id=rec["batch_id"])
    raise ValueError(f"not an output record of the processor: schema {name!r}")


def _warn_failed(topic: str, record: Any) -> None:
    failure = record.failure
    log.warning("%s[%d]@%d: a chunked record could not be reassembled (%s): %s; chunk offsets %s", topic,
                record.partition(), failure.offset, failure.code, failure.message, list(failure.offsets))


def read_records(bootstrap: str, topic: str, *, from_beginning: bool = True, max_records: int | None = None,
                 idle_timeout_seconds: float = 5.0, follow: bool = False,
                 conf: dict[str, Any] | None = None) -> Iterator[Any]:
    """Typed records of ``topic``; stops after ``max_records``, or when idle that long (unless ``follow``)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    from producers.chunking import TopicReassembler

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lineage-tail", "enable.auto.commit": False,
                         "log_level": 3, **(conf or {})})
    try:
        md = consumer.list_topics(topic, timeout=10)
        parts = md.topics[topic].partitions if topic in md.topics else {}
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in parts])
        n = 0
        idle_since = time.monotonic()
        chunks = TopicReassembler()
        while max_records is None or n < max_records:
            msg = consumer.poll(0.2)
            if msg is None:
                if not follow and time.monotonic() - idle_since > idle_timeout_seconds:
                    for failed in chunks.give_up("reading stopped before the group completed"):
                        _warn_failed(topic, failed)
                    return
                continue
            if msg.error() is not None:
                continue
            idle_since = time.monotonic()
            for whole in chunks.add(msg):
                if getattr(whole, "failure", None) is not None:
                    _warn_failed(topic, whole)
                    continue
                n += 1
                yield to_typed(whole.value(), whole.key())
                if max_records is not None and n >= max_records:
                    return
    finally:
        consumer.close()
