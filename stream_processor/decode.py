"""Decode and validate Kafka records on the executors, Arrow batch in, Arrow batch out.

:func:`decode_batches` is the body of a ``mapInArrow`` over the source's columns. Each input
message yields one output row per event it carries (an Evo lineage document carries several):

- ``status = "ok"``: the normalised event (``event_json`` = ``canonical_json``), its
  ``event_hash``, run / job coordinates, ``event_time`` (UTC) and ``has_self`` (the document had
  a ``$self`` output, resolved against ``subject``).
- ``status = "rejected"``: ``error_class``, ``error_code``, ``error_message`` (naming the field),
  ``error_field`` and the original ``raw_value`` / ``raw_headers`` for the dead-letter topic. A standard facet
  that breaks its schema is dropped from its event (still ``ok``) and adds a rejected row of its own
  (``validation.facet``, ``error_field`` = the JSON path of the violation).
  ``event_hash`` is ``"rejected:" + topic/partition/offset/index`` so a rejected row is unique.

Nothing raises out of here: an unexpected exception becomes a rejected row with
``error_code = "internal"``, so one bad record never stops the stream.

The stream carries a narrow form of the row (``decode_batches(..., packed=True)``, :data:`PACKED_SCHEMA`):
the columns the dedupe and the writer's routing read (:data:`NARROW_COLUMNS`) and every other column
packed into one binary column ``packed`` (:func:`pack_row`, :func:`unpack_row`). Why: the `$self`
operator of sessions up to 10 (``applyInPandasWithState``) converted every group's chunk of rows to pandas
and back column by column, so its cost grew with the column count - py-spy put 25.7 of the Python workers'
~77 busy CPU-s of ``lineage bench --events 20000`` there. The dedupe's shuffle still moves fewer columns.
The writer's passes take rows through :func:`full_rows`, which accepts either form (``lineage load``'s
batch mode keeps the wide :data:`DECODED_SCHEMA`).
"""

from __future__ import annotations

import functools
import json
import marshal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.errors import EventValidationError

__all__ = ["DECODED_SCHEMA", "PACKED_SCHEMA", "PLANNED_AT_COLUMN", "READER_PACKED_SCHEMA", "NARROW_COLUMNS", "PACKED_COLUMNS",
           "PACKED_EXTRA", "PACKED_FIELDS", "DecodedColumns", "source_of", "decode_batches",
           "decode_record", "arrow_decoded_schema", "arrow_packed_schema", "pack_row", "unpack_row", "full_rows"]

DECODED_SCHEMA = (
    "status string, event_hash string, event_json string, kind string, event_type string, run_id string, "
    "event_time timestamp, job_namespace string, job_name string, has_self boolean, subject string, "
    "encoding string, source_topic string, source_partition int, source_offset long, kafka_timestamp timestamp, "
    "key binary, error_class string, error_code string, error_message string, error_field string, "
    "raw_value binary, raw_headers array<struct<key:string,value:binary>>"
)


#: The decoded columns the stream keeps as columns through the dedupe (the rest is packed).
NARROW_COLUMNS = ("status", "event_hash", "event_time", "has_self", "run_id", "event_type")
#: The other decoded columns, in the order :func:`pack_row` writes them.
PACKED_COLUMNS = tuple(c.split(" ", 1)[0] for c in DECODED_SCHEMA.split(", ") if c.split(" ", 1)[0] not in NARROW_COLUMNS)
#: What a packed value holds beyond the wide columns, for the staging pass only (never a Spark column): ``parses``,
#: the parses decode made (:func:`decode_record`), and ``graph``, the event's graph rows derived at decode
#: (:meth:`sink.derive.EventDeriver.rows`, ``marshal``-ed on their own; None for a `$self` part, a rejected row, or
#: an event decode could not derive, which the staging pass then parses and derives as before).
PACKED_EXTRA = ("parses", "graph")
PACKED_FIELDS = PACKED_COLUMNS + PACKED_EXTRA
PACKED_SCHEMA = ("status string, event_hash string, event_time timestamp, has_self boolean, run_id string, "
                 "event_type string, packed binary")
