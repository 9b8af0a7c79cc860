"""What two column choices cost PostgreSQL per row: jsonb against json / text documents, and a hash key's collation.

    PYTHONPATH=. python benchmarks/pg_value_probe.py [--events 5000] [--rounds 3] [--postgres-dsn DSN]

Two levers for the store's server time (issue 18, docs/PERFORMANCE.md session 26), priced before building either:

* **Documents as jsonb.** ``lineage_provenance`` holds 2.4 rows per demo event with four jsonb documents (agent,
  operation, context, tracing; ~515 bytes). A jsonb value is parsed on the way in (the staging ``COPY``) and
  written out again on the way out (the Parquet export's ``COPY (SELECT ...)``); json only validates its text and
  text does nothing. The probe COPYs the provenance rows the staging pass derives from ``--events`` demo events
  (``benchmarks/derive_bench.py``'s events, ``BatchDeriver``, as ``GraphStore.stage_partition`` stages them) into a
  table whose four document columns are jsonb, json or text, COPYs them out as the export does (CSV of each column
  as text), and copies them with ``INSERT ... SELECT`` (as the merge does).
* **The collation of a hash key.** ``lineage_events.event_hash`` (64 hex digits, the primary key) uses the
  database's collation; the embedded server's is ``C.UTF-8`` of the libc provider, for which PostgreSQL compares
  with ``strcoll`` and sorts without abbreviated keys. The probe merges the events' hashes in batches of 5,000, as
  the events merge does (``INSERT ... SELECT DISTINCT ON (event_hash) ... ORDER BY event_hash, part ON CONFLICT DO
  NOTHING``), into a table keyed by ``text`` with the default collation and with ``COLLATE "C"``.

The figure is the CPU of the connection's backend (``/proc``), microseconds per row, median (range) of ``--rounds``
alternated rounds; the client is not counted. Without ``--postgres-dsn`` an embedded PostgreSQL (the wheel's) is
started in a temporary directory; with one, the server must run on this machine (the backend's ``/proc`` entry is
read). It prints figures and checks none.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.derive_bench import demo_events  # noqa: E402
from benchmarks.store_write_bench import _process_cpu  # noqa: E402

DOCS = ("agent", "operation", "context", "tracing")
MERGE_ROWS = 5000


def _backend_cpu(conn: Any) -> float:
    cpu = _process_cpu(conn.info.backend_pid)
    if cpu is None:
        raise SystemExit(f"cannot read the backend's /proc entry (pid {conn.info.backend_pid}): the server must run here")
    return cpu


def _provenance_copy_text(events: int) -> tuple[bytes, int, list[str]]:
    """COPY text of the ``stg_provenance`` rows (without batch_id and part) of ``events`` demo events, their count,
    and the events' hashes."""
    from sink.derive import STAGING_COLUMNS, BatchDeriver
    from sink.postgres import copy_text

    stored = demo_events(events)
    deriver = BatchDeriver()
    deriver.add(stored)
    rows = deriver.finish().tables["stg_provenance"]
    columns = STAGING_COLUMNS["stg_provenance"]
    if tuple(columns[-4:]) != DOCS:   # the COPY text below puts the four documents last
        raise SystemExit(f"stg_provenance's columns changed: {columns}")
    return copy_text("", rows).encode(), len(rows), [e.event_hash for e in stored]


def _documents(conn: Any, kind: str, text: bytes, n: int) -> dict[str, float]:
    """µs per row of the backend: COPY in, COPY out (as the export), INSERT ... SELECT (as the merge)."""
    conn.execute(f"DROP TABLE IF EXISTS probe_docs_{kind}, probe_docs2_{kind}")
    conn.execute(f"CREATE UNLOGGED TABLE probe_docs_{kind} (provenance_id uuid, node_id uuid, event_hash text, "
                 f"event_type text, event_time timestamptz, agent {kind}, operation {kind}, context {kind}, "
                 f"tracing {kind})")
    conn.execute(f"CREATE UNLOGGED TABLE probe_docs2_{kind} (LIKE probe_docs_{kind})")
    c0 = _backend_cpu(conn)
    with conn.cursor() as cur, cur.copy(f"COPY probe_docs_{kind} FROM STDIN") as copy:
        copy.write(text)
    c1 = _backend_cpu(conn)
    out = io.BytesIO()
    docs = ", ".join(f"{d}::text" for d in DOCS)
    with conn.cursor() as cur, cur.copy(f"COPY (SELECT provenance_id::text, {docs} FROM probe_docs_{kind}) "
                                        "TO STDOUT WITH (FORMAT csv)") as copy:
        for block in copy:
            out.write(block)
    c2 = _backend_cpu(conn)
    conn.execute(f"INSERT INTO probe_docs2_{kind} SELECT * FROM probe_docs_{kind}")
    c3 = _backend_cpu(conn)
    conn.execute(f"DROP TABLE probe_docs_{kind}, probe_docs2_{kind}")
    return {"copy_in": 1e6 * (c1 - c0) / n, "copy_out": 1e6 * (c2 - c1) / n, "insert_select": 1e6 * (c3 - c2) / n}


