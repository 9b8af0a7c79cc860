"""An in-memory snapshot of the PostgreSQL lineage graph, as of now or a past time (the exports' input).

:func:`load_snapshot` reads every table the exports need in one repeatable-read transaction,
so the snapshot is consistent even while a writer commits batches.

As of ``T`` (``None`` = today's graph):

- datasets and jobs with ``first_seen <= T``;
- edges valid at T: ``first_seen <= T AND (valid_to IS NULL OR valid_to > T)``; today:
  ``valid_to IS NULL``;
- column lineage with ``first_seen <= T``; provenance with ``event_time <= T``; quality with
  ``measured_at <= T``; raw events with ``event_time <= T``; runs with ``first_seen <= T``; dataset
  versions with ``event_time <= T``.

Aliases fold into their canonical node: :meth:`GraphSnapshot.canonical` maps an alias id to
the id it is an alias of; alias rows are kept in :attr:`GraphSnapshot.aliases`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["GraphSnapshot", "load_snapshot", "connect", "utc_iso"]


def utc_iso(value: datetime | None) -> str | None:
    """``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``: an ISO-8601 UTC timestamp, or None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class GraphSnapshot:
    """Rows of the graph tables as dicts (column name -> value), with aliases resolved on demand."""

    as_of: datetime | None
    datasets: list[dict[str, Any]] = field(default_factory=list)     # canonical datasets only
    aliases: list[dict[str, Any]] = field(default_factory=list)      # datasets with alias_of set
    jobs: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)        # all kinds
    column_lineage: list[dict[str, Any]] = field(default_factory=list)
    provenance: list[dict[str, Any]] = field(default_factory=list)
    quality: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    versions: list[dict[str, Any]] = field(default_factory=list)     # lineage_dataset_versions (identity columns)
    alias_map: dict[str, str] = field(default_factory=dict)

    def canonical(self, node_id: Any) -> str:
        key = str(node_id)
        return self.alias_map.get(key, key)

    def dataset_edges(self) -> list[dict[str, Any]]:
        return [e for e in self.edges if e["kind"] == "dataset"]

    def job_edges(self) -> list[dict[str, Any]]:
        return [e for e in self.edges if e["kind"] in ("reads", "writes")]


def connect(conn_or_dsn: Any) -> tuple[Any, bool]:
    """``(connection, owned)``: opens a connection for a DSN string (owned=True), else passes it through."""
    if isinstance(conn_or_dsn, str):
        import psycopg

        return psycopg.connect(conn_or_dsn), True
    return conn_or_dsn, False


def _rows(conn: Any, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    for row in rows:
        for k, v in row.items():
            if hasattr(v, "hex") and type(v).__name__ == "UUID":
                row[k] = str(v)
    return rows


def load_snapshot(conn_or_dsn: Any, as_of: datetime | None = None, with_runs: bool = False) -> GraphSnapshot:
    """Read the graph (as of ``as_of``) into memory, consistently."""
    if as_of is not None and as_of.tzinfo is None:
        raise ValueError("as_of needs a timezone")
    conn, owned = connect(conn_or_dsn)
    try:
        was_autocommit = conn.autocommit
        if was_autocommit:
            conn.autocommit = False
        from psycopg.pq import TransactionStatus

        own_tx = conn.info.transaction_status == TransactionStatus.IDLE
        if own_tx:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        p = {"t": as_of}
        t_nodes = "" if as_of is None else " WHERE first_seen <= %(t)s"
        t_edges = (" WHERE valid_to IS NULL" if as_of is None
                   else " WHERE first_seen <= %(t)s AND (valid_to IS NULL OR valid_to > %(t)s)")
        snap = GraphSnapshot(as_of)
        all_ds = _rows(conn, "SELECT * FROM lineage_datasets" + t_nodes + " ORDER BY qualified_name, dataset_id", p)
        snap.datasets = [d for d in all_ds if d["alias_of"] is None]
        snap.aliases = [d for d in all_ds if d["alias_of"] is not None]
        snap.alias_map = {d["dataset_id"]: d["alias_of"] for d in snap.aliases}
        snap.jobs = _rows(conn, "SELECT * FROM lineage_jobs" + t_nodes + " ORDER BY qualified_name, job_id", p)
        snap.edges = _rows(conn, "SELECT * FROM lineage_edges" + t_edges + " ORDER BY edge_id", p)
        snap.column_lineage = _rows(conn, "SELECT * FROM lineage_column_lineage" + t_nodes
                                    + " ORDER BY column_lineage_id", p)
        snap.provenance = _rows(conn, "SELECT * FROM lineage_provenance"
                                + ("" if as_of is None else " WHERE event_time <= %(t)s")
                                + " ORDER BY event_time, provenance_id", p)
        snap.quality = _rows(conn, "SELECT * FROM lineage_quality"
                             + ("" if as_of is None else " WHERE measured_at <= %(t)s")
                             + " ORDER BY measured_at, quality_id", p)
        snap.versions = _rows(conn, "SELECT version_id, dataset_id, version, event_time, run_id "
                              "FROM lineage_dataset_versions" + ("" if as_of is None else " WHERE event_time <= %(t)s")
                              + " ORDER BY dataset_id, event_time, version_id", p)
        if with_runs:
            snap.runs = _rows(conn, "SELECT * FROM lineage_runs" + t_nodes + " ORDER BY first_seen, run_id", p)
        if own_tx:
            conn.rollback()
        if was_autocommit:
            conn.autocommit = True
        return snap
    finally:
        if owned:
            conn.close()