#: The column ``lineage_kafka``'s decoding reader adds to :data:`PACKED_SCHEMA`: when the micro-batch's ranges were
#: planned (the driver's clock, one value per batch), the ``now`` of the dedupe's clamp (dedupe.py), which drops it.
PLANNED_AT_COLUMN = "planned_at"
READER_PACKED_SCHEMA = PACKED_SCHEMA + f", {PLANNED_AT_COLUMN} timestamp"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_KAFKA_TS = PACKED_COLUMNS.index("kafka_timestamp")


def _lz4() -> tuple[Any, Any]:
    """pyarrow's raw LZ4 block codec (compress, decompress), looked up once per process."""
    global _LZ4
    if _LZ4 is None:
        import pyarrow as pa

        codec = pa.Codec("lz4_raw")   # one codec object: pa.compress(..., codec=name) makes one per call (~0.5 us)
        _LZ4 = (functools.partial(codec.compress, asbytes=True), functools.partial(codec.decompress, asbytes=True))
    return _LZ4


_LZ4: tuple[Any, Any] | None = None


def pack_row(row: dict[str, Any]) -> bytes:
    """:data:`PACKED_COLUMNS` of ``row`` as one value: ``marshal`` (str, int, bytes, None, lists, dicts; ~1 us a row,
    and reading it back builds data only, never runs code, unlike pickle), compressed with LZ4 (raw block, 4-byte
    little-endian length first). ``kafka_timestamp`` is written as microseconds since the epoch (a datetime is not
    marshalable). The format is the running interpreter's: a packed value never outlives its micro-batch (the state
    stores keep only the dedupe keys and the `$self` parts as JSON), so no other Python version ever reads it.

    Why LZ4: the value (the event's text, ~4.4 kB for a demo event) crosses the JVM twice per event (reader ->
    JVM -> dedupe's shuffle -> JVM -> the staging pass's Python worker); a demo event's value shrinks ~3x for
    ~3 us to compress and ~2.5 us to decompress."""
    values = [row.get(name) for name in PACKED_FIELDS]
    ts = values[_KAFKA_TS]
    if isinstance(ts, datetime):
        values[_KAFKA_TS] = ((ts if ts.tzinfo else ts.replace(tzinfo=UTC)) - _EPOCH) // timedelta(microseconds=1)
    raw = marshal.dumps(tuple(values), 4)
    return len(raw).to_bytes(4, "little") + _lz4()[0](raw)


def unpack_row(packed: bytes) -> dict[str, Any]:
    """The :data:`PACKED_COLUMNS` of :func:`pack_row`'s value, ``kafka_timestamp`` a UTC datetime again."""
    view = memoryview(packed)
    values = list(marshal.loads(_lz4()[1](view[4:], decompressed_size=int.from_bytes(view[:4], "little"))))
    ts = values[_KAFKA_TS]
    if ts is not None:
        values[_KAFKA_TS] = _EPOCH + timedelta(microseconds=ts)
    return dict(zip(PACKED_FIELDS, values, strict=True))


def _column_values(column: Any) -> list[Any]:
    """``column.to_pylist()``; a UTC ``timestamp[us]`` column's datetimes made from its microseconds (pyarrow's own
    conversion looks the zone up for every value: ~2.5 of the ~2.9 µs a staged row's narrow columns took,
    2026-11-29). The values are equal, in UTC (``datetime.UTC`` rather than ``ZoneInfo("UTC")``)."""
    from sink.arrowtime import is_utc_micros

    if is_utc_micros(column.type):
        import pyarrow as pa

        return [None if us is None else _EPOCH + timedelta(microseconds=us)
                for us in column.cast(pa.int64()).to_pylist()]
    return column.to_pylist()


