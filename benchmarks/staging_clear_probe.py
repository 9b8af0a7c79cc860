"""What clearing a merged batch's staging rows costs the server: a DELETE and the VACUUM it leaves, against the TRUNCATE
of the batch's slot that the store does since migration 017 (issue 18's "TRUNCATE-based staging clears").

    python benchmarks/staging_clear_probe.py [--batches 6] [--batch-size 10000] [--force-truncate]

Up to session 45 the staging tables (``stg_*`` of :data:`sink.derive.STAGING_COLUMNS`) were one set of tables for
every batch: the merge ended with ``DELETE FROM stg_X WHERE batch_id = b``, and the dead rows (~30 MB a 10,000-event
batch of demo events, most of it ``stg_events``' texts and ``stg_provenance``'s documents) were reclaimed later by
autovacuum, whose CPU shows in ``benchmarks/store_server_ledger.py`` (``vacuum stg_*``). Since migration 017 they are
partitioned into batch slots (``batch_id % 4``) and the merge TRUNCATEs the batch's slot when it has it to itself
(:func:`sink.postgres.clear_slot`), falling back to the DELETE otherwise.

On a fresh embedded PostgreSQL (the product's default server) each batch of demo events is staged and merged as the
store does it (``GraphStore._derive_and_stage`` on one connection, then ``GraphStore.merge``); before the merge its
staged rows are copied (untimed) into a twin set of plain tables (``CREATE TABLE stg_X_twin (LIKE stg_X INCLUDING
ALL)``, autovacuum off). Counted, as CPU of the server backend that runs the statements (``/proc``), per batch after
the first:

* ``truncate``: the merge's clear (:meth:`GraphStore._clear`; it says which way it went: ``truncate`` unless something
  else held the slot, or the batch is smaller than :data:`sink.postgres.TRUNCATE_MIN_ROWS`, which
  ``--force-truncate`` sets to 0 to price a TRUNCATE of small batches);
* ``delete``: ``DELETE FROM stg_X_twin WHERE batch_id = b`` of the same rows (the clear before migration 017);
* ``vacuum``: ``VACUUM`` of the twin tables right after: the work autovacuum would do for those dead rows
  (autovacuum runs later and less often, on a worker of its own, and costs more per dead row there: the ledger).

Asserts nothing; prints microseconds of server CPU per event, median (range) over the counted batches.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.store_write_bench import _process_cpu, demo_events  # noqa: E402


def probe(batches: int, batch_size: int, force_truncate: bool = False) -> dict[str, list[float]]:
    import psycopg

    import sink.postgres
    from lineage.embedded.postgres import EmbeddedPostgres
    from sink.derive import STAGING_COLUMNS
    from sink.postgres import GraphStore, slotted

    stored = demo_events(batches * batch_size)
    tables = list(STAGING_COLUMNS)
    figures: dict[str, list[float]] = {"truncate": [], "delete": [], "vacuum": []}
    cleared: list[tuple[float, str]] = []
    original = GraphStore._clear

    def timed_clear(cur: psycopg.Cursor, batch_id: int, rows: int | None = None) -> str:
        before = _process_cpu(cur.connection.info.backend_pid) or 0.0
        how = original(cur, batch_id, rows)
        cleared.append(((_process_cpu(cur.connection.info.backend_pid) or 0.0) - before, how))
        return how

    with tempfile.TemporaryDirectory(prefix="staging-clear-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "data").start()
        GraphStore._clear = staticmethod(timed_clear)   # type: ignore[method-assign]
        threshold = sink.postgres.TRUNCATE_MIN_ROWS
        if force_truncate:
            sink.postgres.TRUNCATE_MIN_ROWS = 0
        try:
            with GraphStore(server.dsn) as store, psycopg.connect(server.dsn, autocommit=True) as side:
                store.migrate()
                for table in tables:
                    side.execute(f"CREATE TABLE {table}_twin (LIKE {table} INCLUDING ALL) "
                                 "WITH (autovacuum_enabled = false)")   # VACUUMed here, timed
                side_pid = side.info.backend_pid
                for n in range(batches):
                    events = stored[n * batch_size:(n + 1) * batch_size]
                    with store.conn.transaction():
                        GraphStore._derive_and_stage(store.conn, n, 0, events, 1 << 20, {})
                    for table in tables:
                        side.execute(f"INSERT INTO {table}_twin SELECT * FROM {slotted(table, n)} WHERE batch_id = %s",
                                     (n,))
                    store.merge(n)
                    before = _process_cpu(side_pid) or 0.0
                    for table in tables:
                        side.execute(f"DELETE FROM {table}_twin WHERE batch_id = %s", (n,))
                    delete = (_process_cpu(side_pid) or 0.0) - before
                    time.sleep(0.05)
                    before = _process_cpu(side_pid) or 0.0
                    for table in tables:
                        side.execute(f"VACUUM {table}_twin")
                    vacuum = (_process_cpu(side_pid) or 0.0) - before
                    truncate, how = cleared[-1]
                    print(f"batch {n}: the merge's clear ({how}) {truncate:.3f} s, delete {delete:.3f} s, "
                          f"vacuum {vacuum:.3f} s of server CPU", flush=True)
                    if n:   # the first batch: a cold server and empty tables
                        for key, value in (("truncate", truncate), ("delete", delete), ("vacuum", vacuum)):
                            figures[key].append(value * 1e6 / batch_size)
        finally:
            GraphStore._clear = staticmethod(original)   # type: ignore[method-assign]
            sink.postgres.TRUNCATE_MIN_ROWS = threshold
            server.stop(mode="immediate")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=10000)
    parser.add_argument("--force-truncate", action="store_true",
                        help="TRUNCATE the slot whatever the batch's size (TRUNCATE_MIN_ROWS 0)")
    args = parser.parse_args(argv)
    figures = probe(args.batches, args.batch_size, args.force_truncate)
    for key, values in figures.items():
        print(f"{key:>9}: median {statistics.median(values):.1f} us of server CPU per event "
              f"(range {min(values):.1f}-{max(values):.1f}, {len(values)} batches)")
    delete_vacuum = [d + v for d, v in zip(figures["delete"], figures["vacuum"], strict=True)]
    print(f"delete + vacuum against truncate: {statistics.median(delete_vacuum):.1f} against "
          f"{statistics.median(figures['truncate']):.1f} us per event")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
