"""The embedded broker's cost per record batch: ``python benchmarks/embedded_broker_probe.py [--steps 2000,10000,40000]``.

tansu's memory storage (the embedded default, ``lineage.embedded.broker``) keeps one object per record batch, and
ListOffsets and Fetch cost broker CPU linear in a partition's batch count (2026-11-26: 3 ms per ListOffsets at
2,000 batches, 54 ms at 40,000): the processor asks both every micro-batch, so a broker fed one record per batch for
~20 minutes at 200 msg/s stalled a soak. This starts an embedded broker with one partition, produces ``--record-bytes``
records one per batch (a flush after each) up to each step, and prints per step the broker CPU and wall time of
``--calls`` ListOffsets and of a fetch of the last record by a fresh assignment. ``--linger-ms N`` produces with that
linger instead of one record per batch (as fast as it can: batches then hold many records).

``--demo-seconds S [--demo-rate R] [--burst-seconds B]`` measures instead what ``lineage up``'s demo traffic makes:
demo messages published for S seconds at R msg/s with ``DEMO_LINGER_MS``, in bursts of B seconds (default
``DEMO_BURST_SECONDS``; 0: evenly paced), into a topic of three partitions, while ListOffsets is asked every 10 ms
per partition. tansu's ListOffsets answers the start offset of a partition's last record batch, so the distinct
answers count the record batches the traffic made (a lower bound); printed per partition and hour.

``--memory N [--compressions none,lz4,zstd]`` measures what the broker's memory holds of records: for each
``compression.type`` a fresh broker takes the first N messages of ``lineage bench``'s demo traffic (as the bench sends
them), and its RSS before and after is printed beside the bytes of the values sent. The broker keeps record batches
as they arrive: 40,000 demo messages (157.6 MB of values) grew it by 171 MB uncompressed and 37 MB as lz4 (2026-11-29).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from lineage.embedded.broker import EmbeddedBroker, create_topics

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", default="2000,10000,20000,40000", help="record counts to measure at")
    parser.add_argument("--record-bytes", type=int, default=300)
    parser.add_argument("--calls", type=int, default=20, help="ListOffsets calls per step")
    parser.add_argument("--linger-ms", type=int, default=None, help="batch normally with this linger")
    parser.add_argument("--demo-seconds", type=float, default=None, help="count the record batches of demo traffic")
    parser.add_argument("--demo-rate", type=float, default=50.0)
    parser.add_argument("--burst-seconds", type=float, default=None)
    parser.add_argument("--memory", type=int, default=None, help="measure the broker's RSS for this many demo messages")
    parser.add_argument("--compressions", default="none,lz4,zstd", help="compression.type values for --memory")
    args = parser.parse_args(argv)
    if args.demo_seconds:
        return _demo_batches(args.demo_seconds, args.demo_rate, args.burst_seconds)
    if args.memory:
        return _memory(args.memory, args.compressions.split(","))
    steps = sorted(int(s) for s in args.steps.split(","))
    with tempfile.TemporaryDirectory(prefix="broker-probe-") as tmp:
        broker = EmbeddedBroker(partitions=1, topics=(), log_path=Path(tmp) / "tansu.log").start()
        try:
            create_topics(broker.bootstrap, ["probe"], partitions=1)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": args.linger_ms or 0})
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe",
                                 "enable.auto.commit": False})
            value, produced = b"x" * args.record_bytes, 0
            for target in steps:
                while produced < target:
                    producer.produce("probe", value=value)
                    produced += 1
                    if args.linger_ms is None:
                        producer.flush()          # one record per batch: one object in the broker
                    elif produced % 1000 == 0:
                        producer.poll(0)
                producer.flush()
                tp = TopicPartition("probe", 0)
                started, cpu = time.perf_counter(), _cpu_seconds(broker.pid)
                for _ in range(args.calls):
                    consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                lo_wall = (time.perf_counter() - started) / args.calls
                lo_cpu = (_cpu_seconds(broker.pid) - cpu) / args.calls
                started, cpu = time.perf_counter(), _cpu_seconds(broker.pid)
                consumer.assign([TopicPartition("probe", 0, produced - 1)])
                got = consumer.poll(10) is not None
                consumer.unassign()
                print(f"{produced:8d} records: ListOffsets {lo_wall * 1000:6.1f} ms ({lo_cpu * 1000:5.1f} ms broker CPU), "
                      f"fetch of the last {(time.perf_counter() - started) * 1000:6.0f} ms "
                      f"({(_cpu_seconds(broker.pid) - cpu) * 1000:4.0f} ms broker CPU){'' if got else ', nothing fetched'}",
                      flush=True)
            consumer.close()
        finally:
            broker.stop()
    return 0


def _memory(n: int, compressions: list[str]) -> int:
    from benchmarks.e2e_bench import _demo_values, _produce
    from benchmarks.rss_by_process import _rss
    from lineage.embedded.broker import EmbeddedBroker, create_topics

    def rss_mib(pid: int) -> float:
        return (_rss(pid) or 0) / 2**20

    values_mib = sum(len(value) for value, _headers in _demo_values(n)) / 2**20

    for compression in compressions:
        with tempfile.TemporaryDirectory(prefix="broker-probe-") as tmp:
            broker = EmbeddedBroker(partitions=3, topics=(), log_path=Path(tmp) / "tansu.log").start()
            try:
                create_topics(broker.bootstrap, ["memory"], partitions=3)
                time.sleep(0.5)
                before = rss_mib(broker.pid)
                _produce(broker.bootstrap, "memory", _demo_values(n), compression=compression)
                time.sleep(1.0)
                after = rss_mib(broker.pid)
                print(f"compression {compression}: {n} messages, {values_mib:.1f} MiB of values, broker RSS "
                      f"{before:.0f} -> {after:.0f} MiB (+{after - before:.0f})", flush=True)
            finally:
                broker.stop()
    return 0


def _demo_batches(seconds: float, rate: float, burst_seconds: float | None) -> int:
    import threading

    from confluent_kafka import Consumer, TopicPartition

    from lineage.embedded.broker import DEMO_BURST_SECONDS, DEMO_LINGER_MS, EmbeddedBroker, create_topics
    from producers.demo import publish_demo
    from producers.emitter import LineageEmitter
    from producers.settings import EmitterSettings

    burst = DEMO_BURST_SECONDS if burst_seconds is None else burst_seconds
    with tempfile.TemporaryDirectory(prefix="broker-probe-") as tmp:
        broker = EmbeddedBroker(partitions=3, topics=(), log_path=Path(tmp) / "tansu.log").start()
        try:
            create_topics(broker.bootstrap, ["demo"], partitions=3)
            stop, box = threading.Event(), {}
            settings = EmitterSettings(bootstrap_servers=broker.bootstrap, topic="demo", linger_ms=DEMO_LINGER_MS)

            def publish() -> None:
                with LineageEmitter(settings) as emitter:
                    box["stats"] = publish_demo(emitter, rate=rate, duration_seconds=seconds, stop=stop,
                                                burst_seconds=burst)

            thread = threading.Thread(target=publish, daemon=True)
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
            tps = [TopicPartition("demo", p) for p in range(3)]
            seen: list[set[int]] = [set() for _ in tps]
            thread.start()
            while thread.is_alive():
                for i, tp in enumerate(tps):
                    seen[i].add(consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1])
                time.sleep(0.01)
            time.sleep(1.0)   # the last linger
            for i, tp in enumerate(tps):
                seen[i].add(consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1])
            consumer.close()
            stats = box.get("stats")
            batches = [len(s - {0}) + 1 for s in seen]
            per_hour = [round(b * 3600 / seconds) for b in batches]
            print(f"demo {rate:g} msg/s for {seconds:g} s, linger {DEMO_LINGER_MS} ms, bursts of {burst:g} s: "
                  f"{stats.messages if stats else '?'} messages, record batches per partition >= {batches} "
                  f"(~{per_hour} per hour)", flush=True)
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
