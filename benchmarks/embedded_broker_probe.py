"""The embedded broker's cost per record batch: ``python benchmarks/embedded_broker_probe.py [--steps 2000,10000,40000]``.

tansu's memory storage (the embedded default, ``lineage.embedded.broker``) keeps one object per record batch, and
ListOffsets and Fetch cost broker CPU linear in a partition's batch count (2026-11-26: 3 ms per ListOffsets at
2,000 batches, 54 ms at 40,000): the processor asks both every micro-batch, so a broker fed one record per batch for
~20 minutes at 200 msg/s stalled a soak. This starts an embedded broker with one partition, produces ``--record-bytes``
records one per batch (a flush after each) up to each step, and prints per step the broker CPU and wall time of
``--calls`` ListOffsets and of a fetch of the last record by a fresh assignment. ``--linger-ms N`` produces with that
linger instead of one record per batch (as fast as it can: batches then hold many records).
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
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
