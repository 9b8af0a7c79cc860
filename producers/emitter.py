"""``LineageEmitter``: publish OpenLineage events to Kafka, reliably and without silent loss.

- One idempotent confluent-kafka producer (``acks=all``, ``enable.idempotence=true``): a retried
  send never duplicates or reorders the messages of one key.
- Keys as the official OpenLineage Kafka transport computes them (:mod:`producers.keys`).
- Values in the configured encoding: Avro single-object (default, registry-free), Confluent wire
  format, or JSON (:mod:`schemas.codec`).
- ``$self`` publishes carry their subject in the ``lineage.subject`` header (UTF-8 JSON
  ``{"namespace": ..., "name": ...}``).
- :meth:`LineageEmitter.emit` only queues. Every delivery report is looked at: failures are
  collected and :meth:`LineageEmitter.flush` (and ``close``/``__exit__``) raises
  :class:`schemas.errors.DeliveryError` listing them — nothing is dropped silently.
- Values over ``message.max.bytes`` (librdkafka's, default 1,000,000, less 16 KiB of headroom) are
  sent as consecutive chunks of one key (:mod:`producers.chunking`), each compressed in its batch
  like any message; the processor reassembles them before decoding.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer

from schemas.errors import ConfigurationError, DeliveryError, LineageError

from .chunking import DEFAULT_MESSAGE_MAX_BYTES, split_message
from .keys import message_key
from .metrics import ProducerMetrics
from .settings import EmitterSettings

__all__ = ["LineageEmitter", "DeliveryFailure", "SUBJECT_HEADER", "as_event_dict"]

SUBJECT_HEADER = "lineage.subject"
#: At most this many DeliveryFailure records are kept between two flushes (``failed`` counts them all).
MAX_KEPT_FAILURES = 1000
log = logging.getLogger(__name__)
_AUTO: Any = object()


@dataclass(frozen=True)
class DeliveryFailure:
    """One message the broker did not acknowledge."""

    topic: str
    key: str | None
    reason: str      # librdkafka error name, e.g. MSG_SIZE_TOO_LARGE, _MSG_TIMED_OUT
    message: str


def as_event_dict(event: Any) -> dict[str, Any]:
    """A spec-shaped dict from a dict, a :mod:`producers.models` model or an openlineage-python event."""
    if isinstance(event, Mapping):
        return dict(event)
    to_dict = getattr(event, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    if hasattr(event, "__attrs_attrs__"):  # openlineage-python's attrs classes
        from openlineage.client.serde import Serde

        return dict(Serde.to_dict(event))
    raise TypeError(f"cannot publish a {type(event).__name__}: pass a dict, a producers.models event "
                    "or an openlineage-python event")


def subject_header(subject: Mapping[str, Any]) -> tuple[str, bytes]:
    """The ``lineage.subject`` header for a ``$self`` subject ``{"namespace", "name"}``."""
    if not subject.get("namespace") or not subject.get("name"):
        raise ValueError(f"a subject needs namespace and name, got {dict(subject)!r}")
    body = {"namespace": str(subject["namespace"]), "name": str(subject["name"])}
    return SUBJECT_HEADER, json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _register_envelope(settings: EmitterSettings) -> int:
    """Register (or look up) the envelope schema under ``<topic>-value`` in the configured registry."""
    from schemas.registry import ConfluentSchemaRegistry, subject_for_topic

    try:
        return ConfluentSchemaRegistry(settings.registry_url).register_envelope(subject_for_topic(settings.topic))
    except Exception as exc:  # the registry client raises its own error types
        raise ConfigurationError(f"could not register the envelope schema at {settings.registry_url}: {exc}") from exc


class LineageEmitter:
    """Publishes events to ``settings.topic``; use as a context manager or call :meth:`close`.

    ``emit()`` queues; ``flush()`` waits for every delivery report and raises DeliveryError when
    any message was not acknowledged (the error's ``failures`` lists them).
    """

    def __init__(self, settings: EmitterSettings, *, metrics: ProducerMetrics | None = None) -> None:
        if settings.encoding == "confluent" and settings.confluent_schema_id is None:
            if not settings.registry_url:
                raise ConfigurationError("encoding=confluent needs the envelope's Schema Registry id: set "
                                         "LINEAGE_CONFLUENT_SCHEMA_ID or LINEAGE_REGISTRY_URL (or use encoding=avro)")
            settings = settings.model_copy(update={"confluent_schema_id": _register_envelope(settings)})
        self.settings = settings
        self.metrics = metrics or ProducerMetrics()
        self._failures: list[DeliveryFailure] = []
        self._lock = threading.Lock()
        self.queued = 0
        self.delivered = 0
        self.failed = 0
        self._reported = 0
        config = settings.librdkafka_config()
        self._max_bytes = int(config.get("message.max.bytes") or DEFAULT_MESSAGE_MAX_BYTES)
        try:
            self._producer: Producer | None = Producer(
                {**config, "logger": logging.getLogger("producers.librdkafka")})
        except KafkaException as exc:
            raise ConfigurationError(f"invalid producer configuration: {exc}") from exc

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, event: Mapping[str, Any], subject: Mapping[str, Any] | None = None,
               self_link: str | None = None) -> bytes:
        """The message value for ``event`` in the configured encoding."""
        from schemas import codec

        encoding = self.settings.encoding
        if encoding == "avro":
            return codec.encode_single_object(event, subject=subject, self_link=self_link)
        if encoding == "confluent":
            schema_id = self.settings.confluent_schema_id
            assert schema_id is not None  # checked in __init__
            return codec.encode_confluent(event, schema_id, subject=subject,
                                          self_link=self_link)
        return codec.encode_json(event)

    # -- publishing -------------------------------------------------------------------------

    def emit(self, event: Any, *, subject: Mapping[str, Any] | None = None, self_link: str | None = None,
             key: str | None = _AUTO, headers: Sequence[tuple[str, bytes]] | None = None) -> None:
        """Queue one event (dict, model or openlineage-python event). ``subject`` marks a ``$self`` publish."""
        document = as_event_dict(event)
        value = self.encode(document, subject, self_link)
        self.produce(value, key=message_key(document) if key is _AUTO else key,
                     headers=self._headers(subject, headers))

    def emit_raw(self, value: bytes, *, key: str | None, subject: Mapping[str, Any] | None = None,
                 headers: Sequence[tuple[str, bytes]] | None = None) -> None:
        """Queue an already-encoded value (e.g. an Evo lineage document as JSON)."""
        self.produce(value, key=key, headers=self._headers(subject, headers))

    @staticmethod
    def _headers(subject: Mapping[str, Any] | None,
                 headers: Sequence[tuple[str, bytes]] | None) -> list[tuple[str, bytes]]:
        out = list(headers or ())
        if subject is not None:
            out.append(subject_header(subject))
        return out

    def produce(self, value: bytes, *, key: str | None, headers: list[tuple[str, bytes]]) -> None:
        """Hand one message to librdkafka; waits (serving delivery reports) while its queue is full.

        A value over ``message.max.bytes`` (less headroom, :func:`producers.chunking.split_message`) goes
        as consecutive chunks with the same key; the processor reassembles them. When a chunk is refused
        before queueing, the rest are not sent (the failure surfaces at flush; the processor sends the
        incomplete group to its dead-letter topic after its chunk timeout). A ``message.max.bytes`` that
        leaves less than 1 KiB per chunk after the 16 KiB headroom disables chunking: an oversized value
        then fails with ``MSG_SIZE_TOO_LARGE`` as it would without it.
        """
        try:
            parts = split_message(value, headers, self._max_bytes)
        except ValueError:  # a limit too small to chunk under: sent whole, librdkafka reports MSG_SIZE_TOO_LARGE
            parts = [(value, list(headers))]
        if len(parts) > 1:
            self.metrics.chunked(self.settings.topic, len(parts))
        for part, part_headers in parts:
            if not self._produce_one(part, key, part_headers):
                return

    def _produce_one(self, value: bytes, key: str | None, headers: list[tuple[str, bytes | None]]) -> bool:
        """Queue one message; False when it was refused (the failure is recorded)."""
        topic, size = self.settings.topic, len(value)
        encoding = self.settings.encoding

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                with self._lock:
                    self.delivered += 1
                self.metrics.delivered(topic, encoding, size)
            else:
                self._record(DeliveryFailure(topic, key, err.name(), err.str()))

        producer = self._live()
        deadline = time.monotonic() + self.settings.delivery_timeout_ms / 1000
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=cast(Any, headers or None),
                                 on_delivery=on_delivery)
                break
            except BufferError:
                if time.monotonic() > deadline:
                    self._record(DeliveryFailure(topic, key, "_QUEUE_FULL", "local producer queue stayed full"))
                    return False
                producer.poll(0.1)
            except KafkaException as exc:  # refused before queueing, e.g. MSG_SIZE_TOO_LARGE
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                self._record(DeliveryFailure(topic, key, error.name() if error else "PRODUCE",
                                             error.str() if error else str(exc)))
                return False
        with self._lock:
            self.queued += 1
        producer.poll(0)
        return True

    def _live(self) -> Producer:
        if self._producer is None:
            raise LineageError("this LineageEmitter is closed; create a new one")
        return self._producer

    def _record(self, failure: DeliveryFailure) -> None:
        with self._lock:
            if len(self._failures) < MAX_KEPT_FAILURES:  # the count stays exact; the list is bounded
                self._failures.append(failure)
            self.failed += 1
        self.metrics.failed(failure.topic, failure.reason)

    def poll(self, timeout_seconds: float = 0.0) -> int:
        """Serve delivery reports; returns how many were served."""
        return int(self._live().poll(timeout_seconds))

    def take_failures(self) -> list[DeliveryFailure]:
        """The failures collected since the last call (and forget them)."""
        with self._lock:
            failures, self._failures = self._failures, []
        return failures

    def flush(self, timeout_seconds: float | None = None) -> None:
        """Wait for every queued message; raise DeliveryError if any was not acknowledged."""
        timeout = self.settings.flush_timeout_seconds if timeout_seconds is None else timeout_seconds
        remaining = int(self._producer.flush(timeout)) if self._producer is not None else 0
        with self._lock:
            unreported, self._reported = self.failed - self._reported, self.failed
            failures, self._failures = self._failures, []
        if remaining or unreported:
            reasons = sorted({f.reason for f in failures})
            parts = []
            if unreported:
                detail = f" ({', '.join(reasons)}): {failures[0].message}" if failures else ""
                parts.append(f"{unreported} message(s) not acknowledged by the broker{detail}")
            if remaining:
                parts.append(f"{remaining} message(s) still unacknowledged after {timeout:.0f}s "
                             f"(is {self.settings.bootstrap_servers} reachable?)")
            code = f"delivery.{reasons[0].lower().lstrip('_')}" if failures else "delivery.timeout"
            error = DeliveryError("; ".join(parts), code=code)
            error.failures = failures  # type: ignore[attr-defined]
            error.remaining = remaining  # type: ignore[attr-defined]
            raise error

    def close(self, timeout_seconds: float | None = None) -> None:
        """Flush (raising DeliveryError on failures) and release the producer; idempotent."""
        try:
            self.flush(timeout_seconds)
        finally:
            self._producer = None

    def __enter__(self) -> LineageEmitter:
        return self

    def __exit__(self, exc_type: object, *_exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the body's exception; still deliver what was queued
            try:
                self.close()
            except DeliveryError as exc:
                log.error("lineage delivery failed while another error was raised: %s", exc)
