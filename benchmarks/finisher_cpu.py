"""The driver's CPU per finishing step of ``lineage bench``: ``python benchmarks/finisher_cpu.py [-- BENCH ARGS...]``.

``drain_cpu.py`` gives the bench's own process one figure (~0.13 ms of CPU per event in session 26's drain); py-spy's
samples of that process count a thread waiting in a C call (librdkafka's ``flush``, libpq) as busy. This runs
``lineage bench`` in this process with the steps of :class:`stream_processor.writer.GraphBatchWriter` wrapped, and
adds each call's thread CPU (``time.thread_time``: the calling thread only, waits excluded) and wall time per step:

* ``finish``: a batch's whole finishing on the finisher thread (the steps below but ``$self`` and the graph
  publication, which run on threads of their own, plus the bookkeeping between them);
* ``merge``: ``GraphStore.merge``, the client's side (issuing the statements, the quality annotations in Python);
* ``enrich``, ``changed_rows`` (the export's read), ``parquet_write``, ``graph_publish``, ``recombine`` (`$self`);
* ``stage_call``: ``foreachBatch``'s own thread (submitting the staging job, marking the batch).

The default bench is ``--events 40000 --rate 1000 --latency-seconds 1`` (arguments after ``--`` replace it); the
figures cover every batch of the run, the first (cold) one and the latency phase's included. Prints the steps, CPU
first; asserts nothing.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_BENCH = ["--events", "40000", "--rate", "1000", "--latency-seconds", "1"]

#: ``(class path, method, step)`` wrapped.
STEPS = (
    ("stream_processor.writer.GraphBatchWriter", "_finish", "finish"),
    ("sink.postgres.GraphStore", "merge", "merge"),
    ("stream_processor.writer.GraphBatchWriter", "_enrich", "enrich"),
    ("stream_processor.writer.GraphBatchWriter", "_changed_rows", "changed_rows"),
    ("stream_processor.writer.GraphBatchWriter", "_write_parquet", "parquet_write"),
    ("stream_processor.writer.GraphBatchWriter", "_publish_graph", "graph_publish"),
    ("stream_processor.writer.GraphBatchWriter", "_recombine", "recombine"),
    ("stream_processor.writer.GraphBatchWriter", "_write", "stage_call"),
)


class StepClock:
    """Thread CPU, wall time and calls per step, from any thread."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
        self._lock = threading.Lock()

    def wrap(self, owner: Any, name: str, step: str) -> None:
        method = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                with self._lock:
                    total = self.totals[step]
                    total[0] += time.thread_time() - cpu
                    total[1] += time.perf_counter() - wall
                    total[2] += 1

        setattr(owner, name, timed)

    def report(self) -> str:
        lines = [f"{'step':>14}  {'calls':>5}  {'thread CPU s':>12}  {'wall s':>7}"]
        for step, (cpu, wall, calls) in sorted(self.totals.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"{step:>14}  {int(calls):5d}  {cpu:12.2f}  {wall:7.2f}")
        return "\n".join(lines)


def _owner(path: str) -> Any:
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    bench = args[args.index("--") + 1:] if "--" in args else DEFAULT_BENCH
    clock = StepClock()
    for path, name, step in STEPS:
        clock.wrap(_owner(path), name, step)
    from lineage.cli import main as lineage_main

    try:
        return int(lineage_main(["bench", *bench]) or 0)
    finally:
        print(clock.report())


if __name__ == "__main__":
    sys.exit(main())
