"""``AckingProducer``: an idempotent Kafka producer whose sends are awaited until the broker acknowledges.

One confluent-kafka producer (``acks=all``, ``enable.idempotence=true``) shared by every request.
:meth:`AckingProducer.send` queues messages and returns one asyncio future that a background thread
resolves from librdkafka's delivery reports (``poll``) once the last of them is in (one loop wake-up per
call, not per message), so the event loop never blocks on the broker and concurrent requests share
batches. Each message's result is a :class:`Delivered` (partition and offset the broker acknowledged)
or a :class:`DeliveryFailure` (the librdkafka error name and text).

Broker down: librdkafka's ``_ALL_BROKERS_DOWN`` error marks the producer unavailable
(:attr:`AckingProducer.available` is False) so requests are refused at once (503) instead of each
waiting for its delivery timeout; the poll thread probes the cluster's metadata every
``probe_interval_seconds`` and marks it available again when the broker answers (or on any
acknowledged delivery).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

__all__ = ["AckingProducer", "Delivered", "DeliveryFailure", "Message"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivered:
    """Where the broker stored an acknowledged message."""

    topic: str
    partition: int
    offset: int


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

    def __init__(self, config: dict[str, str], *, probe_interval_seconds: float = 2.0) -> None:
        self._producer = Producer({**config, "logger": logging.getLogger("api.librdkafka"),
                                   "error_cb": self._on_error})
        self.available = True
        self._probe_interval = probe_interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_loop, name="api-kafka-poll", daemon=True)
        self._thread.start()

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if self.available:
                log.warning("Kafka unreachable (%s): ingest answers 503 until it is back", err.str())
            self.available = False
        elif err.fatal():
            log.error("fatal Kafka producer error: %s", err.str())

    def _poll_loop(self) -> None:
        next_probe = 0.0
        while not self._stop.is_set():
            self._producer.poll(0.05)
            if not self.available and time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self._probe_interval
                if self.broker_reachable(1.0):
                    log.warning("Kafka reachable again")
                    self.available = True

    def send(self, messages: Sequence[Message]) -> asyncio.Future[list[Delivered | DeliveryFailure]]:
        """Queue ``messages`` (in order); one future for all of them, resolved on the running loop with one
        result per message once the last delivery report is in (one loop wake-up per call, not per message)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Delivered | DeliveryFailure]] = loop.create_future()
        results: list[Delivered | DeliveryFailure | None] = [None] * len(messages)
        pending = [len(messages)]
        lock = threading.Lock()

        def settle(index: int, result: Delivered | DeliveryFailure) -> None:
            results[index] = result
            with lock:
                pending[0] -= 1
                done = pending[0] == 0
            if done:
                loop.call_soon_threadsafe(_resolve, future, results)

        def reporter(index: int) -> Any:
            def on_delivery(err: KafkaError | None, kmsg: Any) -> None:
                if err is None:
                    self.available = True
                    settle(index, Delivered(kmsg.topic(), kmsg.partition(), kmsg.offset()))
                else:
                    settle(index, DeliveryFailure(err.name(), err.str()))
            return on_delivery

        if not messages:
            future.set_result([])
        for index, msg in enumerate(messages):
            try:
                self._producer.produce(msg.topic, value=msg.value, key=msg.key,
                                       headers=list(msg.headers) if msg.headers else None,
                                       on_delivery=reporter(index))
            except BufferError:
                settle(index, DeliveryFailure("_QUEUE_FULL", "the local producer queue is full"))
            except KafkaException as exc:
                error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                settle(index, DeliveryFailure(error.name() if error else "PRODUCE", error.str() if error else str(exc)))
        return future

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
        future.set_result(list(result))
