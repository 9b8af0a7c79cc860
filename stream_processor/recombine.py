"""`$self` recombination (seeds/evo-geoscience-object-lineage.md).

A producer publishing lineage with one object version sends the run's event with the output
``$self`` (resolved by validation against the message's subject). Several object versions of
one run arrive as several such parts; parts are grouped by ``(runId, eventType)`` and ONE record is
emitted whose ``outputs`` (and ``inputs``) are the union of the parts', ordered by first appearance
after sorting parts by ``(event_time, event_hash)`` (:func:`merge_parts`):

- a group is emitted once no part arrived for ``quiet_seconds`` (processing time);
- a part arriving after the emission re-opens the group; after another quiet period the
  record is re-emitted with ``revision + 1`` (revision 1 is the first emission);
- after emission the group is kept ``state_ttl_seconds`` for late parts, then removed, so
  state cannot grow forever.

Recombination in the store (the stream; migration 012). The staging pass writes each part (a decoded row
with ``has_self``, :func:`is_self_part`) to ``stg_self_parts`` with the batch's other staged rows; plain
events never meet the recombiner. Before the batch's merge, the writer calls
:func:`recombine_in_store`: ONE transaction moves the batch's parts into ``lineage_self_parts`` (a part seen
before is not new), re-opens their groups, recombines every group quiet for ``quiet_seconds`` into one
event staged with the batch as part :data:`RECOMBINED_PART` (derived on the driver like any staged event,
with its enriched-record hand-over), records the emission and drops groups past their TTL.
The writer runs this step on a thread of its own once the batch is marked, while its finisher thread finishes
the batch before (it only adds rows to this batch's staging); the finisher waits for it before the batch's
merge. Up to session 12 it ran on the ``foreachBatch`` thread before the mark, where it held up Spark's next
batch by ~0.3 s. Groups and rows commit together, so a crash neither
loses nor repeats an emission; a batch finished twice (recovery of a marked batch, a re-run) emits once
(``emitted_batch``, or the batch already merged). An idle query still emits: the source's ticks run empty micro-batches and the writer
finishes one whenever a group is due (:func:`groups_due`).

Up to session 10 this was a Spark ``applyInPandasWithState`` operator keyed by group, which every event went
through (plain ones in eight pass-through buckets, to keep one linear plan) and which cost a pandas round trip
per `$self` group on a Python worker: half of the plumbing's CPU on demo traffic (issue 18). A checkpoint
written with that operator holds its open groups in Spark state; docs/OPERATIONS.md says how to upgrade.

``lineage load`` (batch mode) has every part of a group at once: :func:`recombine_self_parts_batch`
(``applyInPandas``) emits each group once with revision 1, as the stream does after its quiet period.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from sink.fastjson import loads as _loads  # orjson where it gives the json module's value

__all__ = ["merge_parts", "RECOMBINED_SCHEMA", "RECOMBINED_PART", "group_key_column", "recombine_group",
           "recombine_self_parts_batch", "plain_rows_batch", "self_parts_batch", "self_group_key", "is_self_part",
           "part_doc", "recombined_row", "recombine_in_store", "groups_due", "SelfStep"]

# pyspark's worker concatenates our per-group frames; pandas 2.3 warns about all-NA columns there.
warnings.filterwarnings("ignore", category=FutureWarning, message="The behavior of DataFrame concatenation")

#: The staging part number of the recombined events a stream batch carries (the executors' parts are Spark
#: partition ids, far below it).
RECOMBINED_PART = 1 << 30


def _recombined_schema() -> str:
    from .decode import DECODED_SCHEMA

    return DECODED_SCHEMA + ", revision int, parts int"


def _names(schema: str) -> list[str]:
    return [c.strip().split(" ")[0] for c in schema.split(", ") if not c.strip().startswith(("key:", "value:"))]


#: Batch mode's rows: the decoded columns plus ``revision`` (0 plain, 1.. recombined) and ``parts``.
RECOMBINED_SCHEMA = _recombined_schema()
_COLUMNS = _names(RECOMBINED_SCHEMA)


def group_key_column() -> Any:
    """``self\x1f<runId>\x1f<eventType>``: the group of a `$self` part (:func:`self_group_key` in Spark)."""
    from pyspark.sql import functions as F

    return F.concat_ws("\x1f", F.lit("self"), F.col("run_id"), F.col("event_type"))


def _union(items: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    seen: dict[tuple[Any, Any], dict[str, Any]] = {}
    for group in items:
        for ds in group or []:
            seen.setdefault((ds.get("namespace"), ds.get("name")), ds)
    return list(seen.values())


def merge_parts(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The recombined event of ``parts`` (each ``{"event_json", "event_hash", "event_time", ...}``).

    ``outputs = union(p.outputs)`` and ``inputs = union(p.inputs)`` by ``(namespace, name)``, first
    occurrence wins, parts ordered by ``(event_time, event_hash)``; other fields from the first part.
    """
    ordered = sorted(parts, key=lambda p: (p.get("event_time") or "", p["event_hash"]))
    events = [_loads(p["event_json"]) for p in ordered]
    merged = dict(events[0])
    merged["outputs"] = _union([e.get("outputs") for e in events])
    merged["inputs"] = _union([e.get("inputs") for e in events])
    return merged


