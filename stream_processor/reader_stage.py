"""Staging in the reader task: the plain events a ``lineage_kafka`` reader decodes go to PostgreSQL from there.

The decoding reader (kafka_source.py, "Decoding in the reader") holds each event parsed. With the ``stageDsn``
option it also derives the graph rows of every accepted plain event (not a `$self` part, not a rejected message)
and COPYs them into the staging tables itself (``GraphStore.stage_partition``, the staging pass's own call),
under a **stage key** of its range; the row it hands to Spark keeps its narrow columns and the small packed ones
(source, Kafka key and timestamp, encoding) but not the event's text, and names the key (``stage_key``). So the
text no longer travels reader -> JVM -> the dedupe's shuffle -> JVM -> the staging pass's Python worker, and is
not parsed a second time there (docs/PERFORMANCE.md, session 24).

The stage key (:func:`stage_key`): a hash of the range ``(topic, partition, start, end)`` and the time the driver
planned it, in ``[2**62, 2**63)``, apart from every batch id (stream batch ids are ``epoch * 2**40 + n``,
``lineage load``'s negative). A retried task (the same planned range) replaces its own rows, part by part; a batch
planned anew (after a restart) stages under new keys, so it never touches the rows of a batch a crashed run
marked and has not merged (recovered first, from the keys its mark recorded).

Which keys a batch merges: the staging pass (writer.py) collects the keys of the rows that survived the dedupe,
and the mark (``lineage_staged_batches.stage_keys``, migration 016) records them with how many such rows there
were (``keyed_events``, the batch's ``events_in`` for them). The merge reads ``batch_id = ANY(keys)``. A duplicate
the dedupe dropped was staged too, and is merged with its key when another row of that range survived: harmless,
as every staged row is determined by its event's content and each merge is idempotent per key (an upsert changes
a row only when a value differs; ``lineage_events`` keeps one row per hash). The rows of a key no batch took (every
row of its range a duplicate; a batch read and never marked) stay until :data:`SWEEP_SQL` removes them.

Off (``LINEAGE_READER_STAGING=false``), with Spark's native ``kafka`` source, and for ``lineage load``, the
staging pass stages everything as before.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

__all__ = ["STAGE_KEY_BASE", "SWEEP_AFTER", "SWEEP_SQL", "ReaderStager", "stage_key"]

log = logging.getLogger(__name__)

#: Stage keys are ``STAGE_KEY_BASE + (hash mod STAGE_KEY_BASE)``: 2**62 .. 2**63 - 1.
STAGE_KEY_BASE = 1 << 62
#: How old a key no batch took must be before it is swept: far longer than any batch's way from its read to its mark
#: (a PostgreSQL outage holds a batch there at most ``postgres_retry_max_seconds``), so no batch in flight, of this
#: processor or of another one writing to the same database, loses rows it is about to mark.
SWEEP_AFTER = "1 hour"
_TABLES = ("stg_events", "stg_namespaces", "stg_datasets", "stg_dataset_versions", "stg_jobs", "stg_job_versions",
           "stg_runs", "stg_run_io", "stg_edges", "stg_column_lineage", "stg_provenance", "stg_event_keys")
#: Rows of stage keys no batch took (module doc), older than :data:`SWEEP_AFTER`, and their keys; returns the keys.
SWEEP_SQL = (
    f"WITH gone AS MATERIALIZED (SELECT k.stage_key FROM stg_reader_keys k "
    f"WHERE k.staged_at < now() - interval '{SWEEP_AFTER}' AND NOT EXISTS "
    f"(SELECT 1 FROM lineage_staged_batches b WHERE k.stage_key = ANY(b.stage_keys))), "
    + ", ".join(f"d{i} AS (DELETE FROM {t} WHERE batch_id IN (SELECT stage_key FROM gone))"
                for i, t in enumerate(_TABLES))
    + " DELETE FROM stg_reader_keys WHERE stage_key IN (SELECT stage_key FROM gone) RETURNING stage_key")


def stage_key(topic: str, partition: int, start: int, end: int, planned_us: int | None) -> int:
    """The stage key of a planned range (module doc): the same for a retried task, new for a batch planned anew."""
    digest = hashlib.blake2b(f"{topic}\0{partition}\0{start}\0{end}\0{planned_us}".encode(), digest_size=8).digest()
    return STAGE_KEY_BASE + int.from_bytes(digest, "big") % STAGE_KEY_BASE


class ReaderStager:
    """The events of one reader task's range, staged under its key a chunk at a time (:meth:`flush`).

    :meth:`take` is called with each decoded row (``_event``: the parsed event decode put there) before the row
    is packed: an accepted plain event is kept for staging, and its row loses its text and gains the key."""

    def __init__(self, dsn: str, key: int, handover: bool) -> None:
        self.dsn = dsn
        self.key = key
        self.handover: dict[str, tuple[bytes | None, str]] | None = {} if handover else None
        self.events: list[Any] = []
        self.part = 0
        self.staged = 0

    def take(self, row: dict[str, Any]) -> bool:
        """Keep ``row``'s event for staging when the reader stages it (module doc); True if it does."""
        event = row.pop("_event", None)
        if event is None or row["status"] != "ok" or row.get("has_self") or row.get("revision"):
            return False
        from sink.model import StoredEvent

        from .publish import handover_record

        self.events.append(StoredEvent(
            event=event, event_hash=row["event_hash"],
            source=f"{row['source_topic']}[{row['source_partition']}]@{row['source_offset']}", text=row["event_json"]))
        if self.handover is not None:
            self.handover[row["event_hash"]] = (row.get("key"), handover_record(row))
        row["event_json"] = None
        row["stage_key"] = self.key
        return True

    def flush(self) -> int:
        """Stage the events taken since the last call as the next part of the key (one transaction, replacing
        that part's rows); returns the rows staged."""
        if not self.events:
            return 0
        from sink.heap import frozen_heap
        from sink.postgres import GraphStore

        with frozen_heap():
            staged = GraphStore.stage_partition(self.dsn, self.key, self.part, self.events, self.handover,
                                                stage_key=True)
            self.events.clear()    # freed while the collector is still paused (writer.py's staging pass)
            if self.handover is not None:
                self.handover.clear()
        self.part += 1
        self.staged += staged
        return staged
