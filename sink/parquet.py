"""The Parquet projection of the lineage graph: batch-scoped files, a merge-on-read reader, compaction.

Layout under ``root_dir`` (one directory per table, plain Parquet files, readable by pyarrow,
DuckDB, Spark or any other Parquet reader)::

    lineage_nodes/base=00000000000000000042.parquet     <- compacted rows, up to batch 42
    lineage_nodes/batch=00000000000000000043.parquet    <- rows batch 43 changed
    lineage_edges/...  lineage_column_lineage/  lineage_provenance/  lineage_quality/
    lineage_events/  lineage_runs/

Every row carries ``_batch_id`` (the batch whose write produced it: a stream micro-batch, >= 0, or a
``lineage load`` batch, negative) and ``_commit_seq`` (that batch's commit sequence number,
``lineage_transactions.commit_seq``, migration 008; files written before 008 lack it and read as
``_commit_seq = _batch_id``, which is what 008 gave their batches).

Upsert semantics (merge on read)
    A table's current content is, for each id, the row with the greatest ``_commit_seq``; a row
    from a ``batch=`` file beats a ``base=`` row with the same ``_commit_seq`` (the two are equal
    anyway: both were exported from the same committed database state).
    :meth:`ParquetGraphStore.read_table` applies that rule; in SQL (DuckDB, Spark)::

        SELECT * EXCLUDE (rn) FROM (SELECT *, row_number() OVER (PARTITION BY node_id
               ORDER BY coalesce(_commit_seq, _batch_id) DESC) AS rn
               FROM read_parquet('root/lineage_nodes/*.parquet', union_by_name = true)) WHERE rn = 1

Idempotence
    The batch with commit number ``s`` always writes the file ``batch=<s, 20 digits>.parquet``:
    written to a temporary name in the same directory, then renamed over the target (atomic on
    POSIX), so a replayed batch (same transaction row, same number) replaces its own file and a
    reader never sees half a file. A replay that finds no rows leaves the existing file alone.

Batch ids and commit order
    Batch ids are identities, not an order: the stream's ids (``epoch * 2**40 + micro-batch``) and
    ``lineage load``'s (negative, content-derived) interleave arbitrarily when a load runs beside
    the stream. The order is the commit sequence (migration 008): drawn at the end of each batch
    transaction, after the rows it changes are locked, so of two batches changing one row the
    later commit has the greater number. :func:`changed_rows` reads it with the rows, so the stream
    and ``lineage load`` write the same store at the same time without colliding. Each table's id
    column is ``TABLES[name].id_column`` (the key of a graph-change record: ``event_hash`` for
    ``lineage_events``).

Compaction
    :meth:`compact` merges a table's base and batch files into one new ``base=<max batch>``
    file (latest row per id), written atomically, then deletes the files it merged. A crash
    between the rename and the deletes leaves rows present twice with the same
    ``_batch_id``, which the reader already resolves. Writes compact a table automatically
    once it holds more than ``max_batch_files`` batch files, so a table never has more than
    ``max_batch_files + 1`` files (plus one transient).

Why not Delta Lake or Iceberg
    Both would give the same upserts with a transaction log, but neither has a Python writer
    that works offline here without a JVM or a catalog: delta-rs (``deltalake``) and PyIceberg
    are not installed, PyIceberg needs a catalog service (or a SQL catalog and still no
    row-level MERGE in its Python writer), and the Spark connectors need jars from Maven Central,
    which is unreachable. Batch-keyed files with merge-on-read need only pyarrow, keep the files
    readable by every engine, and make replay idempotence a property of file names. The
    PostgreSQL graph stays the source of truth: the projection can always be rebuilt from it
    (:meth:`write_all`).
"""

from __future__ import annotations

import io
import os
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from schemas.errors import StoreError

from .graph import connect

__all__ = ["ParquetGraphStore", "ParquetTable", "TABLES", "changed_rows", "table_rows"]

TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class ParquetTable:
    """One Parquet table: its id column and the SELECT that projects it from PostgreSQL.

    ``columns`` are ``(name, sql_expression, arrow_type)``; timestamps travel as epoch
    microseconds, uuids and jsonb as text (JSON documents stay JSON strings in Parquet).
    ``batch_column`` selects the rows a batch changed; ``time_filter`` the rows as of ``%(t)s``.
    """

    name: str
    id_column: str
    source: str
    columns: tuple[tuple[str, str, pa.DataType], ...]
    batch_column: str = "last_batch_id"
    time_filter: str = "first_seen <= %(t)s"

    def select(self, where: str) -> str:
        exprs = ", ".join(f"{expr} AS {name}" for name, expr, _ in self.columns)
        return f"SELECT {exprs} FROM {self.source} WHERE {where}"

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(name, typ) for name, _, typ in self.columns]
                         + [("_batch_id", pa.int64()), ("_commit_seq", pa.int64())])


