"""``AckingProducer``: an idempotent Kafka producer whose sends are awaited until the broker acknowledges.

One confluent-kafka producer (``acks=all``, ``enable.idempotence=true``) shared by every request.
:meth:`AckingProducer.send` queues messages and returns asyncio futures that a background thread
resolves from librdkafka's delivery reports (``poll``), so the event loop never blocks on the broker
and many requests share one batch. A future resolves to ``None`` (acknowledged) or to a
:class:`DeliveryFailure` (the librdkafka error name and text).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

__all__ = ["AckingProducer", "DeliveryFailure", "Message"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeliveryFailure:
    """A message the broker did not acknowledge, or one librdkafka refused to queue."""

    reason: str      # librdkafka error name: _MSG_TIMED_OUT, MSG_SIZE_TOO_LARGE, _QUEUE_FULL ...
    message: str


@dataclass(frozen=True)
class Message:
    topic: str
    value: bytes
    key: str | None = None
    headers: Sequence[tuple[str, bytes]] | None = None


class AckingProducer:
    """Queue messages, await their acknowledgements; :meth:`close` flushes and stops the poll thread."""

    def __init__(self, config: dict[str, str]) -> None:
        self._producer = Producer({**config, "logger": logging.getLogger("api.librdkafka")})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_loop, name="api-kafka-poll", daemon=True)
        self._thread.start()

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)

    def send(self, messages: Sequence[Message]) -> list[asyncio.Future[DeliveryFailure | None]]:
        """Queue ``messages`` (in order); one future per message, resolved on the running loop."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[DeliveryFailure | None]] = []
        for msg in messages:
            future: asyncio.Future[DeliveryFailure | None] = loop.create_future()
            futures.append(future)

            def on_delivery(err: KafkaError | None, _msg: Any, future: asyncio.Future[Any] = future) -> None:
                result = None if err is None else DeliveryFailure(err.name(), err.str())
                loop.call_soon_threadsafe(_resolve, future, result)

            try:
                self._producer.produce(msg.topic, value=msg.value, key=msg.key,
                                       headers=list(msg.headers) if msg.headers else None, on_delivery=on_delivery)
            except BufferError:
                future.set_result(DeliveryFailure("_QUEUE_FULL", "the local producer queue is full"))
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                future.set_result(DeliveryFailure(error.name() if error else "PRODUCE",
                                                  error.str() if error else str(exc)))
        return futures

    def broker_reachable(self, timeout_seconds: float = 2.0) -> bool:
        """True when the cluster's metadata can be fetched within ``timeout_seconds``."""
        try:
            metadata = self._producer.list_topics(timeout=timeout_seconds)
        except KafkaException:
            return False
        return bool(metadata.brokers)

    def close(self, timeout_seconds: float = 10.0) -> int:
        """Wait up to ``timeout_seconds`` for queued messages; returns how many were left unacknowledged."""
        self._stop.set()
        self._thread.join(5)
        return int(self._producer.flush(timeout_seconds))


def _resolve(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # a request that was cancelled (client gone) no longer waits
        future.set_result(result)
