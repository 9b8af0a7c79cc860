"""What the Parquet export's read costs with CSV's default quote and delimiter against two control characters.

    PYTHONPATH=. python benchmarks/export_csv_probe.py [--events 15000] [--rounds 3] [--postgres-dsn DSN]

``--events`` demo events are written through ``GraphStore.write_batch`` in batches of 5,000 (an embedded
PostgreSQL 18 unless ``--postgres-dsn``), then every batch's rows of every Parquet table are read as
``sink.parquet.table_rows`` reads them (``COPY (SELECT ...) TO STDOUT`` as CSV, Arrow's CSV reader), with ``"`` and
``,`` (before session 27) and with ``\\x01`` and ``\\x02`` (now), alternated round by round. Per event: the
backend's CPU (``/proc``), this process's CPU (``time.process_time``: psycopg's COPY loop and Arrow's reader), the
CSV bytes; median of ``--rounds``. Both ways must give equal Arrow tables (checked: the probe stops otherwise).
"""

from __future__ import annotations

import argparse
import io
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

BATCH = 5000
STYLES = {"default": ("FORMAT csv", '"', ","),
          "control": ("FORMAT csv, QUOTE E'\\x01', DELIMITER E'\\x02'", "\x01", "\x02")}


def _read(conn: Any, table: Any, batch_id: int, style: str) -> tuple[float, float, int, Any]:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    from psycopg import ClientCursor

    from sink.parquet import TS

    options, quote, delimiter = STYLES[style]
    sql = ClientCursor(conn).mogrify(table.select(f"{table.batch_column} = %(b)s"), {"b": batch_id})
    buf = io.BytesIO()
    s0, c0 = _backend_cpu(conn), time.process_time()
    with conn.cursor() as cur, cur.copy(f"COPY ({sql}) TO STDOUT WITH ({options})") as copy:
        for block in copy:
            buf.write(block)
    s1 = _backend_cpu(conn)
    size = buf.tell()
    buf.seek(0)
    names = [name for name, _, _ in table.columns]
    types = {name: (pa.int64() if typ == TS else typ) for name, _, typ in table.columns}
    rows = None
    if size:
        rows = pacsv.read_csv(
            buf, read_options=pacsv.ReadOptions(column_names=names, block_size=max(1 << 20, size + 1)),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, quote_char=quote, delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False,
                                                 true_values=["t"], false_values=["f"]))
    return s1 - s0, time.process_time() - c0, size, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=15000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres-dsn", default=None)
    ns = parser.parse_args(argv)
    import psycopg

    from sink.parquet import TABLES
    from sink.postgres import GraphStore

    stored = demo_events(ns.events)
    batches = range((ns.events + BATCH - 1) // BATCH)
    figures: dict[str, list[tuple[float, float, int]]] = {}
    with probe_server(ns.postgres_dsn, "export-csv-probe-") as dsn:
        with GraphStore(dsn) as store:
            store.migrate()
            for b in batches:
                store.write_batch(b, stored[b * BATCH:(b + 1) * BATCH])
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(ns.rounds):
                tables: dict[str, dict[tuple[int, str], Any]] = {}
                for style in STYLES:
                    server = client = 0.0
                    size = 0
                    for b in batches:
                        for name, table in TABLES.items():
                            s, c, z, rows = _read(conn, table, b, style)
                            server, client, size = server + s, client + c, size + z
                            tables.setdefault(style, {})[(b, name)] = rows
                    figures.setdefault(style, []).append((server, client, size))
                first, second = tables.values()
                for key, rows in first.items():
                    if (rows is None) != (second[key] is None) or (rows is not None and not rows.equals(second[key])):
                        raise SystemExit(f"the two reads of {key} differ")
    n = ns.events
    print(f"{n} demo events, every batch's rows of {len(TABLES)} Parquet tables; per event, median of {ns.rounds} rounds:")
    for style, runs in figures.items():
        print(f"  {style:8s} server {1e6 * statistics.median(r[0] for r in runs) / n:5.1f} µs  client "
              f"{1e6 * statistics.median(r[1] for r in runs) / n:5.1f} µs  {runs[0][2] / n:,.0f} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
