"""Where the graph store's PostgreSQL CPU goes: the merge statements, autovacuum, the background processes.

    python benchmarks/store_server_ledger.py [--events 30000] [--batch-size 5000] [--settle-seconds 70]
                                             [--json FILE]

A fresh embedded PostgreSQL (the product's default server) takes demo events through ``GraphStore.write_batch``
in batches (derive + staging COPYs + merge, one transaction each), with ``log_autovacuum_min_duration = 0`` so
that every autovacuum and autoanalyze logs the CPU it used. Printed, for the batches after the first (a warm
store):

* the backend's CPU (``/proc``), and the merge's wall time per step (``GraphStore.last_timings``: the staging
  COPYs, one merge statement per table, the quality query); the backend runs nothing else, so a step's wall time
  is mostly its server time;
* autovacuum's CPU per table and kind (vacuum / analyze), from the server log, after waiting ``--settle-seconds``
  for the launcher (its naptime is 60 s) once the writes end;
* the other server processes' CPU (WAL writer, checkpointer, ...) over the same time;
* updates and HOT updates per table (``pg_stat_user_tables``): an update that is not HOT adds an entry to every
  index of its table (migration 015).

Counted work, not throughput: the figures hold on a shared machine better than rates do. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.rss_by_process import tree_pids  # noqa: E402
from benchmarks.store_write_bench import _process_cpu, demo_events  # noqa: E402

_AUTOVACUUM = re.compile(r'automatic (vacuum|analyze) of table "([^"]+)".*?CPU: user: ([\d.]+) s, system: ([\d.]+) s',
                         re.S)


def _children(ppid: int) -> dict[int, str]:
    """``{pid: process title}`` of the postmaster's server processes (:func:`rss_by_process.tree_pids`)."""
    out = {}
    for pid in tree_pids(ppid):
        try:
            if pid != ppid:
                out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
    return out


def autovacuum_cpu(log_text: str) -> dict[str, float]:
    """CPU seconds of autovacuum by ``"kind table"``, from a server log with ``log_autovacuum_min_duration = 0``."""
    out: dict[str, float] = {}
    for kind, table, user, system in _AUTOVACUUM.findall(log_text):
        key = f"{kind} {table.split('.')[-1]}"
        out[key] = out.get(key, 0.0) + float(user) + float(system)
    return out


def ledger(events: int, batch_size: int, settle_seconds: float) -> dict[str, Any]:
    import psycopg

    from lineage.embedded.postgres import EmbeddedPostgres
    from sink.postgres import GraphStore

    stored = demo_events(events + batch_size)
    with tempfile.TemporaryDirectory(prefix="store-ledger-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "data")
        server.start()
        try:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET log_autovacuum_min_duration = 0")
                conn.execute("SELECT pg_reload_conf()")
            postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
            steps: dict[str, float] = {}
            with GraphStore(server.dsn) as store:
                store.migrate()
                backend = store.conn.info.backend_pid
                store.write_batch(0, stored[:batch_size])   # the warm-up batch: not counted
                log_start = len((server.data_dir / "server.log").read_text())
                others0 = {pid: _process_cpu(pid) or 0.0 for pid in _children(postmaster) if pid != backend}
                cpu0, started = _process_cpu(backend) or 0.0, time.perf_counter()
                for n, start in enumerate(range(batch_size, batch_size + events, batch_size), start=1):
                    store.write_batch(n, stored[start:start + batch_size])
                    for step, seconds in store.last_timings.items():
                        steps[step] = steps.get(step, 0.0) + seconds
                backend_cpu = (_process_cpu(backend) or 0.0) - cpu0
                wall = time.perf_counter() - started
                time.sleep(settle_seconds)
                store.conn.execute("SELECT pg_stat_force_next_flush()")
                store.conn.commit()
                others: dict[str, float] = {}
                for pid, title in _children(postmaster).items():
                    if pid == backend or title.startswith("postgres: autovacuum worker"):
                        continue   # autovacuum workers come and go: counted from the log
                    name = re.sub(r"^postgres: ", "", title).split(" ")[0:2]
                    key = " ".join(name)
                    others[key] = others.get(key, 0.0) + (_process_cpu(pid) or 0.0) - others0.get(pid, 0.0)
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                updates = {t: {"updates": u, "hot": h} for t, u, h in conn.execute(
                    "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE n_tup_upd > 0"
                    " ORDER BY relname").fetchall()}
            vacuum = autovacuum_cpu((server.data_dir / "server.log").read_text()[log_start:])
        finally:
            server.stop(mode="immediate")
    return {"events": events, "batch_size": batch_size, "wall_seconds": round(wall, 2),
            "backend_cpu_seconds": round(backend_cpu, 2),
            "backend_ms_per_event": round(1000 * backend_cpu / events, 4),
            "autovacuum_cpu_seconds": round(sum(vacuum.values()), 2),
            "autovacuum_ms_per_event": round(1000 * sum(vacuum.values()) / events, 4),
            "autovacuum_by_table": {k: round(v, 2) for k, v in sorted(vacuum.items(), key=lambda kv: -kv[1])
                                    if v >= 0.01},
            "other_processes_cpu_seconds": {k: round(v, 2) for k, v in sorted(others.items(), key=lambda kv: -kv[1])
                                            if v >= 0.01},
            "steps_seconds": {k: round(v, 2) for k, v in sorted(steps.items(), key=lambda kv: -kv[1])},
            "updates": updates}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=30000, help="events counted, after one warm-up batch")
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--settle-seconds", type=float, default=70.0,
                        help="wait this long after the writes for autovacuum (naptime 60 s) before reading its log")
    parser.add_argument("--json", dest="json_file", help="write the figures here too")
    args = parser.parse_args(argv)
    out = ledger(args.events, args.batch_size, args.settle_seconds)
    for key, value in out.items():
        print(f"{key:>28}: {value}")
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
