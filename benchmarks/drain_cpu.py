"""CPU per event of the processor's drain, by kind of process: ``python benchmarks/drain_cpu.py -- lineage bench ...``.

Throughput on the shared 2-core machine swings by +-10 % between runs of one code (2026-11-26: 1,165-1,404
events/s in three interleaved runs), which hides changes of a few percent. The CPU the processes spend per
event in the drain is counted work, and it says where a change moved work, not only whether the total moved.

The command runs with Spark's event log on (``LINEAGE_SPARK_EVENT_LOG``, a temporary directory) under
:func:`benchmarks.cpu_by_process.cpu_seconds`, sampled every ``--interval`` seconds. The window is the first
streaming query's micro-batches of more than ``--min-rows`` rows after its first (the warm-up; for ``lineage
bench``: the throughput drain), from the start of the first to the end of the last (their progress events);
the figures are the CPU of each kind in the window divided by the rows of those batches. The finishing of the
window's last batch (its merge, enrich and Parquet) falls after the window and that of the batch before the
first inside it, so the two roughly cancel.

Prints ``events/s`` (rows / window), ``ms_cpu_per_event`` (all kinds), ``utilisation`` (CPU / window / cores) and
the milliseconds per event of each kind; ``--json FILE`` writes the same.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

try:
    from .cpu_by_process import cpu_seconds, parse_wrapper_args
    from .spark_timeline import read_events
except ImportError:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.cpu_by_process import cpu_seconds, parse_wrapper_args
    from benchmarks.spark_timeline import read_events

__all__ = ["drain_window", "main"]


def drain_window(events: list[dict[str, Any]], min_rows: int) -> tuple[float, float, int, int]:
    """(start, end) epoch seconds, rows and batches of the drain: the first query's batches of more than
    ``min_rows`` rows, its first such batch left out."""
    batches = []
    for e in events:
        if not e["Event"].endswith("QueryProgressEvent"):
            continue
        p = e["progress"]
        rows = sum(s.get("numInputRows", 0) for s in p["sources"])
        if rows > min_rows:
            start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
            batches.append((p["runId"], p["batchId"], start, start + p["durationMs"]["triggerExecution"] / 1000, rows))
    if not batches:
        raise SystemExit(f"no micro-batch of more than {min_rows} rows in the event log")
    first_run = batches[0][0]
    drain = sorted((b for b in batches if b[0] == first_run), key=lambda b: b[1])[1:]
    if not drain:
        raise SystemExit("one micro-batch only: nothing after the warm-up to measure")
    return drain[0][2], drain[-1][3], sum(b[4] for b in drain), len(drain)


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--min-rows", type=int, default=1000, help="batches with more rows than this are the drain's")
        parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)

    ns, command = parse_wrapper_args(argv, __doc__, 0.25, options=options, tree=True)
    samples: list[tuple[float, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="drain-cpu-") as log_dir:
        os.environ["LINEAGE_SPARK_EVENT_LOG"] = log_dir
        began = time.time()
        _, _, code = cpu_seconds(command, ns.interval, lambda t, step: samples.append((began + t, step)),
                                 tree=ns.tree)
        if code:
            print(f"the command failed (exit code {code})", file=sys.stderr)
            return code
        start, end, rows, batches = drain_window(read_events(Path(log_dir)), ns.min_rows)
    by_kind: dict[str, float] = {}
    for at, step in samples:
        if start <= at <= end:
            for kind, used in step.items():
                by_kind[kind] = by_kind.get(kind, 0.0) + used
    window = end - start
    total = sum(by_kind.values())
    result = {"window_seconds": round(window, 2), "batches": batches, "events": rows,
              "events_per_s": round(rows / window, 1), "ms_cpu_per_event": round(total / rows * 1000, 4),
              "utilisation": round(total / window / ns.cores, 3),
              "ms_per_event_by_kind": {k: round(v / rows * 1000, 4) for k, v in sorted(by_kind.items())}}
    print(f"drain: {batches} batches, {rows} events in {window:.1f} s = {result['events_per_s']} events/s; "
          f"{result['ms_cpu_per_event']} ms of CPU per event, {result['utilisation']:.0%} of {ns.cores} cores")
    for kind, ms in sorted(result["ms_per_event_by_kind"].items(), key=lambda kv: -kv[1]):
        print(f"{kind:>22}: {ms:7.3f} ms/event")
    if ns.json_file:
        Path(ns.json_file).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
