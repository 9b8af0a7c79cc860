"""What staging the event rows costs in COPY text against COPY binary (migration 016), client and server.

    PYTHONPATH=. python benchmarks/event_copy_probe.py [--events 10000] [--rounds 5] [--postgres-dsn DSN]

The ``stg_events`` rows the staging pass derives from ``--events`` demo events (``benchmarks/derive_bench.py``'s
events, ``BatchDeriver``) are staged both ways, alternated round by round on one embedded PostgreSQL 18:

* **text** (before migration 016): ``copy_text`` of the rows into a table shaped like ``stg_events`` was
  (``event_time timestamptz``, ``run_id uuid``), then the events merge's ``INSERT ... SELECT`` into a table shaped
  like ``lineage_events``;
* **binary** (now): ``events_copy_binary`` into the table as migration 016 left it (both columns ``text``), then the
  same ``INSERT ... SELECT`` with the merge's casts (``event_time::timestamptz, run_id::uuid``).

Per event: the client's CPU making and writing the COPY data (this process, ``time.process_time``: the
rows' text or bytes and psycopg's ``write``, which encodes a text chunk), the backend's CPU for the COPY and for the
merge (``/proc``), median (range) of ``--rounds``. It prints figures and checks none.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.derive_bench import demo_events  # noqa: E402
from benchmarks.pg_value_probe import _backend_cpu, print_rounds, probe_server  # noqa: E402

CHUNK = 250   # events per write, as GraphStore._derive_and_stage writes them (_STREAM_EVENTS)
_TARGET = ("CREATE UNLOGGED TABLE probe_events (event_hash text PRIMARY KEY, event_kind text, event_type text, "
           "event_time timestamptz, run_id uuid, job_namespace text, job_name text, producer text, source text, "
           "payload text, revision integer)")


def _round(conn: Any, rows: list[tuple[Any, ...]], binary: bool) -> dict[str, float]:
    from sink.derive import STAGING_COLUMNS
    from sink.postgres import _BINARY_HEADER, _BINARY_TRAILER, copy_text, events_copy_binary

    names = ", ".join(STAGING_COLUMNS["stg_events"])
    conn.execute("DROP TABLE IF EXISTS probe_stage, probe_events")
    times = "text" if binary else "timestamptz"
    ids = "text" if binary else "uuid"
    conn.execute(f"CREATE UNLOGGED TABLE probe_stage (batch_id bigint, part integer, event_hash text, event_kind text, "
                 f"event_type text, event_time {times}, run_id {ids}, job_namespace text, job_name text, producer text, "
                 f"source text, payload text, revision integer)")
    conn.execute(_TARGET)
    client = 0.0
    c0 = _backend_cpu(conn)
    with conn.cursor() as cur, cur.copy(f"COPY probe_stage (batch_id, part, {names}) FROM STDIN"
                                        + (" (FORMAT BINARY)" if binary else "")) as copy:
        if binary:
            copy.write(_BINARY_HEADER)
        encoding = conn.info.encoding
        for start in range(0, len(rows), CHUNK):
            t0 = time.process_time()
            copy.write(events_copy_binary(1, 0, rows[start:start + CHUNK], encoding) if binary
                       else copy_text("1\t0\t", rows[start:start + CHUNK]))   # a str is encoded by write()
            client += time.process_time() - t0
        if binary:
            copy.write(_BINARY_TRAILER)
    c1 = _backend_cpu(conn)
    casts = "event_time::timestamptz, run_id::uuid" if binary else "event_time, run_id"
    conn.execute(f"INSERT INTO probe_events SELECT DISTINCT ON (event_hash) event_hash, event_kind, event_type, {casts}, "
                 "job_namespace, job_name, producer, source, payload, revision FROM probe_stage WHERE batch_id = 1 "
                 "ORDER BY event_hash, part, source ON CONFLICT (event_hash) DO NOTHING")
    c2 = _backend_cpu(conn)
    conn.execute("DROP TABLE probe_stage, probe_events")
    n = len(rows)
    return {"client": 1e6 * client / n, "copy": 1e6 * (c1 - c0) / n, "merge": 1e6 * (c2 - c1) / n,
            "total": 1e6 * (client + c2 - c0) / n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres-dsn", default=None)
    ns = parser.parse_args(argv)
    import psycopg

    from sink.derive import BatchDeriver

    deriver = BatchDeriver()
    deriver.add(demo_events(ns.events))
    rows = deriver.events_since(0)
    print(f"{len(rows)} stg_events rows of demo events, {sum(len(r[9]) for r in rows) / len(rows):.0f} characters of "
          "event text each")
    results: dict[str, dict[str, list[float]]] = {}
    with probe_server(ns.postgres_dsn, "event-copy-probe-") as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(ns.rounds):
            for kind in ("text", "binary"):
                for step, value in _round(conn, rows, kind == "binary").items():
                    results.setdefault(kind, {}).setdefault(step, []).append(value)
    print(f"µs per event, median (range) of {ns.rounds} alternated rounds:")
    print_rounds(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
