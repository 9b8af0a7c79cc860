"""Downstream records and their producers: dead letters, enriched records, graph changes.

All three are Avro single-object encoded (``0xC3 0x01`` + 8-byte CRC-64-AVRO fingerprint +
body) with the shipped ``dead_letter``, ``enriched_record`` and ``graph_change`` schemas, so a
consumer resolves them without a registry (``schemas.codec`` / ``schemas.avro.by_fingerprint``).

Delivery is at-least-once: a re-run micro-batch re-publishes its records (keys are stable, so a
compacted ``openlineage.graph`` converges and an enriched consumer deduplicates by ``event_hash``).

A value larger than the producer's ``message.max.bytes`` (librdkafka's 1,000,000 unless configured)
less :data:`producers.chunking.HEADROOM_BYTES` is sent as consecutive chunks with the same key
(:func:`producers.chunking.split_message`); :func:`stream_processor.consumer.read_records` and the
``lineage_kafka`` source reassemble them.
"""

from __future__ import annotations

import io
import json
import weakref
from datetime import UTC, datetime
from typing import Any

from schemas.errors import DeliveryError
from sink.fastjson import dumps_compact, dumps_sorted

__all__ = ["encode_record", "dead_letter", "enriched_record", "graph_change", "payload_rows", "RecordPublisher",
           "close_shared_publishers", "decode_record"]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"


def encode_record(schema_name: str, record: dict[str, Any]) -> bytes:
    """Avro single-object encoding of ``record`` with the latest shipped ``schema_name``."""
    import fastavro

    from schemas.avro import latest

    shipped = latest(schema_name)
    buf = io.BytesIO()
    buf.write(SINGLE_OBJECT_MAGIC + shipped.fingerprint)
    fastavro.schemaless_writer(buf, shipped.parsed, record)
    return buf.getvalue()


def decode_record(data: bytes) -> tuple[str, dict[str, Any]]:
    """``(schema name, record)`` of an Avro single-object encoded downstream record."""
    import fastavro

    from schemas.avro import by_fingerprint
    from schemas.errors import DecodeError

    if not data or data[:2] != SINGLE_OBJECT_MAGIC or len(data) < 10:
        raise DecodeError("not an Avro single-object record", code="decode.bad_magic")
    shipped = by_fingerprint(data[2:10])
    if shipped is None:
        raise DecodeError("unknown fingerprint", code="decode.unknown_fingerprint")
    return shipped.name, fastavro.schemaless_reader(io.BytesIO(data[10:]), shipped.parsed, shipped.parsed)


def _now() -> datetime:
    return datetime.now(UTC)


def dead_letter(row: dict[str, Any]) -> dict[str, Any]:
    """The ``dead_letter`` record of a rejected decoded row (original bytes, coordinates, reason)."""
    return {
        "key": row.get("key"), "value": row.get("raw_value"),
        "headers": [{"key": h["key"], "value": h["value"]} for h in (row.get("raw_headers") or [])],
        "topic": row["source_topic"], "partition": int(row["source_partition"]), "offset": int(row["source_offset"]),
        "error_class": row.get("error_class") or "LineageError", "error_code": row.get("error_code") or "internal",
        "message": row.get("error_message") or "", "field": row.get("error_field"), "failed_at": _now(),
    }


def enriched_record(row: dict[str, Any], quality: str | None = None, provenance: str | None = None) -> dict[str, Any]:
    """The ``enriched_record`` of an accepted (deduplicated, recombined) row."""
    et = row.get("event_time")
    subject = json.loads(row["subject"]) if row.get("subject") else None
    return {
        "event": row["event_json"], "event_hash": row["event_hash"], "kind": row.get("kind") or "run",
        "event_type": row.get("event_type"),
        "event_time": et.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if et else None,
        "run_id": row.get("run_id"), "job_namespace": row.get("job_namespace"), "job_name": row.get("job_name"),
        "revision": int(row.get("revision") or 0),
        "source": {"topic": row["source_topic"], "partition": int(row["source_partition"]),
                   "offset": int(row["source_offset"])} if row.get("source_topic") else None,
        "subject": {"namespace": subject["namespace"], "name": subject["name"]} if subject else None,
        "quality": quality, "provenance": provenance, "processed_at": _now(),
    }


#: What the staging pass hands over of an enriched record (stream_processor/enrich.py adds the rest).
_NOT_HANDED_OVER = ("event", "quality", "provenance", "processed_at")


