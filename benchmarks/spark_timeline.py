"""Where a micro-batch's time goes: jobs, stages and tasks from Spark's event log, on one time line.

    LINEAGE_SPARK_EVENT_LOG=/tmp/ev lineage bench --events 30000 --rate 10 --latency-seconds 1
    python benchmarks/spark_timeline.py /tmp/ev [--min-ms 200]

``LINEAGE_SPARK_EVENT_LOG`` (stream_processor/session.py) turns Spark's event log on. This prints every
job that took at least ``--min-ms``: its start (seconds after the first job), its duration and its
stages, each with its tasks' wall time and JVM CPU time. Python time is wall time minus JVM CPU in
these tasks; the gaps between jobs are the driver's own work (the merge, the Parquet export, Spark's
commit and the planning of the next batch). Reading it for the processor: per micro-batch, job 1 is
the source + decode stage, the dedupe stage and the recombine + staging stage; job 2 is the enrich pass.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def read_events(path: Path) -> list[dict[str, Any]]:
    """The JSON events of every event-log file under ``path`` (plain or zstd-compressed)."""
    files = [p for p in sorted(path.rglob("*")) if p.is_file() and not p.name.startswith(".")
             and not p.name.startswith("appstatus")] if path.is_dir() else [path]
    events = []
    for file in files:
        data = file.read_bytes()
        if file.suffix == ".zstd":   # a log written with Spark's default compression (ours is plain JSON)
            import zstandard

            data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
        events.extend(json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip())
    return events


def timeline(events: list[dict[str, Any]], min_ms: int = 200) -> list[str]:
    jobs: dict[int, dict[str, Any]] = {}
    stages: dict[int, dict[str, Any]] = {}
    tasks: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        kind = e["Event"]
        if kind == "SparkListenerJobStart":
            jobs[e["Job ID"]] = {"start": e["Submission Time"], "stages": e["Stage IDs"]}
        elif kind == "SparkListenerJobEnd" and e["Job ID"] in jobs:
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            stages[info["Stage ID"]] = {"name": info["Stage Name"].split(" at ")[0], "sub": info.get("Submission Time"),
                                        "done": info.get("Completion Time")}
        elif kind == "SparkListenerTaskEnd":
            info, metrics = e["Task Info"], e.get("Task Metrics") or {}
            tasks[e["Stage ID"]].append(((info["Finish Time"] - info["Launch Time"]) / 1000,
                                         metrics.get("Executor CPU Time", 0) / 1e9))
    if not jobs:
        return ["no jobs in the event log"]
    t0 = min(j["start"] for j in jobs.values())
    lines = []
    for job_id, job in sorted(jobs.items()):
        took = job.get("end", job["start"]) - job["start"]
        if took < min_ms:
            continue
        lines.append(f"job {job_id:5d} at {(job['start'] - t0) / 1000:8.2f} s  {took / 1000:6.2f} s")
        for stage_id in job["stages"]:
            stage = stages.get(stage_id)
            if not stage or stage["sub"] is None or stage["done"] is None:
                continue   # skipped (its output was reused)
            spans = ", ".join(f"{w:.2f}/{c:.2f}" for w, c in tasks[stage_id])
            lines.append(f"    stage {stage_id:5d} {stage['name'][:28]:28s} at {(stage['sub'] - t0) / 1000:8.2f} s "
                         f"{(stage['done'] - stage['sub']) / 1000:6.2f} s  tasks wall/jvm-cpu s: {spans}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="the event-log directory (or one file)")
    parser.add_argument("--min-ms", type=int, default=200, help="leave out jobs shorter than this")
    args = parser.parse_args(argv)
    for line in timeline(read_events(args.path), args.min_ms):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
