"""Pure derivation: normalised OpenLineage events -> rows of the graph's staging tables.

No I/O. :func:`derive_batch` turns a batch of :class:`sink.model.StoredEvent` into :class:`GraphRows`:
one list of tuples per staging table of ``sink/migrations/002_staging.sql``, in the column order of
:data:`STAGING_COLUMNS` (without ``batch_id, part``). Values are already in the form COPY text needs:
``str`` ids, ISO-8601 UTC times as the validator wrote them, JSON columns as JSON text, ``None``.

Rules (the store's contract; tests/test_derive.py pins them):

* **Datasets** ``dataset_id = node_uuid("dataset", namespace, name)``. Evo names
  ``<object_id>:<version>`` (object id a UUID) are the node ``<object_id>`` at version ``<version>``.
  ``node_type`` comes from the ``datasetType`` facet (TABLE->table, VIEW->view, STREAM/TOPIC->stream,
  FILE/DIRECTORY/OBJECT->file, MODEL->model, REPORT/DASHBOARD/CHART->report), else a guess from the
  naming (``kafka://`` -> stream; namespace ``file`` (OpenLineage's name for the local file system),
  ``s3://``/``gs://``/``file:``/``hdfs://``/``abfss://``/Evo and file suffixes -> file; else table; the
  canonical node of a ``TABLE`` symlink identifier -> table, or stream when its naming says stream) that is
  only used when no event ever gave a type.
* **Placeholders**: a dataset that is only *referenced* (an input without facets, a column-lineage
  source, a symlink target), a parent/root job or a parent/root run gets a row with
  ``is_placeholder = true``; any event that describes it (facets, an output, a DatasetEvent, its own
  run event) clears the flag for good.
* **Aliases** (``symlinks`` facet): the canonical node of a dataset with symlinks is its first
  (sorted by namespace, name) identifier of type ``TABLE``, else the dataset as the event names it.
  Every other name of the group gets a row with ``alias_of = canonical``; the event's facets, edges,
  versions and provenance attach to the canonical node. Resolution uses the event's own facet only, so
  an event's rows never depend on what arrived before it (replays and any arrival order give the same
  graph): an event that names an alias *without* the facet writes to the alias node, whose ``alias_of``
  joins it to the canonical one. Readers therefore take ``coalesce(alias_of, dataset_id)`` as the node
  identity (one hop: a canonical node is never itself an alias under this rule unless a later event says
  so). ``aliases`` (``dataset_id -> canonical id``) lets a caller add known aliases; the store passes none.
  Column lineage that names a source by an alias is written with the canonical node's id and qualified name.
* **Versions**: the ``datasetVersion`` facet, else the Evo suffix, else ``run:<runId>`` for outputs of
  COMPLETE events (and for inputs that carry quality facets), ``event:<eventTime>`` for DatasetEvents;
  no version row otherwise (a START announcing an output has not written a version yet).
* **Edges** for each (input, output) of a run/job event (``kind='dataset'``), plus ``reads``
  (dataset -> job) and ``writes`` (job -> dataset). The WIA edge type comes from the output's
  ``columnLineage`` facet, restricted to fields read from that input, both the 1-0 shape
  (``fields.<col>.transformationType``) and the 1-2 shape (``inputFields[].transformations[].subtype``
  or ``type``, plus the dataset-level ``dataset[]`` list): AGGREGATION or GROUP_BY -> aggregated_from,
  else JOIN -> joined_with, else FILTER -> filtered_from, else all IDENTITY and the columns read are a
  strict subset of the input's schema fields (schema facet in the same event) -> projected_from, else
  derived_from.
* **Column lineage** ``transformation_type``: AGGREGATION/GROUP_BY -> aggregated, JOIN -> joined,
  IDENTITY -> direct, anything else -> computed; with several, the first of aggregated, joined,
  computed, direct.
* **Provenance**: inputs of every run event -> ``accessed``/read; outputs of COMPLETE run events ->
  ``created`` when ``lifecycleStateChange`` is CREATE or OVERWRITE, ``deleted`` when DROP, else
  ``modified`` (operation ``transform`` when the event has inputs, else ``write``); DatasetEvents ->
  the same on the dataset with operation ``write``. Context from the custom dataset/job facet
  ``wiaContext`` ``{purpose, legal_basis, retention_period, sensitivity_level}``; sensitivity from tags
  when not given: restricted (RESTRICTED, PHI, PCI, SECRET) > confidential (PII, CONFIDENTIAL,
  SENSITIVE, GDPR) > public (PUBLIC) > internal (default).
* **Tracing properties** (paper §3.4.4): job facet ``tracing`` overlaid by run facet
  ``transformTracing``, keys ``deterministic, reversible, privacy_preserving, generative, terminal``
  (camelCase accepted); kept on the job, the edges and the provenance records.
* **Facets** are the producer's. One marked ``"_deleted": true`` (the spec's "delete this facet", for
  dataset and job facets) is not read, and it *clears* what that facet set on the node: dataset
  ``documentation`` -> description, ``ownership`` -> owner, ``tags`` -> tags, ``schema`` -> fields and
  fields_hash; job ``jobType`` -> job_type, ``documentation`` -> description, ``ownership`` -> owners. The
  cleared value (:data:`CLEARED_TEXT` / :data:`CLEARED_JSON`, not NULL, which means "not said") takes part
  in the facets-time ordering like any value: a deletion newer than the facet wins in any arrival order, an
  older one does not undo a newer facet. Per-version facts (statistics, quality, the version's schema), node
  type, symlinks and job versions are history and are not cleared. ``"_deleted": null``, as dbt writes it,
  is no deletion. Facet values bound for typed columns
  are checked, never trusted, so one odd value cannot fail a whole batch's COPY: ``nominalTime`` times
  are ISO-8601 (stored in UTC; a time without an offset, or a bare
  date, is read as UTC; anything else is left out), parent / root ``runId`` must be UUIDs
  (else the run link is left out; the parent job is kept), counts must fit a bigint (else left out).
* Text PostgreSQL cannot hold (NUL characters, lone surrogates) rejects the event
  (:class:`schemas.errors.EventValidationError` code ``validation.unstorable``): see :func:`check_storable`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas import textscan
from schemas.errors import EventValidationError
from schemas.identity import canonical_json
from schemas.validate import normalise_event_time

from . import ids
from .fastjson import HAVE_ORJSON
from .fastjson import OrjsonError as _OrjsonError
from .fastjson import dumps_compact as _dumps
from .fastjson import json_compact as _json_dumps
from .fastjson import orjson_key as _orjson_dumps
from .heap import frozen_heap
from .model import StoredEvent

__all__ = [
    "STAGING_COLUMNS", "GraphRows", "BatchDeriver", "DerivedEvent", "EventDeriver", "derive_batch", "derive_event",
    "check_storable", "dataset_refs",
    "edge_type_for", "column_transformation_type", "node_type_for", "sensitivity_from_tags",
    "resolve_dataset_name", "reduce_rows", "TERMINAL_STATES", "STATE_RANK",
]

STAGING_COLUMNS: dict[str, tuple[str, ...]] = {
    "stg_events": ("event_hash", "event_kind", "event_type", "event_time", "run_id", "job_namespace",
                   "job_name", "producer", "source", "payload", "revision"),
    "stg_namespaces": ("namespace", "first_seen"),
    "stg_datasets": ("dataset_id", "namespace", "name", "qualified_name", "node_type", "node_type_guess",
                     "description", "owner", "tags", "fields", "fields_hash", "alias_of", "is_placeholder",
                     "first_seen", "last_seen", "facets_time"),
    "stg_dataset_versions": ("version_id", "dataset_id", "version", "event_time", "run_id", "row_count",
                             "byte_count", "null_counts", "fields_hash", "fields", "assertions", "nominal_end"),
    "stg_jobs": ("job_id", "namespace", "name", "qualified_name", "job_type", "description", "owners",
                 "tracing", "is_placeholder", "first_seen", "last_seen", "facets_time"),
    "stg_job_versions": ("job_version_id", "job_id", "source_type", "source_url", "git_commit", "sql",
                         "first_seen", "last_seen"),
    "stg_runs": ("run_id", "job_id", "job_version_id", "state", "state_rank", "state_time", "started_at",
                 "ended_at", "nominal_start", "nominal_end", "error_message", "parent_run_id", "parent_job_id",
                 "root_run_id", "producer", "is_placeholder", "first_seen", "last_seen", "facets_time"),
    "stg_run_io": ("run_id", "dataset_id", "direction", "version_id", "event_time"),
    "stg_edges": ("edge_id", "source_node_id", "target_node_id", "kind", "edge_type", "job_id",
                  "job_version_id", "run_id", "transformation", "metadata", "tracing", "first_seen", "last_seen"),
    "stg_column_lineage": ("column_lineage_id", "source_dataset_id", "source_table", "source_column",
                           "target_dataset_id", "target_table", "target_column", "transformation_type",
                           "transformation_logic", "dependencies", "job_id", "first_seen", "last_seen"),
    "stg_provenance": ("provenance_id", "node_id", "event_hash", "event_type", "event_time", "agent",
                       "operation", "context", "tracing"),
}

TERMINAL_STATES = frozenset({"COMPLETE", "FAIL", "ABORT"})
#: Run state order: a state only replaces one of lower rank, or of equal rank and earlier event time.
STATE_RANK = {"OTHER": 0, "START": 1, "RUNNING": 2, "COMPLETE": 3, "FAIL": 3, "ABORT": 3}

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_BIGINT = (-(2**63), 2**63 - 1)
_EVO_NAME = re.compile(r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}):([^:/]+)$")
_TYPE_MAP = {
    "TABLE": "table", "VIEW": "view", "MATERIALIZED_VIEW": "view", "STREAM": "stream", "TOPIC": "stream",
    "FILE": "file", "DIRECTORY": "file", "OBJECT": "file", "MODEL": "model", "REPORT": "report",
    "DASHBOARD": "report", "CHART": "report",
}
_FILE_SCHEMES = ("s3://", "s3a://", "gs://", "file://", "file:", "hdfs://", "abfss://", "wasbs://",
                 "evogeoscienceobject://")
_FILE_SUFFIXES = (".csv", ".parquet", ".json", ".jsonl", ".avro", ".orc", ".txt", ".xlsx", ".dxf")
_CONTEXT_KEYS = (("purpose", "purpose"), ("legal_basis", "legalBasis"), ("retention_period", "retentionPeriod"),
                 ("sensitivity_level", "sensitivityLevel"))
_TRACING_KEYS = ("deterministic", "reversible", "privacy_preserving", "generative", "terminal")
_SENSITIVITY = (
    ("restricted", ("RESTRICTED", "PHI", "PCI", "SECRET")),
    ("confidential", ("PII", "CONFIDENTIAL", "SENSITIVE", "GDPR")),
    ("public", ("PUBLIC",)),
)


def _event_text(stored: StoredEvent) -> tuple[str, int]:
    """``lineage_events.payload``: the canonical JSON text of the event (the text ``event_hash`` hashes),
    taken from the caller when it has it, after :func:`check_storable`; and whether it names ``"_deleted"``
    (:data:`schemas.textscan.DELETED`, found in the same scan)."""
    text = stored.text if stored.text is not None else canonical_json(stored.event)
    flags = textscan.scan(text, _UNSTORABLE | textscan.DELETED)
    check_storable(stored.event, text, flags)
    return text, flags & textscan.DELETED


def _obj(parent: Any, key: str) -> dict[str, Any]:
    """``parent[key]`` when it is a JSON object, else ``{}``."""
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, dict) else {}


@dataclass
class GraphRows:
    """Rows for every staging table, plus the events that could not be stored (``(source, error)``)."""

    tables: dict[str, list[tuple[Any, ...]]] = field(
        default_factory=lambda: {name: [] for name in STAGING_COLUMNS})
    rejected: list[tuple[str, EventValidationError]] = field(default_factory=list)
    producers: set[str] = field(default_factory=set)

    def count(self) -> int:
        return sum(len(rows) for rows in self.tables.values())


# ----------------------------------------------------------------------------------------------- checks


def _find_unstorable(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        if "\x00" in value:
            return path
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _find_unstorable(key, f"{path}.<key>") or _find_unstorable(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_unstorable(item, f"{path}[{index}]")
            if found:
                return found
    return None


#: The flags of :func:`schemas.textscan.scan` under which a text may hold what PostgreSQL cannot store.
_UNSTORABLE = textscan.NUL | textscan.SURROGATE_ESCAPE | textscan.UNENCODABLE


def check_storable(event: Mapping[str, Any], payload: str | None = None, flags: int | None = None) -> None:
    """Raise ``EventValidationError(code="validation.unstorable")`` for text PostgreSQL cannot hold.

    PostgreSQL ``text``/``jsonb`` cannot store U+0000 nor lone surrogates. Such events are rejected,
    not altered: the stored payload must be the event whose hash is its identity. ``payload`` (the
    event's JSON text, if the caller has it) makes the common case a scan of the text: no NUL, no ``\\u0000``,
    no ``\\ud`` escape, no lone surrogate (:func:`schemas.textscan.scan`; ``flags``, the scan's flags of that text
    when the caller has them, saves the scan). Otherwise, the event is walked.
    """
    if payload is not None:
        if flags is None:
            flags = textscan.scan(payload, _UNSTORABLE)
        if not flags & _UNSTORABLE:
            return
    where = _find_unstorable(event, "$")
    if where:
        raise EventValidationError(
            f"{where} holds a NUL character or a lone surrogate, which PostgreSQL text cannot store",
            code="validation.unstorable", field=where)


# ------------------------------------------------------------------------------------------ small rules


def node_type_for(facets: Mapping[str, Any]) -> str | None:
    """WIA node type from the ``datasetType`` facet, or None when the facet is absent or unknown."""
    facet = facets.get("datasetType")
    if isinstance(facet, dict):
        value = str(facet.get("datasetType") or "").upper()
        return _TYPE_MAP.get(value)
    return None


def _guess_node_type(namespace: str, name: str) -> str:
    lowered = namespace.lower()
    if lowered.startswith("kafka://") or lowered.startswith("pulsar://") or lowered.startswith("kinesis://"):
        return "stream"
    if lowered == "file" or lowered.startswith(_FILE_SCHEMES) or name.lower().endswith(_FILE_SUFFIXES):
        return "file"
    return "table"


def resolve_dataset_name(namespace: str, name: str) -> tuple[str, str | None]:
    """``(node name, version from the name)``: Evo ``<uuid>:<version>`` -> ``(<uuid>, <version>)``."""
    match = _EVO_NAME.match(name)
    if match:
        return match.group(1).lower(), match.group(2)
    return name, None


def sensitivity_from_tags(tags: Iterable[str]) -> str:
    """restricted > confidential > public > internal, from tag keys/values (see the module doc)."""
    key = tuple(str(tag) for tag in tags)
    return _SENSITIVITY_CACHE.get_or_compute(key, lambda: _sensitivity(key))


class _BoundedCache:
    """A memo of pure results by content key, cleared when it holds ``limit`` entries (bounded memory)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[Any, Any] = {}

    def get_or_compute(self, key: Any, compute: Any) -> Any:
        found = self._items.get(key)
        if found is None:
            if len(self._items) >= self.limit:
                self._items.clear()
            found = self._items[key] = compute()
        return found


_SENSITIVITY_CACHE = _BoundedCache(4096)


def _sensitivity(tags: tuple[str, ...]) -> str:
    words: set[str] = set()
    for tag in tags:
        for part in re.split(r"[:=/ ]", str(tag).upper()):
            if part:
                words.add(part)
    for level, markers in _SENSITIVITY:
        if words.intersection(markers):
            return level
    return "internal"


def _tags(facets: Mapping[str, Any]) -> list[str]:
    facet = facets.get("tags")
    out: list[str] = []
    if isinstance(facet, dict) and isinstance(facet.get("tags"), list):
        for tag in facet["tags"]:
            if isinstance(tag, dict) and tag.get("key"):
                value = tag.get("value")
                out.append(str(tag["key"]) if value in (None, "", True, "true") else f"{tag['key']}:{value}")
            elif isinstance(tag, str):
                out.append(tag)
    return out


def _tracing(job_facets: Mapping[str, Any], run_facets: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for facet in (job_facets.get("tracing"), run_facets.get("transformTracing")):
        if isinstance(facet, dict):
            for key, value in facet.items():
                snake = re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()
                if snake in _TRACING_KEYS:
                    out[snake] = value
    return out


def _schema_fields(facets: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    facet = facets.get("schema")
    if not isinstance(facet, dict) or not isinstance(facet.get("fields"), list):
        return None
    out = []
    for item in facet["fields"]:
        if isinstance(item, dict) and item.get("name") is not None:
            out.append({"name": str(item["name"]), "type": item.get("type"),
                        "nullable": item.get("nullable"), "description": item.get("description")})
    return out


def _fields_hash(fields: list[dict[str, Any]] | None) -> str | None:
    if fields is None:
        return None
    return hashlib.sha1(_json_dumps([[f["name"], f["type"]] for f in fields]).encode("utf-8")).hexdigest()


#: Schema results by the JSON text of the facet's ``fields`` list: the same schema repeats across events
#: (the facet objects do not), and the fields' JSON text determines the result. Bounded: cleared when full.
_SCHEMA_CACHE = _BoundedCache(4096)


def _schema_of(facets: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None, str | None]:
    """(fields, fields JSON, fields hash) of the ``schema`` facet; memoised by content (orjson only)."""
    facet = facets.get("schema")

    def compute() -> tuple[list[dict[str, Any]] | None, str | None, str | None]:
        fields = _schema_fields(facets)
        return fields, _dumps(fields) if fields is not None else None, _fields_hash(fields)

    if HAVE_ORJSON and isinstance(facet, dict) and isinstance(facet.get("fields"), list):
        try:
            key = _orjson_dumps(facet["fields"])
        except _OrjsonError:
            return compute()
        return _SCHEMA_CACHE.get_or_compute(key, compute)
    return compute()


def _transform_tokens(transformations: Any) -> list[str]:
    tokens = []
    if isinstance(transformations, list):
        for item in transformations:
            if isinstance(item, dict):
                token = item.get("subtype") or item.get("type")
                if token:
                    tokens.append(str(token).upper())
    return tokens


_LINEAGE_CACHE = _BoundedCache(2048)


def _column_lineage(facets: Mapping[str, Any]) -> tuple[dict[str, list[tuple[str, str, str, list[str], str | None]]],
                                                        list[tuple[str, str, list[str]]]]:
    """Parse a ``columnLineage`` facet: ({target column: [(ns, name, field, tokens, description)]},
    [(ns, name, tokens)] dataset-level entries). Memoised by the facet's JSON text (a job's facet repeats
    run after run); callers only read the result."""
    facet = facets.get("columnLineage")
    if not HAVE_ORJSON or not isinstance(facet, dict):
        return _parse_column_lineage(facet)
    try:
        key = _orjson_dumps(facet)
    except _OrjsonError:
        return _parse_column_lineage(facet)
    return _LINEAGE_CACHE.get_or_compute(key, lambda: _parse_column_lineage(facet))


def _parse_column_lineage(facet: Any) -> tuple[dict[str, list[tuple[str, str, str, list[str], str | None]]],
                                               list[tuple[str, str, list[str]]]]:
    columns: dict[str, list[tuple[str, str, str, list[str], str | None]]] = {}
    dataset_level: list[tuple[str, str, list[str]]] = []
    if not isinstance(facet, dict):
        return columns, dataset_level
    fields = facet.get("fields")
    if isinstance(fields, dict):
        for target, spec in fields.items():
            if not isinstance(spec, dict):
                continue
            col_type = spec.get("transformationType")
            col_desc = spec.get("transformationDescription")
            entries = []
            for src in spec.get("inputFields") or []:
                if not isinstance(src, dict) or src.get("name") is None or src.get("field") is None:
                    continue
                tokens = _transform_tokens(src.get("transformations"))
                if not tokens and col_type:
                    tokens = [str(col_type).upper()]
                descs = [str(t["description"]) for t in src.get("transformations") or []
                         if isinstance(t, dict) and t.get("description")]
                entries.append((str(src.get("namespace") or ""), str(src["name"]), str(src["field"]), tokens,
                                "; ".join(descs) if descs else col_desc))
            columns[str(target)] = entries
    for src in facet.get("dataset") or []:
        if isinstance(src, dict) and src.get("name") is not None:
            dataset_level.append((str(src.get("namespace") or ""), str(src["name"]),
                                  _transform_tokens(src.get("transformations"))))
    return columns, dataset_level


def edge_type_for(tokens: Iterable[str], columns_read: set[str] | None, input_fields: list[str] | None) -> str:
    """WIA edge type from the transformation tokens of one (input, output) pair (module doc)."""
    seen = set(tokens)
    if not seen:
        return "derived_from"
    if seen & {"AGGREGATION", "GROUP_BY"}:
        return "aggregated_from"
    if "JOIN" in seen:
        return "joined_with"
    if "FILTER" in seen:
        return "filtered_from"
    if seen <= {"IDENTITY", "DIRECT"} and columns_read is not None and input_fields:
        if columns_read < set(input_fields):
            return "projected_from"
    return "derived_from"


def column_transformation_type(tokens: Iterable[str]) -> str:
    """WIA §2 transformation type of one source column (module doc)."""
    seen = set(tokens)
    if seen & {"AGGREGATION", "GROUP_BY"}:
        return "aggregated"
    if "JOIN" in seen:
        return "joined"
    if seen - {"IDENTITY", "DIRECT"} or not seen:
        return "computed"
    return "direct"


def _num(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if _BIGINT[0] <= value <= _BIGINT[1] else None
    if isinstance(value, float) and value == value and abs(value) < 9.2e18:
        return int(value)
    return None


def _all_facets(ds: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("facets", "inputFacets", "outputFacets"):
        part = ds.get(key)
        if isinstance(part, dict):
            out.update(part)
    return _live_facets(out)


#: Staged values of a column whose facet an event deleted (``"_deleted": true``): not NULL, which means "not
#: said" and leaves the stored value, but the column's empty value, which the merge takes like any newer
#: value (text columns ``''``, jsonb columns JSON ``null``; readers treat both as none).
CLEARED_TEXT = ""
CLEARED_JSON = "null"


def _deleted_facets(facets: Any) -> frozenset[str]:
    """Names of the facets marked ``"_deleted": true`` in one facets object (``"_deleted": null`` is none)."""
    if not isinstance(facets, dict):
        return frozenset()
    return frozenset(k for k, v in facets.items() if type(v) is dict and v.get("_deleted") is True)


def _deleted_dataset_facets(ds: Mapping[str, Any]) -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for key in ("facets", "inputFacets", "outputFacets"):
        out |= _deleted_facets(ds.get(key))
    return out


def _live_facets(facets: dict[str, Any]) -> dict[str, Any]:
    """``facets`` without those marked ``"_deleted": true`` (spec: "set to true to delete a facet")."""
    for value in facets.values():
        if type(value) is dict and value.get("_deleted") is True:
            return {k: v for k, v in facets.items() if not (type(v) is dict and v.get("_deleted") is True)}
    return facets


_NAIVE_NOMINAL = re.compile(r"\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?\Z", re.ASCII)


def _cleared(deleted: frozenset[str], columns: tuple[tuple[str, Any, str], ...]) -> list[Any]:
    """Each ``(facet, value, cleared)``'s value, or its cleared value when the event deleted that facet."""
    return [cleared if facet in deleted else value for facet, value, cleared in columns]


def _timestamp(value: Any) -> str | None:
    """A ``nominalTime`` facet's date-time as UTC text for a ``timestamptz`` column, or None when it is no
    ISO-8601 date or date-time: facet content is the producer's, and one bad value must not fail the COPY of
    a whole batch. A time with an offset is converted to UTC; one without (``2020-01-01T03:00:00``) or a bare
    date (``2020-01-01``, as the OpenLineage Python client's own tests send) is read as UTC (midnight for a
    date): a nominal time names a schedule slot, and schedulers (Airflow's logical dates) keep those in UTC.
    Unlike ``eventTime``, which is rejected without an offset, a nominal time is annotation, not identity."""
    if value is None:
        return None
    try:
        return normalise_event_time(value, "nominalTime")
    except EventValidationError:
        if type(value) is not str or _NAIVE_NOMINAL.match(value) is None:
            return None
    as_utc = value + ("T00:00:00Z" if len(value) == 10 else ":00Z" if len(value) == 16 else "Z")
    try:
        return normalise_event_time(as_utc, "nominalTime")
    except EventValidationError:
        return None


def _run_ref(value: Any) -> str | None:
    """A referenced runId (parent / root run facet) as a lower-case UUID, or None when it is not one."""
    return value.lower() if isinstance(value, str) and _UUID.match(value) else None


def _transformation_kind(sql: str | None, job_type_facet: Mapping[str, Any]) -> str:
    if sql:
        return "sql"
    integration = str(job_type_facet.get("integration") or "").upper()
    if integration in ("SPARK", "DATABRICKS", "GLUE", "EMR"):
        return "spark"
    if integration in ("DBT", "SNOWFLAKE", "BIGQUERY", "REDSHIFT", "TRINO", "POSTGRES", "SQL"):
        return "sql"
    if integration in ("AIRFLOW", "DAGSTER", "PYTHON", "PANDAS", "PREFECT", "FLYTE"):
        return "python"
    return "custom"


# ------------------------------------------------------------------------------------------- the event


def dataset_refs(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (namespace, name) an event references, for the store's alias look-up."""
    out = []
    datasets = list(event.get("inputs") or []) + list(event.get("outputs") or [])
    if isinstance(event.get("dataset"), dict):
        datasets.append(event["dataset"])
    for ds in datasets:
        if isinstance(ds, dict) and ds.get("name") is not None:
            ns, name = str(ds.get("namespace") or ""), str(ds["name"])
            out.append((ns, resolve_dataset_name(ns, name)[0]))
    return out


class _Deriver:
    """Builds the rows of one batch; caches ids so repeated names cost one UUIDv5."""

    def __init__(self, aliases: Mapping[str, str] | None) -> None:
        self.rows = GraphRows()
        self.t = self.rows.tables
        self.known_aliases = dict(aliases or {})
        self.aliases = dict(self.known_aliases)
        #: False when the event's text has no "_deleted": its facets need no scan for deletions
        self.may_delete = True
        self._ids: dict[tuple[str, str], str] = {}
        #: qualified names of the canonical nodes symlinks facets named (id -> "namespace/name")
        self.qualified: dict[str, str] = {}
        self._schemas: dict[int, tuple[Any, Any, Any, Any]] = {}

    def schema(self, facets: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None, str | None]:
        """(fields, JSON, hash) of a schema facet, computed once per facet object."""
        facet = facets.get("schema")
        if facet is None:
            return None, None, None
        key = id(facet)
        found = self._schemas.get(key)
        if found is None or found[0] is not facet:
            found = self._schemas[key] = (facet, *_schema_of(facets))
        return found[1], found[2], found[3]

    def ds_id(self, ns: str, name: str) -> str:
        key = (ns, name)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = ids.dataset_id(ns, name)
        return found

    def canonical(self, node: str) -> str:
        return self.aliases.get(node, node)

    # -- datasets -------------------------------------------------------------------------------------

    def dataset(self, ds: Mapping[str, Any], time: str, described: bool) -> tuple[str, str, str, str | None,
                                                                               dict[str, Any]]:
        """Rows for one dataset reference; returns (canonical id, ns, node name, name version, facets)."""
        ns = str(ds.get("namespace") or "")
        raw_name = str(ds.get("name"))
        name, name_version = resolve_dataset_name(ns, raw_name)
        facets = _all_facets(ds)
        deleted = _deleted_dataset_facets(ds) if self.may_delete else frozenset()
        node = self.ds_id(ns, name)
        symlinks = facets.get("symlinks")
        canonical_ns, canonical_name = ns, name
        guess = None
        if isinstance(symlinks, dict) and isinstance(symlinks.get("identifiers"), list):
            idents = sorted({(str(i.get("namespace") or ""), str(i.get("name")), str(i.get("type") or "").upper())
                             for i in symlinks["identifiers"] if isinstance(i, dict) and i.get("name") is not None})
            tables = [(n, m) for n, m, kind in idents if kind == "TABLE"]
            if tables:
                canonical_ns, canonical_name = tables[0]
                # the facet says TABLE: a warehouse table (namespace file:/..., hdfs://...) is no file,
                # while a catalog table over a topic (kafka://...) stays a stream
                guess = "stream" if _guess_node_type(canonical_ns, canonical_name) == "stream" else "table"
            canonical = self.ds_id(canonical_ns, canonical_name)
            self.qualified[canonical] = f"{canonical_ns}/{canonical_name}"
            for alias_ns, alias_name in {(ns, name)} | {(n, m) for n, m, _ in idents}:
                alias = self.ds_id(alias_ns, alias_name)
                if alias != canonical:
                    self.aliases[alias] = canonical
                    self._dataset_row(alias, alias_ns, alias_name, None, {}, time, False, canonical, True)
        canonical = self.canonical(node)
        if canonical != node and (canonical_ns, canonical_name) == (ns, name):
            # known alias from an earlier batch: the facets go to the canonical node, whose names we do
            # not know here; the merge never updates names of an existing row (they define its id).
            self._dataset_row(node, ns, name, None, {}, time, False, None, False)
            self._dataset_row(canonical, ns, name, name_version, facets, time, described, None, False,
                              deleted=deleted)
        else:
            self._dataset_row(canonical, canonical_ns, canonical_name, name_version, facets, time, described,
                              None, False, guess, deleted)
        return canonical, canonical_ns, canonical_name, name_version, facets

    def _dataset_row(self, node: str, ns: str, name: str, version: str | None, facets: Mapping[str, Any],
                     time: str, described: bool, alias_of: str | None, is_alias: bool,
                     guess: str | None = None, deleted: frozenset[str] = frozenset()) -> None:
        has_facets = bool(facets) and not is_alias
        fields, fields_json, fields_hash = self.schema(facets) if has_facets else (None, None, None)
        owners = (facets.get("ownership") or {}).get("owners") if has_facets else None
        owner = None
        if isinstance(owners, list) and owners and isinstance(owners[0], dict):
            owner = owners[0].get("name")
        doc = facets.get("documentation") if has_facets else None
        tags = _tags(facets) if has_facets else []
        description = doc.get("description") if isinstance(doc, dict) else None
        tags_json = _dumps(tags) if tags else None
        if deleted:
            description, owner, tags_json = _cleared(deleted, (
                ("documentation", description, CLEARED_TEXT), ("ownership", owner, CLEARED_TEXT),
                ("tags", tags_json, CLEARED_JSON)))
            if "schema" in deleted:
                fields_json, fields_hash = CLEARED_JSON, CLEARED_TEXT
        self.t["stg_datasets"].append((
            node, ns, name, f"{ns}/{name}",
            node_type_for(facets) if has_facets else None, guess or _guess_node_type(ns, name),
            description, owner, tags_json, fields_json, fields_hash, alias_of,
            not (described or has_facets or is_alias or deleted), time, time,
            time if (has_facets or is_alias or deleted) else None,
        ))
        self.t["stg_namespaces"].append((ns, time))

    # -- events ---------------------------------------------------------------------------------------

    def event(self, stored: StoredEvent) -> None:
        event = stored.event
        self.aliases = dict(self.known_aliases)     # the event's own symlinks only (module doc)
        payload, deleted = _event_text(stored)
        self.may_delete = bool(deleted)
        time = str(event.get("eventTime"))
        producer = event.get("producer")
        if producer:
            self.rows.producers.add(str(producer))
        run = event.get("run") if isinstance(event.get("run"), dict) else None
        job = event.get("job") if isinstance(event.get("job"), dict) else None
        if run is not None:
            kind = "run"
        elif isinstance(event.get("dataset"), dict):
            kind = "dataset"
        else:
            kind = "job"
        run_id = str(run.get("runId")).lower() if run else None
        self.t["stg_events"].append((
            stored.event_hash, kind, event.get("eventType") if kind == "run" else None, time, run_id,
            job.get("namespace") if job else None, job.get("name") if job else None, producer, stored.source,
            payload, stored.revision,
        ))
        if kind == "dataset":
            self.dataset_event(event, stored.event_hash, time)
        elif job is not None:
            self.job_event(event, stored.event_hash, time, job, run, run_id)

    def dataset_event(self, event: Mapping[str, Any], event_hash: str, time: str) -> None:
        node, ns, name, name_version, facets = self.dataset(event["dataset"], time, True)
        version = _explicit_version(facets, name_version) or f"event:{time}"
        self.version_row(node, version, time, None, facets, None)
        self.provenance(event_hash, node, "output", _write_event_type(facets), time,
                        _dumps({"type": "job", "id": None, "name": None, "owners": [],
                                "producer": event.get("producer")}),
                        _dumps({"type": "write", "method": "DatasetEvent", "parameters": {}}), facets, {}, "{}")

    def job_event(self, event: Mapping[str, Any], event_hash: str, time: str, job: Mapping[str, Any],
                  run: Mapping[str, Any] | None, run_id: str | None) -> None:
        job_ns, job_name = str(job.get("namespace") or ""), str(job.get("name"))
        job_node = ids.job_id(job_ns, job_name)
        job_facets = _live_facets(_obj(job, "facets"))
        deleted = _deleted_facets(job.get("facets")) if self.may_delete else frozenset()
        run_facets = _obj(run, "facets")
        tracing = _tracing(job_facets, run_facets)
        jt = _obj(job_facets, "jobType")
        owners = (job_facets.get("ownership") or {}).get("owners") if isinstance(job_facets.get("ownership"), dict) else None
        doc = job_facets.get("documentation")
        job_type = "/".join(str(jt.get(k) or "") for k in ("processingType", "integration", "jobType")) if jt else None
        description = doc.get("description") if isinstance(doc, dict) else None
        owners_json = _dumps(owners) if isinstance(owners, list) else None
        if deleted:
            job_type, description, owners_json = _cleared(deleted, (
                ("jobType", job_type, CLEARED_TEXT), ("documentation", description, CLEARED_TEXT),
                ("ownership", owners_json, CLEARED_JSON)))
        self.t["stg_jobs"].append((
            job_node, job_ns, job_name, f"{job_ns}/{job_name}", job_type, description, owners_json,
            _dumps(tracing) if tracing else None, False, time, time,
            time if (job_facets or tracing or deleted) else None,
        ))
        self.t["stg_namespaces"].append((job_ns, time))
        # transform revision
        scl = _obj(job_facets, "sourceCodeLocation")
        sql_facet = _obj(job_facets, "sql")
        sql = sql_facet.get("query") if isinstance(sql_facet.get("query"), str) else None
        source_type = scl.get("type")
        source_url = scl.get("url") or scl.get("repoUrl")
        source_version = scl.get("version") or scl.get("tag") or scl.get("branch")
        git_commit = scl.get("version") if str(source_type or "").lower() == "git" or scl.get("repoUrl") else None
        job_version = None
        if scl or sql:
            job_version = ids.job_version_id(job_node, source_type, source_url, source_version, sql)
            self.t["stg_job_versions"].append((job_version, job_node, source_type, source_url, git_commit, sql,
                                               time, time))
        elif "sourceCodeLocation" in deleted:
            # the event deleted the job's code (a code scanner's retraction of a vanished statement): a code-less
            # version, first seen now, becomes the current one, so the edges of earlier versions stop being
            # current (edge validity, sink/postgres.py); the job's history stays
            job_version = ids.job_version_id(job_node, None, None, None, None)
            self.t["stg_job_versions"].append((job_version, job_node, None, None, None, None, time, time))
        parent_run = parent_job = root_run = nominal_start = nominal_end = None
        if run is not None:
            parent_run, parent_job, root_run = self.parents(run_facets, time)
            state = str(event.get("eventType") or "OTHER").upper()
            nominal = _obj(run_facets, "nominalTime")
            nominal_start, nominal_end = _timestamp(nominal.get("nominalStartTime")), _timestamp(
                nominal.get("nominalEndTime"))
            err = _obj(run_facets, "errorMessage")
            self.t["stg_runs"].append((
                run_id, job_node, job_version, state, STATE_RANK.get(state, 0), time,
                time if state == "START" else None, time if state in TERMINAL_STATES else None,
                nominal_start, nominal_end, err.get("message"),
                parent_run, parent_job, root_run, event.get("producer"), False, time, time, time,
            ))
        version_nominal_end = nominal_end or nominal_start
        agent = {"type": "job", "id": job_node, "name": job_name, "namespace": job_ns,
                 "owners": owners if isinstance(owners, list) else [], "producer": event.get("producer")}
        params: dict[str, Any] = {}
        if sql:
            params["sql"] = sql
        if jt:
            params.update({k: jt[k] for k in ("processingType", "integration", "jobType") if jt.get(k)})
        if run_id:
            params["run_id"] = run_id
        method = str(jt.get("integration") or jt.get("jobType") or "openlineage") if jt else "openlineage"
        agent_json = _dumps(agent)
        tracing_json = _dumps(tracing) if tracing else "{}"
        read_json = _dumps({"type": "read", "method": method, "parameters": params})
        inputs = [d for d in event.get("inputs") or [] if isinstance(d, dict) and d.get("name") is not None]
        write_json = _dumps({"type": "transform" if inputs else "write", "method": method, "parameters": params})
        outputs = [d for d in event.get("outputs") or [] if isinstance(d, dict) and d.get("name") is not None]
        event_type = str(event.get("eventType") or "")
        resolved_in = []
        for ds in inputs:
            node, ns, name, name_version, facets = self.dataset(ds, time, False)
            version = _explicit_version(facets, name_version)
            if version is None and run_id and _has_quality(facets):
                version = f"run:{run_id}"
            vid = self.version_row(node, version, time, run_id, facets, version_nominal_end) if version else None
            if run_id:
                self.t["stg_run_io"].append((run_id, node, "input", vid, time))
                self.provenance(event_hash, node, "input", "accessed", time, agent_json, read_json, facets,
                                job_facets, tracing_json)
            self.t["stg_edges"].append((ids.job_edge_id("reads", node, job_node), node, job_node, "reads", "reads",
                                        job_node, job_version, run_id, "{}", "{}", tracing_json, time, time))
            resolved_in.append((node, ns, name, facets))
        transformation = {"type": _transformation_kind(sql, jt), "logic": sql, "version": source_version,
                          "git_commit": git_commit}
        for ds in outputs:
            node, ns, name, name_version, facets = self.dataset(ds, time, True)
            version = _explicit_version(facets, name_version) or (
                f"run:{run_id}" if run_id and event_type == "COMPLETE" else None)
            vid = self.version_row(node, version, time, run_id, facets, version_nominal_end) if version else None
            if run_id:
                self.t["stg_run_io"].append((run_id, node, "output", vid, time))
            if run_id and event_type == "COMPLETE":
                self.provenance(event_hash, node, "output", _write_event_type(facets), time, agent_json,
                                write_json, facets, job_facets, tracing_json)
            self.t["stg_edges"].append((ids.job_edge_id("writes", job_node, node), job_node, node, "writes", "writes",
                                        job_node, job_version, run_id, "{}", "{}", tracing_json, time, time))
            self.output_lineage(node, ns, name, facets, resolved_in, job_node, job_ns, job_name, job_version,
                                run_id, time, transformation, tracing)

    def parents(self, run_facets: Mapping[str, Any], time: str) -> tuple[str | None, str | None, str | None]:
        parent = run_facets.get("parent")
        if not isinstance(parent, dict):
            return None, None, None
        parent_run, parent_job = self._placeholder_run(parent, time)
        root = parent.get("root")
        root_run = None
        if isinstance(root, dict):
            root_run, _ = self._placeholder_run(root, time)
        return parent_run, parent_job, root_run or parent_run

    def _placeholder_run(self, ref: Mapping[str, Any], time: str) -> tuple[str | None, str | None]:
        run = _obj(ref, "run")
        job = _obj(ref, "job")
        run_id = _run_ref(run.get("runId"))
        job_node = None
        if job.get("name") is not None:
            ns, name = str(job.get("namespace") or ""), str(job["name"])
            job_node = ids.job_id(ns, name)
            self.t["stg_jobs"].append((job_node, ns, name, f"{ns}/{name}", None, None, None, None, True, time, time,
                                       None))
            self.t["stg_namespaces"].append((ns, time))
        if run_id:
            self.t["stg_runs"].append((run_id, job_node, None, None, None, None, None, None, None, None, None,
                                       None, None, None, None, True, time, time, None))
        return run_id, job_node

    def version_row(self, node: str, version: str, time: str, run_id: str | None, facets: Mapping[str, Any],
                    nominal_end: str | None) -> str:
        vid = ids.version_id(node, version)
        dqm = _obj(facets, "dataQualityMetrics")
        stats = {}
        for key in ("outputStatistics", "inputStatistics"):
            if isinstance(facets.get(key), dict):
                stats = facets[key]
                break
        row_count = _num(dqm.get("rowCount"))
        if row_count is None:
            row_count = _num(stats.get("rowCount"))
        byte_count = _num(dqm.get("bytes"))
        if byte_count is None:
            byte_count = _num(stats.get("size"))
        null_counts = {}
        metrics = dqm.get("columnMetrics")
        if isinstance(metrics, dict):
            for col, m in metrics.items():
                if isinstance(m, dict) and _num(m.get("nullCount")) is not None:
                    null_counts[str(col)] = _num(m.get("nullCount"))
        fields, fields_json, fields_hash = self.schema(facets)
        assertions_facet = facets.get("dataQualityAssertions")
        assertions = []
        if isinstance(assertions_facet, dict) and isinstance(assertions_facet.get("assertions"), list):
            assertions = [a for a in assertions_facet["assertions"] if isinstance(a, dict)]
        self.t["stg_dataset_versions"].append((
            vid, node, version, time, run_id, row_count, byte_count, _dumps(null_counts) if null_counts else None,
            fields_hash, fields_json,
            _dumps(assertions) if assertions else None, nominal_end,
        ))
        return vid

    def output_lineage(self, out_node: str, out_ns: str, out_name: str, facets: Mapping[str, Any],
                       inputs: list[tuple[str, str, str, dict[str, Any]]], job_node: str, job_ns: str,
                       job_name: str, job_version: str | None, run_id: str | None, time: str,
                       transformation: dict[str, Any], tracing: dict[str, Any]) -> None:
        columns, dataset_level = _column_lineage(facets)
        stats = _obj(facets, "outputStatistics")
        dqm = _obj(facets, "dataQualityMetrics")
        records = _num(stats.get("rowCount"))
        if records is None:
            records = _num(dqm.get("rowCount"))
        metadata = _dumps({"job_name": f"{job_ns}/{job_name}", "execution_time": time, "duration_ms": None,
                           "records_processed": records})
        trans_json = _dumps(transformation)
        tracing_json = _dumps(tracing) if tracing else "{}"
        # tokens and columns read per source node
        tokens_by_src: dict[str, list[str]] = {}
        cols_by_src: dict[str, set[str]] = {}
        out_table = f"{out_ns}/{out_name}"
        input_nodes = {i[0] for i in inputs}
        for target_col, entries in columns.items():
            deps = []
            per_src: dict[tuple[str, str], tuple[str, list[str], str | None, str]] = {}
            for ns, name, src_field, tokens, desc in entries:
                src_name = resolve_dataset_name(ns, name)[0]
                raw_node = self.ds_id(ns, src_name)
                src_node = self.canonical(raw_node)
                src_table = self.qualified.get(src_node, f"{ns}/{src_name}") if src_node != raw_node else (
                    f"{ns}/{src_name}")
                tokens_by_src.setdefault(src_node, []).extend(tokens)
                cols_by_src.setdefault(src_node, set()).add(src_field)
                deps.append({"source_table": src_table, "source_column": src_field, "expression": desc})
                per_src[(src_node, src_field)] = (src_table, tokens, desc, src_name)
                if src_node == raw_node and src_node != out_node and src_node not in input_nodes:
                    # a source only referenced here (an alias's canonical node has its row from dataset())
                    self._dataset_row(src_node, ns, src_name, None, {}, time, False, None, False)
            deps_json = _dumps(deps)
            for (src_node, src_field), (src_table, tokens, desc, _) in per_src.items():
                self.t["stg_column_lineage"].append((
                    ids.column_lineage_id(src_node, src_field, out_node, target_col), src_node, src_table, src_field,
                    out_node, out_table, target_col, column_transformation_type(tokens), desc, deps_json, job_node,
                    time, time,
                ))
        for ns, name, tokens in dataset_level:
            src_node = self.canonical(self.ds_id(ns, resolve_dataset_name(ns, name)[0]))
            tokens_by_src.setdefault(src_node, []).extend(tokens)
        for in_node, _ns, _name, in_facets in inputs:
            in_fields = _schema_fields(in_facets)
            edge_type = edge_type_for(tokens_by_src.get(in_node, ()), cols_by_src.get(in_node),
                                      [f["name"] for f in in_fields] if in_fields else None)
            self.t["stg_edges"].append((ids.data_edge_id(in_node, out_node, job_node), in_node, out_node, "dataset",
                                        edge_type, job_node, job_version, run_id, trans_json, metadata, tracing_json,
                                        time, time))

    def provenance(self, event_hash: str, node: str, role: str, event_type: str, time: str,
                   agent_json: str, operation_json: str, facets: Mapping[str, Any],
                   job_facets: Mapping[str, Any], tracing_json: str) -> None:
        context: dict[str, Any] = {"purpose": None, "legal_basis": None, "retention_period": None,
                                   "sensitivity_level": None}
        for source in (job_facets.get("wiaContext"), facets.get("wiaContext")):
            if isinstance(source, dict):
                for key, camel in _CONTEXT_KEYS:
                    value = source.get(key, source.get(camel))
                    if value is not None:
                        context[key] = value
        if context["sensitivity_level"] is None:
            tags = _tags(facets)
            for f in (facets.get("schema") or {}).get("fields") or [] if isinstance(facets.get("schema"), dict) else []:
                if isinstance(f, dict) and isinstance(f.get("tags"), list):
                    tags.extend(str(t.get("key") if isinstance(t, dict) else t) for t in f["tags"])
            context["sensitivity_level"] = sensitivity_from_tags(tags)
        self.t["stg_provenance"].append((
            ids.provenance_id(event_hash, node, role), node, event_hash, event_type, time, agent_json,
            operation_json, _dumps(context), tracing_json,
        ))


def _explicit_version(facets: Mapping[str, Any], name_version: str | None) -> str | None:
    facet = facets.get("version") or facets.get("datasetVersion")
    if isinstance(facet, dict) and facet.get("datasetVersion") not in (None, ""):
        return str(facet["datasetVersion"])
    return name_version


def _has_quality(facets: Mapping[str, Any]) -> bool:
    return any(k in facets for k in ("dataQualityMetrics", "dataQualityAssertions", "inputStatistics"))


def _write_event_type(facets: Mapping[str, Any]) -> str:
    facet = facets.get("lifecycleStateChange")
    change = str(facet.get("lifecycleStateChange") or "").upper() if isinstance(facet, dict) else ""
    if change in ("CREATE", "OVERWRITE"):
        return "created"
    if change == "DROP":
        return "deleted"
    return "modified"


# ------------------------------------------------------------------------------------------- reduction
#
# Rows of one batch are reduced per key in Python with the rules the merge SQL applies again across parts
# (sink/postgres.py): fewer rows to COPY and to aggregate. Rules: "first" non-null, "min", "max", "and",
# ("latest", order column): the non-null value of the row with the greatest order value (ties: greater
# text), ("row", order columns): the whole group of columns from the row with the greatest order tuple.

_RULES: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "stg_namespaces": (("namespace",), {"first_seen": "min"}),
    "stg_datasets": (("dataset_id",), {
        "namespace": "first", "name": "first", "qualified_name": "first", "node_type_guess": "first",
        **{c: ("latest", "facets_time") for c in ("node_type", "description", "owner", "tags", "fields",
                                                  "fields_hash", "alias_of")},
        "is_placeholder": "and", "first_seen": "min", "last_seen": "max", "facets_time": "max"}),
    "stg_dataset_versions": (("version_id",), {
        "dataset_id": "first", "version": "first", "event_time": "max",
        **{c: ("latest", "event_time") for c in ("run_id", "row_count", "byte_count", "null_counts", "fields_hash",
                                                 "fields", "assertions", "nominal_end")}}),
    "stg_jobs": (("job_id",), {
        "namespace": "first", "name": "first", "qualified_name": "first",
        **{c: ("latest", "facets_time") for c in ("job_type", "description", "owners", "tracing")},
        "is_placeholder": "and", "first_seen": "min", "last_seen": "max", "facets_time": "max"}),
    "stg_job_versions": (("job_version_id",), {
        **{c: "first" for c in ("job_id", "source_type", "source_url", "git_commit", "sql")},
        "first_seen": "min", "last_seen": "max"}),
    "stg_runs": (("run_id",), {
        **{c: ("row", ("state_rank", "state_time", "state")) for c in ("state", "state_rank", "state_time",
                                                                       "error_message", "ended_at")},
        "started_at": "min",
        **{c: ("latest", "facets_time") for c in ("job_id", "job_version_id", "nominal_start", "nominal_end",
                                                  "parent_run_id", "parent_job_id", "root_run_id", "producer")},
        "is_placeholder": "and", "first_seen": "min", "last_seen": "max", "facets_time": "max"}),
    "stg_run_io": (("run_id", "dataset_id", "direction"), {
        "version_id": ("latest", "event_time"), "event_time": "min"}),
    "stg_edges": (("edge_id",), {
        **{c: "first" for c in ("source_node_id", "target_node_id", "kind", "job_id")},
        **{c: ("row", ("last_seen", "run_id")) for c in ("edge_type", "job_version_id", "run_id", "transformation",
                                                         "metadata", "tracing")},
        "first_seen": "min", "last_seen": "max"}),
    "stg_column_lineage": (("column_lineage_id",), {
        **{c: "first" for c in ("source_dataset_id", "source_table", "source_column", "target_dataset_id",
                                "target_table", "target_column")},
        **{c: ("latest", "last_seen") for c in ("transformation_type", "transformation_logic", "dependencies",
                                                "job_id")},
        "first_seen": "min", "last_seen": "max"}),
}


def _merge_group(group: list[tuple[Any, ...]], plan: list[tuple[int, Any, Any]]) -> tuple[Any, ...]:
    out: list[Any] = list(group[0])
    winners: dict[Any, tuple[Any, ...]] = {}
    for index, rule, arg in plan:
        if rule == "first":
            out[index] = next((r[index] for r in group if r[index] is not None), None)
        elif rule == "min":
            values = [r[index] for r in group if r[index] is not None]
            out[index] = min(values) if values else None
        elif rule == "max":
            values = [r[index] for r in group if r[index] is not None]
            out[index] = max(values) if values else None
        elif rule == "and":
            out[index] = all(r[index] for r in group)
        elif rule == "latest":
            best = best_rank = None
            for r in group:
                value = r[index]
                if value is not None:
                    rank = (r[arg] or "", value if type(value) is str else str(value))
                    if best_rank is None or rank > best_rank:
                        best, best_rank = value, rank
            out[index] = best
        else:  # "row"
            winner = winners.get(arg)
            if winner is None:
                rows = [r for r in group if all(r[i] is not None for i in arg[:1])] or group
                winner = winners[arg] = max(rows, key=lambda r: tuple("" if r[i] is None else r[i] for i in arg))
            out[index] = winner[index]
    return tuple(out)


def reduce_rows(rows: GraphRows) -> GraphRows:
    """Reduce every table of ``rows`` to one row per key (rules above); returns ``rows``."""
    for table, (key, rules) in _RULES.items():
        data = rows.tables[table]
        if len(data) < 2:
            continue
        cols = STAGING_COLUMNS[table]
        key_idx = [cols.index(k) for k in key]
        plan: list[tuple[int, str, Any]] = []
        for col, rule in rules.items():
            if isinstance(rule, tuple):
                name, arg = rule
                arg = cols.index(arg) if isinstance(arg, str) else tuple(cols.index(a) for a in arg)
                plan.append((cols.index(col), name, arg))
            else:
                plan.append((cols.index(col), rule, None))
        groups: dict[Any, Any] = {}
        single = key_idx[0] if len(key_idx) == 1 else None
        for row in data:
            k = row[single] if single is not None else tuple(row[i] for i in key_idx)
            found = groups.get(k)
            if found is None:
                groups[k] = row
            elif type(found) is list:
                found.append(row)
            else:
                groups[k] = [found, row]
        rows.tables[table] = [g if type(g) is tuple else _merge_group(g, plan) for g in groups.values()]
    return rows


def derive_event(stored: StoredEvent, aliases: Mapping[str, str] | None = None) -> GraphRows:
    """Rows of one event (raises :class:`EventValidationError` for an unstorable event)."""
    deriver = _Deriver(aliases)
    deriver.event(stored)
    return deriver.rows


#: Where ``stg_events`` rows hold the event's text: :class:`EventDeriver` leaves it out of the rows it gives (the
#: decoded row carries the text already) and :class:`BatchDeriver` puts it back.
_PAYLOAD = STAGING_COLUMNS["stg_events"].index("payload")
_TABLES = tuple(STAGING_COLUMNS)


def _with_payload(row: tuple[Any, ...], payload: str | None) -> tuple[Any, ...]:
    """``stg_events`` ``row`` with ``payload`` in its payload column."""
    return row[:_PAYLOAD] + (payload,) + row[_PAYLOAD + 1:]


@dataclass(frozen=True)
class DerivedEvent:
    """An event whose rows were derived where it was parsed (the stream's decode, :class:`EventDeriver`): what the
    staging pass needs of it without parsing its text again. ``tables``: :meth:`EventDeriver.rows`' value."""

    event_hash: str
    source: str
    text: str
    revision: int
    tables: tuple[list[tuple[Any, ...]], ...]


class EventDeriver:
    """Rows of one event at a time, for the decoder, which has the event parsed (issue 18, item 1: each event is
    parsed once, at decode; the staging pass gets these rows instead of the text to parse again).

    One per reader task: the dataset ids it computes are memoised across its events, as :class:`BatchDeriver`
    memoises them across a partition's. The rows equal :func:`derive_event`'s of the event parsed from its
    canonical text, but for the key order inside JSON values and the order of rows the event's objects make
    (the validated event has the producer's key order, the canonical text sorted keys); the store reads those
    values as ``jsonb`` and reduces rows per key, so the graph is the same (tests/test_parsed_on_read.py)."""

    def __init__(self) -> None:
        self._deriver = _Deriver(None)

    def rows(self, stored: StoredEvent) -> tuple[list[tuple[Any, ...]], ...]:
        """The rows of ``stored`` per staging table (:data:`STAGING_COLUMNS` order), its ``stg_events`` row without
        the payload (None there). Raises what :func:`derive_event` raises for an event the store cannot take."""
        deriver = self._deriver
        deriver.rows = GraphRows()
        deriver.t = deriver.rows.tables
        deriver._schemas.clear()   # keyed by id(): another event's facets are other objects
        deriver.event(stored)
        tables = deriver.t
        events = tables["stg_events"]
        events[0] = _with_payload(events[0], None)
        return tuple(tables[name] for name in _TABLES)


class BatchDeriver:
    """Incremental :func:`derive_batch`: :meth:`add` events in chunks, then :meth:`finish`.

    Lets the store COPY the ``stg_events`` rows of the events derived so far (:meth:`events_since`) while
    it derives the next chunk: the server parses the jsonb payloads on its own core meanwhile. The rows are
    exactly those of :func:`derive_batch` over all the events added, in the same order.
    """

    def __init__(self, aliases: Mapping[str, str] | None = None) -> None:
        self._deriver = _Deriver(aliases)
        self.rows = self._deriver.rows

    def add(self, events: Iterable[StoredEvent | DerivedEvent],
            on_event: Callable[[Any, dict[str, list[tuple[Any, ...]]]], None] | None = None) -> None:
        """Derive ``events``; an event that cannot be stored is skipped and listed in ``rows.rejected``
        (its partial rows are rolled back). ``on_event(stored, rows)``, if given, is called after each
        stored event with that event's own rows per table (before any reduction): the rows
        :func:`derive_event` gives for it, in this batch's alias context. A :class:`DerivedEvent` (derived at
        decode) adds its rows as they are."""
        deriver = self._deriver
        tables = deriver.t
        rejected = deriver.rows.rejected
        # The cyclic GC would walk the caller's (large) heap of event dicts again and again while the rows,
        # which hold no cycles, are built: kept to the objects this call makes (sink/heap.py).
        with frozen_heap():
            self._add(events, deriver, tables, rejected, on_event)

    @staticmethod
    def _add(events: Iterable[StoredEvent | DerivedEvent], deriver: _Deriver, tables: dict[str, list[tuple[Any, ...]]],
             rejected: list[tuple[str, EventValidationError]],
             on_event: Callable[[StoredEvent, dict[str, list[tuple[Any, ...]]]], None] | None = None) -> None:
        for stored in events:
            if type(stored) is DerivedEvent:   # derived at decode: its rows, the text back in its event row
                own = dict(zip(_TABLES, stored.tables, strict=True))
                own["stg_events"] = [_with_payload(own["stg_events"][0], stored.text)]
                for name, rows in own.items():
                    tables[name] += rows
                if on_event is not None:
                    on_event(stored, own)
                continue
            marks = [(rows, len(rows)) for rows in tables.values()]
            try:
                deriver.event(stored)
            except EventValidationError as exc:
                for rows, mark in marks:
                    del rows[mark:]
                rejected.append((stored.source, exc))
            except (TypeError, AttributeError, KeyError, ValueError) as exc:
                for rows, mark in marks:
                    del rows[mark:]
                rejected.append((stored.source, EventValidationError(
                    f"event not in the normalised shape the store expects: {exc!r}", code="validation.shape")))
            else:
                if on_event is not None:
                    on_event(stored, {name: rows[mark:] for name, (rows, mark) in zip(tables, marks, strict=True)})

    def events_since(self, start: int) -> list[tuple[Any, ...]]:
        """The ``stg_events`` rows from index ``start`` on (final: never changed by :meth:`finish`)."""
        return self.rows.tables["stg_events"][start:]

    def finish(self, reduce: bool = True) -> GraphRows:
        """All rows, reduced per key unless ``reduce`` is false."""
        if not reduce:
            return self.rows
        with frozen_heap():
            return reduce_rows(self.rows)


def derive_batch(events: Iterable[StoredEvent], aliases: Mapping[str, str] | None = None,
                 reduce: bool = True) -> GraphRows:
    """Rows of a batch, reduced per key unless ``reduce`` is false. An event that cannot be stored is
    skipped and listed in ``rejected``; the others are unaffected (its partial rows are rolled back)."""
    deriver = BatchDeriver(aliases)
    deriver.add(events)
    return deriver.finish(reduce)
