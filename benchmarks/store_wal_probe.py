"""The graph store's write-ahead log per event, and its backend's CPU, with the staging tables logged or not.

    PYTHONPATH=. python benchmarks/store_wal_probe.py [--events 30000] [--batch-size 10000]
                                                      [--unlogged-staging] [--set NAME=VALUE ...] [--json FILE]

A fresh embedded PostgreSQL (the product's default server) takes demo events through ``GraphStore.write_batch``
(derive, the staging COPYs, the merge: one transaction per batch) after one warm-up batch. Printed for the batches
after it: the backend's CPU per event (``/proc``), and from ``pg_stat_wal`` / ``pg_stat_checkpointer`` the WAL
records, full-page images and kB written per event and the checkpoints the run caused. ``--unlogged-staging`` makes
the staging tables UNLOGGED after the migrations (what they were before migration 011; a probe of what logging
them costs, not a setting of the product: a PostgreSQL crash empties unlogged tables, and a staged batch whose
Kafka offsets Spark committed is the only copy of its events). ``--set`` applies server settings (``ALTER SYSTEM``,
then a restart) before the run.

Session 33 (2026-11-29, 30,000 events in batches of 10,000, alternated): logged 15.3 kB of WAL per event (62.6
records, 0.24 full-page images, one checkpoint), unlogged 8.3 kB (45.5 records); the backend's CPU 0.251 / 0.282
logged against 0.277 / 0.256 ms per event unlogged: the WAL halves, the CPU does not move. Counted work; asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.store_write_bench import _process_cpu, demo_events  # noqa: E402

#: The staging tables migration 011 made LOGGED (the store's own list) and the enrich hand-over (migration 010).
HANDOVER_TABLE = "stg_event_keys"

_WAL_SQL = "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal"
_CHECKPOINTS_SQL = "SELECT num_timed + num_requested FROM pg_stat_checkpointer"


def probe(events: int, batch_size: int, unlogged: bool, settings: dict[str, str]) -> dict[str, Any]:
    import psycopg
    from psycopg import sql

    from lineage.embedded.postgres import EmbeddedPostgres
    from sink.postgres import STAGING_COLUMNS, GraphStore

    stored = demo_events(events + batch_size)
    with tempfile.TemporaryDirectory(prefix="store-wal-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "data")
        server.start()
        try:
            if settings:
                with psycopg.connect(server.dsn, autocommit=True) as conn:
                    for name, value in settings.items():
                        conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                                                 sql.Literal(value)))
                server.stop()
                server.start()
            with GraphStore(server.dsn) as store:
                store.migrate()
                if unlogged:
                    for table in (*STAGING_COLUMNS, HANDOVER_TABLE):
                        store.conn.execute(sql.SQL("ALTER TABLE {} SET UNLOGGED").format(sql.Identifier(table)))
                backend = store.conn.info.backend_pid
                store.write_batch(0, stored[:batch_size])   # the warm-up batch: not counted
                with psycopg.connect(server.dsn, autocommit=True) as conn:
                    wal0, checkpoints0 = conn.execute(_WAL_SQL).fetchone(), conn.execute(_CHECKPOINTS_SQL).fetchone()[0]
                cpu0, started = _process_cpu(backend) or 0.0, time.perf_counter()
                for n, start in enumerate(range(batch_size, batch_size + events, batch_size), start=1):
                    store.write_batch(n, stored[start:start + batch_size])
                cpu = (_process_cpu(backend) or 0.0) - cpu0
                wall = time.perf_counter() - started
                with psycopg.connect(server.dsn, autocommit=True) as conn:
                    wal1, checkpoints1 = conn.execute(_WAL_SQL).fetchone(), conn.execute(_CHECKPOINTS_SQL).fetchone()[0]
                    shown = {name: conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]
                             for name in settings}
        finally:
            server.stop(mode="immediate")
    return {"events": events, "batch_size": batch_size, "unlogged_staging": unlogged, "settings": shown,
            "wall_seconds": round(wall, 2), "backend_ms_per_event": round(1000 * cpu / events, 4),
            "wal_records_per_event": round((wal1[0] - wal0[0]) / events, 1),
            "full_page_images_per_event": round((wal1[1] - wal0[1]) / events, 2),
            "wal_kb_per_event": round(float(wal1[2] - wal0[2]) / events / 1024, 2),
            "checkpoints": int(checkpoints1 - checkpoints0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=30000, help="events counted, after one warm-up batch")
    parser.add_argument("--batch-size", type=int, default=10000)
    parser.add_argument("--unlogged-staging", action="store_true", help="the staging tables UNLOGGED (a probe)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                        help="a server setting for the run (repeatable)")
    parser.add_argument("--json", dest="json_file", help="write the figures here too")
    args = parser.parse_args(argv)
    settings = dict(s.split("=", 1) for s in args.settings)
    out = probe(args.events, args.batch_size, args.unlogged_staging, settings)
    for key, value in out.items():
        print(f"{key:>28}: {value}")
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
