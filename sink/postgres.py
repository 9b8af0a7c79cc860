"""The PostgreSQL lineage graph: migrations, staging (COPY) and set-based merges.

One batch is one transaction. ``write_batch`` = derive (sink/derive.py, pure) + COPY into the ``stg_*`` tables
tagged ``(batch_id, part)`` + :meth:`GraphStore.merge`, all on one connection in one transaction. The staging tables
are partitioned into four batch slots (migration 017): a batch is staged in, merged from and cleared from its slot's
tables by name (:func:`slotted`), and the merge ends by TRUNCATing its slot when it has it to itself, else by
DELETEing the batch's rows (:func:`clear_slot`). Throughput (benchmarks/store_write_bench.py): the derivation is pipelined with the COPY of
the raw events (the server stores their canonical JSON text while Python derives the next chunk), and the
quality annotations are computed on a thread while the server runs the later merge statements. The streaming path splits it: :meth:`GraphStore.stage_partition` on executors (own
connection, replaces its ``(batch_id, part)`` rows: task retries are idempotent), then
:meth:`GraphStore.merge` on the driver. Bulk writers with the next batch at hand (``lineage load --engine
local``) use :meth:`GraphStore.write_batches`: the same transactions, but batch N+1 is derived and staged on a
second connection while the server merges batch N (median +8 % measured, not the 2x of a perfect overlap).

The merge, per table in a fixed order (namespaces, datasets, dataset versions, jobs, job versions, runs,
run io, edges, column lineage, provenance, quality, events, transaction log), reduces the staged rows to one
per key in SQL (only when the batch was staged by several parts: one part's rows are already one per key,
:func:`_reduce`), then ``INSERT ... SELECT ... ORDER BY key ON CONFLICT DO UPDATE SET ... WHERE <changed>``:

* guards by event time, per column group: *facets* columns (``facets_time``): a newer event's non-null
  value wins, an older one only fills a null; ``first_seen = least``, ``last_seen = greatest``;
  placeholders: ``is_placeholder = old AND new``;
* runs: ``(state_rank, state_time, state)`` only increases (START 1 < RUNNING 2 < COMPLETE/FAIL/ABORT 3),
  so a terminal state is never replaced by a non-terminal one whatever the arrival order, and of two
  terminal events the later in event time wins; ``started_at`` = earliest START, ``ended_at`` = time of the
  winning terminal event, ``duration_ms = ended_at - started_at``;
* ``WHERE (old values) IS DISTINCT FROM (new values)``: a replay changes no row, so ``last_batch_id`` stays
  that of the batch that last changed the row, and ``rows_modified`` counts real changes only;
* keys are sorted (``ORDER BY key``) and tables merged in one order, so two concurrent writers lock rows in
  the same order (deadlocks are still retried ``store_deadlock_retries`` times);
* edge validity: for each job with edges or a version in the batch, the current job version is the one first
  seen last (a version with no edges counts: a code scanner's retraction, whose code facets are ``_deleted``,
  is such a version and so retires every edge of the job); edges of that job
  made by another version and last seen before the current version's first_seen get
  ``valid_to = current.first_seen`` (history); an edge seen again after its valid_to becomes valid again;
* raw events: ``ON CONFLICT (event_hash) DO NOTHING``; duplicates = staged - inserted;
* a batch id already in ``lineage_transactions`` is not merged again (``already_committed``);
* aliases: rows reference the node an event names (resolved through that event's own ``symlinks``
  facet only, sink/derive.py), so the graph never depends on arrival order; ``alias_of`` joins alias
  nodes to their canonical node and readers use ``coalesce(alias_of, dataset_id)``.

Events whose text PostgreSQL cannot hold (NUL, lone surrogates) are rejected by the derivation and listed
in :attr:`GraphStore.last_rejections`; they never fail the batch of the others.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import queue
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import set_json_loads

from schemas.errors import EventValidationError, StoreError
from schemas.identity import canonical_json

from . import ids
from .annotate import annotation_values
from .derive import STAGING_COLUMNS, BatchDeriver, GraphRows, _dumps
from .fastjson import loads as _loads
from .heap import frozen_heap
from .migrate import apply_migrations
from .model import BatchResult, StoredEvent
from .settings import StoreSettings

__all__ = ["GraphStore"]

log = logging.getLogger(__name__)

_BATCH_LOCK_CLASS = 0x4C49  # "LI": pg_advisory_xact_lock(class, batch_id % 2^31)
_MERGE_WORK_MEM = "64MB"
#: Events derived per write to the open ``stg_events`` COPY (:meth:`GraphStore._derive_and_stage`).
_STREAM_EVENTS = 250
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _field(value: Any) -> str:
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, str):
        if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
            return value.translate(_ESCAPES)
        return value
    return str(value)


def _bytea(value: bytes | None) -> str | None:
    """``value`` as bytea input text (hex; the COPY escaping of its backslash is :func:`_field`'s)."""
    return None if value is None else "\\x" + bytes(value).hex()


def copy_text(prefix: str, rows: Sequence[tuple[Any, ...]]) -> str:
    """COPY text format of ``rows``, each preceded by ``prefix`` (the ``batch_id\\tpart\\t`` columns).

    The text :func:`_field` gives, with its common cases (a str, None, a boolean) inline: a function call per
    value was a quarter of the cost (benchmarks/derive_bench.py's demo rows, reduced: 23.6 -> 19.2 us per
    event, median of 7).
    """
    lines = []
    append = lines.append
    for row in rows:
        append("\t".join([
            (v.translate(_ESCAPES) if "\\" in v or "\t" in v or "\n" in v or "\r" in v else v) if type(v) is str
            else "\\N" if v is None else "t" if v is True else "f" if v is False else _field(v) for v in row]))
    if not lines:
        return ""
    return prefix + ("\n" + prefix).join(lines) + "\n"


#: The graph staging tables and the hand-over table are partitioned into this many batch slots (migration 017): a
#: batch's rows are staged in, read from and cleared from the tables of its slot, ``stg_<name>_s<batch_id mod 4>``.
STAGING_SLOTS = 4
#: The hand-over table (migrations 006, 010, 017): written by the staging pass, read and cleared by the enrich step
#: after the merge's commit (stream_processor/enrich.py), so not cleared by the merge.
HANDOVER_TABLE = "stg_event_keys"
_STAGING_TABLE = re.compile(r"\b(" + "|".join((*STAGING_COLUMNS, HANDOVER_TABLE)) + r")\b")


def staging_slot(batch_id: int) -> int:
    """The staging slot of ``batch_id`` (migration 017's partition key: ``(batch_id % 4 + 4) % 4`` in SQL)."""
    return int(batch_id) % STAGING_SLOTS


@functools.lru_cache(maxsize=1024)
def _in_slot(sql: str, slot: int) -> str:
    return _STAGING_TABLE.sub(lambda m: f"{m.group(1)}_s{slot}", sql)


def slotted(sql: str, batch_id: int) -> str:
    """``sql`` (a statement or a table name) with every graph staging table (:data:`STAGING_COLUMNS`) replaced by
    the partition of ``batch_id``'s slot.

    Why by name and not through the partitioned parent: a statement on the parent locks every partition (the slot
    is not known when a prepared statement's generic plan is made), so it would wait for the TRUNCATE of another
    slot that a concurrent merge holds until its commit; the partitions of different slots never wait for each
    other (staging batch N+1 while batch N's merge clears its slot). ``stg_self_parts`` is not partitioned."""
    return _in_slot(sql, int(batch_id) % STAGING_SLOTS)


class _SlotCursor:
    """A cursor whose statements name the staging tables of one batch's slot (:func:`slotted`)."""

    __slots__ = ("_cur", "_batch_id")

    def __init__(self, cur: psycopg.Cursor, batch_id: int) -> None:
        self._cur = cur
        self._batch_id = batch_id

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor:
        return self._cur.execute(slotted(query, self._batch_id), params)


def _copy_staged(cur: Any, table: str, columns: Sequence[str], prefix: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY ``rows`` into the staging table ``table`` after its ``batch_id, part`` columns (given as ``prefix``)."""
    with cur.copy(f"COPY {table} (batch_id, part, {', '.join(columns)}) FROM STDIN") as copy:
        for start in range(0, len(rows), 2000):
            copy.write(copy_text(prefix, rows[start:start + 2000]))


#: COPY's binary format: the signature, the flags and the header extension's length (PostgreSQL's COPY
#: documentation, "Binary Format"); the trailer is a field count of -1. A NULL field is the length -1.
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_BINARY_TRAILER = b"\xff\xff"
_BINARY_NULL = b"\xff\xff\xff\xff"
_INT4 = struct.Struct(">i")
_INT4_SIZE = b"\x00\x00\x00\x04"


def events_copy_binary(batch_id: int, part: int, rows: Sequence[tuple[Any, ...]], encoding: str = "utf-8") -> bytes:
    """The ``stg_events`` ``rows`` (:data:`STAGING_COLUMNS` order: ten text columns, then ``revision``) as COPY
    binary rows of ``(batch_id, part, ...)``, without the header and trailer (:data:`_BINARY_HEADER`).

    Why binary (migration 016): each row carries the event's text (~4 kB of demo traffic). In text format the
    server scans and copies it byte by byte for delimiters and escapes, and the client checks it for the four
    characters to escape and joins a chunk's rows into one string (as wide as its widest character); in binary
    format both sides take each value by its length (benchmarks/event_copy_probe.py). Each text field is the
    string COPY text would have carried (:func:`_field` of a non-str), in the connection's ``encoding``;
    ``revision`` is an int4.
    """
    head = ((2 + len(STAGING_COLUMNS["stg_events"])).to_bytes(2, "big")
            + b"\x00\x00\x00\x08" + int(batch_id).to_bytes(8, "big", signed=True)
            + _INT4_SIZE + int(part).to_bytes(4, "big", signed=True))
    length = _INT4.pack
    parts: list[bytes] = []
    append = parts.append
    for row in rows:
        append(head)
        for v in row[:-1]:
            if v is None:
                append(_BINARY_NULL)
            else:
                data = (v if type(v) is str else _field(v)).encode(encoding)
                append(length(len(data)))
                append(data)
        revision = row[-1]
        append(_BINARY_NULL if revision is None else _INT4_SIZE + length(int(revision)))
    return b"".join(parts)


@contextlib.contextmanager
def _copy_events(cur: Any, batch_id: int, part: int) -> Iterator[Callable[[Sequence[tuple[Any, ...]]], None]]:
    """An open COPY of ``stg_events`` rows of ``(batch_id, part)`` in binary format: writes the header, yields a
    function that writes rows (:func:`events_copy_binary`), and writes the trailer when the block ends."""
    columns = ", ".join(STAGING_COLUMNS["stg_events"])
    encoding = cur.connection.info.encoding
    table = slotted("stg_events", batch_id)
    with cur.copy(f"COPY {table} (batch_id, part, {columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(_BINARY_HEADER)
        yield lambda rows: copy.write(events_copy_binary(batch_id, part, rows, encoding))
        copy.write(_BINARY_TRAILER)


# ------------------------------------------------------------------------------------------------ SQL

_C = '"C"'


def _order(col: str, side: str) -> str:
    return f"coalesce({side}.{col}, '-infinity'::timestamptz)"


def _cn(col: str, order: str = "facets_time", empty: str | None = None) -> str:
    """Newer non-null wins, an older value only fills a null; at equal order time the greater text wins
    (``COLLATE "C"``), so the result never depends on arrival order. ``empty``: the 'absent' value of a
    NOT NULL jsonb column (``'[]'`` / ``'{}'``)."""
    new, old = f"EXCLUDED.{col}", f"t.{col}"
    if empty is not None:
        new, old = f"nullif(EXCLUDED.{col}, '{empty}'::jsonb)", f"nullif(t.{col}, '{empty}'::jsonb)"
    n_ord, o_ord = _order(order, "EXCLUDED"), _order(order, "t")
    tail = f", EXCLUDED.{col}" if empty is not None else ""
    return (f"CASE WHEN {n_ord} > {o_ord} THEN coalesce({new}, t.{col}) "
            f"WHEN {n_ord} < {o_ord} THEN coalesce({old}, EXCLUDED.{col}) "
            f"WHEN {new}::text COLLATE \"C\" > {old}::text COLLATE \"C\" THEN {new} "
            f"ELSE coalesce({old}, {new}{tail}) END")


def _cnj(col: str, empty: str, order: str = "facets_time") -> str:
    return _cn(col, order, empty)


def _latest(col: str, order: str = "facets_time") -> str:
    """Latest non-null value of a column among the staged rows of one key (ties: greater text)."""
    return (f"(array_agg({col} ORDER BY {order} DESC NULLS LAST, {col}::text COLLATE \"C\" DESC) "
            f"FILTER (WHERE {col} IS NOT NULL))[1]")


def _upsert(table: str, key: str, cols: Sequence[str], select: str, updates: Mapping[str, str]) -> str:
    """``WITH ins AS (INSERT .. ON CONFLICT DO UPDATE .. WHERE changed RETURNING added) SELECT counts``."""
    sets = ", ".join(f"{c} = {e}" for c, e in updates.items())
    old = ", ".join(f"t.{c}" for c in updates)
    new = ", ".join(updates.values())
    return (f"WITH ins AS (INSERT INTO {table} AS t ({', '.join(cols)}, last_batch_id) {select} "
            f"ON CONFLICT ({key}) DO UPDATE SET {sets}, last_batch_id = EXCLUDED.last_batch_id "
            f"WHERE ({old}) IS DISTINCT FROM ({new}) RETURNING (xmax = 0) AS added) "
            f"SELECT count(*) FILTER (WHERE added), count(*) FILTER (WHERE NOT added) FROM ins")


_B = "%(b)s"


def _reduce(table: str, keys: str, columns: Sequence[tuple[str, ...]], split: bool = False) -> tuple[str, str]:
    """The staged rows of a batch, one per key: ``(SQL for any number of parts, SQL for one part)``.

    ``columns``: ``(name, aggregate[, value of one row])``, the value of one row defaulting to ``name``.
    Each part's rows are already reduced to one per key (sink/derive.py ``reduce_rows``), so when a
    batch was staged by one part (``write_batch``, or a stream batch of one partition) the aggregates are
    aggregates of one row: the row's own values, with no sort and no GROUP BY (a third to half of each
    merge statement's time). Were a key ever staged twice all the same, ``ON CONFLICT DO UPDATE`` would
    refuse the batch ("cannot affect row a second time") rather than merge it wrongly."""
    many = ", ".join(f"{agg} AS {name}" for name, agg, *_ in columns)
    one = ", ".join(f"{rest[0] if rest else name} AS {name}" for name, _, *rest in columns)
    if split:
        # several parts, ``split``: only the keys staged by more than one part are aggregated, the others take the
        # one-row projection. Pays where the aggregates copy large values (the versions' eight jsonb/text
        # `_latest`: 97 -> 58 ms per 5,000 demo events in 3 parts); elsewhere the window and the materialized
        # rows cost more than the aggregates they save (column lineage 51 -> 60 ms, runs 39 -> 43, run io 27 -> 33)
        return (f"WITH c AS MATERIALIZED (SELECT *, count(*) OVER (PARTITION BY {keys}) AS n_parts FROM {table} "
                f"WHERE batch_id = {_B}) SELECT {keys}, {one} FROM c WHERE n_parts = 1 "
                f"UNION ALL SELECT {keys}, {many} FROM c WHERE n_parts > 1 GROUP BY {keys}",
                f"SELECT {keys}, {one} FROM {table} WHERE batch_id = {_B}")
    return (f"SELECT {keys}, {many} FROM {table} WHERE batch_id = {_B} GROUP BY {keys}",
            f"SELECT {keys}, {one} FROM {table} WHERE batch_id = {_B}")


def _both(merge: Any, staged: tuple[str, str]) -> tuple[str, str]:
    return merge(staged[0]), merge(staged[1])


def _min_uuid(col: str) -> tuple[str, str]:
    return col, f"min({col}::text)::uuid"


_STAGED_NAMESPACES = _reduce("stg_namespaces", "namespace", [("first_seen", "min(first_seen)")])
MERGE_NAMESPACES = _both(lambda src: _upsert(
    "lineage_namespaces", "namespace", ("namespace", "first_seen"),
    f"SELECT namespace, first_seen, {_B} FROM ({src}) s ORDER BY namespace",
    {"first_seen": "least(t.first_seen, EXCLUDED.first_seen)"}), _STAGED_NAMESPACES)

_STAGED_DATASETS = _reduce("stg_datasets", "dataset_id", [
    ("namespace", "min(namespace)"), ("name", "min(name)"), ("qualified_name", "min(qualified_name)"),
    ("node_type", _latest("node_type")), ("node_type_guess", "min(node_type_guess)"),
    *[(c, _latest(c)) for c in ("description", "owner", "tags", "fields", "fields_hash", "alias_of")],
    ("is_placeholder", "bool_and(is_placeholder)"), ("first_seen", "min(first_seen)"),
    ("last_seen", "max(last_seen)"), ("facets_time", "max(facets_time)")])
MERGE_DATASETS = _both(lambda src: _upsert(
    "lineage_datasets", "dataset_id",
    ("dataset_id", "namespace", "name", "qualified_name", "node_type", "node_type_source", "description", "owner",
     "tags", "fields", "fields_hash", "alias_of", "is_placeholder", "first_seen", "last_seen", "facets_time"),
    f"""SELECT dataset_id, namespace, name, qualified_name, coalesce(node_type, node_type_guess),
               CASE WHEN node_type IS NULL THEN 'guess' ELSE 'facet' END, description, owner,
               coalesce(tags, '[]'), coalesce(fields, '[]'), fields_hash, alias_of, is_placeholder, first_seen,
               last_seen, facets_time, {_B}
        FROM ({src}) s
        ORDER BY dataset_id""",
    {
        "node_type": "CASE WHEN EXCLUDED.node_type_source <> 'facet' THEN t.node_type "
                     "WHEN t.node_type_source <> 'facet' THEN EXCLUDED.node_type "
                     f"ELSE {_cn('node_type')} END",
        "node_type_source": "CASE WHEN EXCLUDED.node_type_source = 'facet' THEN 'facet' ELSE t.node_type_source END",
        "description": _cn("description"), "owner": _cn("owner"), "tags": _cnj("tags", "[]"),
        "fields": _cnj("fields", "[]"), "fields_hash": _cn("fields_hash"), "alias_of": _cn("alias_of"),
        "is_placeholder": "t.is_placeholder AND EXCLUDED.is_placeholder",
        "first_seen": "least(t.first_seen, EXCLUDED.first_seen)", "last_seen": "greatest(t.last_seen, EXCLUDED.last_seen)",
        "facets_time": "greatest(t.facets_time, EXCLUDED.facets_time)",
    }), _STAGED_DATASETS)

_STAGED_VERSIONS = _reduce("stg_dataset_versions", "version_id", [
    _min_uuid("dataset_id"), ("version", "min(version)"), ("event_time", "max(event_time)"),
    *[(c, _latest(c, "event_time")) for c in ("run_id", "row_count", "byte_count", "null_counts", "fields_hash",
                                               "fields", "assertions", "nominal_end")]], split=True)
MERGE_VERSIONS = _both(lambda src: _upsert(
    "lineage_dataset_versions", "version_id",
    ("version_id", "dataset_id", "version", "event_time", "run_id", "row_count", "byte_count", "null_counts",
     "fields_hash", "fields", "assertions", "nominal_end"),
    f"""SELECT version_id, dataset_id, version, event_time, run_id, row_count, byte_count,
               coalesce(null_counts, '{{}}'), fields_hash, fields, coalesce(assertions, '[]'), nominal_end, {_B}
        FROM ({src}) s
        ORDER BY version_id""",
    {
        "event_time": "greatest(t.event_time, EXCLUDED.event_time)",
        "run_id": _cn("run_id", "event_time"), "row_count": _cn("row_count", "event_time"),
        "byte_count": _cn("byte_count", "event_time"), "null_counts": _cnj("null_counts", "{}", "event_time"),
        "fields_hash": _cn("fields_hash", "event_time"), "fields": _cn("fields", "event_time"),
        "assertions": _cnj("assertions", "[]", "event_time"), "nominal_end": _cn("nominal_end", "event_time"),
    }), _STAGED_VERSIONS)

_STAGED_JOBS = _reduce("stg_jobs", "job_id", [
    ("namespace", "min(namespace)"), ("name", "min(name)"), ("qualified_name", "min(qualified_name)"),
    *[(c, _latest(c)) for c in ("job_type", "description", "owners", "tracing")],
    ("is_placeholder", "bool_and(is_placeholder)"), ("first_seen", "min(first_seen)"),
    ("last_seen", "max(last_seen)"), ("facets_time", "max(facets_time)")])
MERGE_JOBS = _both(lambda src: _upsert(
    "lineage_jobs", "job_id",
    ("job_id", "namespace", "name", "qualified_name", "job_type", "description", "owners", "tracing",
     "is_placeholder", "first_seen", "last_seen", "facets_time"),
    f"""SELECT job_id, namespace, name, qualified_name, job_type, description, coalesce(owners, '[]'),
               coalesce(tracing, '{{}}'), is_placeholder, first_seen, last_seen, facets_time, {_B}
        FROM ({src}) s
        ORDER BY job_id""",
    {
        "job_type": _cn("job_type"), "description": _cn("description"), "owners": _cnj("owners", "[]"),
        "tracing": _cnj("tracing", "{}"), "is_placeholder": "t.is_placeholder AND EXCLUDED.is_placeholder",
        "first_seen": "least(t.first_seen, EXCLUDED.first_seen)", "last_seen": "greatest(t.last_seen, EXCLUDED.last_seen)",
        "facets_time": "greatest(t.facets_time, EXCLUDED.facets_time)",
    }), _STAGED_JOBS)

_STAGED_JOB_VERSIONS = _reduce("stg_job_versions", "job_version_id", [
    _min_uuid("job_id"), *[(c, f"min({c})") for c in ("source_type", "source_url", "git_commit", "sql")],
    ("first_seen", "min(first_seen)"), ("last_seen", "max(last_seen)")])
MERGE_JOB_VERSIONS = _both(lambda src: _upsert(
    "lineage_job_versions", "job_version_id",
    ("job_version_id", "job_id", "source_type", "source_url", "git_commit", "sql", "first_seen", "last_seen"),
    f"""SELECT job_version_id, job_id, source_type, source_url, git_commit, sql, first_seen, last_seen, {_B}
        FROM ({src}) s ORDER BY job_version_id""",
    {"first_seen": "least(t.first_seen, EXCLUDED.first_seen)", "last_seen": "greatest(t.last_seen, EXCLUDED.last_seen)"}),
    _STAGED_JOB_VERSIONS)

_STATE_ORDER = "state_rank DESC, state_time DESC, state DESC"
_WINS = ("(EXCLUDED.state_rank, EXCLUDED.state_time, EXCLUDED.state) > "
         "(coalesce(t.state_rank, -1), coalesce(t.state_time, '-infinity'::timestamptz), coalesce(t.state, ''))")
_RUN_FACETS = ("job_id", "job_version_id", "nominal_start", "nominal_end", "parent_run_id", "parent_job_id",
               "root_run_id", "producer")
_STAGED_RUNS = _reduce("stg_runs", "run_id", [
    *[(c, f"(array_agg({c} ORDER BY {_STATE_ORDER}) FILTER (WHERE state IS NOT NULL))[1]",
       f"CASE WHEN state IS NOT NULL THEN {c} END") for c in ("state", "state_rank", "state_time", "error_message")],
    ("started_at", "min(started_at)"), *[(c, _latest(c)) for c in _RUN_FACETS],
    ("is_placeholder", "bool_and(is_placeholder)"), ("first_seen", "min(first_seen)"),
    ("last_seen", "max(last_seen)"), ("facets_time", "max(facets_time)")])
MERGE_RUNS = _both(lambda src: _upsert(
    "lineage_runs", "run_id",
    ("run_id", "state", "state_rank", "state_time", "error_message", "started_at", "ended_at", "duration_ms",
     *_RUN_FACETS, "is_placeholder", "first_seen", "last_seen", "facets_time"),
    f"""SELECT run_id, state, state_rank, state_time, error_message, started_at,
               CASE WHEN state_rank = 3 THEN state_time END,
               CASE WHEN state_rank = 3 AND started_at IS NOT NULL
                    THEN (extract(epoch FROM state_time - started_at) * 1000)::bigint END,
               {', '.join(_RUN_FACETS)}, is_placeholder, first_seen, last_seen, facets_time, {_B}
        FROM ({src}) s
        ORDER BY run_id""",
    {
        "state": f"CASE WHEN {_WINS} THEN EXCLUDED.state ELSE t.state END",
        "state_rank": f"CASE WHEN {_WINS} THEN EXCLUDED.state_rank ELSE t.state_rank END",
        "state_time": f"CASE WHEN {_WINS} THEN EXCLUDED.state_time ELSE t.state_time END",
        "error_message": f"CASE WHEN {_WINS} THEN EXCLUDED.error_message ELSE t.error_message END",
        "ended_at": f"CASE WHEN {_WINS} THEN EXCLUDED.ended_at ELSE t.ended_at END",
        "started_at": "least(t.started_at, EXCLUDED.started_at)",
        **{c: _cn(c) for c in _RUN_FACETS},
        "is_placeholder": "t.is_placeholder AND EXCLUDED.is_placeholder",
        "first_seen": "least(t.first_seen, EXCLUDED.first_seen)", "last_seen": "greatest(t.last_seen, EXCLUDED.last_seen)",
        "facets_time": "greatest(t.facets_time, EXCLUDED.facets_time)",
    }), _STAGED_RUNS)

RUN_DURATIONS = """
    UPDATE lineage_runs r SET duration_ms = d.ms
    FROM (SELECT run_id, CASE WHEN ended_at IS NOT NULL AND started_at IS NOT NULL
                              THEN (extract(epoch FROM ended_at - started_at) * 1000)::bigint END AS ms
          FROM lineage_runs WHERE run_id IN (SELECT run_id FROM stg_runs WHERE batch_id = %(b)s)) d
    WHERE r.run_id = d.run_id AND r.duration_ms IS DISTINCT FROM d.ms"""

_STAGED_RUN_IO = _reduce("stg_run_io", "run_id, dataset_id, direction", [
    ("version_id", _latest("version_id", "event_time")), ("event_time", "min(event_time)")])
MERGE_RUN_IO = _both(lambda src: _upsert(
    "lineage_run_io", "run_id, dataset_id, direction",
    ("run_id", "dataset_id", "direction", "version_id", "event_time"),
    f"""SELECT run_id, dataset_id, direction, version_id, event_time, {_B}
        FROM ({src}) s ORDER BY run_id, dataset_id, direction""",
    {"version_id": "coalesce(t.version_id, EXCLUDED.version_id)",
     "event_time": "least(t.event_time, EXCLUDED.event_time)"}), _STAGED_RUN_IO)


def _row_latest(col: str) -> str:
    return f"(array_agg({col} ORDER BY last_seen DESC, coalesce(run_id::text, '') COLLATE {_C} DESC))[1]"


_ENEWER = ("(EXCLUDED.last_seen, coalesce(EXCLUDED.run_id::text, '')) >= "
           "(t.last_seen, coalesce(t.run_id::text, ''))")
_EDGE_LATEST = ("edge_type", "job_version_id", "run_id", "transformation", "metadata", "tracing")
_STAGED_EDGES = _reduce("stg_edges", "edge_id", [
    _min_uuid("source_node_id"), _min_uuid("target_node_id"), ("kind", "min(kind)"), _min_uuid("job_id"),
    *[(c, _row_latest(c)) for c in _EDGE_LATEST], ("first_seen", "min(first_seen)"), ("last_seen", "max(last_seen)")])
MERGE_EDGES = _both(lambda src: _upsert(
    "lineage_edges", "edge_id",
    ("edge_id", "source_node_id", "target_node_id", "kind", "job_id", *_EDGE_LATEST, "first_seen", "last_seen"),
    f"""SELECT s.edge_id, s.source_node_id, s.target_node_id, s.kind, s.job_id, s.edge_type, s.job_version_id, s.run_id,
               s.transformation,
               CASE WHEN s.kind = 'dataset' THEN jsonb_set(s.metadata, '{{duration_ms}}', coalesce(to_jsonb(r.duration_ms), 'null'))
                    ELSE s.metadata END,
               s.tracing, s.first_seen, s.last_seen, {_B}
        FROM ({src}) s
        LEFT JOIN lineage_runs r ON r.run_id = s.run_id
        ORDER BY s.edge_id""",
    {
        **{c: f"CASE WHEN {_ENEWER} THEN EXCLUDED.{c} ELSE t.{c} END" for c in _EDGE_LATEST},
        "first_seen": "least(t.first_seen, EXCLUDED.first_seen)", "last_seen": "greatest(t.last_seen, EXCLUDED.last_seen)",
        "valid_to": "CASE WHEN EXCLUDED.last_seen > t.valid_to THEN NULL ELSE t.valid_to END",
    }), _STAGED_EDGES)

EDGE_DURATIONS = """
    UPDATE lineage_edges e SET metadata = jsonb_set(e.metadata, '{duration_ms}', to_jsonb(r.duration_ms)),
                               last_batch_id = %(b)s
    FROM lineage_runs r
    WHERE r.run_id IN (SELECT run_id FROM stg_runs WHERE batch_id = %(b)s) AND e.run_id = r.run_id
      AND e.kind = 'dataset' AND r.duration_ms IS NOT NULL
      AND e.metadata -> 'duration_ms' IS DISTINCT FROM to_jsonb(r.duration_ms)"""

_EDGE_VALIDITY = """
    WITH jobs AS MATERIALIZED ({jobs}),
    cur AS MATERIALIZED (
        SELECT DISTINCT ON (v.job_id) v.job_id, v.job_version_id, v.first_seen
        FROM lineage_job_versions v JOIN jobs ON jobs.job_id = v.job_id
        ORDER BY v.job_id, v.first_seen DESC, v.job_version_id DESC),
    want AS MATERIALIZED (
        SELECT w.edge_id, w.valid_to FROM (
            SELECT e.edge_id, e.valid_to AS was,
                   CASE WHEN e.job_version_id IS DISTINCT FROM cur.job_version_id AND e.last_seen < cur.first_seen
                        THEN cur.first_seen END AS valid_to
            FROM lineage_edges e JOIN cur ON e.job_id = cur.job_id
            WHERE e.job_version_id IS NOT NULL) w
        WHERE w.was IS DISTINCT FROM w.valid_to
        ORDER BY w.edge_id)
    UPDATE lineage_edges e SET valid_to = want.valid_to, last_batch_id = %(b)s
    FROM want WHERE e.edge_id = want.edge_id"""
#: Edge validity for the jobs the batch staged edges for, then for those it staged only a version for (a code
#: scanner's retraction). The job set, the current versions and the changed edges are materialized, so the
#: update touches only the edges whose validity changes, by key: inlined, with the new table's stale
#: statistics (one row), the planner chose a nested loop over all of a job's edges for each edge, quadratic
#: for a job with 100,000 outputs (tests/test_reliability_hostile.py).
EDGE_VALIDITY = _EDGE_VALIDITY.format(jobs="SELECT DISTINCT job_id FROM stg_edges WHERE batch_id = %(b)s")
EDGE_VALIDITY_VERSIONS_ONLY = _EDGE_VALIDITY.format(
    jobs="SELECT job_id FROM stg_job_versions WHERE batch_id = %(b)s "
         "EXCEPT SELECT job_id FROM stg_edges WHERE batch_id = %(b)s")

_CL_LATEST = ("transformation_type", "transformation_logic", "dependencies", "job_id")
_STAGED_COLUMN_LINEAGE = _reduce("stg_column_lineage", "column_lineage_id", [
    _min_uuid("source_dataset_id"), ("source_table", "min(source_table)"), ("source_column", "min(source_column)"),
    _min_uuid("target_dataset_id"), ("target_table", "min(target_table)"), ("target_column", "min(target_column)"),
    *[(c, _latest(c, "last_seen")) for c in _CL_LATEST], ("first_seen", "min(first_seen)"),
    ("last_seen", "max(last_seen)")])
MERGE_COLUMN_LINEAGE = _both(lambda src: _upsert(
    "lineage_column_lineage", "column_lineage_id",
    ("column_lineage_id", "source_dataset_id", "source_table", "source_column", "target_dataset_id", "target_table",
     "target_column", *_CL_LATEST, "first_seen", "last_seen"),
    f"""SELECT column_lineage_id, source_dataset_id, source_table, source_column, target_dataset_id, target_table,
               target_column, {', '.join(_CL_LATEST)}, first_seen, last_seen, {_B}
        FROM ({src}) s ORDER BY column_lineage_id""",
    {
        **{c: _cn(c, "last_seen") for c in _CL_LATEST},
        "first_seen": "least(t.first_seen, EXCLUDED.first_seen)", "last_seen": "greatest(t.last_seen, EXCLUDED.last_seen)",
    }), _STAGED_COLUMN_LINEAGE)

MERGE_PROVENANCE = """
    WITH ins AS (
        INSERT INTO lineage_provenance (provenance_id, node_id, event_hash, event_type, event_time, agent, operation,
                                        context, tracing, last_batch_id, declared_type)
        SELECT DISTINCT ON (provenance_id) provenance_id, node_id, event_hash, event_type, event_time, agent,
               operation, context, tracing, %(b)s, event_type
        FROM stg_provenance WHERE batch_id = %(b)s ORDER BY provenance_id, part
        ON CONFLICT (provenance_id) DO NOTHING RETURNING 1)
    SELECT count(*), 0 FROM ins"""

#: The nodes this batch wrote, locked (transaction-scoped advisory locks, in node order) before
#: :data:`RESOLVE_WRITE_KINDS` re-reads them in a new statement snapshot: two batches writing one node
#: resolve it one after the other, the second seeing the first's committed records.
#: One advisory lock per bucket of written nodes (256 buckets), taken in bucket order: a lock per node ran out
#: of the lock table (max_locks_per_transaction) on an event with 100,000 outputs, and PostgreSQL's "out of
#: shared memory" made the merge retry forever (tests/test_reliability_hostile.py).
LOCK_WRITTEN_NODES = """
    SELECT count(pg_advisory_xact_lock(%(lock)s, bucket)) FROM (
        SELECT DISTINCT hashtext(node_id::text) & 255 AS bucket FROM stg_provenance
         WHERE batch_id = %(b)s AND event_type <> 'accessed' ORDER BY bucket) n"""

#: Provenance write kinds (migration 009): of the writes of each node this batch wrote, the earliest in
#: event time (ties: smallest provenance_id) is ``created`` unless its event declared a lifecycle change
#: (CREATE/OVERWRITE -> created, DROP -> deleted, kept as declared); every other plain write is ``modified``.
#: Index work only, whatever a node's history: the earliest write is one probe of the partial index
#: ``lineage_provenance_writes``, and the record that may have to give ``created`` up is found through
#: ``lineage_provenance_created`` (at most one per node).
RESOLVE_WRITE_KINDS = """
    WITH touched AS (
        SELECT DISTINCT node_id FROM stg_provenance WHERE batch_id = %(b)s AND event_type <> 'accessed'),
    first AS (
        SELECT f.provenance_id FROM touched t CROSS JOIN LATERAL (
            SELECT p.provenance_id FROM lineage_provenance p
             WHERE p.node_id = t.node_id AND p.declared_type <> 'accessed'
             ORDER BY p.event_time, p.provenance_id LIMIT 1) f),
    want AS (
        SELECT provenance_id, 'created' AS want FROM first
        UNION ALL
        SELECT p.provenance_id, 'modified' FROM lineage_provenance p JOIN touched t ON t.node_id = p.node_id
         WHERE p.event_type = 'created' AND p.declared_type = 'modified'
           AND p.provenance_id NOT IN (SELECT provenance_id FROM first))
    UPDATE lineage_provenance p SET event_type = w.want, last_batch_id = %(b)s
      FROM want w
     WHERE p.provenance_id = w.provenance_id AND p.declared_type = 'modified' AND p.event_type <> w.want"""

#: ``pg_advisory_xact_lock`` class of :data:`LOCK_WRITTEN_NODES` ("LP").
_WRITE_KIND_LOCK_CLASS = 0x4C50


def resolve_write_kinds(cur: psycopg.Cursor, params: Mapping[str, Any]) -> int:
    """Re-resolve the provenance write kinds of the nodes the batch wrote; returns the rows changed."""
    cur.execute(slotted(LOCK_WRITTEN_NODES, params["b"]), {**params, "lock": _WRITE_KIND_LOCK_CLASS})
    return cur.execute(slotted(RESOLVE_WRITE_KINDS, params["b"]), params).rowcount


MERGE_EVENTS = """
    WITH ins AS (
        INSERT INTO lineage_events (event_hash, event_kind, event_type, event_time, run_id, job_namespace, job_name,
                                    producer, source, payload, revision, first_batch_id)
        SELECT DISTINCT ON (event_hash) event_hash, event_kind, event_type, event_time::timestamptz, run_id::uuid,
               job_namespace, job_name, producer, source, payload, revision, %(b)s
        FROM stg_events WHERE batch_id = %(b)s ORDER BY event_hash, part, source
        ON CONFLICT (event_hash) DO NOTHING RETURNING 1)
    SELECT (SELECT count(*) FROM stg_events WHERE batch_id = %(b)s), (SELECT count(*) FROM ins)"""

QUALITY_INPUTS = """
    WITH touched AS (SELECT DISTINCT version_id FROM stg_dataset_versions WHERE batch_id = %(b)s),
    cur AS (SELECT v.version_id, v.dataset_id, v.event_time FROM lineage_dataset_versions v JOIN touched USING (version_id)),
    ids AS (SELECT version_id FROM cur
            UNION
            SELECT n.version_id FROM cur CROSS JOIN LATERAL (
                SELECT n.version_id FROM lineage_dataset_versions n
                WHERE n.dataset_id = cur.dataset_id AND (n.event_time, n.version_id) > (cur.event_time, cur.version_id)
                ORDER BY n.event_time, n.version_id LIMIT 1) n)
    SELECT a.version_id::text, a.dataset_id::text, a.event_time, a.row_count, a.null_counts,
           CASE WHEN a.fields_hash IS DISTINCT FROM p.fields_hash THEN a.fields END, a.assertions,
           a.nominal_end, p.version_id IS NOT NULL, p.row_count, p.null_counts,
           CASE WHEN a.fields_hash IS DISTINCT FROM p.fields_hash THEN p.fields END,
           a.fields IS NOT NULL AND a.fields_hash IS NOT DISTINCT FROM p.fields_hash
    FROM lineage_dataset_versions a JOIN ids USING (version_id) LEFT JOIN LATERAL (
        SELECT * FROM lineage_dataset_versions p
        WHERE p.dataset_id = a.dataset_id AND (p.event_time, p.version_id) < (a.event_time, a.version_id)
        ORDER BY p.event_time DESC, p.version_id DESC LIMIT 1) p ON true
    WHERE a.row_count IS NOT NULL OR a.null_counts <> '{}' OR a.assertions <> '[]' OR a.fields IS NOT NULL
       OR a.nominal_end IS NOT NULL
    ORDER BY a.version_id"""

MERGE_QUALITY = _upsert(
    "lineage_quality", "quality_id",
    ("quality_id", "node_id", "version_id", "measured_at", "metrics", "validations", "anomalies"),
    """SELECT quality_id, node_id, version_id, measured_at, metrics, validations, anomalies, %(b)s
       FROM jsonb_to_recordset(%(rows)s::jsonb) AS q(quality_id uuid, node_id uuid, version_id uuid,
            measured_at timestamptz, metrics jsonb, validations jsonb, anomalies jsonb)
       ORDER BY quality_id""",
    {"node_id": "EXCLUDED.node_id", "measured_at": "EXCLUDED.measured_at", "metrics": "EXCLUDED.metrics",
     "validations": "EXCLUDED.validations", "anomalies": "EXCLUDED.anomalies"})

#: ``(graph table, (statement for any number of parts, statement for one part))``, in merge order.
_MERGES: tuple[tuple[str, tuple[str, str]], ...] = (
    ("lineage_namespaces", MERGE_NAMESPACES),
    ("lineage_datasets", MERGE_DATASETS),
    ("lineage_dataset_versions", MERGE_VERSIONS),
    ("lineage_jobs", MERGE_JOBS),
    ("lineage_job_versions", MERGE_JOB_VERSIONS),
    ("lineage_runs", MERGE_RUNS),
    ("lineage_run_io", MERGE_RUN_IO),
    ("lineage_edges", MERGE_EDGES),
    ("lineage_column_lineage", MERGE_COLUMN_LINEAGE),
    ("lineage_provenance", (MERGE_PROVENANCE, MERGE_PROVENANCE)),
)

#: Whether any staging table holds rows of more than one part of the batch (index range scans on (batch_id, part)).
STAGED_PARTS = "SELECT " + " OR ".join(
    f"EXISTS (SELECT 1 FROM {t} WHERE batch_id = %(b)s AND part > "
    f"(SELECT min(part) FROM {t} WHERE batch_id = %(b)s))" for t in (
        "stg_namespaces", "stg_datasets", "stg_dataset_versions", "stg_jobs", "stg_job_versions", "stg_runs",
        "stg_run_io", "stg_edges", "stg_column_lineage"))


def _counts(row: tuple[Any, ...] | None) -> tuple[int, int]:
    if row is None:  # pragma: no cover - the count queries always return one row
        raise StoreError("a merge statement returned no counts", code="store.merge")
    return int(row[0]), int(row[1])


def _identity(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The committer identity of the transaction log (paper §3.6.2): host, user, application, pid,
    overlaid by what the caller gives (the processor adds its application id, batch source, ...)."""
    import getpass
    import os
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = None
    return {"host": socket.gethostname(), "user": user, "application": "lineage-stream", "pid": os.getpid(),
            **dict(given or {})}


#: A batch of fewer events than this has its staged rows DELETEd, not its slot TRUNCATEd (:func:`clear_slot`). A
#: TRUNCATE costs about the same 10-50 ms however few rows go (new files for each table and index, their unlink at
#: commit, the lock), while a DELETE and its later vacuum cost per row. benchmarks/staging_clear_probe.py
#: ``--force-truncate`` (server CPU per event of demo traffic, TRUNCATE vs DELETE + VACUUM, 2026-12-07): 400-event
#: batches 50 vs 0-50 + 0-50 µs, 2,000: 20 vs 5 + 10, 5,000: 8 vs 4 + 6, 10,000: 2 vs 6 + 3; even at ~4,000-5,000.
#: Light traffic (small batches) is thus cleared as before migration 017; a backlog's full batches are TRUNCATEd.
TRUNCATE_MIN_ROWS = 5000


def clear_slot(cur: psycopg.Cursor, batch_id: int, tables: Sequence[str], rows: int | None = None) -> str:
    """Remove ``batch_id``'s rows from the staging ``tables`` (unslotted names) in the caller's transaction: TRUNCATE
    its slot's tables when they hold nothing else, else DELETE its rows. Returns how: ``truncate``, ``delete`` or
    ``empty`` (nothing staged). ``rows``: the batch's events when the caller knows them; fewer than
    :data:`TRUNCATE_MIN_ROWS` are DELETEd straight away (a TRUNCATE's fixed cost is more than their DELETE's).

    Migration 017 says why (a DELETE's dead rows cost the statement and then autovacuum). A TRUNCATE needs the slot's
    tables to itself: the lock is asked for without waiting (``NOWAIT``: a reader of the parent tables, an autovacuum
    worker or another writer's staging holds it, and waiting while a merge holds graph rows could deadlock), and no
    other batch may have rows there (another writer's batch in the same slot, a batch a crash left staged): then the
    lock is given back (the savepoint is rolled back) and the rows are DELETEd."""
    names = [slotted(table, batch_id) for table in tables]
    if rows is not None and rows < TRUNCATE_MIN_ROWS:
        _delete_batch(cur, names, batch_id)
        return "delete"
    bounds_sql = " UNION ALL ".join(f"SELECT min(batch_id), max(batch_id) FROM {name}" for name in names)
    if all(low is None for low, _high in cur.execute(bounds_sql).fetchall()):
        return "empty"
    try:
        with cur.connection.transaction():   # a savepoint: rolled back, it gives the lock back
            cur.execute(f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE NOWAIT")
            if any(low is not None and (low != batch_id or high != batch_id)
                   for low, high in cur.execute(bounds_sql).fetchall()):
                raise _SlotShared
            cur.execute(f"TRUNCATE {', '.join(names)}")
            return "truncate"
    except (_SlotShared, pg_errors.LockNotAvailable):
        pass
    _delete_batch(cur, names, batch_id)
    return "delete"


def _delete_batch(cur: psycopg.Cursor, names: Sequence[str], batch_id: int) -> None:
    for name in names:
        cur.execute(f"DELETE FROM {name} WHERE batch_id = %s", (batch_id,))


class _SlotShared(Exception):
    """A staging slot holds another batch's rows too (:func:`clear_slot`)."""


#: Stand-in for two schemas known equal by fields_hash (consistency 1.0, no schema anomaly).
_SAME_SCHEMA = [{"name": "", "type": ""}]


class GraphStore:
    """The PostgreSQL lineage graph (see the module doc). ``GraphStore(dsn_or_settings)``."""

    def __init__(self, dsn_or_settings: str | StoreSettings) -> None:
        if isinstance(dsn_or_settings, StoreSettings):
            self.settings = dsn_or_settings
        else:
            self.settings = StoreSettings(postgres_dsn=dsn_or_settings)
        self._conn: psycopg.Connection | None = None
        #: ``(source, EventValidationError)`` of the events the last write/stage could not store.
        self.last_rejections: list[tuple[str, EventValidationError]] = []
        #: Seconds spent per step of the last write/merge (derive, stage, each merge statement): for profiling.
        self.last_timings: dict[str, float] = {}

    # -- connections ---------------------------------------------------------------------------------

    @staticmethod
    def connect(settings: StoreSettings) -> psycopg.Connection:
        """An autocommit connection with the store's connect and statement timeouts (sink/settings.py)."""
        try:
            conn = psycopg.connect(settings.dsn(), connect_timeout=settings.store_connect_timeout_seconds,
                                   autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the graph database: {exc}", code="store.connect") from exc
        conn.execute("SELECT set_config('statement_timeout', %s, false)",
                     (str(int(settings.store_statement_timeout_seconds * 1000)),))
        return conn

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = self.connect(self.settings)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> GraphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------------------

    def migrate(self, up_to: int | None = None) -> list[int]:
        """Apply pending migrations (idempotent, safe with concurrent starters); return versions applied."""
        return apply_migrations(self.conn, up_to=up_to)

    # -- staging --------------------------------------------------------------------------------------

    @staticmethod
    def _stage_rows(conn: psycopg.Connection, batch_id: int, part: int, rows: GraphRows, chunk: int,
                    skip: tuple[str, ...] = ()) -> int:
        """DELETE the (batch_id, part) rows of every staging table and COPY ``rows`` in (caller's transaction).
        Tables in ``skip`` are neither cleared nor copied (already staged by :meth:`_derive_and_stage`)."""
        prefix = f"{int(batch_id)}\t{int(part)}\t"
        total = 0
        with conn.cursor() as cur:
            for table, columns in STAGING_COLUMNS.items():
                if table in skip:
                    continue
                cur.execute(f"DELETE FROM {slotted(table, batch_id)} WHERE batch_id = %s AND part = %s",
                            (batch_id, part))
                data = rows.tables[table]
                if not data:
                    continue
                total += len(data)
                if table == "stg_events":
                    with _copy_events(cur, batch_id, part) as write:
                        for start in range(0, len(data), 2000):
                            write(data[start:start + 2000])
                else:
                    _copy_staged(cur, slotted(table, batch_id), columns, prefix, data)
        return total

    @classmethod
    def _derive_and_stage(cls, conn: psycopg.Connection, batch_id: int, part: int,
                          events: Sequence[StoredEvent], chunk: int,
                          timings: dict[str, float],
                          handover: Mapping[str, tuple[bytes | None, str]] | None = None) -> tuple[GraphRows, int]:
        """Derive ``events`` and stage their rows as ``(batch_id, part)`` (caller's transaction).

        Pipelined: the events are derived :data:`_STREAM_EVENTS` at a time and the ``stg_events`` rows of
        each chunk (the bulky payload texts) are written to one open COPY before the next chunk is derived,
        so the server stores them on its core while Python derives on the other; then the
        reduced rows of the other tables are COPYed. Returns ``(rows, rows staged)``; ``timings`` gets
        ``derive`` (Python derivation) and ``stage`` (the rest). ``handover`` (the stream's staging pass):
        ``{event_hash: (Kafka key, enriched record JSON without the event)}``; each event's row in
        ``stg_event_keys`` (migrations 006, 010) gets its annotation keys, from the rows just derived, and
        those two, for the enrich step after the merge (stream_processor/enrich.py).
        """
        started = time.perf_counter()
        derive_s = 0.0
        deriver = BatchDeriver()
        keys: dict[str, str] = {}
        on_event = None
        if handover is not None:
            from .annotations_lookup import keys_from_rows, keys_to_text

            def on_event(stored: StoredEvent, rows: dict[str, list[tuple[Any, ...]]]) -> None:
                keys[stored.event_hash] = keys_to_text(keys_from_rows(stored.event_hash, rows))
        sent = 0
        with conn.cursor() as cur:
            cur.execute(slotted("DELETE FROM stg_events WHERE batch_id = %s AND part = %s", batch_id), (batch_id, part))
            with _copy_events(cur, batch_id, part) as write:
                for start in range(0, len(events), _STREAM_EVENTS):
                    t0 = time.perf_counter()
                    deriver.add(events[start:start + _STREAM_EVENTS], on_event)
                    fresh = deriver.events_since(sent)
                    derive_s += time.perf_counter() - t0
                    if fresh:
                        sent += len(fresh)
                        write(fresh)
        t0 = time.perf_counter()
        rows = deriver.finish()
        derive_s += time.perf_counter() - t0
        total = sent + cls._stage_rows(conn, batch_id, part, rows, chunk, skip=("stg_events",))
        if handover is not None:
            cls._stage_handover(conn, batch_id, part, events, keys, handover)
        timings["derive"] = derive_s
        timings["stage"] = time.perf_counter() - started - derive_s
        return rows, total

    @staticmethod
    def _stage_handover(conn: psycopg.Connection, batch_id: int, part: int, events: Sequence[StoredEvent],
                        keys: Mapping[str, str], handover: Mapping[str, tuple[bytes | None, str]]) -> None:
        """COPY one ``stg_event_keys`` row per event of ``handover`` as ``(batch_id, part)``, replacing that
        pair's rows (migrations 006, 010). An event the deriver rejected has no keys: its record gets the event
        text itself (``lineage_events`` will not hold it), JSON with ASCII escapes (it may hold lone surrogates)."""
        # only an event the deriver rejected needs its event again (rare: read once more, for those alone)
        missing = {h for h in handover if h not in keys}
        by_hash = {e.event_hash: e for e in events if e.event_hash in missing} if missing else {}
        rows = []
        for event_hash, (record_key, record) in handover.items():
            event_keys = keys.get(event_hash)
            if event_keys is None:
                doc = json.loads(record)
                stored = by_hash[event_hash]
                doc["event"] = stored.text if stored.text is not None else canonical_json(stored.event)
                record = json.dumps(doc, ensure_ascii=True, separators=(",", ":"))
            rows.append((event_hash, event_keys, _bytea(record_key), record))
        with conn.cursor() as cur:
            cur.execute(slotted("DELETE FROM stg_event_keys WHERE batch_id = %s AND part = %s", batch_id),
                        (batch_id, part))
            if rows:
                _copy_staged(cur, slotted(HANDOVER_TABLE, batch_id), ("event_hash", "keys", "record_key", "record"),
                             f"{int(batch_id)}\t{int(part)}\t", rows)

    @classmethod
    def stage_partition(cls, dsn: str | StoreSettings, batch_id: int, part: int,
                        events: Sequence[StoredEvent],
                        handover: Mapping[str, tuple[bytes | None, str]] | None = None,
                        self_parts: Sequence[tuple[str, str, str]] = ()) -> int:
        """Derive ``events`` and COPY them into staging as ``(batch_id, part)``, replacing earlier rows of
        that pair (a retried task is idempotent). Own connection: callable on a Spark executor.
        Returns the number of staged rows. ``handover``: see :meth:`_derive_and_stage`. ``self_parts``:
        the batch's `$self` parts as ``(group_key, event_hash, doc)``, staged in ``stg_self_parts`` in the same
        transaction (migration 012; stream_processor/recombine.py)."""
        settings = dsn if isinstance(dsn, StoreSettings) else StoreSettings(postgres_dsn=dsn)
        # a Sequence is read in slices as it is derived (the staging pass's ParsedOnRead parses on read)
        events = events if isinstance(events, Sequence) else list(events)
        if not events and not self_parts:
            # Nothing to stage, and nothing to replace: a re-run of this task reads the same (empty) input.
            # Skipping the connection matters for the idle query's empty micro-batches (ticks).
            return 0
        with cls.connect(settings) as conn, frozen_heap():
            try:
                with conn.transaction():
                    if events:
                        rows, total = cls._derive_and_stage(conn, batch_id, part, events,
                                                            settings.store_copy_chunk_bytes, {}, handover)
                    else:
                        rows, total = GraphRows(), 0
                    total += cls.stage_self_parts(conn, batch_id, part, self_parts)
            except psycopg.Error as exc:
                raise StoreError(f"staging batch {batch_id} part {part} failed: {exc}", code="store.stage") from exc
            for source, exc in rows.rejected:
                log.warning("rejected event %s: %s", source, exc)
            return total

    @staticmethod
    def stage_self_parts(conn: psycopg.Connection, batch_id: int, part: int,
                         parts: Sequence[tuple[str, str, str]]) -> int:
        """Replace the ``stg_self_parts`` rows of ``(batch_id, part)`` by ``parts`` (caller's transaction)."""
        with conn.cursor() as cur:
            cur.execute("DELETE FROM stg_self_parts WHERE batch_id = %s AND part = %s", (batch_id, part))
            if parts:
                _copy_staged(cur, "stg_self_parts", ("group_key", "event_hash", "doc"),
                             f"{int(batch_id)}\t{int(part)}\t", parts)
        return len(parts)

    # -- merging --------------------------------------------------------------------------------------

    def merge(self, batch_id: int, identity: Mapping[str, Any] | None = None) -> BatchResult:
        """Merge every staged row of ``batch_id`` into the graph in one transaction and clear them."""
        with frozen_heap():
            return self._retry(lambda: self._merge_tx(batch_id, identity, None))

    def write_batch(self, batch_id: int, events: Sequence[StoredEvent],
                    identity: Mapping[str, Any] | None = None) -> BatchResult:
        """Derive, stage and merge ``events`` as batch ``batch_id`` in ONE transaction (module doc)."""
        events = list(events)
        self.last_timings = {}
        self.last_rejections = []
        derived: list[GraphRows] = []    # set by the first attempt; a retried transaction stages it again
        with frozen_heap():     # the collector walks what the batch allocates, not the caller's events
            result = self._retry(lambda: self._merge_tx(batch_id, identity, derived[0] if derived else events,
                                                        derived))
        rows = derived[0]
        self.last_rejections = list(rows.rejected)
        for source, exc in rows.rejected:
            log.warning("rejected event %s: %s", source, exc)
        result.rows_by_table["rejected_events"] = len(rows.rejected)
        return result

    def write_batches(self, batches: Iterable[tuple[int, Sequence[StoredEvent]]],
                      identity: Mapping[str, Any] | None = None) -> Iterator[tuple[BatchResult, list[Any]]]:
        """Write several batches, each one transaction as :meth:`write_batch` writes it, pipelined: a staging
        thread on its own connection derives and stages batch N+1 while the server merges batch N here.

        Yields ``(result, rejections)`` per batch in order (``rejections`` as :attr:`last_rejections`), each
        once its merge has committed. :meth:`write_batch` is serial: Python derives (about half of a batch's
        time) while the server waits, then the server merges while Python waits; here the two overlap. Measured
        gain is small (median +8 %, ``benchmarks/store_overlap_ab.py``): both sides' Python shares one
        interpreter lock, and the first staging and the last merge overlap nothing. For bulk writers that have the next batch at hand (``lineage load --engine local``). The
        stream cannot use it: Spark runs its micro-batches one after the other and checkpoints a batch only
        when its ``foreachBatch`` returns, i.e. after the merge committed.

        The staged rows of a batch are committed (as the stream's executors commit theirs) before its merge
        starts; a merge that fails leaves them in the staging tables, where the next write of that
        batch id replaces them. An error in either thread stops both and is raised here; the batches merged
        before it stay committed.
        """
        handoff: queue.Queue[tuple[int, GraphRows, float] | BaseException | None] = queue.Queue(maxsize=1)
        stop = threading.Event()

        def stage_all() -> None:
            try:
                with self.connect(self.settings) as conn, frozen_heap():
                    for batch_id, events in batches:
                        if stop.is_set():
                            return
                        events = list(events)
                        started = time.perf_counter()
                        try:
                            with conn.transaction():
                                rows, _ = self._derive_and_stage(conn, batch_id, 0, events,
                                                                 self.settings.store_copy_chunk_bytes, {})
                        except psycopg.Error as exc:
                            raise StoreError(f"staging batch {batch_id} failed: {exc}", code="store.stage") from exc
                        if not _put(handoff, (batch_id, rows, time.perf_counter() - started), stop):
                            return
                _put(handoff, None, stop)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
                _put(handoff, exc, stop)

        stager = threading.Thread(target=stage_all, name="lineage-store-stage", daemon=True)
        stager.start()
        try:
            while True:
                item = handoff.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                batch_id, rows, staged_s = item
                self.last_timings = {"stage": staged_s}
                with frozen_heap():
                    result = self._retry(lambda b=batch_id: self._merge_tx(b, identity, None))
                self.last_rejections = list(rows.rejected)
                for source, exc in rows.rejected:
                    log.warning("rejected event %s: %s", source, exc)
                result.rows_by_table["rejected_events"] = len(rows.rejected)
                yield result, list(rows.rejected)
        finally:
            stop.set()
            while stager.is_alive():       # unblock a stager waiting on a full hand-off
                try:
                    handoff.get_nowait()
                except queue.Empty:
                    stager.join(0.05)

    def _retry(self, attempt: Any) -> BatchResult:
        tries = self.settings.store_deadlock_retries + 1
        for number in range(tries):
            try:
                return attempt()
            except (pg_errors.DeadlockDetected, pg_errors.SerializationFailure) as exc:
                if number + 1 >= tries:
                    raise StoreError(f"batch gave up after {tries} deadlocks: {exc}", code="store.deadlock") from exc
                log.info("batch transaction retried after %s", type(exc).__name__)
                time.sleep(0.05 * (number + 1))
            except psycopg.Error as exc:
                raise StoreError(f"batch transaction failed: {exc}", code="store.merge") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _merge_tx(self, batch_id: int, identity: Mapping[str, Any] | None,
                  data: GraphRows | Sequence[StoredEvent] | None,
                  derived: list[GraphRows] | None = None) -> BatchResult:
        """One batch transaction. ``data``: None (merge what is staged), events (derive and stage them as
        part 0, appending their :class:`GraphRows` to ``derived``) or rows derived by an earlier attempt."""
        conn = self.conn
        params = {"b": batch_id}
        result = BatchResult(batch_id=batch_id)
        with conn.transaction(), conn.cursor() as cur:
            scur = _SlotCursor(cur, batch_id)   # the staging tables of the batch's slot (migration 017)
            # work_mem for this transaction only: the sorts of the staged events and provenance rows (ORDER BY
            # key, for the lock order) are ~7 MB per 5,000 events and spilled to disk at the default 4 MB.
            scur.execute("SELECT pg_advisory_xact_lock(%s, %s), set_config('work_mem', %s, true)",
                        (_BATCH_LOCK_CLASS, batch_id % 2_147_483_647, _MERGE_WORK_MEM))
            if data is not None:
                started = time.perf_counter()
                for table in STAGING_COLUMNS:
                    scur.execute(f"DELETE FROM {table} WHERE batch_id = %s", (batch_id,))
                if isinstance(data, GraphRows):
                    self._stage_rows(conn, batch_id, 0, data, self.settings.store_copy_chunk_bytes)
                    self.last_timings["stage"] = time.perf_counter() - started
                else:
                    rows, _ = self._derive_and_stage(conn, batch_id, 0, data, self.settings.store_copy_chunk_bytes,
                                                     self.last_timings)
                    self.last_rejections = list(rows.rejected)   # known even if the transaction fails
                    if derived is not None:
                        derived.append(rows)
            committed = scur.execute("SELECT events_in, events_new, duplicates, rows_added, rows_modified "
                                    "FROM lineage_transactions WHERE batch_id = %s", (batch_id,)).fetchone()
            if committed is not None:
                self._clear(cur, batch_id, committed[0])
                result.events_in, result.events_new, result.duplicates = committed[0], committed[1], committed[2]
                result.already_committed = True
                return result
            annotating: _Annotator | None = None
            try:
                one_part = not scur.execute(STAGED_PARTS, params).fetchone()[0]
                for table, statements in _MERGES:
                    started = time.perf_counter()
                    added, modified = _counts(scur.execute(statements[one_part], params).fetchone())
                    if table == "lineage_runs":
                        scur.execute(RUN_DURATIONS, params)
                    if table == "lineage_edges":
                        modified += scur.execute(EDGE_DURATIONS, params).rowcount
                        modified += scur.execute(EDGE_VALIDITY, params).rowcount
                        modified += scur.execute(EDGE_VALIDITY_VERSIONS_ONLY, params).rowcount
                    if table == "lineage_provenance":
                        modified += resolve_write_kinds(cur, params)
                    self._count(result, table, added, modified)
                    self.last_timings[table] = time.perf_counter() - started
                    if table == "lineage_dataset_versions":
                        # the versions are final now: compute their quality annotations (Python) in a
                        # thread while the server merges the other tables; written after provenance.
                        started = time.perf_counter()
                        set_json_loads(_loads, cur)
                        inputs = scur.execute(QUALITY_INPUTS, params).fetchall()
                        self.last_timings["quality_query"] = time.perf_counter() - started
                        annotating = _Annotator(inputs, self.settings.timeliness_window_seconds)
                        annotating.start()
                started = time.perf_counter()
                out = annotating.result() if annotating is not None else []
                annotating = None
                self.last_timings["quality_wait"] = time.perf_counter() - started
                started = time.perf_counter()
                if out:
                    self._count(result, "lineage_quality",
                                *_counts(scur.execute(MERGE_QUALITY, {**params, "rows": _dumps(out)}).fetchone()))
                self.last_timings["lineage_quality"] = time.perf_counter() - started
            finally:
                if annotating is not None:
                    annotating.join()
            started = time.perf_counter()
            events_in, events_new = _counts(scur.execute(MERGE_EVENTS, params).fetchone())
            self.last_timings["lineage_events"] = time.perf_counter() - started
            self._count(result, "lineage_events", events_new, 0)
            producers = sorted({p for (p,) in scur.execute(
                "SELECT DISTINCT producer FROM stg_events WHERE batch_id = %s AND producer IS NOT NULL",
                (batch_id,)).fetchall()})
            result.events_in, result.events_new, result.duplicates = events_in, events_new, events_in - events_new
            scur.execute(
                "INSERT INTO lineage_transactions (batch_id, identity, producers, events_in, events_new, duplicates,"
                " rows_added, rows_modified, rows_by_table) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (batch_id, json.dumps(_identity(identity), sort_keys=True, default=str), json.dumps(producers),
                 events_in, events_new, result.duplicates, result.rows_added, result.rows_modified,
                 json.dumps(result.rows_by_table, sort_keys=True)))
            self._clear(cur, batch_id, events_in)
        return result

    @staticmethod
    def _count(result: BatchResult, table: str, added: int, modified: int) -> None:
        result.rows_added += added
        result.rows_modified += modified
        if added or modified:
            result.rows_by_table[table] = added + modified

    @staticmethod
    def _clear(cur: psycopg.Cursor, batch_id: int, rows: int | None = None) -> str:
        """Remove ``batch_id``'s staged graph rows at the end of its merge (:func:`clear_slot`; ``rows``: its events
        when known); returns how."""
        return clear_slot(cur, batch_id, tuple(STAGING_COLUMNS), rows)


def _put(handoff: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Put ``item`` on ``handoff`` unless ``stop`` is set first; True if it was put."""
    while not stop.is_set():
        try:
            handoff.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def annotate_versions(inputs: Sequence[tuple[Any, ...]], window: float) -> list[dict[str, Any]]:
    """``lineage_quality`` rows (dicts for ``MERGE_QUALITY``) of the :data:`QUALITY_INPUTS` rows (pure):
    :func:`sink.annotate.quality_annotation` of each version against the previous one, through
    :func:`sink.annotate.annotation_values` (the same figures, without building the two versions' facts)."""
    out = []
    append = out.append
    for row in inputs:
        vid, node, etime, rc, nc, fields, assertions, nominal, has_prev, p_rc, p_nc, p_fields, same_schema = row
        if same_schema:   # schemas equal by hash: not fetched; any equal non-empty schema gives the same result
            fields = p_fields = _SAME_SCHEMA
        note = annotation_values(rc, nc, fields, assertions, etime, nominal, has_prev, p_rc, p_nc, p_fields, window)
        if note is None:
            continue
        metrics, checks, found = note
        append({"quality_id": ids.quality_id(vid), "node_id": node, "version_id": vid,
                "measured_at": etime.isoformat(), "metrics": metrics, "validations": checks, "anomalies": found})
    return out


class _Annotator(threading.Thread):
    """:func:`annotate_versions` on a thread: Python work overlapping the server's merge statements
    (psycopg releases the GIL while it waits for the server)."""

    def __init__(self, inputs: Sequence[tuple[Any, ...]], window: float) -> None:
        super().__init__(name="quality-annotations", daemon=True)
        self._inputs = inputs
        self._window = window
        self._out: list[dict[str, Any]] = []
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._out = annotate_versions(self._inputs, self._window)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread by result()
            self._error = exc

    def result(self) -> list[dict[str, Any]]:
        self.join()
        if self._error is not None:
            raise self._error
        return self._out
