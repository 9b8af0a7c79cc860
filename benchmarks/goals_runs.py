"""Issue 18's goals command, run several times (and alternated between checkouts), with medians and ranges.

    python benchmarks/goals_runs.py [--runs 3] [--checkout DIR ...] [--out DIR] [-- EXTRA BENCH ARGS]

Each run is the goals table's command (docs/PERFORMANCE.md)::

    python benchmarks/drain_cpu.py --tree --json D -- python benchmarks/rss_by_process.py --json R -- \\
        python -m lineage bench --events 40000 --rate 1000 --latency-seconds 20 --json B [EXTRA]

in the checkout's directory, with ``PYTHONPATH`` set to it (so the Spark workers import that checkout's code; build
its compiled modules first: ``python scripts/build_compiled.py`` there). With several ``--checkout`` the runs take
turns (A, B, A, B, ...): this machine's speed drifts within minutes, so only alternated runs compare two versions.
A broker or PostgreSQL server a run leaves behind (one that appeared during the run: the bench's PostgreSQL, or a
broker that outlived the process that started it) is stopped before the next; other commands' servers are not touched.

Printed per run and, per checkout, as median (range): sustained events/s, its ratio to the naive baseline and to raw
``COPY`` of the same run, p95 latency, the tree's peak RSS, the drain's CPU per event (and by process kind), with the
issue's goals beside them. Each run's files (the three JSON documents and the log) are kept in ``--out``. Nothing is
asserted: these are measurements, and they are only as quiet as the machine (run nothing else beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The goals command's bench arguments (issue 18, docs/PERFORMANCE.md "Issue 18's goals").
BENCH_ARGS = ["--events", "40000", "--rate", "1000", "--latency-seconds", "20"]
#: Issue 18's goals, as ``(figure, comparison, bound)``.
GOALS = {"sustained": (">=", 2500.0), "x_naive": (">=", 2.0), "x_copy": (">=", 0.15), "p95_s": ("<=", 2.0),
         "rss_gb": ("<=", 3.0)}
def _orphan(pid: int) -> bool:
    """Whether ``pid``'s parent is init (its starter exited without stopping it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == "1"
    except (OSError, IndexError):
        return False


def _bench_servers() -> set[int]:
    """Servers a bench may leave behind: its embedded PostgreSQL (data under the bench's ``lineage-bench-*`` work
    directory; pg_ctl leaves every PostgreSQL a child of init, so parentage says nothing there) and orphaned brokers.
    Servers of other commands (a test session's, ``lineage up``'s) are neither."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"lineage-bench-" in cmdline or (b"tansu" in cmdline and _orphan(int(entry.name))):
            pids.add(int(entry.name))
    return pids


def _stop_new_servers(before: set[int]) -> list[int]:
    """SIGTERM the bench servers (:func:`_bench_servers`) that appeared since ``before``, then SIGKILL those still
    there after 5 s."""
    new = sorted(_bench_servers() - before)
    for pid in new:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _bench_servers() & set(new):
        time.sleep(0.2)
    for pid in _bench_servers() & set(new):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return new


def command(checkout: Path, stem: Path, extra: list[str]) -> list[str]:
    """The goals command for one run, its files named ``stem`` + ``.d.json`` / ``.r.json`` / ``.b.json``."""
    py = sys.executable
    return [py, str(checkout / "benchmarks" / "drain_cpu.py"), "--tree", "--json", f"{stem}.d.json", "--",
            py, str(checkout / "benchmarks" / "rss_by_process.py"), "--json", f"{stem}.r.json", "--",
            py, "-m", "lineage", "bench", *BENCH_ARGS, *extra, "--json", f"{stem}.b.json"]


def figures(stem: Path) -> dict[str, Any]:
    """One run's figures from its files (a missing file leaves its figures out)."""
    out: dict[str, Any] = {}
    try:
        b = json.loads(Path(f"{stem}.b.json").read_text())
    except (OSError, ValueError):
        return out
    sustained = b.get("e2e_sustained_events_per_s")
    naive, copy = b.get("naive_events_per_s"), b.get("pg_copy_rows_per_s")
    out.update(sustained=sustained, naive=naive, copy=copy, p95_s=b.get("latency_p95_s"))
    if sustained and naive:
        out["x_naive"] = sustained / naive
    if sustained and copy:
        out["x_copy"] = sustained / copy
    try:
        r = json.loads(Path(f"{stem}.r.json").read_text())
        out["rss_gb"] = r["peak_rss_bytes"] / 1e9
    except (OSError, ValueError, KeyError):
        pass
    try:
        d = json.loads(Path(f"{stem}.d.json").read_text())
        out["drain_ms"] = d["ms_cpu_per_event"]
        out["utilisation"] = d.get("utilisation")
        out["by_kind"] = d.get("ms_per_event_by_kind", {})
    except (OSError, ValueError, KeyError):
        pass
    return out


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "-"
    if key in ("x_naive", "rss_gb", "p95_s"):
        return f"{value:.2f}"
    if key in ("x_copy", "drain_ms"):
        return f"{value:.3f}"
    return f"{value:,.0f}"


