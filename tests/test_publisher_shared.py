"""RecordPublisher.shared: one producer per worker process and configuration, never one that reported an error."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError

from stream_processor.publish import DeliveryError, RecordPublisher

CONF = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 200, "socket.timeout.ms": 100, "log_level": 0}


@pytest.fixture(autouse=True)
def _forget_publishers() -> Iterator[None]:
    """No producer made by these tests outlives them (it would keep dialling a stopped broker)."""
    from stream_processor import publish

    before = set(publish._SHARED)
    yield
    for key in set(publish._SHARED) - before:
        publish._SHARED.pop(key)


@pytest.mark.integration
def test_the_same_configuration_gets_the_same_publisher_with_fresh_counters(kafka_bootstrap: str,
                                                                           topic_names: dict[str, str]) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    first = RecordPublisher.shared(conf)
    first.publish(topic_names["events"], b"k", b"v")
    assert first.flush() == 1
    first.chunked = 2
    again = RecordPublisher.shared(dict(reversed(list(conf.items()))))
    assert again is first
    assert (again.sent, again.chunked) == (0, 0)
    assert RecordPublisher.shared({**conf, "client.id": "other"}) is not first


def test_a_publisher_that_reported_a_client_error_is_replaced() -> None:
    first = RecordPublisher.shared(CONF)   # (kept while it reports nothing: the integration test above)
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


def test_errors_of_an_idle_publisher_are_served_before_it_is_handed_out_again() -> None:
    """Nothing polls a worker's publisher between tasks: a broker that went away meanwhile is only known once
    its error events are served, which shared() does before choosing."""
    first = RecordPublisher.shared(CONF)    # nothing listens on port 1: connection errors queue up
    time.sleep(1.0)
    assert not first._broken                # not served yet
    assert RecordPublisher.shared(CONF) is not first


def test_a_dropped_publisher_is_freed_at_once_not_by_the_cyclic_collector() -> None:
    """A publisher is no reference cycle (its producer's error callback holds it weakly): dropped, its librdkafka
    handle goes at once. With a cycle, the graph publication's producer of every batch lived until a full
    collection, and a processor died after ~1,000 batches ("Failed to initialize thread local storage")."""
    import gc
    import weakref

    gc.disable()
    try:
        publisher = RecordPublisher(CONF)
        ref = weakref.ref(publisher)
        publisher._producer.poll(0)
        del publisher
        assert ref() is None
    finally:
        gc.enable()


def test_a_publisher_still_hears_of_client_errors() -> None:
    publisher = RecordPublisher(CONF)          # nothing listens on port 1
    deadline = __import__("time").monotonic() + 10
    while not publisher._broken and __import__("time").monotonic() < deadline:
        publisher._producer.poll(0.2)
    assert publisher._broken


@pytest.mark.integration
def test_closing_the_shared_publishers_delivers_what_they_hold_and_drops_them(kafka_bootstrap: str,
                                                                              topic_names: dict[str, str]) -> None:
    from lineage.topic_reader import read_topic
    from stream_processor.publish import close_shared_publishers

    publisher = RecordPublisher.shared({"bootstrap.servers": kafka_bootstrap, "linger.ms": 60000})
    publisher.publish(topic_names["dlq"], b"k", b"held until closed")   # lingers: nothing sent yet
    assert close_shared_publishers() >= 1
    assert RecordPublisher.shared({"bootstrap.servers": kafka_bootstrap, "linger.ms": 60000}) is not publisher
    # read by assign() (no consumer group to join): the record is on the topic once close returned
    got = [message.value() for message in read_topic(kafka_bootstrap, topic_names["dlq"], idle_seconds=5)]
    assert got == [b"held until closed"]


@pytest.mark.integration
def test_warm_connects_and_fetches_the_topics_metadata(kafka_bootstrap: str, topic_names: dict[str, str]) -> None:
    """The writer warms its publishers before the first batch's finishing (GraphBatchWriter._warm_publishers): after
    warm() the producer knows the broker and the topic, and sends as before."""
    publisher = RecordPublisher({"bootstrap.servers": kafka_bootstrap})
    assert publisher.warm([topic_names["enriched"], topic_names["graph"]], timeout_seconds=10)
    known = publisher._producer.list_topics(timeout=10)
    assert {topic_names["enriched"], topic_names["graph"]} <= set(known.topics)
    publisher.publish(topic_names["enriched"], b"k", b"v")
    assert publisher.flush() == 1


def test_warm_against_an_unreachable_cluster_returns_false_and_raises_nothing() -> None:
    publisher = RecordPublisher(CONF)
    assert publisher.warm(["t"], timeout_seconds=0.5) is False
    assert publisher.sent == 0