def _hash_merge(conn: Any, collation: str, hashes: list[str]) -> float:
    """µs per row of the backend: the hashes merged :data:`MERGE_ROWS` at a time into a ``text`` key of
    ``collation`` (``default`` or ``"C"``), as the events merge does."""
    conn.execute("DROP TABLE IF EXISTS probe_keys, probe_stage")
    conn.execute("CREATE UNLOGGED TABLE probe_stage (batch_id int, part int, event_hash text, payload text)")
    with conn.cursor() as cur, cur.copy("COPY probe_stage FROM STDIN") as copy:
        for i, h in enumerate(hashes):
            copy.write_row((i // MERGE_ROWS, i % 2, h, "x" * 300))
    conn.execute("CREATE INDEX ON probe_stage (batch_id)")
    conn.execute("ANALYZE probe_stage")
    clause = "" if collation == "default" else f"COLLATE {collation}"
    conn.execute(f"CREATE UNLOGGED TABLE probe_keys (event_hash text {clause} PRIMARY KEY, part int, payload text)")
    c0 = _backend_cpu(conn)
    for b in range((len(hashes) + MERGE_ROWS - 1) // MERGE_ROWS):
        conn.execute("INSERT INTO probe_keys SELECT DISTINCT ON (event_hash) event_hash, part, payload FROM probe_stage "
                     "WHERE batch_id = %s ORDER BY event_hash, part ON CONFLICT DO NOTHING", (b,))
    c1 = _backend_cpu(conn)
    conn.execute("DROP TABLE probe_keys, probe_stage")
    return 1e6 * (c1 - c0) / len(hashes)


@contextlib.contextmanager
def probe_server(dsn: str | None, prefix: str) -> Iterator[str]:
    """``dsn``, or a fresh embedded PostgreSQL (the wheel's) in a temporary directory for the block: its DSN."""
    if dsn is not None:
        yield dsn
        return
    from lineage.embedded.postgres import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pg").start()
        try:
            yield server.dsn
        finally:
            server.stop()


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f} ({min(values):.2f}-{max(values):.2f})"


def print_rounds(results: dict[str, dict[str, list[float]]], width: int = 5) -> None:
    """One line per variant of ``results`` (``{variant: {figure: [value per round]}}``): each figure's median
    (range), one decimal."""
    for variant, figures in results.items():
        print(f"  {variant:6s} " + "  ".join(f"{name} {statistics.median(v):{width}.1f} ({min(v):.1f}-{max(v):.1f})"
                                            for name, v in figures.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres-dsn", default=None)
    ns = parser.parse_args(argv)
    import psycopg

    text, n, hashes = _provenance_copy_text(ns.events)
    # the hashes of 40 batches' worth of events: distinct, as new events' are (sha256 of each event's hash and i)
    keys = [hashlib.sha256(f"{hashes[i % len(hashes)]}/{i}".encode()).hexdigest() for i in range(40 * MERGE_ROWS)]
    print(f"{ns.events} demo events: {n} provenance rows ({len(text) / n:.0f} bytes of COPY text each); "
          f"{len(keys)} event hashes")
    docs: dict[str, dict[str, list[float]]] = {}
    coll: dict[str, list[float]] = {}
    with probe_server(ns.postgres_dsn, "pg-value-probe-") as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(ns.rounds):
            for kind in ("jsonb", "json", "text"):
                for step, value in _documents(conn, kind, text, n).items():
                    docs.setdefault(kind, {}).setdefault(step, []).append(value)
            for collation in ("default", '"C"'):
                coll.setdefault(collation, []).append(_hash_merge(conn, collation, keys))
    print(f"provenance documents, backend µs per row, median (range) of {ns.rounds} rounds:")
    for kind, steps in docs.items():
        print(f"  {kind:5s}  " + "  ".join(f"{step} {_summary(v)}" for step, v in steps.items()))
    print(f"event-hash key merged {MERGE_ROWS} rows at a time, backend µs per row:")
    for collation, values in coll.items():
        print(f"  {collation:8s} {_summary(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
