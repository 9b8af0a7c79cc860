"""What storing the provenance documents once would save the server: today's rows against content-addressed documents.

    PYTHONPATH=. python benchmarks/provenance_docs_probe.py [--events 10000] [--batches 4] [--rounds 4]
                                                           [--postgres-dsn DSN]

Each provenance row (WIA-DATA-008 §3, ``lineage_provenance``: ~2.4 per demo event) carries its event's ``agent``,
``operation`` and ``tracing`` documents as ``jsonb``, the same for every dataset the event touched (and the same
``agent`` for every event of a job). The lever weighed here (docs/PERFORMANCE.md sessions 29, 32 and 34): keep each
distinct document once, in a table keyed by a hash of its text, and a 16-byte id in the row instead.

The ``stg_provenance`` rows the staging pass derives from ``--batches`` x ``--events`` demo events
(``benchmarks/derive_bench.py``'s events, ``BatchDeriver``, batch by batch) are written both ways into tables shaped
like the store's (the staging table, and the graph table with the store's five indexes), batch after batch as the
merge writes them, alternated round by round on one server (a fresh embedded PostgreSQL unless ``--postgres-dsn``):

* **inline** (the store today): ``COPY`` of the rows into the staging table, then the provenance merge's
  ``INSERT ... SELECT DISTINCT ON ... ON CONFLICT DO NOTHING``;
* **once**: the three documents replaced by ids (``sink.ids.node_uuid`` of the text, the store's uuid5), the
  batch's distinct documents staged beside them and merged into a document table with ``ON CONFLICT DO NOTHING``.

Per event, over the batches after the first: the backend's CPU for the ``COPY`` and for the merge (``/proc``), the
COPY text's bytes, and the two tables' size with their indexes at the end. The client's work of the "once" layout
(hashing each document) is left out: the staging pass would compute the ids where it writes the documents. What
readers would pay for the join (the Parquet export, the enriched records' annotations, the API) is not measured.
It prints figures and checks none.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.derive_bench import demo_events  # noqa: E402
from benchmarks.pg_value_probe import _backend_cpu, print_rounds, probe_server  # noqa: E402

_GRAPH_INDEXES = """
CREATE INDEX ON probe_prov (node_id, event_time);
CREATE INDEX ON probe_prov (last_batch_id);
CREATE INDEX ON probe_prov (node_id, event_time, provenance_id) WHERE declared_type <> 'accessed';
CREATE INDEX ON probe_prov (node_id) WHERE event_type = 'created' AND declared_type = 'modified';"""


def _tables(once: bool) -> list[str]:
    """The probe's tables: the staging and graph tables as migrations 001, 002 and 009 make them (inline), or with
    the three documents as ids and a document table beside them (once)."""
    doc = "uuid" if once else "jsonb"
    out = [
        "DROP TABLE IF EXISTS probe_stg, probe_prov, probe_stg_docs, probe_docs",
        f"CREATE TABLE probe_stg (batch_id bigint NOT NULL, part integer NOT NULL, provenance_id uuid, node_id uuid, "
        f"event_hash text, event_type text, event_time timestamptz, agent {doc}, operation {doc}, context jsonb, "
        f"tracing {doc})",
        "CREATE INDEX ON probe_stg (batch_id, part)",
        f"CREATE TABLE probe_prov (provenance_id uuid PRIMARY KEY, node_id uuid NOT NULL, event_hash text NOT NULL, "
        f"event_type text NOT NULL, event_time timestamptz NOT NULL, agent {doc} NOT NULL, operation {doc} NOT NULL, "
        f"context jsonb NOT NULL, tracing {doc} NOT NULL, last_batch_id bigint, declared_type text)",
        _GRAPH_INDEXES,
    ]
    if once:
        out += ["CREATE TABLE probe_stg_docs (batch_id bigint NOT NULL, part integer NOT NULL, doc_id uuid, doc jsonb)",
                "CREATE INDEX ON probe_stg_docs (batch_id, part)",
                "CREATE TABLE probe_docs (doc_id uuid PRIMARY KEY, doc jsonb NOT NULL)"]
    return out


_MERGE = """INSERT INTO probe_prov
    SELECT DISTINCT ON (provenance_id) provenance_id, node_id, event_hash, event_type, event_time, agent, operation,
           context, tracing, %(b)s, event_type
      FROM probe_stg WHERE batch_id = %(b)s ORDER BY provenance_id, part
    ON CONFLICT (provenance_id) DO NOTHING"""
_MERGE_DOCS = """INSERT INTO probe_docs
    SELECT DISTINCT ON (doc_id) doc_id, doc FROM probe_stg_docs WHERE batch_id = %(b)s ORDER BY doc_id
    ON CONFLICT (doc_id) DO NOTHING"""


def _copy_data(batch_id: int, rows: list[tuple[Any, ...]], once: bool) -> tuple[list[str], list[str]]:
    """COPY text of the batch's provenance rows, and of its distinct documents (once)."""
    from sink.derive import STAGING_COLUMNS
    from sink.ids import node_uuid
    from sink.postgres import copy_text

    prefix = f"{batch_id}\t0\t"
    if not once:
        return [copy_text(prefix, rows[i:i + 2000]) for i in range(0, len(rows), 2000)], []
    columns = STAGING_COLUMNS["stg_provenance"]
    positions = [columns.index(c) for c in ("agent", "operation", "tracing")]
    docs: dict[str, str] = {}
    slim = []
    for row in rows:
        values = list(row)
        for i in positions:
            values[i] = docs.setdefault(values[i], node_uuid("document", values[i]))
        slim.append(tuple(values))
    doc_rows = [(doc_id, text) for text, doc_id in docs.items()]
    return ([copy_text(prefix, slim[i:i + 2000]) for i in range(0, len(slim), 2000)],
            [copy_text(prefix, doc_rows[i:i + 2000]) for i in range(0, len(doc_rows), 2000)])


