"""The cyclic collector's pauses in the Python processes of a command: ``python benchmarks/gc_pauses.py -- CMD...``.

A collection stops every thread of its process: in the processor's driver process the ``foreachBatch`` thread,
the finisher, the `$self` step and the graph publication all wait while one of them walks the heap. Session 13
measured 26 full collections of ~117 ms per ``lineage bench --events 40000`` in the bench's process (3 s of
stop-the-world; PySpark, py4j and pandas make a large old generation). This tool puts a ``sitecustomize`` on
``PYTHONPATH`` (``gc.callbacks``) in every Python process the command starts that exits normally (the
command's own process and the Spark driver's; Spark's forked Python workers end with ``os._exit`` and are not
counted), and prints, per process, collections, seconds and the longest pause per generation, and for full
collections the thread whose allocation started them.

Options: ``--json FILE`` writes ``{"processes": [{"pid", "argv", "generations": {gen: {"count", "seconds",
"max_ms"}}, "full_by_thread": {thread: count}}]}``; ``--only TEXT`` keeps the processes whose command line
contains TEXT (``sys.argv`` joined: for ``python -m lineage bench ...`` that is ``.../lineage/__main__.py bench ...``,
so ``--only "__main__.py bench"``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SITECUSTOMIZE", "summarise", "main"]

try:  # run as python benchmarks/gc_pauses.py or as python -m benchmarks.gc_pauses
    from .cpu_by_process import parse_wrapper_args
except ImportError:  # pragma: no cover - script mode
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.cpu_by_process import parse_wrapper_args

#: Loaded by every Python process of the command (``GC_PAUSES_DIR`` set): one JSON file per process at exit.
SITECUSTOMIZE = '''
import os
if os.environ.get("GC_PAUSES_DIR"):
    import atexit, gc, json, sys, threading, time
    _stats, _start = {}, [0.0]
    _threads = {}

    def _on_gc(phase, info):
        if phase == "start":
            _start[0] = time.perf_counter()
            return
        took = time.perf_counter() - _start[0]
        gen = str(info.get("generation"))
        s = _stats.setdefault(gen, {"count": 0, "seconds": 0.0, "max_ms": 0.0})
        s["count"] += 1
        s["seconds"] += took
        s["max_ms"] = max(s["max_ms"], took * 1000)
        if gen == "2":
            name = threading.current_thread().name
            _threads[name] = _threads.get(name, 0) + 1

    def _write():
        path = os.path.join(os.environ["GC_PAUSES_DIR"], f"{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump({"pid": os.getpid(), "argv": " ".join(sys.argv), "generations": _stats,
                       "full_by_thread": _threads}, f)

    gc.callbacks.append(_on_gc)
    atexit.register(_write)
'''


def summarise(records: list[dict[str, Any]], only: str | None = None) -> list[dict[str, Any]]:
    """The per-process records kept (``only``: their command line contains it), longest total pause first."""
    kept = [r for r in records if only is None or only in r.get("argv", "")]
    return sorted(kept, key=lambda r: -sum(g["seconds"] for g in r["generations"].values()))


def main(args: list[str] | None = None) -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--only", help="keep the processes whose command line contains this")

    ns, command = parse_wrapper_args(args, __doc__, 0.0, options=options)
    with tempfile.TemporaryDirectory(prefix="gc-pauses-") as tmp:
        site, out = Path(tmp, "site"), Path(tmp, "out")
        site.mkdir()
        out.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        env = dict(os.environ, GC_PAUSES_DIR=str(out),
                   PYTHONPATH=os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
        code = subprocess.call(command, env=env)
        records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob("*.json"))]
    kept = summarise(records, ns.only)
    for r in kept:
        print(f"pid {r['pid']}: {r['argv'][:100]}")
        for gen, g in sorted(r["generations"].items()):
            print(f"  generation {gen}: {g['count']:6d} collections, {g['seconds']:7.3f} s, longest {g['max_ms']:.1f} ms")
        if r["full_by_thread"]:
            print("  full collections by thread: " + ", ".join(
                f"{t} {n}" for t, n in sorted(r["full_by_thread"].items(), key=lambda x: -x[1])))
    if ns.json_file:
        Path(ns.json_file).write_text(json.dumps({"processes": kept}, indent=2), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
