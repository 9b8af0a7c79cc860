"""Read a whole topic (or its tail) with ``assign()``: no consumer group, no committed offsets.

Used by the operator commands (`lineage dlq`, tests) that look at a topic rather than process it.
The end of each partition is taken from the high watermark the *fetch* responses report
(``get_watermark_offsets(cached=True)``), because the embedded broker's ListOffsets(latest) can
lag the log end by the last record batch; reading stops when every partition is at its fetched
high watermark or nothing arrived for ``idle_seconds``.

Messages split into chunks by their producer (:mod:`producers.chunking`) are reassembled: the
reader yields one message with chunk 0's offset and the whole value. A group that cannot be
reassembled (a lost or corrupt chunk, or one still open when reading stops) is yielded as its
first chunk with a ``lineage.chunk.error`` header (``msg.failure`` says why), never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["read_topic"]


def read_topic(bootstrap: str, topic: str, *, from_beginning: bool = True, idle_seconds: float = 2.0,
               max_messages: int | None = None, extra_config: dict[str, Any] | None = None) -> Iterator[Any]:
    """Yield the messages of ``topic`` (confluent_kafka.Message objects without errors, or
    :class:`producers.chunking.KafkaRecord` for chunked ones), partition order kept but for chunked
    messages (yielded when their last chunk arrives)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

    from producers.chunking import TopicReassembler

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "lineage-topic-reader", "enable.auto.commit": False,
        "enable.partition.eof": True, **(extra_config or {}),
    })
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions) if topic in metadata.topics else []
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        at_eof: set[int] = set()
        seen = 0
        chunks = TopicReassembler()
        while partitions and len(at_eof) < len(partitions):
            batch = consumer.consume(500, timeout=idle_seconds)
            if not batch:
                break
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(msg.partition())
                        continue
                    raise RuntimeError(f"reading {topic}: {err}")
                at_eof.discard(msg.partition())
                for out in chunks.add(msg):
                    yield out
                    seen += 1
                    if max_messages is not None and seen >= max_messages:
                        return
        yield from chunks.give_up("reading stopped at the end of the topic before the group completed")
    finally:
        consumer.close()