def _iso(value: Any) -> str | None:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    return value.isoformat()


def _part_of(row: Any) -> dict[str, Any]:
    """A part as merge_parts and the store keep it (a decoded row as a dict or a pandas row)."""
    key = row["key"]
    return {"event_json": row["event_json"], "event_hash": row["event_hash"],
            "event_time": _iso(row["event_time"]), "kafka_timestamp": _iso(row["kafka_timestamp"]),
            "source_topic": row["source_topic"], "source_partition": int(row["source_partition"]),
            "source_offset": int(row["source_offset"]), "encoding": row["encoding"],
            "key": key.hex() if isinstance(key, (bytes, bytearray)) else None}


def recombined_row(parts: list[dict[str, Any]], revision: int, new_parts: int) -> dict[str, Any]:
    """The decoded row (every :data:`RECOMBINED_SCHEMA` column, times as UTC datetimes) of the event
    :func:`merge_parts` makes of ``parts``: revision ``revision``, ``parts`` = the ``new_parts`` it adds.
    Its Kafka coordinates and key are the last-arrived part's; ``_event`` (no column) is the merged event itself."""
    from datetime import datetime

    from schemas.identity import canonical_json_hashed

    merged = merge_parts(parts)
    text, digest = canonical_json_hashed(merged)
    last = max(parts, key=lambda p: (p["kafka_timestamp"] or "", p["source_offset"]))
    job, run = merged.get("job") or {}, merged.get("run") or {}
    row: dict[str, Any] = {c: None for c in _COLUMNS}
    event_time = merged.get("eventTime")
    row.update(status="ok", event_hash=digest, event_json=text, kind="run",
               event_type=merged.get("eventType"), run_id=run.get("runId"),
               event_time=pd.Timestamp(event_time).to_pydatetime() if event_time else None,
               job_namespace=job.get("namespace"), job_name=job.get("name"), has_self=True,
               encoding=last["encoding"], source_topic=last["source_topic"],
               source_partition=last["source_partition"], source_offset=last["source_offset"],
               kafka_timestamp=datetime.fromisoformat(last["kafka_timestamp"]) if last["kafka_timestamp"] else None,
               key=bytes.fromhex(last["key"]) if last["key"] else None, revision=revision, parts=new_parts)
    row["_event"] = merged   # the event itself (not a column): the stream stages it without parsing its text
    return row


def _emit(parts: list[dict[str, Any]], revision: int, new_parts: int) -> pd.DataFrame:
    row = recombined_row(parts, revision, new_parts)
    for name in ("event_time", "kafka_timestamp"):
        row[name] = pd.Timestamp(row[name]) if row[name] is not None else None
    return pd.DataFrame([row], columns=_COLUMNS)


# -- the stream: recombination in the store (module doc; migration 012) ----------------------------------


def is_self_part(row: dict[str, Any]) -> bool:
    """True for a decoded row that is a `$self` part still to recombine: an accepted run event (parts are grouped
    by ``(runId, eventType)``; a job or dataset event with a `$self` output has no run to group by and is stored
    as it is, its `$self` resolved to the subject like any part's), not itself recombined."""
    return (bool(row.get("has_self")) and row.get("status") == "ok" and bool(row.get("run_id"))
            and not row.get("revision"))


def part_doc(row: dict[str, Any]) -> tuple[str, str, str]:
    """``(group_key, event_hash, doc)``: a `$self` part as the staging pass writes it to ``stg_self_parts``."""
    return self_group_key(row) or "", row["event_hash"], json.dumps(_part_of(row), separators=(",", ":"))


