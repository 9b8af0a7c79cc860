"""What the text spool saves a batch's export: the events' texts read back from PostgreSQL, or joined from the spool.

    PYTHONPATH=. python benchmarks/export_texts_probe.py [--events 20000] [--batch-size 10000] [--rounds 5]
                                                         [--postgres-dsn DSN]

``--events`` demo events are written through ``GraphStore.write_batch`` in batches of ``--batch-size`` (an
embedded PostgreSQL 18 unless ``--postgres-dsn``), then each batch's changed rows are exported as the writer's
after-commit step does (``sink.parquet.changed_rows``, every Parquet table, one snapshot), two ways, alternated
round by round:

* ``postgres``: without a spool (a cluster, ``LINEAGE_TEXT_SPOOL=false``, before session 45): the server writes
  each new event's text out as CSV and this process parses it back;
* ``spool``: the staging tasks' files (``stream_processor/text_spool.py``): ``write_texts`` per 5,000-event part
  (the staging task's cost, counted apart as ``write``), then ``TextSpool.texts`` and the export joining the
  payloads by hash.

Per event, median of ``--rounds`` (range): the backend's CPU (``/proc``) and this process's CPU
(``time.process_time``) of the export, and of the spool's writes. Both ways must give equal tables (checked: the
probe stops otherwise). Counted work, not throughput; asserts nothing else.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.pg_value_probe import _backend_cpu, probe_server  # noqa: E402
from benchmarks.store_write_bench import demo_events  # noqa: E402

PART = 5000   # events per staging task's file (a 10,000-event batch has two tasks on this machine)


def _timed(conn: Any, work: Any) -> tuple[float, float, Any]:
    """(backend CPU s, this process's CPU s, result) of ``work()``."""
    server0, client0 = _backend_cpu(conn), time.process_time()
    out = work()
    return _backend_cpu(conn) - server0, time.process_time() - client0, out


def probe(dsn: str | None, events: int, batch_size: int, rounds: int) -> dict[str, Any]:
    import psycopg

    from sink.parquet import changed_rows
    from sink.postgres import GraphStore
    from stream_processor.text_spool import TextSpool, write_texts

    stored = demo_events(events)
    batches = list(range(1, (events + batch_size - 1) // batch_size + 1))
    figures: dict[str, list[float]] = {}
    with probe_server(dsn, "export-texts-") as url:
        with GraphStore(url) as store:
            store.migrate()
            for b in batches:
                store.write_batch(b, stored[(b - 1) * batch_size:b * batch_size])
        spool = TextSpool()
        try:
            with psycopg.connect(url) as conn:
                for rnd in range(rounds):
                    cost = {"postgres_server": 0.0, "postgres_client": 0.0, "spool_server": 0.0,
                            "spool_client": 0.0, "write": 0.0}
                    for way in (("postgres", "spool") if rnd % 2 == 0 else ("spool", "postgres")):
                        for b in batches:
                            batch = stored[(b - 1) * batch_size:b * batch_size]
                            if way == "postgres":
                                server, client, _ = _timed(conn, lambda b=b: changed_rows(conn, b))
                            else:
                                started = time.process_time()
                                for part, at in enumerate(range(0, len(batch), PART)):
                                    chunk = batch[at:at + PART]
                                    write_texts(spool.root, b, part, [e.event_hash for e in chunk],
                                                [e.text for e in chunk])
                                cost["write"] += time.process_time() - started
                                server, client, _ = _timed(
                                    conn, lambda b=b: changed_rows(conn, b, texts=spool.texts(b)))
                                spool.discard(b)
                            conn.rollback()
                            cost[f"{way}_server"] += server
                            cost[f"{way}_client"] += client
                        if way == "spool" and rnd == 0:
                            check = changed_rows(conn, batches[-1])
                            write_texts(spool.root, 0, 0, [e.event_hash for e in stored], [e.text for e in stored])
                            if changed_rows(conn, batches[-1], texts=spool.texts(0)) != check:
                                raise SystemExit("the spool's export differs from PostgreSQL's")
                            spool.discard(0)
                            conn.rollback()
                    for key, seconds in cost.items():
                        figures.setdefault(key, []).append(1e6 * seconds / events)
        finally:
            spool.close()
    return {key: (statistics.median(v), min(v), max(v)) for key, v in figures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres-dsn", help="an existing server on this machine (default: an embedded one)")
    args = parser.parse_args(argv)
    out = probe(args.postgres_dsn, args.events, args.batch_size, args.rounds)
    print(f"µs of CPU per event, median of {args.rounds} rounds (range), {args.events} demo events in batches of "
          f"{args.batch_size}")
    for key, (med, lo, hi) in out.items():
        print(f"  {key:>16}: {med:7.1f}  ({lo:.1f}-{hi:.1f})")
    saved = (out["postgres_server"][0] + out["postgres_client"][0]
             - out["spool_server"][0] - out["spool_client"][0] - out["write"][0])
    print(f"  {'saved':>16}: {saved:7.1f}  (postgres - spool - write, medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
