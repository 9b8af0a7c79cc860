"""The Parquet projection of the lineage graph: batch-scoped files, a merge-on-read reader, compaction.

Layout under ``root_dir`` (one directory per table, plain Parquet files, readable by pyarrow,
DuckDB, Spark or any other Parquet reader)::

    lineage_nodes/base=00000000000000000010.parquet     <- a compacted segment: rows of batches <= 10
    lineage_nodes/base=00000000000000000042.parquet     <- another: rows of batches 11..42
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

Sorted files
    Every file this module writes is sorted by the table's id column (bytewise, as Arrow sorts
    strings), in row groups of a few MB (at most ``_GROUP_BYTES`` of decoded Arrow data, at most
    ``_GROUP_ROWS`` rows), and says so in its key-value metadata (``lineage.sorted_by = <id
    column>``, plus Parquet's own ``sorting_columns``). Files without the mark (earlier versions
    wrote batch files in COPY order and ``write_all``'s base unsorted) are sorted on their first
    compaction in runs of ``_RUN_BYTES`` spilled to temporary files, so they too merge in bounded
    memory: a one-time cost of one extra write.

Compaction (size-tiered, streaming)
    Merges are k-way streaming merges (:meth:`ParquetGraphStore._merge_files_streaming`): one
    cursor per input file reads it ``_READ_ROWS`` rows at a time into a chunk of about
    ``_MERGE_BYTES / k``; each step takes from every cursor the rows with an id <= a frontier (the
    least, over the cursors, of the id that ends their next ``_GROUP_BYTES / k`` bytes: a sorted
    prefix of each), keeps the latest row per id (the reader's rule, :func:`_latest_per_id`, shared
    with :meth:`~ParquetGraphStore.read_table`) and appends it to the output, written in row groups
    of about ``_GROUP_BYTES``. Peak memory is about ``_MERGE_BYTES`` of input (at least
    ``_READ_ROWS`` rows per input file) plus a step and an output row group, whatever the table's
    size.

    Once a table holds more than ``max_batch_files`` batch files, a write merges those batch files
    (only them) into a new segment ``base=<greatest seq of its inputs>`` (with the base file of that
    name if one exists, after a replay of old batches). Base segments fall into tiers by their row
    count (tier ``floor(log_fanout(rows))``, from the Parquet footer); while a tier holds ``fanout``
    or more segments, they are merged into one. So a table has at most ``max_batch_files`` batch files
    plus fewer than ``fanout`` segments per tier (``O(log rows)`` tiers), plus one transient, and a
    row is rewritten ``O(log rows)`` times (write amplification ``O(log n)``, not ``O(n)`` per
    merge). :meth:`~ParquetGraphStore.compact` still folds everything into one base file (streaming
    too), for explicit use. Several base files are as correct as one: each row carries its
    ``_commit_seq``, and the reader's rule above does not care which file a row is in. A merge writes
    its target atomically, then deletes its inputs: a crash in between leaves rows present twice with
    the same ``_commit_seq``, which the reader resolves, and the next merge folds away.

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

import bisect
import io
import os
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable
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

__all__ = ["ParquetGraphStore", "ParquetTable", "TABLES", "changed_rows", "events_rows", "table_rows"]

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


#: The export's CSV quote and delimiter: two control characters instead of ``"`` and ``,``. CSV's rules are kept
#: (a value holding the delimiter, the quote or a line break is quoted, a quote inside doubled; the reader undoes
#: it), so any value reads back as it was; but JSON text (event texts, documents), which holds many ``"`` and
#: ``,`` and never a raw control character, is now written as it is: the server no longer quotes it and doubles
#: each ``"`` byte by byte, and the reader no longer undoes that. Per event of demo traffic, reading every table's
#: rows of every batch (benchmarks/export_csv_probe.py, three runs in one slow hour): the server 57-67 -> 49-52 µs,
#: this process 53-66 -> 41-64 µs, 7,154 -> 6,595 bytes (docs/PERFORMANCE.md, session 27).
_CSV_QUOTE = "\x01"
_CSV_DELIMITER = "\x02"
_CSV_OPTIONS = "FORMAT csv, QUOTE E'\\x01', DELIMITER E'\\x02'"


def table_rows(conn: Any, table: ParquetTable, where: str, params: dict[str, Any],
               batch_id: int, commit_seq: int | None = None) -> pa.Table:
    """Rows of ``table`` selected by ``where``, as Arrow, through ``COPY (SELECT ...) TO STDOUT`` (CSV),
    with the columns ``_batch_id`` and ``_commit_seq`` (``commit_seq``, else ``batch_id``)."""
    buf = io.BytesIO()
    sql = table.select(where)
    from psycopg import ClientCursor

    query = ClientCursor(conn).mogrify(sql, params) if params else sql
    with conn.cursor() as cur:
        with cur.copy(f"COPY ({query}) TO STDOUT WITH ({_CSV_OPTIONS})") as copy:
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
            parse_options=pacsv.ParseOptions(newlines_in_values=True, quote_char=_CSV_QUOTE, delimiter=_CSV_DELIMITER),
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


def changed_rows(conn_or_dsn: Any, batch_id: int, tables: Iterable[str] | None = None,
                 texts: pa.Table | None = None, stats: dict[str, int] | None = None) -> dict[str, pa.Table]:
    """Rows each Parquet table (of ``tables``, default all) gets from batch ``batch_id`` (``last_batch_id =
    batch_id``), for the Parquet files and the graph topic. ``texts``: ``(event_hash, payload)`` pairs the caller
    has (stream_processor/text_spool.py): the events' payloads are taken from them, see :func:`events_rows` (and
    ``stats``)."""
    conn, owned = connect(conn_or_dsn)
    try:
        if owned:   # one snapshot for every table
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        seq = commit_seq(conn, batch_id)
        out = {}
        for name, t in TABLES.items():
            if tables is not None and name not in tables:
                continue
            if name == "lineage_events" and texts is not None:
                out[name] = events_rows(conn, batch_id, seq, texts, stats)
            else:
                out[name] = table_rows(conn, t, f"{t.batch_column} = %(b)s", {"b": batch_id}, batch_id, seq)
        return out
    finally:
        if owned:
            conn.close()


def _one_chunk(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


#: The payloads :func:`events_rows` did not find in the caller's texts.
_MISSING_TEXTS_SQL = "SELECT event_hash, payload FROM lineage_events WHERE first_batch_id = %s AND event_hash = ANY(%s)"


def events_rows(conn: Any, batch_id: int, seq: int, texts: pa.Table, stats: dict[str, int] | None = None) -> pa.Table:
    """``lineage_events``' rows of ``batch_id`` as :func:`table_rows` reads them, but the ``payload`` column taken
    from ``texts`` (``event_hash``, ``payload``; a hash names one text, migration 005) by hash, and read from
    PostgreSQL only for the hashes ``texts`` lacks: the server no longer writes ~4 kB per event as CSV for this
    process to parse back. ``stats`` gets ``texts_given`` and ``texts_read`` (payloads taken from ``texts``, read
    from PostgreSQL)."""
    table = TABLES["lineage_events"]
    names = [name for name, _, _ in table.columns]
    at = names.index("payload")
    narrow = ParquetTable(table.name, table.id_column, table.source, table.columns[:at] + table.columns[at + 1:],
                          table.batch_column, table.time_filter)
    rows = table_rows(conn, narrow, f"{table.batch_column} = %(b)s", {"b": batch_id}, batch_id, seq)
    hashes = rows.column("event_hash")
    index = pc.index_in(hashes, value_set=_one_chunk(texts.column("event_hash")).cast(pa.string()))
    payload = _one_chunk(texts.column("payload").cast(pa.string()).take(index))   # null where texts lacks the hash
    wanted: list[str] = []
    if payload.null_count:
        missing = _one_chunk(pc.is_null(index))
        wanted = pc.filter(hashes, missing).to_pylist()
        found = dict(conn.execute(_MISSING_TEXTS_SQL, (batch_id, wanted)).fetchall())
        payload = pc.replace_with_mask(payload, missing, pa.array([found.get(h) for h in wanted], pa.string()))
    if stats is not None:
        stats["texts_read"] = stats.get("texts_read", 0) + len(wanted)
        stats["texts_given"] = stats.get("texts_given", 0) + rows.num_rows - len(wanted)
    return rows.add_column(at, pa.field("payload", pa.string()), payload)


_SORTED_BY = b"lineage.sorted_by"   # key-value metadata: the file's rows are sorted by this (id) column
_GROUP_BYTES = 4 << 20               # a row group holds about this much decoded Arrow data
_GROUP_ROWS = 1 << 16                # ... and at most this many rows
_MERGE_BYTES = 16 << 20              # a merge's cursors together hold about this much decoded input
_READ_ROWS = 128                     # a cursor reads its file this many rows at a time
_RUN_BYTES = 32 << 20                # an unsorted (legacy) file is sorted in runs of about this size


class ParquetGraphStore:
    """The Parquet tables under ``root_dir`` (see the module docs for the layout and the rules)."""

    def __init__(self, root_dir: str | os.PathLike[str], max_batch_files: int = 32, fanout: int = 4) -> None:
        if fanout < 2:
            raise StoreError(f"fanout must be >= 2, not {fanout}", code="store.parquet")
        self.root = Path(root_dir)
        self.max_batch_files = max_batch_files
        self.fanout = fanout

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
            self._atomic_write(self._dir(name) / f"batch={seq:020d}.parquet", rows, _id_column(name))
            if len(self._files(name, "batch")) > self.max_batch_files:
                self.compact_tiers(name)
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
                self._atomic_write(self._dir(name) / f"base={int(top):020d}.parquet", rows, t.id_column)
                for path in old:
                    if path.name != f"base={int(top):020d}.parquet":
                        path.unlink(missing_ok=True)
                counts[name] = rows.num_rows
            return counts
        finally:
            if owned:
                conn.close()

    def compact(self, name: str | None = None) -> dict[str, int]:
        """Fold each table's files into one base file keeping the current row per id (a streaming merge, in
        bounded memory); returns the number of files removed per table."""
        removed = {}
        for table in [name] if name else list(TABLES):
            files = self._files(table, "base") + self._files(table, "batch")
            removed[table] = self._fold(table, files) if len(files) > 1 else 0
        return removed

    def compact_tiers(self, name: str) -> int:
        """The automatic compaction (module docs): more than ``max_batch_files`` batch files become one base
        segment, then each tier holding ``fanout`` segments or more is merged into one. Returns files removed."""
        removed = 0
        batches = self._files(name, "batch")
        if len(batches) > self.max_batch_files:
            removed += self._fold(name, batches)
        while True:
            tiers: dict[int, list[Path]] = defaultdict(list)
            for path in self._files(name, "base"):
                tiers[_tier(pq.read_metadata(path).num_rows, self.fanout)].append(path)
            full = [paths for _, paths in sorted(tiers.items()) if len(paths) >= self.fanout]
            if not full:
                return removed
            removed += self._fold(name, full[0])

    def _fold(self, name: str, files: list[Path]) -> int:
        """Merge ``files`` into ``base=<greatest seq among them>`` (with that file too, if it exists and is not
        among them), then delete the inputs; returns the number of files removed."""
        top = max(_seq(path) for path in files)
        target = self._dir(name) / f"base={top:020d}.parquet"
        inputs = list(files) + ([target] if target not in files and target.exists() else [])
        self._merge_files_streaming(name, inputs, target)
        for path in inputs:          # after the rename: a crash here leaves duplicates the reader resolves
            if path != target:
                path.unlink(missing_ok=True)
        return len(inputs) - 1

    def _merge_files_streaming(self, name: str, files: list[Path], target: Path) -> int:
        """Write the current rows of ``files`` (the reader's rule) to ``target``, atomically, sorted by id, in a
        k-way merge holding about ``_MERGE_BYTES`` of input (module docs); returns the rows written."""
        if name not in TABLES:
            _guess_id(name)
        schema, id_column = TABLES[name].schema, TABLES[name].id_column
        tmp = _scratch(target)
        scratch: list[Path] = []
        cursors: list[_Cursor] = []
        out: _GroupWriter | None = None
        try:
            sources: list[tuple[Path, int]] = []
            for path in files:
                rank = _rank(path)
                if _is_sorted(path, id_column):
                    sources.append((path, rank))
                else:      # written by an earlier version: sort it, in runs spilled next to it
                    runs = _sorted_runs(path, schema, id_column)
                    scratch.extend(runs)
                    sources.extend((run, rank) for run in runs)
            budget = max(1, _MERGE_BYTES // max(1, len(sources)))
            for source, rank in sources:
                cursors.append(_Cursor(source, rank, schema, id_column, budget))
            out = _GroupWriter(tmp, schema, id_column)
            active = [c for c in cursors if c.ready()]
            while active:       # each step takes about _GROUP_BYTES of input, at most a chunk per cursor
                quota = max(1, _GROUP_BYTES // len(active))
                frontier = min(c.id_within(quota) for c in active)
                parts: list[pa.Table] = []
                for c in active:
                    c.cut(frontier, parts)
                out.write(_latest_per_id(pa.concat_tables(parts), id_column))
                active = [c for c in active if c.ready()]
            rows = out.close()
            out = None
            os.replace(tmp, target)
            return rows
        finally:
            if out is not None:
                out.abort()
            for c in cursors:
                c.close()
            for path in [tmp, *scratch]:
                path.unlink(missing_ok=True)

    # -- reading ---------------------------------------------------------------------------
    def read_table(self, name: str) -> pa.Table:
        """The current content of table ``name``: exactly one row per id (greatest ``_commit_seq`` wins)."""
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
        """The current rows of ``files``, all in memory (the reader)."""
        id_column = _id_column(name)
        parts = []
        for path in files:
            part = pq.read_table(path).replace_schema_metadata(None)
            parts.append(_with_rank(part, _rank(path)))
        return _latest_per_id(pa.concat_tables(parts, promote_options="default"), id_column)

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
    def _atomic_write(target: Path, table: pa.Table, id_column: str) -> None:
        """Write ``table`` sorted by ``id_column`` (and marked so) to a temporary file, then rename it."""
        tmp = _scratch(target)
        try:
            _write_sorted(tmp, table, id_column)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def _latest_per_id(table: pa.Table, id_column: str) -> pa.Table:
    """The reader's rule on concatenated rows carrying ``_rank`` (1 from a ``batch=`` file, 0 from ``base=``):
    per id, the row with the greatest ``coalesce(_commit_seq, _batch_id)``, then the greatest ``_rank``, then
    the first; sorted by id, without ``_rank``. ``_commit_seq`` comes out coalesced (appended if missing)."""
    if "_commit_seq" not in table.column_names:     # files written before migration 008
        table = table.append_column("_commit_seq", table.column("_batch_id"))
    else:
        table = table.set_column(table.column_names.index("_commit_seq"), "_commit_seq",
                                 pc.coalesce(table.column("_commit_seq"), table.column("_batch_id")))
    if table.num_rows == 0:
        return table.drop_columns(["_rank"])
    order = pc.sort_indices(table, sort_keys=[(id_column, "ascending"), ("_commit_seq", "descending"),
                                              ("_rank", "descending")])
    if table.num_rows > 1:
        ids = table.column(id_column).take(order).combine_chunks()
        differs = pc.not_equal(ids.slice(1), ids.slice(0, table.num_rows - 1))
        order = order.filter(pa.concat_arrays([pa.array([True]), pc.fill_null(differs, True)]))
    return table.take(order).drop_columns(["_rank"])


def _rank(path: Path) -> int:
    """A file's rank in the reader's rule: 1 for a ``batch=`` file, 0 for a ``base=`` one."""
    return 1 if path.name.startswith("batch=") else 0


def _with_rank(table: pa.Table, rank: int) -> pa.Table:
    return table.append_column("_rank", pa.array([rank] * table.num_rows, type=pa.int8()))


def _scratch(path: Path, tag: str = "") -> Path:
    """A hidden temporary file beside ``path`` (not matched by the table's file names, unique)."""
    return path.with_name(f".{path.name}.{tag}{uuid.uuid4().hex}.tmp")


def _id_column(name: str) -> str:
    return TABLES[name].id_column if name in TABLES else _guess_id(name)


def _seq(path: Path) -> int:
    return int(_FILE.match(path.name).group(2))  # type: ignore[union-attr]


def _tier(rows: int, fanout: int) -> int:
    """``floor(log_fanout(rows))``, in integers (0 for an empty segment)."""
    tier = 0
    while rows >= fanout:
        rows //= fanout
        tier += 1
    return tier


def _rows_per_group(table: pa.Table) -> int:
    """Rows per row group for rows like ``table``'s: about ``_GROUP_BYTES`` of them, at most ``_GROUP_ROWS``."""
    if table.num_rows == 0:
        return _GROUP_ROWS
    per_row = max(1, table.nbytes // table.num_rows)
    return max(1, min(_GROUP_ROWS, _GROUP_BYTES // per_row))


def _no_null_ids(ids: pa.Array | pa.ChunkedArray, id_column: str) -> None:
    if ids.null_count:
        raise StoreError(f"{ids.null_count} rows without an id ({id_column} is NULL)", code="store.parquet")


def _is_sorted(path: Path, id_column: str) -> bool:
    """Whether ``path`` is marked sorted by ``id_column`` (written by this version of the module)."""
    return (pq.read_metadata(path).metadata or {}).get(_SORTED_BY) == id_column.encode()


def _open_writer(path: Path, schema: pa.Schema, id_column: str) -> pq.ParquetWriter:
    schema = schema.with_metadata({_SORTED_BY: id_column.encode()})
    return pq.ParquetWriter(path, schema, compression="zstd",
                            sorting_columns=[pq.SortingColumn(schema.get_field_index(id_column))])


def _write_sorted(path: Path, table: pa.Table, id_column: str) -> None:
    """Write ``table`` to ``path`` sorted by ``id_column`` (stable), in bounded row groups, marked sorted."""
    table = table.replace_schema_metadata(None)
    _no_null_ids(table.column(id_column), id_column)
    if table.num_rows > 1:
        table = table.sort_by([(id_column, "ascending")])
    with _open_writer(path, table.schema, id_column) as writer:
        if table.num_rows:
            writer.write_table(table, row_group_size=_rows_per_group(table))


def _conform(rows: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """``rows`` with exactly ``schema``'s columns: missing ones (older files) as nulls, others dropped."""
    names = set(rows.schema.names)
    columns = []
    for field in schema:
        if field.name in names:
            column = rows.column(field.name)
            columns.append(column if column.type == field.type else column.cast(field.type))
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _sorted_runs(path: Path, schema: pa.Schema, id_column: str) -> list[Path]:
    """An unsorted file as sorted, marked temporary files of about ``_RUN_BYTES`` each (beside it)."""
    runs: list[Path] = []
    pending: list[pa.Table] = []
    size = 0

    def spill() -> None:
        nonlocal pending, size
        run = _scratch(path, f"run{len(runs)}.")
        runs.append(run)
        _write_sorted(run, pa.concat_tables(pending), id_column)
        pending, size = [], 0

    source = pq.ParquetFile(path, pre_buffer=False)
    try:
        for batch in source.iter_batches(batch_size=1024):
            pending.append(_conform(batch, schema))
            size += pending[-1].nbytes
            if size >= _RUN_BYTES:
                spill()
        if pending:
            spill()
    except BaseException:
        for run in runs:
            run.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    return runs


class _Ids:
    """A sorted id array as a sequence of Python values, for :func:`bisect.bisect_right` (str compares by code
    point, which is UTF-8's byte order: Arrow's order)."""

    def __init__(self, ids: pa.Array) -> None:
        self.ids = ids

    def __getitem__(self, i: int) -> Any:
        return self.ids[i].as_py()


class _Cursor:
    """One sorted input file of a merge, read ``_READ_ROWS`` rows at a time into chunks of about ``budget``
    bytes: the current chunk's rows not merged yet."""

    def __init__(self, path: Path, rank: int, schema: pa.Schema, id_column: str, budget: int) -> None:
        self.file = pq.ParquetFile(path, pre_buffer=False)
        self.batches = self.file.iter_batches(batch_size=_READ_ROWS)
        self.rank, self.schema, self.id_column, self.budget = rank, schema, id_column, budget
        self.rows: pa.Table | None = None
        self.ids: pa.Array | None = None
        self.pos = self.n = self.row_bytes = 0

    def ready(self) -> bool:
        """Whether rows are left, reading the next chunk if the current one is used up."""
        while self.pos >= self.n:
            self.rows = self.ids = None
            self.pos = self.n = 0
            batches, size = [], 0
            for batch in self.batches:
                if batch.num_rows:
                    batches.append(batch)
                    size += batch.nbytes
                    if size >= self.budget:
                        break
            if not batches:
                return False
            rows = _conform(pa.Table.from_batches(batches), self.schema)
            self.rows = _with_rank(rows, self.rank)
            self.ids = rows.column(self.id_column).combine_chunks()
            _no_null_ids(self.ids, self.id_column)
            self.n, self.row_bytes = rows.num_rows, max(1, size // rows.num_rows)
        return True

    def id_within(self, quota: int) -> Any:
        """The id of the last of the next rows holding about ``quota`` bytes (at least one; in this chunk)."""
        assert self.ids is not None
        return self.ids[min(self.n, self.pos + max(1, quota // self.row_bytes)) - 1].as_py()

    def cut(self, frontier: Any, out: list[pa.Table]) -> None:
        """Move every remaining row with id <= ``frontier`` to ``out``: a prefix of this chunk, and of the next
        ones while a chunk is used up (equal ids can straddle a chunk or row group boundary)."""
        while self.ready():
            assert self.rows is not None and self.ids is not None
            end = bisect.bisect_right(_Ids(self.ids), frontier, self.pos, self.n)
            if end > self.pos:
                out.append(self.rows.slice(self.pos, end - self.pos))
            self.pos = end
            if end < self.n:
                return

    def close(self) -> None:
        self.rows = self.ids = None
        self.pos = self.n = 0
        self.file.close()


class _GroupWriter:
    """The merge's output: sorted rows appended in steps, written in row groups of about ``_GROUP_BYTES``."""

    def __init__(self, path: Path, schema: pa.Schema, id_column: str) -> None:
        self.writer = _open_writer(path, schema, id_column)
        self.pending: list[pa.Table] = []
        self.rows = self.bytes = self.written = 0

    def write(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self.pending.append(rows)
        self.rows += rows.num_rows
        self.bytes += rows.nbytes
        if self.bytes >= _GROUP_BYTES or self.rows >= _GROUP_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self.pending:
            return
        rows = pa.concat_tables(self.pending)
        per_group = _rows_per_group(rows)
        n = rows.num_rows if final else (rows.num_rows // per_group) * per_group or rows.num_rows
        self.writer.write_table(rows.slice(0, n), row_group_size=per_group)
        self.written += n
        rest = rows.slice(n)
        self.pending = [rest] if rest.num_rows else []
        self.rows, self.bytes = rest.num_rows, rest.nbytes

    def close(self) -> int:
        self._flush(final=True)
        self.writer.close()
        return self.written

    def abort(self) -> None:
        self.pending = []
        self.writer.close()


def _guess_id(name: str) -> str:
    raise StoreError(f"unknown Parquet table {name!r}", code="store.parquet")