def _t(col: str) -> tuple[str, str, pa.DataType]:
    return (col, f"(extract(epoch FROM {col}) * 1000000)::bigint", TS)


def _s(col: str, expr: str | None = None) -> tuple[str, str, pa.DataType]:
    return (col, f"({expr or col})::text", pa.string())


def _i(col: str) -> tuple[str, str, pa.DataType]:
    return (col, col, pa.int64())


def _b(col: str) -> tuple[str, str, pa.DataType]:
    return (col, col, pa.bool_())


_NODES_SOURCE = """(
    SELECT dataset_id AS node_id, 'dataset' AS node_kind, node_type, namespace, name, qualified_name, description,
           to_jsonb(owner) AS owners, tags, fields, alias_of, '{}'::jsonb AS tracing, is_placeholder,
           first_seen, last_seen, last_batch_id FROM lineage_datasets
    UNION ALL
    SELECT job_id, 'job', coalesce(job_type, 'job'), namespace, name, qualified_name, description,
           owners, '[]'::jsonb, '[]'::jsonb, NULL::uuid, tracing, is_placeholder,
           first_seen, last_seen, last_batch_id FROM lineage_jobs) n"""

TABLES: dict[str, ParquetTable] = {t.name: t for t in (
    ParquetTable("lineage_nodes", "node_id", _NODES_SOURCE, (
        _s("node_id"), _s("node_kind"), _s("node_type"), _s("namespace"), _s("name"), _s("qualified_name"),
        _s("description"), _s("owners"), _s("tags"), _s("fields"), _s("alias_of"), _s("tracing"),
        _b("is_placeholder"), _t("first_seen"), _t("last_seen"), _i("last_batch_id"))),
    ParquetTable("lineage_edges", "edge_id", "lineage_edges", (
        _s("edge_id"), _s("source_node_id"), _s("target_node_id"), _s("kind"), _s("edge_type"), _s("job_id"),
        _s("job_version_id"), _s("run_id"), _s("transformation"), _s("metadata"), _s("tracing"), _t("first_seen"),
        _t("last_seen"), _t("valid_to"), _i("last_batch_id")),
        time_filter="first_seen <= %(t)s AND (valid_to IS NULL OR valid_to > %(t)s)"),
    ParquetTable("lineage_column_lineage", "column_lineage_id", "lineage_column_lineage", (
        _s("column_lineage_id"), _s("source_dataset_id"), _s("source_table"), _s("source_column"),
        _s("target_dataset_id"), _s("target_table"), _s("target_column"), _s("transformation_type"),
        _s("transformation_logic"), _s("dependencies"), _s("job_id"), _t("first_seen"), _t("last_seen"),
        _i("last_batch_id"))),
    ParquetTable("lineage_provenance", "provenance_id", "lineage_provenance", (
        _s("provenance_id"), _s("node_id"), _s("event_hash"), _s("event_type"), _t("event_time"), _s("agent"),
        _s("operation"), _s("context"), _s("tracing"), _i("last_batch_id")), time_filter="event_time <= %(t)s"),
    ParquetTable("lineage_quality", "quality_id", "lineage_quality", (
        _s("quality_id"), _s("node_id"), _s("version_id"), _t("measured_at"), _s("metrics"), _s("validations"),
        _s("anomalies"), _i("last_batch_id")), time_filter="measured_at <= %(t)s"),
    ParquetTable("lineage_events", "event_hash", "lineage_events", (
        _s("event_hash"), _s("event_kind"), _s("event_type"), _t("event_time"), _s("run_id"),
        _s("job_namespace"), _s("job_name"), _s("producer"), _s("source"), _s("payload"), _i("revision"),
        _i("first_batch_id")), batch_column="first_batch_id", time_filter="event_time <= %(t)s"),
    ParquetTable("lineage_runs", "run_id", "lineage_runs", (
        _s("run_id"), _s("job_id"), _s("job_version_id"), _s("state"), _t("state_time"), _t("started_at"),
        _t("ended_at"), _i("duration_ms"), _t("nominal_start"), _t("nominal_end"), _s("error_message"),
        _s("parent_run_id"), _s("parent_job_id"), _s("root_run_id"), _s("producer"), _b("is_placeholder"),
        _t("first_seen"), _t("last_seen"), _i("last_batch_id"))),
)}

_FILE = re.compile(r"^(base|batch)=(\d{20})\.parquet$")


