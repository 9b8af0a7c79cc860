"""CPU seconds per kind of process while a command runs: ``python benchmarks/cpu_by_process.py -- CMD...``.

Throughput on the shared 2-core machine drifts by 2x between runs (docs/ARCHITECTURE.md, "Finding where
the time goes"); the CPU each part of the processor burns is steadier evidence of what a change did. Every
``--interval`` seconds this reads ``/proc/<pid>/stat`` of every process on the machine, remembers each
process's last cumulative CPU time and its kind, and at the end prints, per kind, the CPU used while the
command ran (processes that start and end between two samples are missed: keep the interval short).

Kinds, from the command line: ``jvm`` (java, the Spark driver), ``spark-python`` (Python workers and
daemons, whatever the daemon module), ``spark-source-runner`` (the Python streaming source's planner),
``postgres``, ``broker`` (tansu), ``driver`` (the command's own Python process), ``python`` (other
Python), ``other``.

Output: a table, and with ``--json FILE`` ``{"wall_seconds", "cpu_seconds": {kind: s}}``. With ``--series FILE``
also one JSON line per sample, ``{"t": seconds, kind: CPU-s in that interval}``: over ``lineage bench``
it shows the dips at each micro-batch's boundary (2026-11-26: ~0.5-1 s at 60-70 % of two cores per ~2.5 s
batch, only the driver busy), where the batches' CPU is otherwise ~85 % of both cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

__all__ = ["classify", "cpu_seconds", "main"]

_TICKS = os.sysconf("SC_CLK_TCK")


def classify(cmdline: str, driver_pid: int | None = None, pid: int | None = None) -> str:
    """The kind of a process from its NUL-free command line."""
    if pid is not None and pid == driver_pid:
        return "driver"
    argv0 = cmdline.split(" ", 1)[0]
    if argv0.endswith("/java") or argv0 == "java":
        return "jvm"
    if "org.apache.spark.deploy.SparkSubmit" in cmdline:
        # spark-submit's bash launcher, about to exec java: "other" is looked at again (its --conf options
        # name the worker daemon module, which would otherwise make the JVM count as "spark-python")
        return "other"
    if "python_streaming_source_runner" in cmdline:
        return "spark-source-runner"
    if "pyspark.worker" in cmdline or "pyspark.daemon" in cmdline or "spark_daemon" in cmdline \
            or "pyspark.sql.worker" in cmdline:
        return "spark-python"
    if "postgres" in argv0 or "postgres:" in cmdline:
        return "postgres"
    if "tansu" in cmdline:
        return "broker"
    if "python" in argv0:
        return "python"
    return "other"


def _snapshot(parents: dict[int, tuple[int, int]] | None = None) -> dict[int, float]:
    """Cumulative CPU seconds of every process; ``parents`` (when given) gets each one's parent pid and start
    time (clock ticks since boot)."""
    out: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry)] = (int(fields[11]) + int(fields[12])) / _TICKS   # utime + stime
        if parents is not None:
            parents[int(entry)] = (int(fields[1]), int(fields[19]))
    return out


def _descendants(root: int, parents: dict[int, tuple[int, int]], known: set[int]) -> set[int]:
    """``known`` plus every process whose parent chain reaches ``root`` (``root`` included), and the daemons
    the tree started: processes adopted by init (pid 1) that started after ``root`` (``pg_ctl`` detaches
    the PostgreSQL server it starts) with their children."""
    mine = known | {root}
    born = parents.get(root, (0, 0))[1]
    grew = True
    while grew:
        grew = False
        for pid, (ppid, started) in parents.items():
            if pid not in mine and (ppid in mine or (ppid == 1 and started >= born)):
                mine.add(pid)
                grew = True
    return mine


def _cmdline(pid: int) -> str | None:
    """The process's command line; for one that has none (a zombie between its exit and its parent's wait, a
    kernel thread) its name from ``/proc/<pid>/stat``, so a Python child caught after it exited still counts
    as "python" (CI 2026-11-26: a busy child seen only as a zombie on a loaded machine counted as "other")."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        if cmd:
            return cmd
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.index(b"(") + 1:stat.rindex(b")")].decode(errors="replace")
    except (OSError, ValueError):
        return None


