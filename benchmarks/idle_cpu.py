"""CPU an idle processor burns: ``lineage process``'s query with no input, measured over a window.

    python benchmarks/idle_cpu.py [--trigger-seconds 1.0] [--warmup-seconds 90] [--window-seconds 60]

Starts the embedded broker and PostgreSQL, runs :func:`stream_processor.runner.run_processor` on a thread,
produces 10 events (so that the query has processed data), waits ``--warmup-seconds`` (startup, those
events, their quiet period) and then prints the CPU seconds of this process tree (driver, JVM, Python
workers, broker, PostgreSQL) during ``--window-seconds`` with nothing arriving: the empty micro-batch
the source's tick starts every ``tick_interval()`` (5 s by default; ``--tick-seconds 0`` gives Spark's
no-data micro-batch on every trigger, as before ticks). Prints figures; asserts nothing.

Measured (2-core machine, trigger 1 s): 20.8 CPU-s in 50 s (42 % of a core) with a no-data batch per
trigger; 5.0 CPU-s in 50 s (10 %) with a tick every 5 s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and all its descendants, from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total, stack = 0.0, [pid]
    while stack:
        p = stack.pop()
        total += cpu.get(p, 0.0)
        stack.extend(children.get(p, []))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--warmup-seconds", type=float, default=90.0)
    parser.add_argument("--window-seconds", type=float, default=60.0)
    parser.add_argument("--tick-seconds", type=float, default=None, help="default: the processor's own")
    args = parser.parse_args()

    from lineage.embedded.broker import EmbeddedBroker
    from lineage.embedded.postgres import EmbeddedPostgres
    from stream_processor.runner import run_processor
    from stream_processor.settings import ProcessorSettings
    from stream_processor.testing import json_bytes, produce, run_event

    work = Path(tempfile.mkdtemp(prefix="lineage-idle-"))
    broker = EmbeddedBroker().start()
    pg = EmbeddedPostgres(work / "pg").start()
    stop = threading.Event()
    try:
        settings = ProcessorSettings(bootstrap_servers=broker.bootstrap, postgres_dsn=pg.create_database("idle"),
                                     checkpoint_dir=str(work / "ck"), trigger_interval_seconds=args.trigger_seconds,
                                     tick_seconds=args.tick_seconds)
        runner = threading.Thread(target=run_processor, args=(settings,),
                                  kwargs={"stop_event": stop, "status": lambda _s: None}, daemon=True)
        runner.start()
        produce(broker.bootstrap, settings.topic_events, [json_bytes(run_event()) for _ in range(10)])
        time.sleep(args.warmup_seconds)
        cpu0, wall0 = tree_cpu_seconds(os.getpid()), time.monotonic()
        time.sleep(args.window_seconds)
        cpu, wall = tree_cpu_seconds(os.getpid()) - cpu0, time.monotonic() - wall0
        print(f"idle, trigger {args.trigger_seconds:g} s: {cpu:.1f} CPU-s in {wall:.0f} s "
              f"({cpu / wall * 100:.0f} % of a core)", flush=True)
        stop.set()
        runner.join(60)
    finally:
        pg.stop()
        broker.stop()


if __name__ == "__main__":
    main()