_LOCK = "SELECT pg_advisory_xact_lock(19539, 1)"   # "LS", 1: one recombination step at a time per database

_ABSORB = """
    WITH staged AS (
        SELECT DISTINCT ON (group_key, event_hash) group_key, event_hash, doc FROM stg_self_parts
        WHERE batch_id = %(b)s ORDER BY group_key, event_hash, part),
    fresh AS (
        INSERT INTO lineage_self_parts (group_key, event_hash, doc) SELECT group_key, event_hash, doc FROM staged
        ON CONFLICT DO NOTHING RETURNING group_key),
    opened AS (
        INSERT INTO lineage_self_groups AS g (group_key, pending, last_part_at)
        SELECT DISTINCT group_key, true, %(now)s FROM fresh
        ON CONFLICT (group_key) DO UPDATE SET pending = true, last_part_at = EXCLUDED.last_part_at
        RETURNING 1)
    SELECT (SELECT count(*) FROM staged), (SELECT count(*) FROM fresh)"""

_DUE_WHERE = "g.pending AND g.last_part_at <= %(now)s - make_interval(secs => %(quiet)s)"

_DUE = f"""
    SELECT g.group_key, g.revision, g.emitted_parts, array_agg(p.doc ORDER BY p.event_hash)
    FROM lineage_self_groups g JOIN lineage_self_parts p ON p.group_key = g.group_key
    WHERE {_DUE_WHERE} GROUP BY g.group_key, g.revision, g.emitted_parts ORDER BY g.group_key"""

_EMITTED = """
    UPDATE lineage_self_groups g SET pending = false, revision = e.revision, emitted_parts = e.parts,
        emitted_at = %(now)s, emitted_batch = %(b)s
    FROM unnest(%(keys)s::text[], %(revisions)s::int[], %(parts)s::int[]) AS e(group_key, revision, parts)
    WHERE g.group_key = e.group_key"""

_EXPIRE = """
    WITH gone AS (
        DELETE FROM lineage_self_groups
        WHERE NOT pending AND emitted_at <= %(now)s - make_interval(secs => %(ttl)s) RETURNING group_key)
    DELETE FROM lineage_self_parts p USING gone WHERE p.group_key = gone.group_key"""


@dataclass
class SelfStep:
    """What :func:`recombine_in_store` did for one batch."""

    parts: int = 0          # parts the batch staged
    new_parts: int = 0      # ... not seen before (each re-opens its group)
    emitted: int = 0        # groups recombined into an event staged with the batch
    staged_rows: int = 0    # staging rows of those events
    expired: int = 0        # parts dropped with their groups past the TTL
    pending: int = 0        # groups waiting for their quiet period after the step
    held: int = 0           # groups in the store after the step (pending, or emitted and within the TTL)
    parses: int = 0         # event texts of parts parsed to recombine them (``lineage_event_parses_total``)


def groups_due(conn: Any, quiet_seconds: float, now: datetime | None = None) -> bool:
    """True when a `$self` group has been quiet for ``quiet_seconds`` (an idle batch must then be finished)."""
    row = conn.execute(f"SELECT EXISTS (SELECT 1 FROM lineage_self_groups g WHERE {_DUE_WHERE})",
                       {"now": now or datetime.now(UTC), "quiet": float(quiet_seconds)}).fetchone()
    return bool(row and row[0])


