"""The driver's memory batch by batch: ``python benchmarks/driver_memory.py [--events 80000] [--batch-events 100]``.

A soak shows the driver's RSS over an hour but not what it is made of. This drains ``--events`` demo events
(produced up front into the embedded broker; embedded PostgreSQL) with :func:`stream_processor.runner.run_processor`
in this process, in micro-batches of ``--batch-events`` records (small batches: many batches per minute, so a
per-batch growth shows in minutes), and every ``--every`` batches prints one line:

- ``rss``: the process's VmRSS (MB);
- ``glibc_in_use`` / ``glibc_free``: bytes in use and in free chunks in glibc's arenas (``mallinfo2``; free
  chunks below a live one stay resident until ``malloc_trim``, sink/heap.py), ``glibc_mmap``: its mmapped chunks;
- ``arrow``: bytes allocated in pyarrow's default pool;
- ``java_objects``: py4j's live ``JavaObject`` proxies (each pins a JVM object: a batch's ``Dataset`` and plans);
- ``threads``: the process's threads.

``--json FILE`` writes the lines. Prints figures; asserts nothing. Measured 2026-11-26 (HEAD of session 16, 560
batches of 100 events): RSS 272-310 MB with no trend, glibc in use 38.0 -> 39.1 MB, Arrow under 1 MB, live
``JavaObject`` s 30-983 (freed by the periodic full collection).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

try:
    from .e2e_bench import _produce, _values
except ImportError:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.e2e_bench import _produce, _values


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo() -> dict[str, int]:
    """glibc's ``mallinfo2()`` (all arenas): in use, free, mmapped; empty where the C library is not glibc >= 2.33."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    info = fn()
    return {"glibc_in_use": info.uordblks, "glibc_free": info.fordblks, "glibc_mmap": info.hblkhd}


def _rss() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def sample(batch: int) -> dict[str, Any]:
    """One line of figures for the driver as it is now."""
    import py4j.finalizer
    import pyarrow as pa

    return {"batch": batch, "rss": _rss(), **_mallinfo(), "arrow": pa.total_allocated_bytes(),
            "java_objects": len(py4j.finalizer.ThreadSafeFinalizer.finalizers),
            "threads": len(os.listdir("/proc/self/task"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=80_000)
    parser.add_argument("--batch-events", type=int, default=100, help="maxOffsetsPerTrigger of the drain")
    parser.add_argument("--every", type=int, default=20, help="print a line every this many batches")
    parser.add_argument("--json", default=None, help="write the lines to this file (JSON lines)")
    args = parser.parse_args()

    from lineage.embedded.broker import EmbeddedBroker, create_topics
    from lineage.embedded.postgres import EmbeddedPostgres
    from stream_processor.runner import run_processor
    from stream_processor.settings import ProcessorSettings

    work = Path(tempfile.mkdtemp(prefix="lineage-driver-memory-"))
    broker = EmbeddedBroker(partitions=3, topics=(), log_path=work / "tansu.log").start()
    pg = EmbeddedPostgres(work / "pg").start()
    lines: list[dict[str, Any]] = []
    try:
        dsn = pg.create_database("driver_memory")
        topics = {k: f"mem{uuid.uuid4().hex[:6]}.{k}" for k in ("events", "enriched", "graph", "dlq")}
        create_topics(broker.bootstrap, topics.values(), partitions=3)
        _produce(broker.bootstrap, topics["events"], _values("demo", args.events))
        batches = [0]

        def on_batch(_report: Any) -> None:
            batches[0] += 1
            if batches[0] % args.every == 0:
                line = sample(batches[0])
                lines.append(line)
                print(" ".join(f"{k}={v / 1e6:.1f}MB" if k in ("rss", "arrow") or k.startswith("glibc") else f"{k}={v}"
                               for k, v in line.items()), flush=True)

        settings = ProcessorSettings(
            bootstrap_servers=broker.bootstrap, postgres_dsn=dsn, topic_events=topics["events"],
            topic_enriched=topics["enriched"], topic_graph=topics["graph"], topic_dlq=topics["dlq"],
            checkpoint_dir=str(work / "checkpoint"), parquet_dir=str(work / "parquet"), trigger_interval_seconds=0.1,
            recombine_quiet_seconds=2.0, max_offsets_per_trigger=args.batch_events, dedupe_window_seconds=300)
        run_processor(settings, available_now=True, on_batch=on_batch, status=lambda _line: None)
    finally:
        pg.stop()
        broker.stop()
    if args.json:
        Path(args.json).write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


if __name__ == "__main__":
    main()
