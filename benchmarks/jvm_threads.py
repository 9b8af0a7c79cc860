"""CPU seconds per JVM thread kind while a command runs: ``python benchmarks/jvm_threads.py [--series F] -- CMD...``.

PySpark's JVM is opaque to py-spy, and a JFR recording shows Java samples only (G1, the JIT compilers and
native code are most of the JVM's CPU here). Linux accounts CPU per thread, and the JVM names its threads:
every ``--interval`` seconds this reads ``/proc/<pid>/task/<tid>/stat`` of every ``java`` process and adds
each thread's CPU since the previous sample to its kind, the thread name with digits folded to ``#``
(``Executor task launch worker for task 12`` and ``... 13`` are one kind; Linux keeps 15 characters of a
name; a thread that ends between two samples loses its last interval). With ``--series FILE`` it also writes one JSON line per sample, ``{"t": seconds, kind: CPU-s}``, to
put the CPU of the planning thread (``stream executio``), the task threads (``Executor task l``), the JIT
(``C# CompilerThre``) and py4j's gateway threads (``Thread-#``) on the run's time line.

What it showed (2026-11-23, ``lineage bench --events 20000``): during the drain the JVM took ~0.9 ms of CPU
per event, a quarter of the processor's; an idle query with a no-data micro-batch per 1 s trigger spent
~0.11 CPU-s per batch in ``stream executio`` (planning, state commit, checkpoint files), which is what the
source's ticks now save (stream_processor/kafka_source.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

__all__ = ["thread_kind", "parse_stat", "main"]

_TICKS = os.sysconf("SC_CLK_TCK")
_DIGITS = re.compile(r"[0-9]+")


def thread_kind(name: str) -> str:
    """A thread name with its numbers folded: ``GC Thread#1`` -> ``GC Thread##``."""
    return _DIGITS.sub("#", name)


def parse_stat(raw: bytes) -> tuple[str, float]:
    """``(name, utime + stime seconds)`` of one ``/proc/.../stat`` line (the name may hold spaces and ``)``)."""
    name = raw[raw.index(b"(") + 1: raw.rindex(b")")].decode(errors="replace")
    fields = raw[raw.rindex(b")") + 2:].split()
    return name, (int(fields[11]) + int(fields[12])) / _TICKS


def _java_threads(skip: frozenset[str] = frozenset()) -> dict[tuple[str, str], tuple[str, float]]:
    """``{(pid, tid): (thread name, CPU seconds)}`` of every thread of every ``java`` process but those in ``skip``."""
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid in skip:
            continue
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
                if f.read().strip() != "java":
                    continue
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                    out[(pid, tid)] = parse_stat(f.read())
            except (OSError, ValueError, IndexError):
                continue
    return out


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--series", help="write one JSON line per sample here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(args)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("a command to run is required")
    # JVMs already running are not the command's (a soak's, a test run's): left out
    others = frozenset(pid for pid, _tid in _java_threads())
    last: dict[tuple[str, str], float] = {}
    totals: dict[str, float] = {}
    series = open(ns.series, "w", encoding="utf-8") if ns.series else None  # noqa: SIM115 - closed below
    started = time.monotonic()
    proc = subprocess.Popen(command)
    try:
        while True:
            done = proc.poll() is not None
            sample: dict[str, float] = {}
            for key, (name, cpu) in _java_threads(others).items():
                kind = thread_kind(name)
                sample[kind] = sample.get(kind, 0.0) + cpu - last.get(key, 0.0)
                last[key] = cpu
            for kind, cpu in sample.items():
                totals[kind] = totals.get(kind, 0.0) + cpu
            if series is not None:
                series.write(json.dumps({"t": round(time.monotonic() - started, 1),
                                         **{k: round(v, 3) for k, v in sample.items() if v > 0.0005}}) + "\n")
            if done:
                break
            time.sleep(ns.interval)
    finally:
        if series is not None:
            series.close()
    print(f"{'wall':>24}: {time.monotonic() - started:8.1f} s")
    for kind, cpu in sorted(totals.items(), key=lambda kv: -kv[1]):
        if cpu >= 0.05:
            print(f"{kind:>24}: {cpu:8.1f} CPU-s")
    return proc.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