def handover_record(row: dict[str, Any]) -> str:
    """:func:`enriched_record` of ``row`` as JSON, without the event text (``lineage_events.payload`` has it),
    the annotations and the processing time: the ``stg_event_keys.record`` the enrich step completes."""
    record = enriched_record(row)
    for name in _NOT_HANDED_OVER:
        del record[name]
    return dumps_compact(record)   # orjson where it writes the json module's value (~55 of ~2,000 worker samples)


def graph_change(table: str, row_id: str, payload: dict[str, Any] | None, batch_id: int) -> dict[str, Any]:
    """The ``graph_change`` record of one upserted (or, with ``payload=None``, deleted) row.

    ``payload`` is the row as compact JSON with sorted keys (:func:`sink.fastjson.dumps_sorted`). Writing it
    with the json module was 8.6 of the driver's ~47 CPU-s in ``lineage bench --events 30000`` (py-spy)."""
    return {"op": "upsert" if payload is not None else "delete", "table": table, "id": row_id,
            "payload": dumps_sorted(payload) if payload is not None else None,
            "batch_id": int(batch_id)}


def payload_rows(table: Any) -> list[dict[str, Any]]:
    """The rows of Arrow ``table`` as :func:`graph_change` payloads: ``table.to_pylist()``, but each timestamp as the
    text ``str()`` gives its ``datetime`` (``2024-01-01 07:39:20.484000+00:00``, no fraction when it is zero), made
    column-wise in Arrow. Equal payload text (tests/test_avro_records.py); ~2x faster on a batch's ~30,000 changed
    rows, most of it the ``datetime`` objects ``to_pylist`` made and ``dumps_sorted`` turned back into text one by
    one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from sink.arrowtime import is_utc_micros, utc_micros_text

    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_timestamp(field.type) and is_utc_micros(field.type):
            text = pc.replace_substring_regex(utc_micros_text(column), pattern=r"\.000000$", replacement="")
            column = pc.binary_join_element_wise(text, pa.scalar("+00:00"), "")
        columns.append(column.to_pylist())   # other types (and other timestamps) as to_pylist gives them
    names = table.column_names
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


#: :meth:`RecordPublisher.shared`'s publishers, by configuration.
_SHARED: dict[str, RecordPublisher] = {}


def close_shared_publishers(timeout_seconds: float = 5.0) -> int:
    """Deliver what the process's shared publishers (:meth:`RecordPublisher.shared`) hold, within ``timeout_seconds``
    each, and drop them; returns how many were dropped. For a process whose broker is about to go away for good (a
    test session's end): a dropped publisher's librdkafka handle is destroyed, where a kept one would go on
    reconnecting to the gone broker, and logging each failed attempt, until the process exits."""
    dropped = list(_SHARED.values())
    _SHARED.clear()
    for publisher in dropped:
        try:
            publisher._producer.flush(timeout_seconds)
        except Exception:  # noqa: BLE001 - the publisher is dropped whatever its last deliveries did
            pass
    return len(dropped)


class RecordPublisher:
    """A confluent-kafka producer that chunks large values, counts failures and raises :class:`DeliveryError` on flush.

    ``chunked`` counts the records sent as several chunks, ``sent`` the records (not the chunks).
    """

    def __init__(self, conf: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        from producers.chunking import DEFAULT_MESSAGE_MAX_BYTES, HEADROOM_BYTES, split_message

        self._split = split_message
        # lz4: enriched records and graph changes are JSON-heavy; compressed, the embedded broker (which keeps
        # its log in memory) held ~0.35 GB less in lineage bench --events 20000 (tree PSS 2.9 -> 2.55 GB, 2 runs)
        base = {"linger.ms": 20, "batch.num.messages": 10000, "enable.idempotence": True,
                "compression.type": "lz4", "queue.buffering.max.messages": 500000, "log_level": 3}
        base.update(conf)
        # through a weak reference: a bound method would make publisher -> producer -> callback -> publisher a
        # cycle, and a dropped publisher's librdkafka handle (threads, a thread-local key: at most ~1,000 per
        # process) would live until the cyclic collector's next full pass
        ref = weakref.ref(self)

        def on_error(err: Any) -> None:
            publisher = ref()
            if publisher is not None:
                publisher._on_error(err)

        base.setdefault("error_cb", on_error)
        self._producer = Producer(base)
        self.max_bytes = int(base.get("message.max.bytes") or DEFAULT_MESSAGE_MAX_BYTES)
        #: A value of at most this many bytes, without headers, is sent whole (split_message's own test).
        self._whole_bytes = self.max_bytes - HEADROOM_BYTES
        self.sent = 0
        self.chunked = 0
        self._errors: list[str] = []
        self._shared_key: str | None = None
        self._broken = False   # a fatal error, or the cluster seen down: not handed out by shared() again

    @classmethod
    def shared(cls, conf: dict[str, Any]) -> RecordPublisher:
        """The process's publisher for ``conf``, counters reset: for the executor passes, whose tasks a Python
        worker runs one after another. A new idempotent producer costs a connection, the cluster's metadata
        and a producer id before its first acknowledgement: that was 3.4 of the enrich pass's 5.3 task-seconds
        in ``lineage bench --events 10000`` (cProfile, 2026-11-25: 18 tasks, 187 ms per ``flush``). A publisher
        whose flush failed, or that reported any client error (a dropped connection, the cluster down, a fatal
        error: a restarted broker may not know its producer id) since, is not handed out again; errors that
        happened while the worker was idle are served (``poll``) before the choice.

        A new idempotent producer's first acknowledgement takes ~0.5 s whatever it sends (the embedded broker,
        2026-11-25: 502-504 ms for 100 records against 3 ms for a warm one), so the passes ask for theirs
        before their other work, and the staging pass makes the one its worker will enrich with."""
        key = json.dumps(conf, sort_keys=True, default=str)
        publisher = _SHARED.get(key)
        if publisher is not None:
            publisher._producer.poll(0)  # serve what happened while the worker was idle (a broker restart...)
        if publisher is None or publisher._broken:
            publisher = _SHARED[key] = cls(conf)
            publisher._shared_key = key
        publisher.sent, publisher.chunked, publisher._errors = 0, 0, []
        return publisher

    def warm(self, topics: list[str], timeout_seconds: float = 5.0) -> bool:
        """Connect and fetch ``topics``' metadata now, so that the first records sent later are acknowledged at
        once: a new idempotent producer's first flush waits ~0.5 s for its connection, producer id and the topic's
        metadata (the embedded broker, 2026-12-01: 499 ms for 5,000 records cold, 3-4 ms after this call, which
        itself took ~50 ms). False, with nothing raised, when the cluster did not answer in time: the records'
        own flush then waits and reports as before."""
        from confluent_kafka import KafkaException

        try:
            for topic in topics:
                self._producer.list_topics(topic, timeout=timeout_seconds)
        except KafkaException:
            return False
        return True

    def _on_error(self, err: Any) -> None:
        self._broken = True  # any client error (a dropped connection, the cluster down, a fatal one): start afresh

    def _evict(self) -> None:
        if self._shared_key is not None and _SHARED.get(self._shared_key) is self:
            _SHARED.pop(self._shared_key)

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def _produce(self, topic: str, key: bytes | str | None, value: bytes, headers: list[Any] | None) -> None:
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, headers=headers or None,
                                       on_delivery=self._on_delivery)
                return
            except BufferError:
                self._producer.poll(0.05)

    def publish(self, topic: str, key: bytes | str | None, value: bytes,
                headers: list[tuple[str, bytes | None]] | None = None) -> int:
        """Send one record; returns the number of Kafka messages it took (1, or its chunks)."""
        if not headers and len(value) <= self._whole_bytes:   # one message: no chunking to work out
            parts: list[tuple[bytes, list[Any] | None]] = [(value, None)]
        else:
            try:
                parts = self._split(value, headers, self.max_bytes)
            except ValueError:  # a limit too small to chunk under: sent whole (librdkafka: MSG_SIZE_TOO_LARGE)
                parts = [(value, list(headers or ()))]
        for part, part_headers in parts:
            self._produce(topic, key, part, part_headers)
        self.sent += 1
        if len(parts) > 1:
            self.chunked += 1
        if self.sent % 1000 == 0:
            self._producer.poll(0)
        return len(parts)

    def flush(self, timeout_seconds: float = 60.0) -> int:
        """Wait for every delivery report; raise :class:`DeliveryError` if any failed."""
        try:
            remaining = self._producer.flush(timeout_seconds)
        except Exception as exc:  # e.g. a fatal idempotence error raised through a delivery callback
            self._evict()
            raise DeliveryError(f"flush failed: {exc!r}") from exc
        if remaining or self._errors:
            self._evict()  # late reports of this publisher must not fail the next task
        if remaining:
            raise DeliveryError(f"{remaining} records not delivered within {timeout_seconds:.0f}s")
        if self._errors:
            raise DeliveryError(f"{len(self._errors)} records failed: {self._errors[0]}")
        return self.sent
