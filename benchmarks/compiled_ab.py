"""The compiled modules against the pure ones, per piece of work: ``python benchmarks/compiled_ab.py [--rounds 5]``.

Each round runs the same workload in two fresh interpreters, one with the compiled twins (schemas/_compiled.py; build
them first: ``python scripts/build_compiled.py``) and one with ``LINEAGE_PURE_PYTHON=1``, alternating which goes
first. A workload times, in CPU time of its thread (``time.thread_time``: other processes do not inflate it), per
demo event (``DemoTraffic(seed=7)``, as ``lineage bench`` sends them) after an untimed warm-up:

- ``decode``: the reader task's ``stream_processor.decode.decode_record`` of each message (Avro / JSON decode,
  validation, canonical text, hash, packing);
- ``staging``: the staging pass's derive + COPY text + annotation keys (``benchmarks/derive_bench.py``'s
  ``stage_text``, 5,000 events a slice, as a batch's partition stages them);
- ``handover``: the enriched record each staged event hands over (``stream_processor.publish.handover_record``);
- ``quality``: ``sink.postgres.annotate_versions`` of one quality-input row per event (a version with row count,
  null counts, schema and an assertion against its previous version);
- ``graph``: ``stream_processor.avro_records.encode_graph_upserts`` of five graph changes per event.

Prints per piece the median and range of microseconds per event for each kind, and the ratio of the medians;
``--json FILE`` writes them. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PIECES = ("decode", "staging", "handover", "quality", "graph")


def _timed(fn: Any, n: int) -> float:
    """CPU microseconds of this thread per item for ``fn()`` over ``n`` items (after one untimed call)."""
    fn()
    started = time.thread_time()
    fn()
    return (time.thread_time() - started) * 1e6 / n


def workload(events: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from datetime import UTC, datetime, timedelta

    from benchmarks.derive_bench import demo_events, demo_messages, stage_text
    from schemas import _compiled
    from sink.postgres import annotate_versions
    from stream_processor.avro_records import encode_graph_upserts
    from stream_processor.decode import decode_record
    from stream_processor.publish import handover_record

    messages = demo_messages(events)
    rows = [dict(r, source_topic="t", source_partition=0, source_offset=i)
            for i, (value, headers) in enumerate(messages) for r in decode_record(value, headers)
            if r["status"] == "ok"]
    stored = demo_events(events)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    fields = [{"name": f"c{i}", "type": "int" if i % 2 else "text"} for i in range(8)]
    inputs = [(f"00000000-0000-0000-0000-{i:012d}", "00000000-0000-0000-0000-0000000000aa", t0 + timedelta(hours=i),
               1000 + i, {"c1": i % 7, "c2": 3}, fields, [{"assertion": "not_null_c1", "success": i % 3 > 0}],
               t0 + timedelta(hours=i, minutes=-5), True, 990 + i, {"c1": 1, "c2": 2}, fields[:-1], [],
               t0 + timedelta(hours=i - 1), None, False) for i in range(events)]
    graph = [{"node_id": f"00000000-0000-0000-0000-{i:012d}", "namespace": "warehouse", "name": f"db.table_{i % 500}",
              "last_seen": "2026-01-01 00:00:00+00:00", "fields": fields[: i % 8], "last_batch_id": 7}
             for i in range(events * 5)]

    def decode() -> None:
        for value, headers in messages:
            decode_record(value, headers)

    return {
        "compiled": sorted(n for n, s in _compiled.status().items() if s == "compiled"),
        "pure": bool(os.environ.get(_compiled.PURE_ENV)),
        "us_per_event": {
            "decode": _timed(decode, len(messages)),
            "staging": _timed(lambda: stage_text(stored), len(stored)),
            "handover": _timed(lambda: [handover_record(r) for r in rows], len(rows)),
            "quality": _timed(lambda: annotate_versions(inputs, 3600.0), len(inputs)),
            "graph": _timed(lambda: list(encode_graph_upserts("lineage_nodes", graph, "node_id", 7)), events),
        },
    }


def _run(pure: bool, events: int) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("LINEAGE_PURE_PYTHON", None)
    if pure:
        env["LINEAGE_PURE_PYTHON"] = "1"
    done = subprocess.run([sys.executable, __file__, "--worker", "--events", str(events)], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(workload(args.events)))
        return
    runs: dict[str, list[dict[str, float]]] = {"compiled": [], "pure": []}
    for i in range(args.rounds):
        for pure in ((False, True) if i % 2 == 0 else (True, False)):
            result = _run(pure, args.events)
            if not pure and not result["compiled"]:
                raise SystemExit("nothing is compiled: run `python scripts/build_compiled.py` first")
            runs["pure" if pure else "compiled"].append(result["us_per_event"])
    out: dict[str, Any] = {"rounds": args.rounds, "events": args.events}
    print(f"{args.rounds} rounds of {args.events} demo events, CPU us per event: median (range)")
    for piece in PIECES:
        figures = {kind: [r[piece] for r in runs[kind]] for kind in runs}
        medians = {kind: statistics.median(v) for kind, v in figures.items()}
        out[piece] = {kind: {"median": round(medians[kind], 2), "min": round(min(v), 2), "max": round(max(v), 2)}
                      for kind, v in figures.items()}
        out[piece]["compiled_over_pure"] = round(medians["compiled"] / medians["pure"], 3)
        print(f"  {piece:9s} pure {medians['pure']:7.1f} ({min(figures['pure']):.1f}-{max(figures['pure']):.1f})   "
              f"compiled {medians['compiled']:7.1f} ({min(figures['compiled']):.1f}-{max(figures['compiled']):.1f})"
              f"   x{out[piece]['compiled_over_pure']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
