"""Read-only look-up of the committed annotations of a batch's events, for the enriched topic.

The stream processor publishes one enriched record per new event *after* the batch's merge, with the
event's quality (WIA-DATA-008 §4) and provenance (§3) annotations as the graph holds them
(stream_processor/enrich.py, on the driver, for a whole batch). This module is the PostgreSQL side of that
step:

1. :func:`event_keys` (pure) derives an event with :func:`sink.derive.derive_event` - the very rows the
   store staged for it - and keeps the keys of its annotations: the ``provenance_id`` of each dataset it
   touched, and the ``version_id`` / ``quality_id = node_uuid("quality", version_id)`` of each *output*
   dataset version (run events: their ``lineage_run_io`` output slots; DatasetEvents: the dataset's
   version; JobEvents: the versions of the datasets they write);
2. :func:`lookup` fetches, in ONE statement (three primary-key probes joined by ``UNION ALL``), which of
   the hashes are new in the batch (``lineage_events.first_batch_id = batch_id``: a duplicate of an event
   stored by an earlier batch gets no second record, and a re-run of a committed batch finds the same
   set), the provenance rows and the quality rows;
3. :func:`annotations` (pure) assembles the two JSON arrays of one event.

An enriched record's ``quality`` is a JSON array with one WIA §4 object per output dataset version that
has a quality annotation, plus ``dataset`` (``namespace/name``), ``version`` and ``version_id``;
``provenance`` a JSON array with one WIA §3 object per dataset the event touched, plus ``dataset`` and
``tracing``. Both are ``[]`` (not null) when the graph holds none for the event. The quality is the one
committed when the record is published: it compares the version with the previous version of the
dataset, whichever batch that arrived in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import ids
from .derive import STAGING_COLUMNS, derive_event
from .fastjson import OrjsonError, dumps_sorted, loads, orjson_key
from .model import StoredEvent

__all__ = ["EventKeys", "OutputVersion", "FoundAnnotations", "event_keys", "keys_from_rows", "keys_to_text",
           "keys_from_text", "lookup", "lookup_partition", "found_in_rows", "annotations", "dumps", "LOOKUP_SQL"]

_V = {c: i for i, c in enumerate(STAGING_COLUMNS["stg_dataset_versions"])}
_IO = {c: i for i, c in enumerate(STAGING_COLUMNS["stg_run_io"])}
_E = {c: i for i, c in enumerate(STAGING_COLUMNS["stg_edges"])}
_D = {c: i for i, c in enumerate(STAGING_COLUMNS["stg_datasets"])}
_P = {c: i for i, c in enumerate(STAGING_COLUMNS["stg_provenance"])}

_UTC = "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'"

#: New hashes of the batch, provenance rows and quality rows of the given keys: one round trip.
LOOKUP_SQL = f"""
    SELECT 'e', event_hash, NULL::jsonb FROM lineage_events
     WHERE event_hash = ANY(%(hashes)s::text[]) AND first_batch_id = %(b)s
    UNION ALL
    SELECT 'p', provenance_id::text, jsonb_build_object(
               'provenance_id', provenance_id, 'node_id', node_id, 'event_type', event_type,
               'event_time', to_char(event_time AT TIME ZONE 'UTC', {_UTC}), 'agent', agent,
               'operation', operation, 'context', context, 'tracing', tracing)
      FROM lineage_provenance WHERE provenance_id = ANY(%(prov)s::uuid[])
    UNION ALL
    SELECT 'q', quality_id::text, jsonb_build_object(
               'quality_id', quality_id, 'node_id', node_id,
               'measured_at', to_char(measured_at AT TIME ZONE 'UTC', {_UTC}), 'metrics', metrics,
               'validations', validations, 'anomalies', anomalies)
      FROM lineage_quality WHERE quality_id = ANY(%(quality)s::uuid[])"""


_LOOKUP_AGG_SQL = f"""SELECT coalesce(json_agg(json_build_array(kind, key, doc)), '[]'::json)
                      FROM ({LOOKUP_SQL}) AS found (kind, key, doc)"""


@dataclass(frozen=True)
class OutputVersion:
    version_id: str
    quality_id: str
    node_id: str
    version: str


@dataclass
class EventKeys:
    """The annotation keys of one event (:func:`event_keys`)."""

    event_hash: str
    provenance_ids: list[str] = field(default_factory=list)
    outputs: list[OutputVersion] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)      # node id -> "namespace/name"


@dataclass
class FoundAnnotations:
    """What :func:`lookup` found: new hashes of the batch, provenance and quality objects by id."""

    new_hashes: set[str] = field(default_factory=set)
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    quality: dict[str, dict[str, Any]] = field(default_factory=dict)


def event_keys(stored: StoredEvent) -> EventKeys:
    """Keys of ``stored``'s annotations (module doc); an unstorable event raises ``EventValidationError``."""
    return keys_from_rows(stored.event_hash, derive_event(stored).tables)


