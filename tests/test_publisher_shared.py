"""RecordPublisher.shared: one producer per worker process and configuration, never a broken one (no broker
needed: nothing here is delivered)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError

from stream_processor.publish import DeliveryError, RecordPublisher

CONF = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 200, "socket.timeout.ms": 100, "log_level": 0}


@pytest.fixture(autouse=True)
def _forget_publishers() -> Iterator[None]:
    """No producer of these tests outlives them (they would keep dialling port 1 until the session ends)."""
    from stream_processor import publish

    yield
    for key in [k for k in publish._SHARED if '"127.0.0.1:1"' in k]:
        publish._SHARED.pop(key)


def test_the_same_configuration_gets_the_same_publisher_with_fresh_counters() -> None:
    first = RecordPublisher.shared(CONF)
    first.sent, first.chunked = 7, 2
    again = RecordPublisher.shared(dict(reversed(list(CONF.items()))))
    assert again is first
    assert (again.sent, again.chunked) == (0, 0)
    assert RecordPublisher.shared({**CONF, "client.id": "other"}) is not first


def test_a_publisher_that_saw_the_cluster_down_or_a_fatal_error_is_replaced() -> None:
    first = RecordPublisher.shared(CONF)
    first._on_error(KafkaError(KafkaError._TRANSPORT))          # one connection failing: kept
    assert RecordPublisher.shared(CONF) is first
    first._on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    second = RecordPublisher.shared(CONF)
    assert second is not first
    second._on_error(KafkaError(KafkaError._FATAL, fatal=True))
    assert RecordPublisher.shared(CONF) is not second


def test_a_failed_flush_evicts_the_publisher() -> None:
    publisher = RecordPublisher.shared(CONF)
    publisher.publish("t", b"k", b"value")
    with pytest.raises(DeliveryError):
        publisher.flush(timeout_seconds=5)    # nothing listens on port 1: the message times out
    assert RecordPublisher.shared(CONF) is not publisher