def cpu_seconds(argv: list[str], interval: float = 0.25,
                on_sample: Any = None, tree: bool = False) -> tuple[float, dict[str, float], int]:
    """Run ``argv``; returns (wall seconds, CPU seconds per kind, exit code). ``on_sample(t, {kind: CPU-s})``
    gets, after every sample, the CPU each kind used since the previous one (``t``: seconds since the start).
    ``tree``: count only ``argv``'s process and its descendants (seen at a sample), not the whole machine: for a
    run beside other work (a soak, a test run), where a machine-wide count would add their CPU to the kinds."""
    start = _snapshot()
    last = dict(start)
    kinds: dict[int, str] = {}
    began = time.time()
    proc = subprocess.Popen(argv)

    def note(pid: int) -> None:
        # classified again at every sample, by its latest command line: a process exec()s (the driver forks,
        # the child runs spark-submit's bash scripts, which exec java) and must count as what it became
        if kinds.get(pid) != "jvm":
            cmd = _cmdline(pid)
            if cmd is not None:
                kinds[pid] = classify(cmd, proc.pid, pid)

    mine: set[int] = set()
    while proc.poll() is None:
        time.sleep(interval)
        step: dict[str, float] = {}
        parents: dict[int, tuple[int, int]] = {}
        snapshot = _snapshot(parents if tree else None)
        if tree:
            mine = _descendants(proc.pid, parents, mine)
        for pid, value in snapshot.items():
            if tree and pid not in mine:
                continue
            note(pid)
            used = value - last.get(pid, start.get(pid, 0.0))   # a process new since the start: from 0
            if used > 0:
                kind = kinds.get(pid, "other")
                step[kind] = step.get(kind, 0.0) + used
            last[pid] = value
        if on_sample is not None:
            on_sample(time.time() - began, step)
    wall = time.time() - began
    totals: dict[str, float] = {}
    for pid, value in last.items():
        if tree and pid not in mine:
            continue
        used = value - start.get(pid, 0.0)
        if used > 0:
            kind = kinds.get(pid, "other")
            totals[kind] = totals.get(kind, 0.0) + used
    return wall, totals, proc.returncode


def parse_wrapper_args(args: list[str] | None, doc: str, interval: float | None, series: bool = False,
                       options: Any = None, tree: bool = False) -> tuple[argparse.Namespace, list[str]]:
    """``[--interval S] [--json FILE] [--tree] [--series FILE] -- CMD...`` of a tool that runs and watches a
    command (``--interval`` only where ``interval`` is a default, ``--tree`` only where ``tree``, ``--series``
    only where ``series``; ``options(parser)`` adds the tool's own)."""
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    if interval is not None:
        parser.add_argument("--interval", type=float, default=interval)
    parser.add_argument("--json", dest="json_file")
    if tree:
        parser.add_argument("--tree", action="store_true",
                            help="count only the command's process tree, not the whole machine (beside other work)")
    if series:
        parser.add_argument("--series", help="write one JSON line per sample here")
    if options is not None:
        options(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(args)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("no command (put it after --)")
    return ns, command


def main(args: list[str] | None = None) -> int:
    ns, command = parse_wrapper_args(args, __doc__, 0.25, series=True, tree=True)
    series = open(ns.series, "w", encoding="utf-8") if ns.series else None  # noqa: SIM115 - closed below

    def on_sample(t: float, step: dict[str, float]) -> None:
        series.write(json.dumps({"t": round(t, 2), **{k: round(v, 3) for k, v in sorted(step.items())}}) + "\n")

    try:
        wall, totals, code = cpu_seconds(command, ns.interval, on_sample if series is not None else None,
                                        tree=ns.tree)
    finally:
        if series is not None:
            series.close()
    print(f"{'wall':>22}: {wall:8.1f} s")
    for kind, value in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"{kind:>22}: {value:8.1f} CPU-s")
    if ns.json_file:
        with open(ns.json_file, "w") as f:
            json.dump({"wall_seconds": round(wall, 2), "cpu_seconds": {k: round(v, 2) for k, v in totals.items()},
                       "exit_code": code}, f, indent=2)
    return code


if __name__ == "__main__":
    sys.exit(main())