def table_rows(conn: Any, table: ParquetTable, where: str, params: dict[str, Any],
               batch_id: int, commit_seq: int | None = None) -> pa.Table:
    """Rows of ``table`` selected by ``where``, as Arrow, through ``COPY (SELECT ...) TO STDOUT`` (CSV),
    with the columns ``_batch_id`` and ``_commit_seq`` (``commit_seq``, else ``batch_id``)."""
    buf = io.BytesIO()
    sql = table.select(where)
    from psycopg import ClientCursor

    query = ClientCursor(conn).mogrify(sql, params) if params else sql
    with conn.cursor() as cur:
        with cur.copy(f"COPY ({query}) TO STDOUT WITH (FORMAT csv)") as copy:
            for block in copy:
                buf.write(block)
    types = {name: (pa.int64() if typ == TS else typ) for name, _, typ in table.columns}
    names = [name for name, _, _ in table.columns]
    if buf.tell() == 0:
        arrays = [pa.array([], type=typ) for _, _, typ in table.columns]
        result = pa.Table.from_arrays(arrays, names=names)
    else:
        size = buf.tell()
        buf.seek(0)
        result = pacsv.read_csv(
            buf,
            # one block for the whole export: a row (a 20,000-field dataset) can be larger than the 1 MB default
            read_options=pacsv.ReadOptions(column_names=names, block_size=max(1 << 20, size + 1)),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                 quoted_strings_can_be_null=False,
                                                 true_values=["t"], false_values=["f"]),
        )
        for i, (name, _, typ) in enumerate(table.columns):
            if typ == TS:
                result = result.set_column(i, name, result.column(i).cast(TS))
    batch = pa.array([batch_id] * result.num_rows, type=pa.int64())
    seq = pa.array([batch_id if commit_seq is None else commit_seq] * result.num_rows, type=pa.int64())
    return result.append_column("_batch_id", batch).append_column("_commit_seq", seq)


COMMIT_SEQ_SQL = "SELECT commit_seq FROM lineage_transactions WHERE batch_id = %s"


def commit_seq(conn: Any, batch_id: int) -> int:
    """The commit sequence number of committed batch ``batch_id`` (migration 008). Rows written outside
    :class:`~sink.postgres.GraphStore` (no transaction record) with a batch id >= 0 are ordered by it, as
    before 008."""
    row = conn.execute(COMMIT_SEQ_SQL, (batch_id,)).fetchone()
    if (row is None or row[0] is None) and batch_id >= 0:
        return batch_id
    if row is None or row[0] is None:
        raise StoreError(f"batch {batch_id} is not committed: no commit sequence number to order its rows by",
                         code="store.parquet")
    return int(row[0])


def changed_rows(conn_or_dsn: Any, batch_id: int) -> dict[str, pa.Table]:
    """Rows each Parquet table gets from batch ``batch_id`` (``last_batch_id = batch_id``), for the graph topic."""
    conn, owned = connect(conn_or_dsn)
    try:
        if owned:   # one snapshot for every table
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        seq = commit_seq(conn, batch_id)
        return {name: table_rows(conn, t, f"{t.batch_column} = %(b)s", {"b": batch_id}, batch_id, seq)
                for name, t in TABLES.items()}
    finally:
        if owned:
            conn.close()


