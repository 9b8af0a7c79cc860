"""Producer throughput: events/s through LineageEmitter into the embedded broker (Avro single-object).

For a few (compression, linger.ms) settings it measures, on the same pre-generated demo events:

- produce: events / (first emit .. flush returned, every delivery report OK), encoding included;
- produce pre-encoded: the same with values encoded beforehand (emit_raw): the Kafka side alone;
- consume: events / time to read them all back with one assign()ed consumer (what the processor pays
  for the producer's compression choice);
- encode only: encode_single_object() alone, the CPU floor of the producer.

    python benchmarks/producer_throughput.py [--events 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from lineage.embedded.broker import EmbeddedBroker, create_topics
from producers.demo import DemoTraffic
from producers.emitter import LineageEmitter
from producers.keys import message_key
from producers.settings import EmitterSettings
from schemas.codec import encode_single_object

SETTINGS = [("none", 5), ("none", 20), ("lz4", 5), ("lz4", 20), ("lz4", 100), ("snappy", 20), ("zstd", 20)]


def consume_rate(bootstrap: str, topic: str, expected: int, timeout: float = 120.0) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 52_428_800})
    partitions = consumer.list_topics(topic, timeout=15).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    seen, start = 0, time.perf_counter()
    deadline = time.monotonic() + timeout
    while seen < expected and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen / elapsed if seen == expected else float("nan")


def run(events: list[dict[str, Any]], bootstrap: str) -> list[dict[str, Any]]:
    results = []
    size = sum(len(encode_single_object(e)) for e in events) / len(events)
    start = time.perf_counter()
    for e in events:
        encode_single_object(e)
    encode_rate = len(events) / (time.perf_counter() - start)
    encoded = [(encode_single_object(e), message_key(e)) for e in events]
    print(f"{len(events)} demo events, mean Avro size {size:.0f} B; encode only: {encode_rate:,.0f} events/s")
    for compression, linger in SETTINGS:
        topic = f"bench.{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, [topic], 3)
        settings = EmitterSettings(bootstrap_servers=bootstrap, topic=topic, compression_type=compression,
                                   linger_ms=linger)
        emitter = LineageEmitter(settings)
        start = time.perf_counter()
        for e in events:
            emitter.emit(e)
        emitter.close()
        produce = len(events) / (time.perf_counter() - start)
        consume = consume_rate(bootstrap, topic, len(events))
        raw_topic = f"bench.{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, [raw_topic], 3)
        emitter = LineageEmitter(settings.model_copy(update={"topic": raw_topic}))
        start = time.perf_counter()
        for value, key in encoded:
            emitter.emit_raw(value, key=key)
        emitter.close()
        raw = len(events) / (time.perf_counter() - start)
        row = {"compression": compression, "linger_ms": linger, "produce_events_per_s": round(produce),
               "produce_pre_encoded_events_per_s": round(raw),
               "consume_events_per_s": round(consume) if consume == consume else None,
               "mean_event_bytes": round(size), "encode_only_events_per_s": round(encode_rate)}
        results.append(row)
        print(f"compression={compression:6s} linger.ms={linger:3d}: produce {produce:9,.0f} events/s "
              f"(pre-encoded {raw:9,.0f}), "
              f"consume {consume:9,.0f} events/s")
    return results


def run_small_batches(events: list[dict[str, Any]], bootstrap: str, count: int = 3000) -> list[dict[str, Any]]:
    """Sporadic producers: linger.ms=0 and a poll after each event, so batches hold one or a few events."""
    results = []
    for compression in ("none", "lz4", "zstd"):
        topic = f"bench.{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, [topic], 3)
        emitter = LineageEmitter(EmitterSettings(bootstrap_servers=bootstrap, topic=topic,
                                                 compression_type=compression, linger_ms=0))
        start = time.perf_counter()
        for e in events[:count]:
            emitter.emit(e)
            emitter.poll(0.0005)
        emitter.close()
        produce = count / (time.perf_counter() - start)
        consume = consume_rate(bootstrap, topic, count)
        results.append({"compression": compression, "linger_ms": 0, "small_batches": True,
                        "produce_events_per_s": round(produce),
                        "consume_events_per_s": round(consume) if consume == consume else None})
        print(f"small batches compression={compression:6s}: produce {produce:9,.0f} events/s, "
              f"consume {consume:9,.0f} events/s")
    return results


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    for key in rows[0]:
        if key.endswith("_per_s") and all(r[key] is not None for r in rows):
            out[key] = round(statistics.median(r[key] for r in rows))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=1, help="run each setting N times; report medians")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    traffic = DemoTraffic(42).take(args.events)
    events = [e for m in traffic for e in (m.value["events"] if m.subject else [m.value])][: args.events]
    with EmbeddedBroker(partitions=3, topics=()) as broker:
        rounds = [run(events, broker.bootstrap) + run_small_batches(events, broker.bootstrap)
                  for _ in range(args.repeat)]
    results = [_median_row([r[i] for r in rounds]) for i in range(len(rounds[0]))]
    if args.repeat > 1:
        print(f"medians of {args.repeat} rounds:")
        for row in results:
            print("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