def full_rows(batch: Any) -> list[dict[str, Any]]:
    """The rows of an Arrow batch as dicts with every :data:`DECODED_SCHEMA` column (plus whatever else the
    batch has, e.g. ``revision``), whether the batch is packed (``packed`` column) or wide; the values
    ``batch.to_pylist()`` gives, in its column order."""
    names = batch.schema.names
    rows = [dict(zip(names, values, strict=True))
            for values in zip(*[_column_values(batch.column(i)) for i in range(batch.num_columns)], strict=True)]
    if "packed" in batch.schema.names:
        for row in rows:
            packed = row.pop("packed")
            if packed is not None:
                row.update(unpack_row(packed))
    return rows


def arrow_decoded_schema() -> Any:
    import pyarrow as pa

    s, ts = pa.string(), pa.timestamp("us", tz="UTC")
    return pa.schema([
        ("status", s), ("event_hash", s), ("event_json", s), ("kind", s), ("event_type", s), ("run_id", s),
        ("event_time", ts), ("job_namespace", s), ("job_name", s), ("has_self", pa.bool_()), ("subject", s),
        ("encoding", s), ("source_topic", s), ("source_partition", pa.int32()), ("source_offset", pa.int64()),
        ("kafka_timestamp", ts), ("key", pa.binary()), ("error_class", s), ("error_code", s),
        ("error_message", s), ("error_field", s), ("raw_value", pa.binary()),
        ("raw_headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])


#: Event times Spark's Arrow/pandas path can carry (pandas nanosecond timestamps: 1677-09-21 .. 2262-04-11).
_MIN_EVENT_TIME = datetime(1678, 1, 1, tzinfo=UTC)
_MAX_EVENT_TIME = datetime(2262, 1, 1, tzinfo=UTC)


def _event_time(value: Any) -> datetime:
    """The validated (UTC, ISO-8601) eventTime as a datetime; a time outside the range the stateful
    operators can represent is rejected (to the DLQ, naming the field) rather than crashing the query."""
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if not _MIN_EVENT_TIME <= parsed < _MAX_EVENT_TIME:
        raise EventValidationError(
            f"eventTime {value} is outside the supported range {_MIN_EVENT_TIME:%Y-%m-%d} .. {_MAX_EVENT_TIME:%Y-%m-%d}",
            code="validation.event_time", field="eventTime")
    return parsed


def _has_self(document: Any) -> bool:
    outputs = document.get("outputs") if isinstance(document, dict) else None
    return isinstance(outputs, list) and any(isinstance(o, dict) and o.get("name") == "$self" for o in outputs)


def _kind(event: dict[str, Any]) -> str:
    if "run" in event:
        return "run"
    return "dataset" if "dataset" in event else "job"


def _rejected(exc: BaseException, index: int) -> dict[str, Any]:
    code = getattr(exc, "code", None) or ("decode.too_deep" if isinstance(exc, RecursionError) else "internal")
    message = str(getattr(exc, "message", None) or exc) or type(exc).__name__
    return {"status": "rejected", "error_class": type(exc).__name__, "error_code": str(code),
            "error_message": message[:2000], "error_field": getattr(exc, "field", None), "_index": index}


def _facet_rejections(violations: Any, index: int, encoding: str | None) -> list[dict[str, Any]]:
    """One rejected row per standard facet dropped from event ``index`` (code ``validation.facet``, field = the
    JSON path of the violation): the event itself is accepted, the DLQ gets the original bytes and the reason."""
    return [{"status": "rejected", "error_class": "FacetValidationError", "error_code": "validation.facet",
             "error_message": v.message[:2000], "error_field": v.path, "_index": f"{index}.facet{k}",
             "encoding": encoding} for k, v in enumerate(violations)]


_REGISTRIES: dict[str, Any] = {}


def _registry(url: str) -> Any:
    """One Schema Registry client per executor process and URL (``schemas.registry``)."""
    if url not in _REGISTRIES:
        from schemas.registry import ConfluentSchemaRegistry

        _REGISTRIES[url] = ConfluentSchemaRegistry(url)
    return _REGISTRIES[url]


def decode_record(value: bytes | None, headers: list[tuple[str, bytes | None]] | None,
                  registry_url: str | None = None, keep_event: bool = False) -> list[dict[str, Any]]:
    """The output rows (without source columns) for one Kafka message value and its headers. Each accepted row has
    ``parses``: the parses of the message's bytes it took (1 on the first event of a message, 0 on the other events
    one document made: an Evo document is parsed once for all its events). ``keep_event``: each accepted row also
    has ``_event``, the validated event (:class:`DecodedColumns` derives its graph rows from it)."""
    from producers.chunking import chunk_rejection
    from schemas.codec import decode_message
    from schemas.identity import canonical_json_scanned
    from schemas.validate import validate_openlineage_event
    from sink.derive import _UNSTORABLE, check_storable

    chunk_error = chunk_rejection(headers)  # a chunk group the source gave up on, or an unassembled chunk
    if chunk_error is not None:
        return [_rejected(chunk_error, 0)]
    try:
        if registry_url:
            messages = decode_message(value, headers, registry=_registry(registry_url))
        else:
            messages = decode_message(value, headers)
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - every failure is a DLQ row
        return [_rejected(exc, 0)]
    rows = []
    parses = 1   # decode_message parsed the message's bytes once, whatever number of events it held
    for i, msg in enumerate(messages):
        try:
            has_self = _has_self(msg.document)
            event, facet_violations = validate_openlineage_event(
                msg.document, msg.subject, msg.self_link, event_index=msg.event_index, event_count=msg.event_count)
            text, digest, flags = canonical_json_scanned(event, _UNSTORABLE)
            check_storable(event, text, flags)  # NUL / lone surrogates: to the DLQ here, not lost at the sink
            event_time = _event_time(event.get("eventTime"))
            job = event.get("job") or {}
            run = event.get("run") or {}
            rows.append({
                "status": "ok", "event_hash": digest, "event_json": text, "kind": _kind(event),
                "event_type": event.get("eventType"), "run_id": run.get("runId"),
                "event_time": event_time, "job_namespace": job.get("namespace"),
                "job_name": job.get("name"), "has_self": has_self,
                "subject": json.dumps(msg.subject, sort_keys=True) if msg.subject else None,
                "encoding": msg.encoding, "parses": parses,
            })
            parses = 0
            if keep_event:
                rows[-1]["_event"] = event
            rows += _facet_rejections(facet_violations, i, msg.encoding)  # dropped facets: to the DLQ too
        except (Exception, RecursionError) as exc:  # noqa: BLE001
            row = _rejected(exc, i)
            row["encoding"] = getattr(msg, "encoding", None)
            rows.append(row)
    return rows


def source_of(row: dict[str, Any]) -> str:
    """``topic[partition]@offset`` of a decoded row: its event's ``source`` in the store."""
    return f"{row['source_topic']}[{row['source_partition']}]@{row['source_offset']}"


def arrow_packed_schema() -> Any:
    import pyarrow as pa

    wide = arrow_decoded_schema()
    return pa.schema([wide.field(name) for name in NARROW_COLUMNS] + [("packed", pa.binary())])


class DecodedColumns:
    """The output columns of decode, filled one Kafka message at a time: the one place a message becomes rows.

    Both paths call it: :func:`decode_batches` (the ``mapInArrow`` over the native ``kafka`` source's
    columns) and the ``lineage_kafka`` source's reader tasks with ``decode=packed``
    (:func:`stream_processor.kafka_source.read_range`), which decode the confluent-kafka messages they read
    without handing them to the JVM as Kafka columns first.
    """

    def __init__(self, registry_url: str | None = None, packed: bool = False, derive: bool = False) -> None:
        self.registry_url = registry_url
        self.packed = packed
        self.derive = packed and derive
        #: packed rows carry their event's graph rows, derived here from the event decode parsed (module doc)
        self._deriver: Any = None
        self._stored: Any = None
        self.schema = arrow_packed_schema() if packed else arrow_decoded_schema()
        self._names = NARROW_COLUMNS if packed else tuple(self.schema.names)
        self.cols: dict[str, list[Any]] = {n: [] for n in self.schema.names}
        #: messages added since the last :meth:`take` (an Evo document makes several rows of one message)
        self.messages = 0

    def add(self, value: bytes | None, headers: list[tuple[str, bytes | None]], topic: str, partition: int,
            offset: int, kafka_timestamp: Any, key: bytes | None) -> None:
        """The rows of one message. ``kafka_timestamp``: a datetime, microseconds since the epoch (UTC), or None.
        A rejected row keeps the message's coordinates, raw bytes and headers for the dead-letter topic."""
        self.messages += 1
        cols, names = self.cols, self._names
        for row in decode_record(value, headers, self.registry_url, keep_event=self.derive):
            event = row.pop("_event", None)
            rejected = row["status"] != "ok"
            if rejected:
                row["event_hash"] = f"rejected:{topic}:{partition}:{offset}:{row.pop('_index', 0)}"
            row.update(source_topic=topic, source_partition=partition, source_offset=offset,
                       kafka_timestamp=kafka_timestamp, key=key, raw_value=value if rejected else None,
                       raw_headers=[{"key": k, "value": v} for k, v in headers] if rejected else None,
                       has_self=row.get("has_self", False))
            for name in names:
                cols[name].append(row.get(name))
            if self.packed:
                # not a `$self` part (recombine.is_self_part's test, without importing recombine's pandas here)
                if event is not None and not (row["has_self"] and row.get("run_id")):
                    graph = self._derived(event, row)
                    # marshalled on its own: the staging pass keeps a partition's events and reads them back a
                    # chunk at a time, so the rows stay bytes until then (~4.1 kB for a demo event against ~9.7 kB
                    # as Python tuples; docs/PERFORMANCE.md, session 40)
                    row["graph"] = None if graph is None else marshal.dumps(graph, 4)
                cols["packed"].append(pack_row(row))

    def _derived(self, event: dict[str, Any], row: dict[str, Any]) -> Any:
        """The graph rows of an accepted event (:meth:`sink.derive.EventDeriver.rows`), or None when the deriver
        refuses it: the staging pass derives that one from its text again and reports why."""
        if self._deriver is None:   # imported once per task, not per event
            from sink.derive import EventDeriver
            from sink.model import StoredEvent

            self._deriver, self._stored = EventDeriver(), StoredEvent
        stored = self._stored(event=event, event_hash=row["event_hash"], text=row["event_json"], source=source_of(row))
        try:
            return self._deriver.rows(stored)
        except (EventValidationError, TypeError, AttributeError, KeyError, ValueError):
            return None

    def take(self) -> Any:
        """The rows added since the last call as one record batch, or None when there are none."""
        import pyarrow as pa

        self.messages = 0
        if not self.cols["status"]:
            return None
        batch = pa.RecordBatch.from_pydict(self.cols, schema=self.schema)
        self.cols = {n: [] for n in self.schema.names}
        return batch


def decode_batches(batches: Iterator[Any], registry_url: str | None = None, packed: bool = False,
                   derive: bool = False) -> Iterator[Any]:
    """``mapInArrow`` body: source columns (native Kafka schema) -> :data:`DECODED_SCHEMA` rows, or with
    ``packed`` :data:`PACKED_SCHEMA` rows (module doc), one output batch per input batch; ``derive``: packed rows
    carry their events' graph rows (:class:`DecodedColumns`)."""
    from .worker_heap import freeze_imports

    freeze_imports()
    out = DecodedColumns(registry_url, packed, derive)
    for batch in batches:
        d = batch.to_pydict()
        values, keys, timestamps = d["value"], d["key"], d["timestamp"]
        topics, partitions, offsets, all_headers = d["topic"], d["partition"], d["offset"], d["headers"]
        for j in range(batch.num_rows):
            headers = [(h["key"], h["value"]) for h in all_headers[j] or ()]
            out.add(values[j], headers, topics[j], partitions[j], offsets[j], timestamps[j], keys[j])
        decoded = out.take()
        if decoded is not None:
            yield decoded
