"""Where the machine's CPU goes while a command runs, kernel included: ``python benchmarks/kernel_share.py -- CMD...``.

``cpu_by_process.py`` counts each process's user + system time; it cannot say what the system time is. This runs
``CMD``, waits until a line of its output matches ``--start`` (default: the first status line of ``lineage bench``'s
drain that still has a lag, i.e. a micro-batch committed and more to come), then samples every CPU of the machine
for ``--seconds`` with ``perf record -e cpu-clock -a -g`` (a software clock: it works on virtual machines whose
hardware counters ``perf`` cannot read) and, once ``CMD`` ended, prints:

* the share of the busy samples (idle, ``swapper``, left out) of each kind of process (``cpu_by_process.classify``
  of the command lines seen when the sampling ended), split into user and kernel space;
* the share of samples with a page fault on their stack (``exc_page_fault``), per kind;
* the largest kernel symbols, and the largest symbols overall, with their kind.

Measured (2026-12-01, ``lineage bench``'s drain, docs/PERFORMANCE.md session 36): 15 minutes after the machine
booted (``perf record`` by hand, 12 s) PostgreSQL took ~33 % of the busy samples, 14 points of it in the kernel, and
``copy_folio_from_iter_atomic`` (page-cache copies of the WAL and of evicted data pages) was the largest symbol of the
run (8.2 %); 100 minutes later, with this tool (10 s), PostgreSQL took 22.5 %, 4.5 of it in the kernel, and that symbol
0.34 %. The difference is the guest's memory: its first touch after boot cost 0.60 GiB/s against 1.5-2.1 once touched
(``mmap`` + ``memset`` of 6 GiB, the same minutes). Needs ``perf`` (Debian's linux-perf) and the right to sample the whole machine
(root, or ``kernel.perf_event_paranoid`` <= 0). Asserts nothing; ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

try:
    from .cpu_by_process import classify, parse_wrapper_args
except ImportError:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.cpu_by_process import classify, parse_wrapper_args

__all__ = ["Sample", "samples", "shares", "main"]

#: ``lineage bench``'s status line once a drain batch committed and more records wait (``..., lag 30000``).
DEFAULT_START = r"batches [1-9]\d*, lag [1-9]"
_HEADER = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)/(?P<tid>\d+)(\s|$)")
_FRAME = re.compile(r"^\s*[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$")


class Sample(NamedTuple):
    """One ``perf script`` sample; ``frames``: ``(symbol, dso)`` from the leaf outwards."""

    pid: int
    comm: str
    frames: tuple[tuple[str, str], ...]

    @property
    def kernel(self) -> bool:
        """The sampled instruction was the kernel's."""
        return bool(self.frames) and self.frames[0][1] == "[kernel.kallsyms]"

    @property
    def page_fault(self) -> bool:
        return any(sym.startswith(("exc_page_fault", "asm_exc_page_fault")) for sym, _ in self.frames)

    @property
    def leaf(self) -> str:
        return self.frames[0][0].split("+0x", 1)[0] if self.frames else "?"


def samples(lines: Iterable[str]) -> Iterator[Sample]:
    """The samples of ``perf script -F comm,pid,tid,ip,sym,dso`` output with call chains (blank-line separated)."""
    head: tuple[int, str] | None = None
    frames: list[tuple[str, str]] = []
    for line in lines:
        if not line.strip():
            if head is not None:
                yield Sample(head[0], head[1], tuple(frames))
            head, frames = None, []
            continue
        if head is None:
            m = _HEADER.match(line)
            if m:
                head = (int(m["pid"]), m["comm"].strip())
            continue
        m = _FRAME.match(line)
        if m:
            frames.append((m["sym"], m["dso"]))
    if head is not None:
        yield Sample(head[0], head[1], tuple(frames))


def _kind_of_comm(comm: str) -> str:
    """The kind of a process that had ended when the kinds were read (a staging task's PostgreSQL backend lives one
    micro-batch), from its thread's name alone."""
    if comm == "postgres":
        return "postgres"
    if comm.startswith("python"):
        return "python"
    return "other"