class ParquetGraphStore:
    """The Parquet tables under ``root_dir`` (see the module docs for the layout and the rules)."""

    def __init__(self, root_dir: str | os.PathLike[str], max_batch_files: int = 32) -> None:
        self.root = Path(root_dir)
        self.max_batch_files = max_batch_files

    # -- writing ---------------------------------------------------------------------------
    def write_batch(self, batch_id: int, tables: dict[str, pa.Table]) -> dict[str, int]:
        """Write each table's rows of ``batch_id`` (replacing a previous write of that batch) into the file of
        its commit number: the rows' ``_commit_seq`` (:func:`changed_rows` sets it), else ``batch_id``."""
        counts = {}
        for name, rows in tables.items():
            counts[name] = rows.num_rows
            if rows.num_rows == 0:
                continue
            if "_batch_id" not in rows.column_names:
                rows = rows.append_column("_batch_id", pa.array([batch_id] * rows.num_rows, type=pa.int64()))
            if "_commit_seq" not in rows.column_names:
                rows = rows.append_column("_commit_seq", rows.column("_batch_id"))
            seq = pc.max(rows.column("_commit_seq")).as_py()
            if seq is None or seq < 0 or pc.min(rows.column("_commit_seq")).as_py() != seq:
                raise StoreError(f"batch {batch_id}: rows need one commit sequence number >= 0 (migration 008), "
                                 f"not {seq}", code="store.parquet")
            self._atomic_write(self._dir(name) / f"batch={seq:020d}.parquet", rows)
            if len(self._files(name, "batch")) > self.max_batch_files:
                self.compact(name)
        return counts

    def write_from_postgres(self, conn_or_dsn: Any, batch_id: int) -> dict[str, int]:
        """Export the rows batch ``batch_id`` changed in PostgreSQL into that batch's files. Idempotent."""
        return self.write_batch(batch_id, changed_rows(conn_or_dsn, batch_id))

    def write_all(self, conn_or_dsn: Any, as_of: datetime | None = None) -> dict[str, int]:
        """Replace every table with one base file holding the whole graph (as of ``as_of``): the export."""
        conn, owned = connect(conn_or_dsn)
        try:
            if owned:   # one snapshot for every table
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            counts = {}
            for name, t in TABLES.items():
                if as_of is None:
                    where, params = ("valid_to IS NULL" if name == "lineage_edges" else "true"), {}
                else:
                    where, params = t.time_filter, {"t": as_of}
                top = conn.execute(f"SELECT coalesce(max({t.batch_column}), 0) FROM {t.source}").fetchone()[0]
                seq = conn.execute("SELECT coalesce(max(commit_seq), 0) FROM lineage_transactions").fetchone()[0]
                rows = table_rows(conn, t, where, params, int(top), int(seq))
                top = seq
                old = self._files(name, "base") + self._files(name, "batch")
                self._atomic_write(self._dir(name) / f"base={int(top):020d}.parquet", rows)
                for path in old:
                    if path.name != f"base={int(top):020d}.parquet":
                        path.unlink(missing_ok=True)
                counts[name] = rows.num_rows
            return counts
        finally:
            if owned:
                conn.close()

    def compact(self, name: str | None = None) -> dict[str, int]:
        """Fold each table's files into one base file keeping the current row per id; returns files removed."""
        removed = {}
        for table in [name] if name else list(TABLES):
            files = self._files(table, "base") + self._files(table, "batch")
            if len(files) <= 1:
                removed[table] = 0
                continue
            current = self._merge(table, files)
            top = max(int(_FILE.match(p.name).group(2)) for p in files)  # type: ignore[union-attr]
            target = self._dir(table) / f"base={top:020d}.parquet"
            self._atomic_write(target, current)
            for path in files:
                if path != target:
                    path.unlink(missing_ok=True)
            removed[table] = len(files) - 1
        return removed

    # -- reading ---------------------------------------------------------------------------
    def read_table(self, name: str) -> pa.Table:
        """The current content of table ``name``: exactly one row per id (latest ``_batch_id`` wins)."""
        files = self._files(name, "base") + self._files(name, "batch")
        if not files:
            table = TABLES.get(name)
            if table is None:
                raise StoreError(f"no Parquet table {name!r} under {self.root}", code="store.parquet")
            return table.schema.empty_table()
        return self._merge(name, files)

    def files(self, name: str) -> list[Path]:
        return self._files(name, "base") + self._files(name, "batch")

    def _merge(self, name: str, files: list[Path]) -> pa.Table:
        id_column = TABLES[name].id_column if name in TABLES else _guess_id(name)
        parts = []
        for path in files:
            part = pq.read_table(path)
            rank = 1 if path.name.startswith("batch=") else 0
            parts.append(part.append_column("_rank", pa.array([rank] * part.num_rows, type=pa.int8())))
        table = pa.concat_tables(parts, promote_options="default")
        if "_commit_seq" not in table.column_names:     # files written before migration 008
            table = table.append_column("_commit_seq", table.column("_batch_id"))
        else:
            table = table.set_column(table.column_names.index("_commit_seq"), "_commit_seq",
                                     pc.coalesce(table.column("_commit_seq"), table.column("_batch_id")))
        if table.num_rows == 0:
            return table.drop_columns(["_rank"])
        order = pc.sort_indices(table, sort_keys=[(id_column, "ascending"), ("_commit_seq", "descending"),
                                                  ("_rank", "descending")])
        table = table.take(order)
        ids = table.column(id_column).combine_chunks()
        if table.num_rows > 1:
            differs = pc.not_equal(ids.slice(1), ids.slice(0, table.num_rows - 1))
            keep = pa.concat_arrays([pa.array([True]), pc.fill_null(differs, True)])
            table = table.filter(keep)
        return table.drop_columns(["_rank"])

    # -- files -----------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _files(self, name: str, kind: str) -> list[Path]:
        path = self.root / name
        if not path.is_dir():
            return []
        return sorted(p for p in path.iterdir() if (m := _FILE.match(p.name)) and m.group(1) == kind)

    @staticmethod
    def _atomic_write(target: Path, table: pa.Table) -> None:
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def _guess_id(name: str) -> str:
    raise StoreError(f"unknown Parquet table {name!r}", code="store.parquet")
