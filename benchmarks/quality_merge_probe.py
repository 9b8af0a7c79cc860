"""What writing a batch's quality annotations (``lineage_quality``) costs the server, by how the rows travel.

    PYTHONPATH=. python benchmarks/quality_merge_probe.py [--events 20000] [--batch-size 5000] [--rounds 5]
                                                          [--postgres-dsn DSN]

A fresh embedded PostgreSQL (the product's default server) takes ``--events`` demo events through
``GraphStore.write_batch`` in ``--batch-size`` batches; the quality rows the last batch's merge wrote (the dicts
``annotate_versions`` made) are kept. Then, round by round and alternated, in a transaction that is rolled back,
those rows are deleted and written again each way:

* **jsonb** (before session 28): one ``jsonb`` parameter, ``jsonb_to_recordset``;
* **json**: the same text as ``json``, ``json_to_recordset`` (no jsonb tree of the whole array);
* **copy**: ``COPY`` text into a temporary table, then the same upsert from it.

Per quality row: the backend's CPU for the statement(s) (``/proc``) and the client's (``time.process_time``: the
JSON text or the COPY rows), median (range) of ``--rounds``. The written rows are compared between the ways
(same ``lineage_quality`` contents). Prints figures and checks only that equality.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.pg_value_probe import _backend_cpu, probe_server  # noqa: E402

_COLUMNS = ("quality_id", "node_id", "version_id", "measured_at", "metrics", "validations", "anomalies")
_DOCS = ("metrics", "validations", "anomalies")
_FROM = "jsonb_to_recordset(%(rows)s::jsonb)"
_TYPES = ("quality_id uuid, node_id uuid, version_id uuid, measured_at timestamptz, metrics jsonb, "
          "validations jsonb, anomalies jsonb")


def _statement(way: str) -> str:
    """The store's ``MERGE_QUALITY`` with its rows read ``way``."""
    from sink.postgres import MERGE_QUALITY

    if _FROM not in MERGE_QUALITY:
        raise SystemExit("MERGE_QUALITY no longer reads jsonb_to_recordset: update this probe")
    if way == "copy":   # the temporary table has the record's columns and types
        return re.sub(re.escape(_FROM) + r" AS q\([^)]*\)", "probe_quality", MERGE_QUALITY)
    return MERGE_QUALITY.replace(_FROM, {"jsonb": _FROM, "json": "json_to_recordset(%(rows)s::json)"}[way])


def _capture(dsn: str, events: int, batch_size: int) -> tuple[int, list[dict[str, Any]]]:
    """Write the demo events; the last batch's id and the quality rows its merge computed (its quality inputs, kept
    by :func:`benchmarks.quality_annotate_bench.capture_inputs`, annotated as the merge annotates them)."""
    from benchmarks.quality_annotate_bench import capture_inputs
    from sink.postgres import annotate_versions
    from sink.settings import StoreSettings

    kept = capture_inputs(dsn, events, batch_size)
    return len(kept), annotate_versions(kept[-1], StoreSettings(postgres_dsn=dsn).timeliness_window_seconds)


def _write(conn: Any, way: str, batch: int, rows: list[dict[str, Any]]) -> tuple[float, float, list[Any]]:
    """Client and backend CPU seconds of writing ``rows`` ``way``, and the rows as written (rolled back after)."""
    from sink.derive import _dumps
    from sink.postgres import copy_text

    with conn.transaction(force_rollback=True), conn.cursor() as cur:
        cur.execute("DELETE FROM lineage_quality WHERE last_batch_id = %s", (batch,))
        if way == "copy":
            cur.execute(f"CREATE TEMP TABLE probe_quality ({_TYPES}) ON COMMIT DROP")
        b0, c0 = _backend_cpu(conn), time.process_time()
        if way == "copy":
            with cur.copy("COPY probe_quality FROM STDIN") as copy:
                copy.write(copy_text("", [tuple(_dumps(r[c]) if c in _DOCS else r[c] for c in _COLUMNS)
                                          for r in rows]))
            cur.execute(_statement(way), {"b": batch})
        else:
            cur.execute(_statement(way), {"b": batch, "rows": _dumps(rows)})
        c1, b1 = time.process_time(), _backend_cpu(conn)
        written = cur.execute("SELECT quality_id, node_id, version_id, measured_at, metrics, validations, anomalies "
                              "FROM lineage_quality WHERE last_batch_id = %s ORDER BY quality_id", (batch,)).fetchall()
    return c1 - c0, b1 - b0, written


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} ({min(values):.1f}-{max(values):.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres-dsn", default=None, help="a server to use (default: a fresh embedded one)")
    args = parser.parse_args(argv)
    import psycopg

    ways = ("jsonb", "json", "copy")
    with probe_server(args.postgres_dsn, "quality-probe-") as dsn:
        batch, rows = _capture(dsn, args.events, args.batch_size)
        print(f"batch {batch}: {len(rows)} quality rows")
        client: dict[str, list[float]] = {w: [] for w in ways}
        server: dict[str, list[float]] = {w: [] for w in ways}
        with psycopg.connect(dsn) as conn:
            reference = None
            for _ in range(args.rounds):
                for way in ways:
                    c, s, written = _write(conn, way, batch, rows)
                    client[way].append(1e6 * c / len(rows))
                    server[way].append(1e6 * s / len(rows))
                    if reference is None:
                        reference = written
                    elif written != reference:
                        raise SystemExit(f"{way}: the written rows differ from the first way's")
    print("µs per quality row, median (range):")
    for way in ways:
        print(f"  {way:5s}  client {_summary(client[way])}  server {_summary(server[way])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
