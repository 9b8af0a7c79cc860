"""Peak memory per kind of process while a command runs: ``python benchmarks/rss_by_process.py -- CMD...``.

``lineage bench`` reports ``peak_rss_bytes``, the sum of the RSS of its process tree: it says how much, not
who. This samples the command's process tree every ``--interval`` seconds and keeps, per kind of process
(the kinds of :func:`benchmarks.cpu_by_process.classify`: ``jvm``, ``spark-python``, ``postgres``,
``broker``, ``driver``, ...), the peak of the kind's summed RSS and of its summed PSS, and the peak of the
whole tree's sums.

RSS counts a shared page in every process that maps it: PostgreSQL's shared buffers in every backend, the
pages a forked Python worker still shares with its daemon. PSS (``/proc/PID/smaps_rollup``) divides each
shared page among the processes that map it, so the tree's PSS is the memory the tree really holds.

RSS is read from ``/proc/PID/statm`` at every sample (~0.2 ms for a bench's 13 processes). PSS costs the kernel a
walk of every mapping's page tables: ``smaps_rollup`` of the same 13 processes took ~37 ms of this process's CPU per
sample in a ``lineage bench`` drain, ~4 % of a core at one sample a second, which the figures this tool sits beside
(``drain_cpu.py --tree`` counts it as the ``driver``) paid (2026-11-28, session 26). So PSS is read only when the
tree's RSS passes the highest RSS at which PSS was read by :data:`PSS_STEP`, and at every :data:`PSS_EVERY`-th
sample: the peak PSS is that of the samples where the RSS peaked (and of the periodic ones).

Output: a table (each kind's own peak, and its RSS in the sample where the tree peaked), and with ``--json FILE``
``{"wall_seconds", "peak_rss_bytes", "peak_pss_bytes", "rss_by_kind", "pss_by_kind", "processes_by_kind",
"rss_at_peak_by_kind", "peak_at_seconds"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

try:
    from .cpu_by_process import _cmdline, classify, parse_wrapper_args
except ImportError:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.cpu_by_process import _cmdline, classify, parse_wrapper_args

__all__ = ["tree_pids", "sample", "main"]

_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (parents from ``/proc/PID/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split(None, 2)[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


#: PSS is read when the tree's RSS exceeds the RSS of the last sample that read it by this factor (module doc) ...
PSS_STEP = 1.02
#: ... and at every this many-th sample.
PSS_EVERY = 10


def _rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _rss_pss(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return None
    rss = pss = 0
    for line in text.splitlines():
        if line.startswith(b"Rss:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith(b"Pss:"):
            pss = int(line.split()[1]) * 1024
    return rss, pss


def sample(root: int, kinds: dict[int, str], pss: bool = True,
           pids: list[int] | None = None) -> dict[str, tuple[int, int, int]]:
    """{kind: (rss, pss, processes)} of ``root``'s tree now; ``kinds`` caches each pid's kind. ``pss=False``: RSS
    only (``statm``, cheap; the PSS figures are 0). ``pids``: the tree's processes when the caller has just listed
    them (:func:`tree_pids`)."""
    out: dict[str, tuple[int, int, int]] = {}
    for pid in tree_pids(root) if pids is None else pids:
        if kinds.get(pid) != "jvm":
            cmd = _cmdline(pid)
            if cmd is not None:
                kinds[pid] = classify(cmd, root, pid)
        if pss:
            mem = _rss_pss(pid)
        else:
            rss_only = _rss(pid)
            mem = None if rss_only is None else (rss_only, 0)
        if mem is None:
            continue
        kind = kinds.get(pid, "other")
        rss, pss_sum, n = out.get(kind, (0, 0, 0))
        out[kind] = (rss + mem[0], pss_sum + mem[1], n + 1)
    return out


def measure(argv: list[str], interval: float = 1.0) -> dict[str, object]:
    """Run ``argv`` and return the peaks (module doc)."""
    began = time.time()
    proc = subprocess.Popen(argv)
    kinds: dict[int, str] = {}
    peak_rss = peak_pss = 0
    rss_by: dict[str, int] = {}
    pss_by: dict[str, int] = {}
    procs_by: dict[str, int] = {}
    pss_at = 0   # the tree's RSS at the last sample that read PSS
    samples = 0
    at_peak: dict[str, int] = {}   # each kind's RSS in the sample where the tree's RSS peaked
    peak_at = 0.0
    while proc.poll() is None:
        pids = tree_pids(proc.pid)
        now = sample(proc.pid, kinds, pss=False, pids=pids)
        tree_rss = sum(v[0] for v in now.values())
        if tree_rss > pss_at * PSS_STEP or samples % PSS_EVERY == 0:   # module doc: PSS where RSS peaks
            now = sample(proc.pid, kinds, pids=pids)
            tree_rss = sum(v[0] for v in now.values())   # smaps_rollup's RSS, a moment later
            pss_at = max(pss_at, tree_rss)
            peak_pss = max(peak_pss, sum(v[1] for v in now.values()))
            for kind, (_tree_rss, pss, _n) in now.items():
                pss_by[kind] = max(pss_by.get(kind, 0), pss)
        samples += 1
        if tree_rss > peak_rss:
            peak_rss, peak_at = tree_rss, time.time() - began
            at_peak = {kind: v[0] for kind, v in now.items()}
        for kind, (rss, _pss, n) in now.items():
            rss_by[kind] = max(rss_by.get(kind, 0), rss)
            procs_by[kind] = max(procs_by.get(kind, 0), n)
        time.sleep(interval)
    return {"wall_seconds": round(time.time() - began, 1), "exit_code": proc.returncode,
            "peak_rss_bytes": peak_rss, "peak_pss_bytes": peak_pss,
            "rss_by_kind": rss_by, "pss_by_kind": pss_by, "processes_by_kind": procs_by,
            "rss_at_peak_by_kind": at_peak, "peak_at_seconds": round(peak_at, 1)}


def main(args: list[str] | None = None) -> int:
    ns, command = parse_wrapper_args(args, __doc__, 1.0)
    result = measure(command, ns.interval)
    mib = 1024 * 1024
    print(f"{'kind':>20}  {'peak RSS MiB':>12}  {'peak PSS MiB':>12}  {'at tree peak':>12}  processes")
    for kind in sorted(result["rss_by_kind"], key=lambda k: -result["rss_by_kind"][k]):  # type: ignore[index]
        print(f"{kind:>20}  {result['rss_by_kind'][kind] / mib:12.0f}  "  # type: ignore[index]
              f"{result['pss_by_kind'].get(kind, 0) / mib:12.0f}  "  # type: ignore[index]
              f"{result['rss_at_peak_by_kind'].get(kind, 0) / mib:12.0f}  {result['processes_by_kind'][kind]}")  # type: ignore[index]
    print(f"{'tree (peak of sums)':>20}  {result['peak_rss_bytes'] / mib:12.0f}  "  # type: ignore[operator]
          f"{result['peak_pss_bytes'] / mib:12.0f}  at {result['peak_at_seconds']} s")  # type: ignore[operator]
    if ns.json_file:
        with open(ns.json_file, "w") as f:
            json.dump(result, f, indent=2)
    return int(result["exit_code"] or 0)  # type: ignore[call-overload]


if __name__ == "__main__":
    sys.exit(main())