_COLUMNS = ("sustained", "naive", "x_naive", "copy", "x_copy", "p95_s", "rss_gb", "drain_ms")


def _row(label: str, f: dict[str, Any]) -> str:
    cells = " ".join(f"{_fmt(k, f.get(k)):>9}" for k in _COLUMNS)
    kinds = " ".join(f"{k} {v:.3f}" for k, v in sorted((f.get("by_kind") or {}).items(), key=lambda kv: -kv[1])
                     if v >= 0.001)
    return f"{label:<28} {cells}  {kinds}"


def summary(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Per-checkout median (range) lines of ``runs`` (``(checkout label, figures)``), with the goals."""
    lines = []
    for label in dict.fromkeys(lbl for lbl, _ in runs):
        mine = [f for lbl, f in runs if lbl == label]
        lines.append(f"{label}: {len(mine)} run(s)")
        for key in _COLUMNS:
            values = [f[key] for f in mine if f.get(key) is not None]
            if not values:
                continue
            goal = GOALS.get(key)
            met = ""
            if goal is not None:
                op, bound = goal
                hits = sum(1 for v in values if (v >= bound if op == ">=" else v <= bound))
                met = f"   goal {op} {bound:g}: {hits} of {len(values)} runs"
            lines.append(f"  {key:<10} median {_fmt(key, statistics.median(values)):>9}  "
                         f"({_fmt(key, min(values))}-{_fmt(key, max(values))}){met}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per checkout")
    parser.add_argument("--checkout", action="append", type=Path,
                        help="a source checkout to run (repeat to alternate several; default: this one)")
    parser.add_argument("--out", type=Path, help="keep each run's files here (default: a new temporary directory)")
    args = parser.parse_args(argv)
    checkouts = [c.resolve() for c in (args.checkout or [ROOT])]
    out = args.out or Path(tempfile.mkdtemp(prefix="goals-runs-"))
    out.mkdir(parents=True, exist_ok=True)
    labels = {c: (c.name if len({x.name for x in checkouts}) == len(checkouts) else str(c)) for c in checkouts}
    print(f"runs in {out}; {'alternating ' if len(checkouts) > 1 else ''}{', '.join(map(str, checkouts))}")
    print(f"{'run':<28} " + " ".join(f"{k:>9}" for k in _COLUMNS) + "  drain ms/event by kind")
    runs: list[tuple[str, dict[str, Any]]] = []
    for number in range(args.runs):
        for checkout in checkouts:
            stem = out / f"{labels[checkout].replace('/', '_')}-{number + 1}"
            before = _bench_servers()
            started = time.strftime("%H:%M:%S")
            with open(f"{stem}.log", "w") as log:
                done = subprocess.run(command(checkout, stem, extra), cwd=checkout, stdout=log,
                                      stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(checkout)})
            left = _stop_new_servers(before)
            f = figures(stem)
            runs.append((labels[checkout], f))
            note = f"  exit {done.returncode}" if done.returncode else ""
            note += f"  (stopped {len(left)} server process(es) it left)" if left else ""
            print(_row(f"{labels[checkout]} #{number + 1} {started}", f) + note, flush=True)
    print()
    print("\n".join(summary(runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
