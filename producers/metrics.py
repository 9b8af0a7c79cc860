"""Prometheus counters of the producer library, in a registry the caller chooses.

- ``lineage_producer_messages_sent_total{topic,encoding}``: messages the broker acknowledged.
- ``lineage_producer_delivery_failures_total{topic,reason}``: messages the broker did not
  acknowledge (``reason`` is librdkafka's error name, e.g. ``_MSG_TIMED_OUT``, ``MSG_SIZE_TOO_LARGE``).
- ``lineage_producer_bytes_sent_total{topic}``: value bytes acknowledged.
- ``lineage_producer_chunked_events_total{topic}``: values over ``message.max.bytes`` split into chunks
  (each chunk then counts as one message above); ``lineage_producer_chunks_total{topic}``: chunks queued.

By default a private :class:`prometheus_client.CollectorRegistry` is used, so that several
emitters in one process never clash; pass ``prometheus_client.REGISTRY`` to expose them with
the process's default ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["ProducerMetrics"]


class ProducerMetrics:
    """The producer's counters, registered in ``registry`` (a new private one when None)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.sent = Counter("lineage_producer_messages_sent", "messages acknowledged by the broker",
                            ["topic", "encoding"], registry=self.registry)
        self.failures = Counter("lineage_producer_delivery_failures", "messages the broker did not acknowledge",
                                ["topic", "reason"], registry=self.registry)
        self.bytes = Counter("lineage_producer_bytes_sent", "value bytes acknowledged by the broker",
                             ["topic"], registry=self.registry)
        self.chunked_events = Counter("lineage_producer_chunked_events", "values split into chunks because they "
                                      "were over message.max.bytes", ["topic"], registry=self.registry)
        self.chunks = Counter("lineage_producer_chunks", "chunks of split values queued", ["topic"],
                              registry=self.registry)

    def chunked(self, topic: str, chunks: int) -> None:
        self.chunked_events.labels(topic).inc()
        self.chunks.labels(topic).inc(chunks)

    def delivered(self, topic: str, encoding: str, size: int) -> None:
        self.sent.labels(topic, encoding).inc()
        self.bytes.labels(topic).inc(size)

    def failed(self, topic: str, reason: str) -> None:
        self.failures.labels(topic, reason).inc()

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (``lineage_producer_messages_sent_total``...), 0 when absent."""
        found = self.registry.get_sample_value(name, labels)
        return float(found) if found is not None else 0.0
