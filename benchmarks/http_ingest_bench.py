"""HTTP ingest throughput: demo events through ``POST /api/v1/lineage`` beside the same events produced
straight to Kafka, in the same run, against the embedded broker.

- ``http_single_events_per_s``: one keep-alive HTTP/1.1 connection (``http.client``) posting one event per
  request, sequentially: each answer comes only after the broker acknowledged that event, so this is
  bound by the request round trip including the broker's ``acks=all`` acknowledgement.
- ``http_single_concurrent_events_per_s``: the same with ``--connections`` keep-alive connections in threads
  (what a client that does not wait for each answer before sending the next, or several producers, get).
- ``http_batch_events_per_s``: one keep-alive connection posting JSON arrays of ``--batch`` events.
- ``kafka_direct_events_per_s``: the same events produced by one confluent-kafka producer (idempotent,
  ``acks=all``, JSON values, the official keys) and flushed: the broker-side ceiling of this machine.
- ``kafka_direct_sequential_acked_events_per_s``: the same producer waiting for each event's acknowledgement
  before the next (produce + flush): the floor of any path that answers only after the broker's ack, as a
  sequential single-event HTTP client does.

The server runs as ``python -m lineage serve`` (its own process, uvloop + httptools), as in production.

    python benchmarks/http_ingest_bench.py [--events 5000] [--batch 100] [--connections 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serving import served  # noqa: E402
from lineage.embedded.broker import EmbeddedBroker, create_topics  # noqa: E402
from producers.demo import DemoTraffic  # noqa: E402
from producers.keys import message_key  # noqa: E402


def demo_events(n: int) -> list[dict[str, Any]]:
    """``n`` demo OpenLineage events (Evo documents, which need a subject header, left out)."""
    out: list[dict[str, Any]] = []
    traffic = DemoTraffic(seed=0)
    while len(out) < n:
        out.extend(m.value for m in traffic.take(2 * n) if m.subject is None)
    return out[:n]


def post_all(port: int, bodies: list[bytes]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    for body in bodies:
        conn.request("POST", "/api/v1/lineage", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status not in (200, 201):
            raise SystemExit(f"POST answered {response.status}")
    conn.close()


def timed(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def concurrent(port: int, bodies: list[bytes], connections: int) -> float:
    parts = [bodies[i::connections] for i in range(connections)]
    threads = [threading.Thread(target=post_all, args=(port, p)) for p in parts]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def _warm_up(producer: Any, topic: str, events: list[dict[str, Any]]) -> None:
    """Connect and get the idempotent producer id before timing, as the HTTP server's warm-up does."""
    for event in events[:200]:
        producer.produce(topic, orjson.dumps(event), key=message_key(event))
    if producer.flush(30):
        raise SystemExit("kafka direct: the warm-up was not acknowledged")


def kafka_direct(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": "true",
                         "linger.ms": 5, "compression.type": "lz4"})
    _warm_up(producer, topic, events)
    start = time.perf_counter()
    for event in events:
        producer.produce(topic, orjson.dumps(event), key=message_key(event))
        producer.poll(0)
    if producer.flush(60):
        raise SystemExit("kafka direct: messages left unacknowledged")
    return time.perf_counter() - start


def kafka_direct_sequential(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> float:
    """One event at a time, each waited for (produce + flush): the floor of any "answer after the ack" path."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": "true", "linger.ms": 0})
    _warm_up(producer, topic, events)
    start = time.perf_counter()
    for event in events:
        producer.produce(topic, orjson.dumps(event), key=message_key(event))
        if producer.flush(30):
            raise SystemExit("kafka direct sequential: a message left unacknowledged")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()

    events = demo_events(args.events)
    singles = [orjson.dumps(e) for e in events]
    batches = [orjson.dumps(events[i:i + args.batch]) for i in range(0, len(events), args.batch)]
    broker = EmbeddedBroker(partitions=3, topics=()).start()
    topic = f"bench.{uuid.uuid4().hex[:8]}"
    create_topics(broker.bootstrap, [topic], partitions=3)
    env = {"LINEAGE_POSTGRES_DSN": "postgresql://bench@127.0.0.1:1/none", "LINEAGE_POOL_MIN_SIZE": "0"}
    with served("--bootstrap-servers", broker.bootstrap, "--topic-events", topic, "--data-dir", "/nonexistent",
                env=env) as url:
        port = int(url.rsplit(":", 1)[1])
        post_all(port, singles[:200])  # warm up (imports, connections, producer id)
        n = len(events)
        figures = {
            "events": n,
            "avg_event_bytes": round(sum(map(len, singles)) / n),
            "kafka_direct_events_per_s": n / kafka_direct(broker.bootstrap, topic, events),
            "kafka_direct_sequential_acked_events_per_s": n / kafka_direct_sequential(broker.bootstrap, topic, events),
            "http_single_events_per_s": n / timed(post_all, port, singles),
            "http_single_concurrent_events_per_s": n / concurrent(port, singles, args.connections),
            "http_batch_events_per_s": n / timed(post_all, port, batches),
            "batch": args.batch,
            "connections": args.connections,
        }
    broker.stop()
    for key, value in figures.items():
        print(f"{key:40s} {value:,.0f}" if isinstance(value, float) else f"{key:40s} {value}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