#: Column positions :func:`keys_from_rows` reads (looked up once, not per row).
_D_ID, _D_QUALIFIED = _D["dataset_id"], _D["qualified_name"]
_P_ID = _P["provenance_id"]
_V_ID, _V_DATASET, _V_VERSION = _V["version_id"], _V["dataset_id"], _V["version"]
_IO_DIRECTION, _IO_VERSION = _IO["direction"], _IO["version_id"]
_E_KIND, _E_TARGET = _E["kind"], _E["target_node_id"]


def keys_from_rows(event_hash: str, rows: Mapping[str, Sequence[tuple[Any, ...]]]) -> EventKeys:
    """Keys of one event's annotations from its own derived rows per staging table (unreduced, as
    :func:`sink.derive.derive_event` gives them or ``BatchDeriver.add(on_event=...)`` hands them over)."""
    keys = EventKeys(event_hash)
    keys.names = {r[_D_ID]: r[_D_QUALIFIED] for r in rows["stg_datasets"]}
    keys.provenance_ids = list(dict.fromkeys([r[_P_ID] for r in rows["stg_provenance"]]))
    versions = {r[_V_ID]: r for r in rows["stg_dataset_versions"]}
    kind = rows["stg_events"][0][1] if rows["stg_events"] else None
    if kind == "run":
        wanted = [r[_IO_VERSION] for r in rows["stg_run_io"] if r[_IO_DIRECTION] == "output" and r[_IO_VERSION]]
    elif kind == "dataset":
        wanted = list(versions)
    else:
        written = {r[_E_TARGET] for r in rows["stg_edges"] if r[_E_KIND] == "writes"}
        wanted = [vid for vid, r in versions.items() if r[_V_DATASET] in written]
    outputs = keys.outputs
    for vid in dict.fromkeys(wanted):
        row = versions.get(vid)
        if row is not None:
            outputs.append(OutputVersion(vid, ids.quality_id(vid), row[_V_DATASET], row[_V_VERSION]))
    return keys


_keys_json = json.JSONEncoder(separators=(",", ":")).encode


def keys_to_text(keys: EventKeys) -> str:
    """Compact JSON of ``keys`` (the ``stg_event_keys.keys`` column, migration 006), non-ASCII as ``\\u``
    escapes.

    Written by orjson when its text is printable ASCII: for a document of strings that is the json module's
    text byte for byte (both escape ``"``, ``\\`` and control characters alike; checked for the code points
    up to U+3000, the surrogates and more in tests/test_derive_golden.py), and ~10x faster; text with
    non-ASCII or DEL, which the json module escapes and orjson does not, is written by the json module
    (demo events: 5.5 -> 2.4-3.3 us per event, median of 7).
    """
    doc = {"p": keys.provenance_ids, "o": [[o.version_id, o.quality_id, o.node_id, o.version] for o in keys.outputs],
           "n": keys.names}
    if orjson_key is not None:
        try:
            raw = orjson_key(doc)
        except OrjsonError:
            pass
        else:
            if raw.isascii() and b"\x7f" not in raw:
                return raw.decode("ascii")
    return _keys_json(doc)


def keys_from_text(event_hash: str, text: str) -> EventKeys:
    """The inverse of :func:`keys_to_text`."""
    doc = loads(text)
    return EventKeys(event_hash, list(doc["p"]), [OutputVersion(*o) for o in doc["o"]], dict(doc["n"]))


def _parsed(texts: list[str | None]) -> list[Any]:
    """The JSON documents of ``texts`` (None stays None), each distinct text parsed once, all in one call as one JSON
    array (a parse per document was ~2x the time). Equal texts give the same object: the documents are only read
    (:func:`annotations` copies the top level). A batch's provenance repeats its job's agent in every record (110
    distinct agent texts of 11,872 records of a demo batch; 2 distinct contexts, 1 tracing, 3 validations):
    ``found_in_rows`` of such a batch (~11,800 provenance and ~6,200 quality rows) took ~158 ms before, ~50 now
    (medians of 8 alternating runs in one process, 2026-11-26)."""
    distinct = list(dict.fromkeys(t for t in texts if t is not None))
    parsed = dict(zip(distinct, loads("[" + ",".join(distinct) + "]"), strict=True))
    return [None if t is None else parsed[t] for t in texts]