def _round(conn: Any, batches: list[list[tuple[Any, ...]]], events: int, once: bool) -> dict[str, float]:
    for statement in _tables(once):
        conn.execute(statement)
    copy_cpu = merge_cpu = 0.0
    copied = 0
    for batch_id, rows in enumerate(batches):
        texts, doc_texts = _copy_data(batch_id, rows, once)
        c0 = _backend_cpu(conn)
        with conn.transaction(), conn.cursor() as cur:
            for table, data in (("probe_stg", texts), ("probe_stg_docs", doc_texts)):
                if data:
                    with cur.copy(f"COPY {table} FROM STDIN") as copy:
                        for text in data:
                            copy.write(text)
            c1 = _backend_cpu(conn)
            cur.execute(_MERGE, {"b": batch_id})
            if once:
                cur.execute(_MERGE_DOCS, {"b": batch_id})
        c2 = _backend_cpu(conn)
        if batch_id > 0:   # the first batch fills empty tables and caches: not counted
            copy_cpu += c1 - c0
            merge_cpu += c2 - c1
            copied += sum(map(len, texts)) + sum(map(len, doc_texts))
    (size,) = conn.execute("SELECT pg_total_relation_size('probe_prov')"
                           " + coalesce(pg_total_relation_size(to_regclass('probe_docs')), 0)").fetchone()
    conn.execute("DROP TABLE IF EXISTS probe_stg, probe_prov, probe_stg_docs, probe_docs")
    counted = events * (len(batches) - 1)
    return {"copy": 1e6 * copy_cpu / counted, "merge": 1e6 * merge_cpu / counted, "bytes": copied / counted,
            "MB": size / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10000, help="events per batch")
    parser.add_argument("--batches", type=int, default=4, help="batches per round (the first is not counted)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--postgres-dsn", default=None)
    ns = parser.parse_args(argv)
    import psycopg

    from sink.derive import BatchDeriver

    events = demo_events(ns.events * ns.batches)
    batches = []
    for b in range(ns.batches):
        deriver = BatchDeriver()
        deriver.add(events[b * ns.events:(b + 1) * ns.events])
        batches.append(deriver.finish().tables["stg_provenance"])
    rows = sum(map(len, batches))
    print(f"{rows} provenance rows of {ns.events * ns.batches} demo events ({rows / (ns.events * ns.batches):.2f} per "
          f"event), {ns.batches} batches per round, the first not counted")
    results: dict[str, dict[str, list[float]]] = {}
    with probe_server(ns.postgres_dsn, "provenance-docs-probe-") as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        for r in range(ns.rounds):
            for layout in (("inline", "once") if r % 2 == 0 else ("once", "inline")):
                for key, value in _round(conn, batches, ns.events, layout == "once").items():
                    results.setdefault(layout, {}).setdefault(key, []).append(value)
    print(f"per event (backend CPU in µs, COPY bytes), and the tables' size; median (range) of {ns.rounds} alternated "
          "rounds:")
    print_rounds(results, width=6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
