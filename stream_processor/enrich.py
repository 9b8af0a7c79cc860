"""The enriched records of a committed batch, made on the driver from what PostgreSQL holds.

After a batch's merge, its new events are in ``lineage_events`` (``first_batch_id = batch_id``, the event
text in ``payload``) and their quality (WIA-DATA-008 §4) and provenance (§3) annotations in the graph. The
staging pass left, per staged event, a row in ``stg_event_keys`` (migrations 006, 010): the event's
annotation keys, the Kafka key of its message and the enriched record without the event text. So
:func:`enrich_batch` needs no second Spark pass over the batch (as it did up to session 9: a persisted
batch, a Spark job, a Python worker per partition): two statements and a producer.

1. the batch's handed-over rows, each with its event's payload when the event is new in the graph with this
   batch (``lineage_events.first_batch_id``; the finisher hands over the texts its Parquet export read, else
   one statement reads them): a duplicate of an event an earlier batch stored gets no second record, and a
   re-run of a committed batch finds the same set;
2. their provenance and quality documents: those of the rows the batch changed from the Parquet export's rows
   (:func:`sink.annotations_lookup.found_in_rows`; the finisher reads them once for the files, the graph topic
   and here), the others (rows an earlier batch changed last) with one statement
   (:data:`sink.annotations_lookup.LOOKUP_SQL`, only for the keys not found; up to session 12 it fetched all
   of them, ~0.19 s of the server per 5,000-event batch, the most expensive statement of the finishing);
3. the records are published to ``openlineage.events.enriched`` and delivered (flushed), then the batch's
   handed-over rows are removed (its slot of ``stg_event_keys`` TRUNCATEd when it holds nothing else, migration 017).

An event the store could not derive (``keys`` NULL) carries its event in the handed-over record and is
published with null annotations (``enriched_unannotated``), as before. Counts, as the executor pass had
them: ``enriched``, ``enriched_chunked``, ``enriched_duplicates``, ``enriched_unannotated``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["HANDOVER_SQL", "EVENT_TEXTS_SQL", "enrich_batch"]

#: The handed-over rows of a batch, in no order; an event hash staged by more than one part is kept once, from its
#: lowest part, by :func:`_handed_over`. ``DISTINCT ON (event_hash) ... ORDER BY event_hash, part`` did that in the
#: server with a sort of the whole hand-over (keys and record, ~0.7 kB a row), which went to disk at the default
#: ``work_mem`` (4 MB): 33 MB of temporary files per 10 batches of 5,000 demo events (pg_stat_statements).
HANDOVER_SQL = "SELECT event_hash, part, keys, record_key, record FROM stg_event_keys WHERE batch_id = %(b)s"

#: The texts of the events new in the graph with a batch (index lineage_events_batch), when the caller has not
#: read them already (the Parquet export's rows).
EVENT_TEXTS_SQL = "SELECT event_hash, payload FROM lineage_events WHERE first_batch_id = %(b)s"


def _handed_over(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``(event_hash, keys, record_key, record)`` of :data:`HANDOVER_SQL`'s ``rows``, one per event hash: the row of its
    lowest part, in the order the rows came."""
    kept: dict[str, tuple[Any, ...]] = {}
    for row in rows:
        seen = kept.get(row[0])
        if seen is None or row[1] < seen[1]:
            kept[row[0]] = row
    return [(h, keys, key, record) for h, _part, keys, key, record in kept.values()]


def enrich_batch(conn: Any, batch_id: int, publisher: Any, topic: str,
                 bump: Callable[[str, int], None], payloads: Mapping[str, str] | None = None,
                 known: Any = None) -> int:
    """Publish the enriched records of committed batch ``batch_id`` (module doc) with ``publisher`` (a
    :class:`~stream_processor.publish.RecordPublisher`) on ``conn`` (autocommit psycopg connection);
    returns the records published. The handed-over rows are deleted only after delivery: a failure
    leaves them for the re-run (records are at-least-once, with stable keys). ``payloads``: the texts of
    the events new in the graph with this batch, by hash, when the caller has read them (the Parquet export's
    ``lineage_events`` rows: ``first_batch_id = batch_id``, the same set), so they are not read twice. ``known``:
    the annotation documents the caller has (:func:`sink.annotations_lookup.found_in_rows` of the export's
    provenance and quality rows); the look-up reads only the others (rows an earlier batch changed last)."""
    from datetime import UTC, datetime

    from sink.annotations_lookup import annotations, dumps, keys_from_text, lookup
    from sink.fastjson import loads
    from sink.postgres import HANDOVER_TABLE, clear_slot, slotted

    from .avro_records import encode_enriched

    keyed, bare = [], []   # (keys, Kafka key, record, event text) of new events; (Kafka key, record) of unstored
    if payloads is None:
        payloads = dict(conn.execute(EVENT_TEXTS_SQL, {"b": int(batch_id)}).fetchall())
    handed = _handed_over(conn.execute(slotted(HANDOVER_SQL, batch_id), {"b": int(batch_id)}).fetchall())
    for event_hash, keys, key, record in handed:
        payload = payloads.get(event_hash)
        if keys is None:
            bare.append((key, record))
        elif payload is None:
            bump("enriched_duplicates", 1)   # an earlier batch stored this event: no second record
        else:
            keyed.append((keys_from_text(event_hash, keys), key, record, payload))
    found = lookup(conn, batch_id, (), (p for k, *_ in keyed for p in k.provenance_ids),
                   (o.quality_id for k, *_ in keyed for o in k.outputs), known)
    processed_at = datetime.now(UTC)
    published = 0

    def publish(key: Any, record: dict[str, Any], quality: str | None, provenance: str | None) -> None:
        nonlocal published
        record["quality"], record["provenance"], record["processed_at"] = quality, provenance, processed_at
        if publisher.publish(topic, bytes(key) if key is not None else None,
                             encode_enriched(record)) > 1:
            bump("enriched_chunked", 1)
        published += 1

    for keys, key, record, payload in keyed:
        doc = loads(record)
        doc["event"] = payload
        quality, provenance = annotations(keys, found)
        publish(key, doc, dumps(quality), dumps(provenance))
    for key, record in bare:
        bump("enriched_unannotated", 1)
        publish(key, loads(record), None, None)
    if published:
        publisher.flush()
        bump("enriched", published)
    # the batch's slot of the hand-over table TRUNCATEd when it holds nothing else and the batch is large enough
    # (TRUNCATE_MIN_ROWS), else its rows DELETEd (migration 017)
    with conn.transaction(), conn.cursor() as cur:
        clear_slot(cur, int(batch_id), (HANDOVER_TABLE,), len(handed))
    return published