def found_in_rows(provenance: Any = None, quality: Any = None) -> FoundAnnotations:
    """The provenance and quality documents :func:`lookup` would return, made from rows of ``lineage_provenance``
    and ``lineage_quality`` as Arrow tables (the columns of ``sink.parquet.TABLES``: the Parquet export's rows of
    the batch, read once for the files, the graph topic and here): times in :data:`LOOKUP_SQL`'s format, jsonb
    columns parsed. Each document equals the statement's (tests/test_enriched_annotations.py)."""
    import pyarrow.compute as pc

    from .arrowtime import utc_micros_text

    found = FoundAnnotations()
    for table, into, plain, time_column, docs in (
            (provenance, found.provenance, ("provenance_id", "node_id", "event_type"), "event_time",
             ("agent", "operation", "context", "tracing")),
            (quality, found.quality, ("quality_id", "node_id"), "measured_at", ("metrics", "validations", "anomalies"))):
        if table is None or table.num_rows == 0:
            continue
        times = pc.binary_join_element_wise(utc_micros_text(table.column(time_column), "T"), "Z", "")   # as to_char's
        columns = [table.column(name).to_pylist() for name in plain] + [times.to_pylist()]
        columns += [_parsed(table.column(name).to_pylist()) for name in docs]
        names = (*plain, time_column, *docs)
        for values in zip(*columns, strict=True):
            into[values[0]] = dict(zip(names, values, strict=True))
    return found


def lookup(conn: Any, batch_id: int, hashes: Iterable[str], provenance_ids: Iterable[str],
           quality_ids: Iterable[str], known: FoundAnnotations | None = None) -> FoundAnnotations:
    """One statement on ``conn`` (a psycopg connection): see :data:`LOOKUP_SQL`. The jsonb documents are read
    with :func:`sink.fastjson.loads` (orjson where it gives the json module's value): with psycopg's default,
    ``json.loads``, reading them was ~12 % of the enrich pass (cProfile, ``LINEAGE_PROFILE_DIR``). ``known``:
    documents the caller has (:func:`found_in_rows`); only the others are looked up, and none when none is
    missing."""
    from psycopg.types.json import set_json_loads

    found = known if known is not None else FoundAnnotations()
    params = {"b": int(batch_id), "hashes": list(dict.fromkeys(hashes)),
              "prov": [p for p in dict.fromkeys(provenance_ids) if p not in found.provenance],
              "quality": [q for q in dict.fromkeys(quality_ids) if q not in found.quality]}
    if not (params["hashes"] or params["prov"] or params["quality"]):
        return found
    set_json_loads(loads, conn)
    # one JSON array for all the rows: psycopg calls the loader once, not once per document (the per-row
    # fetch with a jsonb column was 30 of the driver's 538 py-spy samples in lineage bench --events 20000);
    # the documents come out of it parsed
    (rows,) = conn.execute(_LOOKUP_AGG_SQL, params).fetchone()
    for kind, key, doc in rows:
        if kind == "e":
            found.new_hashes.add(key)
        elif kind == "p":
            found.provenance[key] = doc
        else:
            found.quality[key] = doc
    return found


def annotations(keys: EventKeys, found: FoundAnnotations) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(quality, provenance)`` arrays of one event (module doc), in the event's dataset order."""
    quality = []
    for out in keys.outputs:
        doc = found.quality.get(out.quality_id)
        if doc is not None:
            quality.append({**doc, "dataset": keys.names.get(out.node_id), "version": out.version,
                            "version_id": out.version_id})
    provenance = []
    for pid in keys.provenance_ids:
        doc = found.provenance.get(pid)
        if doc is not None:
            provenance.append({**doc, "dataset": keys.names.get(str(doc.get("node_id")))})
    return quality, provenance


def lookup_partition(conn: Any, batch_id: int, keys: Sequence[EventKeys]) -> FoundAnnotations:
    """:func:`lookup` of every key of ``keys`` (one partition's events)."""
    return lookup(conn, batch_id, (k.event_hash for k in keys), (p for k in keys for p in k.provenance_ids),
                  (o.quality_id for k in keys for o in k.outputs))


def dumps(value: Sequence[Mapping[str, Any]]) -> str:
    """Compact JSON text of an annotation array (keys sorted, ``str()`` of datetimes)."""
    return dumps_sorted(value)