def shares(found: Iterable[Sample], kinds: dict[int, str], top: int = 12) -> dict[str, Any]:
    """Shares of the busy samples (``swapper``, the idle task, left out) by kind and space, page faults by kind, and the
    largest symbols; ``kinds``: ``{pid: kind}``; a pid not in it is ``postgres`` or ``python`` by its thread's name,
    else ``other``."""
    total = busy = 0
    by_kind: collections.Counter[tuple[str, str]] = collections.Counter()
    faults: collections.Counter[str] = collections.Counter()
    kernel_syms: collections.Counter[tuple[str, str]] = collections.Counter()
    syms: collections.Counter[tuple[str, str]] = collections.Counter()
    for s in found:
        total += 1
        if s.comm == "swapper" or s.pid == 0:
            continue
        busy += 1
        kind = kinds.get(s.pid) or _kind_of_comm(s.comm)
        by_kind[(kind, "kernel" if s.kernel else "user")] += 1
        if s.page_fault:
            faults[kind] += 1
        if s.kernel:
            kernel_syms[(kind, s.leaf)] += 1
        syms[(kind, s.leaf)] += 1
    pct = (lambda n: round(100.0 * n / busy, 2)) if busy else (lambda n: 0.0)
    kinds_seen = sorted({k for k, _ in by_kind}, key=lambda k: -(by_kind[(k, "user")] + by_kind[(k, "kernel")]))
    return {
        "samples": total, "busy_samples": busy, "busy_percent_of_samples": round(100.0 * busy / total, 1) if total else 0.0,
        "by_kind": {k: {"user": pct(by_kind[(k, "user")]), "kernel": pct(by_kind[(k, "kernel")])} for k in kinds_seen},
        "page_faults": {k: pct(n) for k, n in faults.most_common()},
        "top_kernel_symbols": [[k, sym, pct(n)] for (k, sym), n in kernel_syms.most_common(top)],
        "top_symbols": [[k, sym, pct(n)] for (k, sym), n in syms.most_common(top)],
    }


def _kinds(driver_pid: int) -> dict[int, str]:
    """``{pid: kind}`` of every process on the machine now."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cmdline:
            out[int(entry.name)] = classify(cmdline, driver_pid, int(entry.name))
    return out


def main(argv: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--seconds", type=float, default=12.0, help="how long to sample (default 12)")
        parser.add_argument("--frequency", type=int, default=499, help="samples per second per CPU (default 499)")
        parser.add_argument("--start", default=DEFAULT_START, help="regex of the command's output line to start at")
        parser.add_argument("--top", type=int, default=12)

    ns, command = parse_wrapper_args(argv, __doc__, None, options=options)
    start = re.compile(ns.start)
    with tempfile.TemporaryDirectory(prefix="kernel-share-") as tmp:
        data = os.path.join(tmp, "perf.data")
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        started = threading.Event()
        kinds: dict[int, str] = {}

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                if not started.is_set() and start.search(line):
                    started.set()
            started.set()   # the command ended without the line: sample nothing

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        started.wait()
        recorded = False
        if proc.poll() is None:
            rc = subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", str(ns.frequency), "-a", "-g", "-q",
                                 "-o", data, "--", "sleep", str(ns.seconds)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            kinds = _kinds(proc.pid)
            recorded = rc.returncode == 0
            if not recorded:
                print(f"perf record failed ({rc.returncode}): {rc.stderr.strip()[-500:]}", file=sys.stderr)
        code = proc.wait()
        reader.join()
        if not recorded:
            print("nothing sampled: the start line never came, or perf could not record", file=sys.stderr)
            return code or 1
        script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,ip,sym,dso"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, errors="replace")
        result = shares(samples(script.stdout.splitlines()), kinds, ns.top)
    result["command_exit"] = code
    result["seconds"] = ns.seconds
    print(f"\n{result['samples']} samples, {result['busy_percent_of_samples']} % busy; shares of the busy samples:")
    for kind, split in result["by_kind"].items():
        print(f"  {kind:20s} user {split['user']:6.2f} %  kernel {split['kernel']:6.2f} %  "
              f"page faults {result['page_faults'].get(kind, 0.0):5.2f} %")
    print("largest kernel symbols:")
    for kind, sym, p in result["top_kernel_symbols"]:
        print(f"  {p:6.2f} %  {kind:14s} {sym}")
    print("largest symbols:")
    for kind, sym, p in result["top_symbols"]:
        print(f"  {p:6.2f} %  {kind:14s} {sym}")
    if ns.json_file:
        Path(ns.json_file).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
