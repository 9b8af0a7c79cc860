"""Write throughput of the PostgreSQL graph store against the same machine's raw COPY rate.

    python benchmarks/store_write_bench.py [--events 50000] [--batch-size 5000] [--dsn DSN] [--json FILE]

Events come from the deterministic demo generator (producers/demo.py; Evo documents are decoded with
their subject header), validated and hashed up front (not timed). Then, in one run on one database:

* ``raw_copy``: COPY of the same events as (event_hash text, payload jsonb) rows into a plain table
  — the floor any store of these events as jsonb pays; measured before and again after the store run (the
  ratio to each is printed: on a shared machine the load drifts); ``raw_copy_text``: the same rows into a
  (text, text) table — the floor of the store's own layout (``lineage_events.payload`` is text since
  migration 005), printed beside it so that neither baseline flatters the ratio;
* ``store``: ``GraphStore.write_batch`` of the events in batches (derive + COPY to staging + merge,
  one transaction per batch), reported as events/s and graph rows/s (staged rows / s), with the time
  split into derive (Python; the ``stg_events`` COPY runs on the server meanwhile), stage (the rest of
  the COPYs), each merge statement, ``quality_query`` and ``lineage_quality`` (the annotations are
  computed on a thread during the other merges; ``quality_wait`` is what was left to wait for);
  The store and replay runs also count CPU seconds of this process and of the store's server backend
  (``store_python_cpu_s``, ``store_server_cpu_s``; /proc, so the server must run on this machine) and the
  seconds the cyclic GC ran (``store_gc_s``): counted work, steadier than throughput on a shared machine;
  ``store_vs_raw_copy_cpu`` compares that work with the raw COPY's (``raw_copy_cpu_s``, the lesser of its
  two runs, counted the same way): the ratio of their throughputs when every core is busy anyway (other
  processes on a shared machine), where overlapping the client with the server gains nothing and only
  less work per event raises the store's rate;
* ``replay``: the same batches again (all duplicates: the idempotent path);
* ``split``: the streaming path on a fresh database — each batch cut into ``--parts`` partitions staged
  by that many worker processes at once (``GraphStore.stage_partition``, as Spark executors do), then one
  ``GraphStore.merge`` on the "driver". The workers are forked with the events (not sent them per batch:
  pickling 5,000 events to two workers and unpickling them took ~1 s of each batch's staging).

Without ``--dsn`` the embedded PostgreSQL is started in a temporary directory and stopped at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from schemas.codec import SUBJECT_HEADER, decode_message
from schemas.identity import canonical_json, event_hash
from schemas.validate import validate_message
from sink.derive import derive_batch
from sink.model import StoredEvent
from sink.postgres import GraphStore, copy_text


def demo_events(n: int, seed: int = 7) -> list[StoredEvent]:
    from producers.demo import DemoTraffic

    out: list[StoredEvent] = []
    traffic = DemoTraffic(seed=seed, datasets=400, jobs=200)
    for i, message in enumerate(traffic.messages()):
        headers = [(SUBJECT_HEADER, json.dumps(message.subject).encode())] if message.subject else None
        for decoded in decode_message(json.dumps(message.value).encode(), headers):
            event = validate_message(decoded)
            # the stream's decoder hands the store the canonical text it hashed (StoredEvent.text)
            out.append(StoredEvent(event, event_hash(event), f"demo[0]@{i}", text=canonical_json(event)))
        if len(out) >= n:
            return out[:n]
    return out


def raw_copy(dsn: str, events: list[StoredEvent], payload_type: str = "jsonb") -> tuple[float, float]:
    """Seconds, and CPU seconds of this process and the server backend (as :func:`store_run` counts them),
    of the COPY of ``events`` as ``(event_hash, payload)`` rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS bench_raw; CREATE TABLE bench_raw (event_hash text, payload {payload_type})")
        rows = [(e.event_hash, canonical_json(e.event)) for e in events]
        backend = conn.info.backend_pid
        started, c0, s0 = time.perf_counter(), time.process_time(), _process_cpu(backend)
        with conn.transaction(), conn.cursor() as cur, cur.copy("COPY bench_raw FROM STDIN") as copy:
            for i in range(0, len(rows), 2000):
                copy.write(copy_text("", rows[i:i + 2000]))
        elapsed = time.perf_counter() - started
        s1 = _process_cpu(backend)
        cpu = time.process_time() - c0 + (s1 - s0 if s0 is not None and s1 is not None else float("nan"))
        conn.execute("DROP TABLE bench_raw")
    return elapsed, cpu


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of a process of this machine, None when it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _GcClock:
    """Seconds the cyclic GC ran (gc.callbacks), while counting."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def store_run(dsn: str, events: list[StoredEvent], batch_size: int, first_batch: int) -> dict[str, Any]:
    """``write_batch`` of ``events`` in batches. Besides wall time, counted work (steadier than wall time on
    a shared machine): CPU seconds of this Python process and of the store's server backend (read from
    /proc, when the server runs on this machine) and the seconds the cyclic GC ran, all during the writes."""
    total = python_cpu = server_cpu = 0.0
    steps: dict[str, float] = {}
    clock = _GcClock()
    with GraphStore(dsn) as store:
        store.migrate()
        backend = store.conn.info.backend_pid
        # rows COPYed: derived before the counting starts (its collections used to be counted in store_gc_s)
        staged = sum(derive_batch(events[i:i + batch_size]).count() for i in range(0, len(events), batch_size))
        gc.callbacks.append(clock)
        try:
            for start in range(0, len(events), batch_size):
                batch = events[start:start + batch_size]
                t0, c0, s0 = time.perf_counter(), time.process_time(), _process_cpu(backend)
                store.write_batch(first_batch + start // batch_size, batch)
                total += time.perf_counter() - t0
                python_cpu += time.process_time() - c0
                s1 = _process_cpu(backend)
                server_cpu = server_cpu + (s1 - s0) if s0 is not None and s1 is not None else float("nan")
                for step, seconds in store.last_timings.items():
                    steps[step] = steps.get(step, 0.0) + seconds
        finally:
            gc.callbacks.remove(clock)
    return {"seconds": total, "derive_seconds": steps.get("derive", 0.0), "staged_rows": staged, "steps": steps,
            "python_cpu": python_cpu, "server_cpu": server_cpu, "gc_seconds": clock.seconds}


#: The split run's events, set before its worker processes are forked: they inherit them (as Spark executors
#: hold their partition's rows), so the timed staging does not include pickling the events to the workers.
_SPLIT_EVENTS: list[StoredEvent] = []


def _stage(args: tuple[str, int, int, int, int, int]) -> int:
    dsn, batch_id, part, start, stop, step = args
    return GraphStore.stage_partition(dsn, batch_id, part, _SPLIT_EVENTS[start:stop:step])


def split_run(dsn: str, events: list[StoredEvent], batch_size: int, parts: int) -> dict[str, Any]:
    import multiprocessing

    stage_s = merge_s = 0.0
    _SPLIT_EVENTS[:] = events
    with GraphStore(dsn) as store, multiprocessing.get_context("fork").Pool(parts) as pool:
        store.migrate()
        for start in range(0, len(events), batch_size):
            batch_id = 1 + start // batch_size
            stop = min(start + batch_size, len(events))
            t0 = time.perf_counter()
            pool.map(_stage, [(dsn, batch_id, p, start + p, stop, parts) for p in range(parts)])
            t1 = time.perf_counter()
            store.merge(batch_id)
            stage_s += t1 - t0
            merge_s += time.perf_counter() - t1
    return {"seconds": stage_s + merge_s, "stage_seconds": stage_s, "merge_seconds": merge_s}


def pipelined_run(dsn: str, events: list[StoredEvent], batch_size: int) -> dict[str, Any]:
    """``GraphStore.write_batches`` of the same batches on a fresh database: batch N+1 derived and staged on
    a thread while the server merges batch N. Wall time and this process's CPU (the staging connection's
    backend exits with it, so the server's CPU is not counted here)."""
    batches = [(1 + start // batch_size, events[start:start + batch_size]) for start in range(0, len(events), batch_size)]
    with GraphStore(dsn) as store:
        store.migrate()
        t0, c0 = time.perf_counter(), time.process_time()
        for _result, _rejected in store.write_batches(batches):
            pass
        return {"seconds": time.perf_counter() - t0, "python_cpu": time.process_time() - c0}


def bench_postgres(dsn: str | None) -> tuple[str, Callable[[], None]]:
    """``(dsn, stop)``: the given DSN and a no-op, or an embedded server started in a temp dir and what stops it."""
    if dsn is not None:
        return dsn, lambda: None
    from lineage.embedded.postgres import EmbeddedPostgres

    tmp = tempfile.TemporaryDirectory(prefix="store-bench-")
    server = EmbeddedPostgres(Path(tmp.name) / "data")
    server.start()

    def stop() -> None:
        try:
            server.stop(mode="immediate")
        finally:
            tmp.cleanup()

    return server.dsn, stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: embedded server in a temp dir)")
    parser.add_argument("--json", default=None, help="write the figures to this file too")
    parser.add_argument("--parts", type=int, default=2, help="staging processes of the split path (0: skip it)")
    args = parser.parse_args(argv)

    dsn, stop_postgres = bench_postgres(args.dsn)
    try:
        db = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}"')
        admin_dsn = dsn
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        params["dbname"] = db
        dsn = psycopg.conninfo.make_conninfo(**params)

        t0 = time.perf_counter()
        events = demo_events(args.events)
        print(f"generated + validated {len(events)} demo events in {time.perf_counter() - t0:.1f}s "
              f"(avg payload {sum(len(canonical_json(e.event)) for e in events[:2000]) / min(2000, len(events)):.0f} B)")
        raw_s, raw_cpu = raw_copy(dsn, events)
        raw_text_s, _ = raw_copy(dsn, events, "text")
        first = store_run(dsn, events, args.batch_size, 1)
        raw_after_s, raw_after_cpu = raw_copy(dsn, events)       # again: the machine's load drifts during a run
        replay = store_run(dsn, events, args.batch_size, 1_000_000)
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db}_pipelined"')
        params["dbname"] = f"{db}_pipelined"
        pipelined = pipelined_run(psycopg.conninfo.make_conninfo(**params), events, args.batch_size)
        split = None
        if args.parts > 0:
            split_db = f"{db}_split"
            with psycopg.connect(admin_dsn, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{split_db}"')
            params["dbname"] = split_db
            split = split_run(psycopg.conninfo.make_conninfo(**params), events, args.batch_size, args.parts)
        n = len(events)
        figures = {
            "events": n,
            "batch_size": args.batch_size,
            "raw_copy_events_per_s": round(n / raw_s),
            "raw_copy_text_events_per_s": round(n / raw_text_s),
            "store_events_per_s": round(n / first["seconds"]),
            "store_rows_per_s": round(first["staged_rows"] / first["seconds"]),
            "staged_rows_per_event": round(first["staged_rows"] / n, 2),
            "raw_copy_after_events_per_s": round(n / raw_after_s),
            "store_vs_raw_copy": round(raw_s / first["seconds"], 3),
            "store_vs_raw_copy_after": round(raw_after_s / first["seconds"], 3),
            "store_vs_raw_copy_text": round(raw_text_s / first["seconds"], 3),
            "derive_share": round(first["derive_seconds"] / first["seconds"], 3),
            "derive_events_per_s": round(n / first["derive_seconds"]),
            "replay_events_per_s": round(n / replay["seconds"]),
            "pipelined_events_per_s": round(n / pipelined["seconds"]),
            "pipelined_vs_raw_copy": round(raw_s / pipelined["seconds"], 3),
            "pipelined_vs_raw_copy_after": round(raw_after_s / pipelined["seconds"], 3),
            "pipelined_python_cpu_s": round(pipelined["python_cpu"], 2),
            "store_python_cpu_s": round(first["python_cpu"], 2),
            "store_server_cpu_s": round(first["server_cpu"], 2),
            "store_gc_s": round(first["gc_seconds"], 2),
            "raw_copy_cpu_s": round(min(raw_cpu, raw_after_cpu), 2),
            "store_vs_raw_copy_cpu": round(min(raw_cpu, raw_after_cpu) / (first["python_cpu"] + first["server_cpu"]), 3),
            "replay_python_cpu_s": round(replay["python_cpu"], 2),
            "replay_server_cpu_s": round(replay["server_cpu"], 2),
        }
        if split is not None:
            figures.update({"split_parts": args.parts, "split_events_per_s": round(n / split["seconds"]),
                            "split_vs_raw_copy": round(raw_s / split["seconds"], 3),
                            "split_stage_seconds": round(split["stage_seconds"], 2),
                            "split_merge_seconds": round(split["merge_seconds"], 2)})
        for key, value in figures.items():
            print(f"{key:>24}: {value}")
        print("time per step of the first write (s):",
              ", ".join(f"{k} {v:.2f}" for k, v in sorted(first["steps"].items(), key=lambda kv: -kv[1])))
        figures["steps_seconds"] = {k: round(v, 3) for k, v in first["steps"].items()}
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            for name in (db, f"{db}_split", f"{db}_pipelined"):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
    finally:
        stop_postgres()
    return 0


if __name__ == "__main__":
    sys.exit(main())