def recombine_in_store(conn: Any, batch_id: int, quiet_seconds: float, ttl_seconds: float,
                       now: datetime | None = None, handover: bool = True, copy_chunk: int = 1 << 20) -> SelfStep:
    """Absorb ``batch_id``'s staged `$self` parts and stage the recombined events of the due groups with it,
    in one transaction on ``conn`` (module doc). ``now``: the processing time (default: the clock).
    ``handover``: stage each recombined event's enriched-record hand-over (the stream publishes them)."""
    from sink.model import StoredEvent
    from sink.postgres import GraphStore

    from .decode import source_of
    from .publish import handover_record

    now = now or datetime.now(UTC)
    params = {"b": batch_id, "now": now, "quiet": float(quiet_seconds), "ttl": float(ttl_seconds)}
    step = SelfStep()
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(_LOCK)
        step.parts, step.new_parts = cur.execute(_ABSORB, params).fetchone()
        cur.execute("DELETE FROM stg_self_parts WHERE batch_id = %(b)s", params)
        # a batch already merged, or one that already carried an emission (a crash after this step, then its
        # finishing again): nothing more to emit with it; the due groups go with the next batch
        done = cur.execute("SELECT EXISTS (SELECT 1 FROM lineage_transactions WHERE batch_id = %(b)s) OR "
                           "EXISTS (SELECT 1 FROM lineage_self_groups WHERE emitted_batch = %(b)s)", params).fetchone()
        if not done[0]:
            rows, keys, sizes = [], [], []
            for key, revision, emitted, docs in cur.execute(_DUE, params).fetchall():
                parts = [_loads(d) for d in docs]
                rows.append(recombined_row(parts, int(revision) + 1, len(parts) - int(emitted or 0)))
                keys.append(key)
                sizes.append(len(parts))
            if rows:
                # merged from the parts' parsed events: staged without parsing the recombined text again
                events = [StoredEvent(event=r.pop("_event"), event_hash=r["event_hash"], source=source_of(r),
                                      revision=int(r["revision"]), text=r["event_json"]) for r in rows]
                step.parses = sum(sizes)   # merge_parts parsed each part's event text once
                hand = {r["event_hash"]: (r["key"], handover_record(r)) for r in rows} if handover else None
                _, step.staged_rows = GraphStore._derive_and_stage(conn, batch_id, RECOMBINED_PART, events, copy_chunk,
                                                                   {}, hand)
                cur.execute(_EMITTED, {**params, "keys": keys, "revisions": [r["revision"] for r in rows],
                                       "parts": sizes})
                step.emitted = len(rows)
        step.expired = cur.execute(_EXPIRE, params).rowcount
        step.pending, step.held = cur.execute(
            "SELECT count(*) FILTER (WHERE pending), count(*) FROM lineage_self_groups").fetchone()
    return step


# -- batch mode (`lineage load`) -------------------------------------------------------------------------


def self_group_key(row: Any) -> str | None:
    """:func:`group_key_column` of a decoded row as a dict: its `$self` group, None for a plain row."""
    if not (row.get("has_self") and row.get("status") == "ok" and row.get("run_id")):
        return None
    return "\x1f".join(str(v) for v in ("self", row.get("run_id"), row.get("event_type")) if v is not None)


def recombine_group(key: tuple[str], pdf: pd.DataFrame) -> pd.DataFrame:
    """Batch mode's per-group function (``applyInPandas``; ``lineage load --engine local`` calls it too).

    Every part of a group is in ``pdf`` at once, so a `$self` group is emitted once, as the stream
    emits it after its quiet period (:func:`_emit`, revision 1, ``parts`` = the parts merged); a
    plain group passes through with revision 0, as in the stream.
    """
    if not key[0].startswith("self\x1f"):
        out = pdf.drop(columns=[c for c in pdf.columns if c not in _COLUMNS])
        out["revision"] = 0
        out["parts"] = 1
        return out[_COLUMNS]
    parts: dict[str, dict[str, Any]] = {}
    for _, row in pdf.iterrows():
        parts.setdefault(row["event_hash"], _part_of(row))
    return _emit(list(parts.values()), 1, len(parts))


def recombine_self_parts_batch(df: Any) -> Any:
    """Batch mode's recombination (``RECOMBINED_SCHEMA`` rows, no state; the stream's is :func:`recombine_in_store`):
    :func:`plain_rows_batch` and :func:`self_parts_batch` of ``df``, in one DataFrame."""
    return plain_rows_batch(df).unionByName(self_parts_batch(df))


def _is_self() -> Any:
    from pyspark.sql import functions as F

    return F.coalesce(F.col("has_self") & (F.col("status") == "ok") & F.col("run_id").isNotNull()
                      & (F.col("run_id") != ""), F.lit(False))


def plain_rows_batch(df: Any) -> Any:
    """The rows of ``df`` that are no `$self` part, with ``revision = 0, parts = 1``."""
    from pyspark.sql import functions as F

    decoded = [c for c in _COLUMNS if c not in ("revision", "parts")]
    return df.filter(~_is_self()).select(*decoded, F.lit(0).cast("int").alias("revision"),
                                         F.lit(1).cast("int").alias("parts"))


def self_parts_batch(df: Any) -> Any:
    """The `$self` parts of ``df`` grouped by :func:`group_key_column` and merged by :func:`recombine_group`."""
    return (df.filter(_is_self()).withColumn("group_key", group_key_column())
              .groupBy("group_key").applyInPandas(recombine_group, RECOMBINED_SCHEMA))
