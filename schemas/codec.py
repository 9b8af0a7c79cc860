"""Encode and decode OpenLineage events on the wire, in the three encodings the input topic accepts.

Encodings (DESIGN.md "Topics and wire formats")

1. **Avro single-object encoding** (the default, registry-free)::

       C3 01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's
             | parsing canonical form | Avro binary body

   The writer schema is found by fingerprint among *all* shipped versions of
   ``openlineage_envelope`` (``schemas/avro/*.avsc``) and resolved to the latest one, so an
   old producer's v1 data and a new producer's v2 data both decode.
2. **Confluent wire format**::

       00 | 4-byte big-endian schema id | Avro binary body

   The writer schema comes from a Schema Registry (``registry=``: a
   :class:`schemas.registry.ConfluentSchemaRegistry`, a :class:`schemas.registry.LocalSchemaRegistry`,
   anything with ``get_schema(schema_id) -> str``, or a plain ``{id: schema}`` mapping).
3. **JSON**: UTF-8 JSON text, as the official OpenLineage clients' Kafka transport sends it:
   one event object, or an Evo lineage document ``{"events": [...], "self_link": "/events/i/outputs/j"}``
   (also accepted wrapped as ``{"lineage": {...}}``), which yields one message per event.

Detection order, on the first bytes of each message: empty / ``None`` / over ``max_bytes`` ->
error; ``C3 01`` -> single-object; ``00`` -> Confluent; first byte that can start JSON text
(``{``, ``[``, ``"``, a digit, ``-``, ``t``/``f``/``n``, whitespace, a UTF-8 BOM) -> JSON (which must
then be an object); anything else -> ``decode.bad_magic``. The three cannot be confused: JSON text
never starts with byte ``00`` or ``C3``. JSON is strict (RFC 8259): a byte-order mark is rejected
(``decode.bom``, detected so that the reason is clear), and so is a ``NaN`` / ``Infinity`` literal (``decode.json``).

The *subject* that ``$self`` outputs stand for comes from the Kafka header ``lineage.subject``
(UTF-8 JSON ``{"namespace", "name"}``) or from the Avro envelope's ``subject`` field; the
header wins.

Avro layout (``schemas/avro/openlineage_envelope.v*.avsc``): the identifying strings are typed
fields (eventType, eventTime, producer, schemaURL, run.runId, job / dataset / inputs[*] / outputs[*]
namespace and name); everything else (facets, unknown keys, explicit ``null``, a value of the wrong
type) is carried as one JSON text, ``rest``: the event with the typed values removed. Decoding
merges the two back, so it gives exactly the original JSON document, modulo key order: ``1`` vs
``1.0``, big integers, unicode and nulls survive. One JSON text rather than one per facet keeps
decoding at one ``json.loads`` plus a short Avro read.

Bad input raises :class:`schemas.errors.DecodeError` (or its subclass
:class:`schemas.errors.SchemaNotFoundError`) with a ``code`` and a message naming the cause, never
another exception: nesting deeper than ``max_depth`` is caught by a bracket pre-scan before
``json.loads`` can recurse.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from schemas.avro import ENVELOPE, by_fingerprint, latest, parse_schema, parsing_canonical_form
from schemas.envelope_reader import READ_FOR, read_envelope
from schemas.errors import DecodeError, SchemaNotFoundError
from schemas.fastjson import loads

__all__ = [
    "DecodedMessage",
    "SelfLinkPointer",
    "SUBJECT_HEADER",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "SINGLE_OBJECT_MAGIC",
    "CONFLUENT_MAGIC",
    "encode_single_object",
    "encode_confluent",
    "encode_json",
    "encode_evo_document",
    "subject_header",
    "decode_message",
    "detect_encoding",
    "encode_record",
    "decode_record",
    "event_to_envelope",
    "envelope_to_event",
]

SUBJECT_HEADER = "lineage.subject"
#: Default largest message value accepted (bytes); Kafka's own default limit is about 1 MB.
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
#: Default deepest JSON nesting accepted (objects + arrays, counted from the outermost).
DEFAULT_MAX_DEPTH = 256
SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = b"\x00"

_JSON_START = frozenset(b'{["-0123456789tfn \t\r\n\xef')
_STR_FIELDS = ("eventTime", "eventType", "producer", "schemaURL")
_EVENT_KEYS = ("run", "job", "dataset", "eventType", "eventTime", "producer")


@dataclass(frozen=True)
class DecodedMessage:
    """One OpenLineage event decoded from a message, before validation.

    ``event_index`` / ``event_count`` are the event's position in an Evo lineage document and the
    document's number of events (None otherwise): pass them to
    :func:`schemas.validate.validate_event` so that ``self_link`` is checked against the right event.
    """

    document: dict[str, Any]
    encoding: str  # "avro" | "confluent" | "json"
    subject: dict[str, str] | None = None
    self_link: str | None = None
    event_index: int | None = None
    event_count: int | None = None


class SelfLinkPointer(str):
    """A ``self_link`` string that also knows the event it came with (``DecodedMessage.self_link``).

    It equals and serialises as the plain pointer text; :func:`schemas.validate.validate_event`
    reads ``event_index`` / ``event_count`` from it when the caller does not pass them, so that
    ``validate_event(msg.document, msg.subject, msg.self_link)`` checks the right event of an Evo
    lineage document.
    """

    event_index: int | None
    event_count: int | None

    def __new__(cls, text: str, event_index: int | None = None, event_count: int | None = None) -> SelfLinkPointer:
        obj = super().__new__(cls, text)
        obj.event_index = event_index
        obj.event_count = event_count
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (SelfLinkPointer, (str(self), self.event_index, self.event_count))


# --------------------------------------------------------------------------- JSON helpers


# Built once: json.dumps(..., separators=...) would build a new encoder on every call.
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_dumps_ascii = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value (strict JSON, RFC 8259: no NaN / Infinity literals)")


_json_decode = json.JSONDecoder(parse_constant=_not_json).decode


# A JSON string, or an unterminated one up to the end: it always matches from a quote, so the scan
# never backtracks (a pattern that requires the closing quote is quadratic on `\"\"\"...`).
_STRING_RE = re.compile(r'"[^"\\]*(?:\\.?[^"\\]*)*"?', re.S)
_BRACKET_RE = re.compile(r"[\[\]{}]")


def _json_depth(text: str) -> int:
    """Deepest container nesting of JSON text, ignoring brackets inside strings (linear scan)."""
    depth = deepest = 0
    for m in _BRACKET_RE.finditer(_STRING_RE.sub("", text)):
        if m.group() in "{[":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def _check_depth(text: str, max_depth: int, where: str) -> None:
    if text.count("{") + text.count("[") <= max_depth:  # cannot nest deeper than its open brackets
        return
    depth = _json_depth(text)
    if depth > max_depth:
        raise DecodeError(f"{where}: JSON nested {depth} levels deep, more than the limit of {max_depth}",
                          code="decode.too_deep")


def _loads(text: str, max_depth: int, where: str, checked: bool = False) -> Any:
    """``json.loads`` that raises DecodeError only; ``checked``: the caller already bounded the depth."""
    if not checked:
        _check_depth(text, max_depth, where)
    try:
        # orjson where it gives the same value (schemas/fastjson.py): the json module's parse of the envelopes'
        # rest was 19 of the workers' 550 py-spy samples in lineage bench --events 20000 (2026-11-26)
        return loads(text, _json_decode)
    except RecursionError as exc:
        raise DecodeError(f"{where}: JSON nested too deeply to parse", code="decode.too_deep") from exc
    except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise DecodeError(f"{where}: invalid JSON ({exc})", code="decode.json") from exc


# --------------------------------------------------------------------------- event <-> envelope


def _classify_kind(event: Mapping[str, Any]) -> str:
    if "run" in event:
        return "RUN"
    if "job" in event:
        return "JOB"
    if "dataset" in event:
        return "DATASET"
    return "UNKNOWN"


_NS = "io.lineagestream.openlineage."
_NAME_KEYS = ("namespace", "name")
_RUN_KEYS = ("runId",)
#: (typed keys, union branch name) of the object-valued typed fields.
_OBJECTS = {"run": (_RUN_KEYS, _NS + "Run"), "job": (_NAME_KEYS, _NS + "Job"),
            "dataset": (_NAME_KEYS, _NS + "StaticDataset")}


def _split(value: Any, keys: tuple[str, ...]) -> tuple[dict[str, str] | None, dict[str, Any] | None]:
    """(typed part, rest) of a JSON object whose ``keys`` are all strings; (None, None) when it does not fit."""
    if type(value) is not dict:
        return None, None
    typed = {}
    for k in keys:
        v = value.get(k)
        if type(v) is not str:
            return None, None
        typed[k] = v
    if len(value) == len(keys):
        return typed, None
    return typed, {k: v for k, v in value.items() if k not in keys}


def _split_datasets(value: Any) -> tuple[list[dict[str, str]] | None, list[dict[str, Any]] | None]:
    if type(value) is not list:
        return None, None
    typed, rests, any_rest = [], [], False
    for item in value:
        t, r = _split(item, _NAME_KEYS)
        if t is None:
            return None, None
        typed.append(t)
        if r:
            any_rest = True
            rests.append(r)
        else:
            rests.append({})
    return typed, (rests if any_rest else None)


def _subject_for_encoding(subject: Mapping[str, str]) -> dict[str, str]:
    ns, name = subject.get("namespace"), subject.get("name")
    if type(ns) is not str or not ns or type(name) is not str or not name:
        raise ValueError(f"a subject needs non-empty string namespace and name, not {subject!r}")
    return {"namespace": ns, "name": name}


def event_to_envelope(event: Mapping[str, Any], subject: Mapping[str, str] | None = None,
                      self_link: str | None = None, *, trace_id: str | None = None) -> dict[str, Any]:
    """The ``openlineage_envelope`` Avro record (a dict) for one event; see the module docstring.

    Typed fields take the identifying strings; ``rest`` takes the JSON of everything else.
    Union values use fastavro's tuple notation ``(branch name, value)``, which skips its
    per-branch validation on write.
    """
    if not isinstance(event, Mapping):
        raise TypeError(f"an event must be a dict, not {type(event).__name__}")
    rec: dict[str, Any] = {"kind": _classify_kind(event)}
    rest: dict[str, Any] = {}
    for k, v in event.items():
        if k in _STR_FIELDS:
            if type(v) is str:
                rec[k] = v
                continue
        elif k in _OBJECTS:
            keys, branch = _OBJECTS[k]
            typed, r = _split(v, keys)
            if typed is not None:
                rec[k] = (branch, typed)
                if r:
                    rest[k] = r
                continue
        elif k == "inputs" or k == "outputs":
            items, rests = _split_datasets(v)
            if items is not None:
                rec[k] = ("array", items)
                if rests is not None:
                    rest[k] = rests
                continue
        rest[k] = v
    if rest:
        rec["rest"] = _dumps(rest)
    if subject is not None:
        rec["subject"] = (_NS + "Subject", _subject_for_encoding(subject))
    rec["self_link"] = self_link
    rec["trace_id"] = trace_id
    return rec


def _bad_rest(where: str) -> DecodeError:
    return DecodeError(f"envelope rest does not match its typed fields at {where}", code="decode.avro")


def envelope_to_event(rec: Mapping[str, Any], max_depth: int = DEFAULT_MAX_DEPTH,
                      checked: bool = False) -> dict[str, Any]:
    """The OpenLineage event (a dict) an ``openlineage_envelope`` record carries; inverse of
    :func:`event_to_envelope`. Raises DecodeError when ``rest`` is bad. ``checked``: the caller
    has already bounded the nesting of ``rest`` by ``max_depth``."""
    text = rec.get("rest")
    if text is None:
        rest: dict[str, Any] = {}
    else:
        rest = _loads(text, max_depth, "envelope rest", checked)
        if type(rest) is not dict:
            raise DecodeError("envelope rest is not a JSON object", code="decode.avro")
    event: dict[str, Any] = {}
    for k in _STR_FIELDS:
        v = rec.get(k)
        if v is not None:
            event[k] = v
    for k in _OBJECTS:
        typed = rec.get(k)
        if typed is not None:
            r = rest.pop(k, None)
            if r is not None:
                if type(r) is not dict:
                    raise _bad_rest(k)
                typed.update(r)
            event[k] = typed
    for k in ("inputs", "outputs"):
        items = rec.get(k)
        if items is not None:
            r = rest.pop(k, None)
            if r is not None:
                if type(r) is not list or len(r) != len(items):
                    raise _bad_rest(k)
                for t, extra in zip(items, r, strict=True):
                    if type(extra) is not dict:
                        raise _bad_rest(k)
                    t.update(extra)
            event[k] = items
    if rest:
        event.update(rest)
    return event


# --------------------------------------------------------------------------- encoders


def _write_body(parsed: Any, record: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parsed, record)
    return buf.getvalue()


def _envelope_body(event: Mapping[str, Any], subject: Mapping[str, str] | None, self_link: str | None,
                   trace_id: str | None) -> bytes:
    parsed = latest(ENVELOPE).parsed
    try:
        return _write_body(parsed, event_to_envelope(event, subject, self_link, trace_id=trace_id))
    except UnicodeEncodeError:
        # Lone surrogates (from JSON "\ud800" escapes) cannot be UTF-8: carry the whole event as
        # ASCII-escaped JSON in `rest`, which is still lossless.
        rec = event_to_envelope({}, subject, self_link, trace_id=trace_id)
        rec["kind"] = _classify_kind(event)
        rec["rest"] = _dumps_ascii(dict(event))
        return _write_body(parsed, rec)


def encode_single_object(event: Mapping[str, Any], subject: Mapping[str, str] | None = None,
                         self_link: str | None = None, *, trace_id: str | None = None) -> bytes:
    """Avro single-object encoding of ``event`` with the latest envelope schema (the default encoding).

    ``C3 01`` + 8-byte little-endian CRC-64-AVRO fingerprint + Avro body. Raises TypeError for values
    that are not JSON (the event must be a JSON-compatible dict).
    """
    schema = latest(ENVELOPE)
    return SINGLE_OBJECT_MAGIC + schema.fingerprint + _envelope_body(event, subject, self_link, trace_id)


def encode_confluent(event: Mapping[str, Any], schema_id: int, subject: Mapping[str, str] | None = None,
                     self_link: str | None = None, *, trace_id: str | None = None) -> bytes:
    """Confluent wire format: ``00`` + 4-byte big-endian ``schema_id`` + Avro body (latest envelope schema).

    ``schema_id`` must be the id the registry gave the latest envelope schema
    (:meth:`schemas.registry.ConfluentSchemaRegistry.register_envelope`).
    """
    if not 0 <= schema_id < 2**32:
        raise ValueError(f"schema id {schema_id} does not fit 4 unsigned bytes")
    return CONFLUENT_MAGIC + schema_id.to_bytes(4, "big") + _envelope_body(event, subject, self_link, trace_id)


def _json_bytes(doc: Any) -> bytes:
    try:
        return _dumps(doc).encode("utf-8")
    except UnicodeEncodeError:
        return _dumps_ascii(doc).encode("ascii")


def encode_json(event: Mapping[str, Any]) -> bytes:
    """UTF-8 JSON of the event, as the OpenLineage clients' Kafka transport sends it."""
    return _json_bytes(event)


def encode_evo_document(events: Iterable[Mapping[str, Any]], self_link: str | None = None) -> bytes:
    """UTF-8 JSON of an Evo lineage document ``{"events": [...], "self_link": ...}``."""
    doc: dict[str, Any] = {"events": list(events)}
    if self_link is not None:
        doc["self_link"] = self_link
    return _json_bytes(doc)


def subject_header(subject: Mapping[str, str]) -> tuple[str, bytes]:
    """The Kafka header ``("lineage.subject", b'{"namespace":...,"name":...}')`` for a subject."""
    return SUBJECT_HEADER, _dumps(_subject_for_encoding(subject)).encode("utf-8")


# --------------------------------------------------------------------------- decoding


def detect_encoding(value: bytes) -> str:
    """``"avro"``, ``"confluent"``, ``"json"`` or ``"unknown"`` from the first bytes (no parsing)."""
    if not value:
        return "unknown"
    b0 = value[0]
    if b0 == 0xC3:
        return "avro" if value[1:2] == b"\x01" else "unknown"
    if b0 == 0x00:
        return "confluent"
    return "json" if b0 in _JSON_START else "unknown"


def _header_subject(headers: Any, max_depth: int) -> dict[str, str] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    raw: Any = None
    try:
        for item in items:
            key, val = item
            if isinstance(key, (bytes, bytearray)):
                key = bytes(key).decode("utf-8", "replace")
            if key == SUBJECT_HEADER:
                raw = val  # the last one wins
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"headers are not (key, value) pairs ({exc})", code="decode.headers") from exc
    if raw is None:
        return None
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = bytes(raw).decode("utf-8")
        except (TypeError, ValueError) as exc:
            raise DecodeError(f"header {SUBJECT_HEADER} is not UTF-8 ({exc})", code="decode.subject",
                              field=SUBJECT_HEADER) from exc
    try:
        doc = _loads(text, max_depth, f"header {SUBJECT_HEADER}")
    except DecodeError as exc:
        raise DecodeError(exc.message, code="decode.subject", field=SUBJECT_HEADER) from exc
    return _subject_from(doc, f"header {SUBJECT_HEADER}")


def _subject_from(doc: Any, where: str) -> dict[str, str]:
    if type(doc) is not dict:
        raise DecodeError(f"{where} must be a JSON object {{\"namespace\", \"name\"}}", code="decode.subject",
                          field=SUBJECT_HEADER)
    ns, name = doc.get("namespace"), doc.get("name")
    if type(ns) is not str or not ns or type(name) is not str or not name:
        raise DecodeError(f"{where} needs non-empty string \"namespace\" and \"name\"", code="decode.subject",
                          field=SUBJECT_HEADER)
    return {"namespace": ns, "name": name}


@lru_cache(maxsize=1)
def _fast_writer() -> Any:
    """The parsed schema :func:`schemas.envelope_reader.read_envelope` reads (the shipped envelope whose fingerprint
    is its :data:`~schemas.envelope_reader.READ_FOR`), or None when no shipped schema is that version."""
    shipped = by_fingerprint(READ_FOR)
    return None if shipped is None else shipped.parsed


def _read_envelope(body: bytes, offset: int, writer: Any, reader: Any, where: str) -> dict[str, Any]:
    """The Avro record at ``body[offset:]``, which must be consumed exactly: by
    :func:`schemas.envelope_reader.read_envelope` when ``writer`` is the version it reads and no reader schema
    differs (and the record is well formed), else by fastavro."""
    if reader is None and writer is _fast_writer():
        rec = read_envelope(body, offset)   # the version producers write, read field by field
        if rec is not None:
            return rec
    buf = io.BytesIO(body)
    buf.seek(offset)
    try:
        rec = schemaless_reader(buf, writer, reader)
    except EOFError as exc:
        raise DecodeError(f"{where}: Avro body is truncated ({exc})", code="decode.truncated") from exc
    except Exception as exc:  # noqa: BLE001 - fastavro raises many types on garbage; all mean "not Avro"
        raise DecodeError(f"{where}: Avro body does not match its schema ({type(exc).__name__}: {exc})",
                          code="decode.avro") from exc
    if buf.tell() != len(body):
        raise DecodeError(f"{where}: {len(body) - buf.tell()} bytes left after the Avro body", code="decode.avro")
    if type(rec) is not dict:
        raise DecodeError(f"{where}: Avro body is not a record", code="decode.avro")
    return rec


def _envelope_messages(rec: dict[str, Any], encoding: str, header_subject: dict[str, str] | None,
                       max_depth: int, value: bytes) -> list[DecodedMessage]:
    # Every JSON text of the envelope is a slice of `value`: if the whole message has no more open
    # brackets than max_depth, no text can nest deeper and the per-text scans are skipped.
    checked = value.count(b"{") + value.count(b"[") <= max_depth
    event = envelope_to_event(rec, max_depth, checked)
    subject = header_subject
    if subject is None and rec.get("subject") is not None:
        subject = _subject_from(rec["subject"], "envelope subject")
    return [DecodedMessage(event, encoding, subject, rec.get("self_link"))]


def _decode_single_object(value: bytes, header_subject: dict[str, str] | None, max_depth: int) -> list[DecodedMessage]:
    if len(value) < 10:
        raise DecodeError(f"single-object message of {len(value)} bytes is shorter than its 10-byte header",
                          code="decode.truncated")
    fp = value[2:10]
    writer = by_fingerprint(fp)
    if writer is None:
        raise SchemaNotFoundError(f"no shipped schema has fingerprint {fp.hex()} (single-object header)",
                                  code="decode.unknown_fingerprint")
    if writer.name != ENVELOPE:
        raise DecodeError(f"single-object message is a {writer.name} v{writer.version}, not an OpenLineage envelope",
                          code="decode.unexpected_schema")
    current = latest(ENVELOPE)
    reader = None if writer is current else current.parsed
    rec = _read_envelope(value, 10, writer.parsed, reader, f"single-object ({ENVELOPE} v{writer.version})")
    return _envelope_messages(rec, "avro", header_subject, max_depth, value)


@lru_cache(maxsize=512)
def _parse_registry_schema(text: str) -> tuple[Any, bool]:
    """(parsed writer schema, whether it is the latest envelope schema itself) for registry schema text."""
    try:
        parsed = parse_schema(text)
        same = parsing_canonical_form(text) == latest(ENVELOPE).canonical_form
    except Exception as exc:  # noqa: BLE001
        raise DecodeError(f"registry schema is not a valid Avro schema ({exc})", code="decode.registry") from exc
    return parsed, same


def _registry_schema_text(registry: Any, schema_id: int) -> str:
    if registry is None:
        raise SchemaNotFoundError(f"Confluent-framed message (schema id {schema_id}) but no schema registry is "
                                  "configured", code="decode.unknown_schema_id")
    try:
        if isinstance(registry, Mapping):
            if schema_id not in registry:
                raise SchemaNotFoundError(f"schema id {schema_id} is not in the registry",
                                          code="decode.unknown_schema_id")
            found = registry[schema_id]
        else:
            found = registry.get_schema(schema_id)
    except DecodeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a registry client failure must not escape as another type
        raise DecodeError(f"schema registry lookup of id {schema_id} failed ({type(exc).__name__}: {exc})",
                          code="decode.registry") from exc
    if found is None:
        raise SchemaNotFoundError(f"schema id {schema_id} is not in the registry", code="decode.unknown_schema_id")
    if isinstance(found, Mapping):
        return json.dumps(found, sort_keys=True)
    if not isinstance(found, str):
        found = getattr(found, "schema_str", found)
    if not isinstance(found, str):
        raise DecodeError(f"schema registry returned {type(found).__name__} for id {schema_id}",
                          code="decode.registry")
    return found


def _decode_confluent(value: bytes, header_subject: dict[str, str] | None, registry: Any,
                      max_depth: int) -> list[DecodedMessage]:
    if len(value) < 5:
        raise DecodeError(f"Confluent-framed message of {len(value)} bytes is shorter than its 5-byte header",
                          code="decode.truncated")
    schema_id = int.from_bytes(value[1:5], "big")
    writer, same = _parse_registry_schema(_registry_schema_text(registry, schema_id))
    current = latest(ENVELOPE)
    reader = None if same else current.parsed
    rec = _read_envelope(value, 5, current.parsed if same else writer, reader, f"Confluent (schema id {schema_id})")
    return _envelope_messages(rec, "confluent", header_subject, max_depth, value)


def _evo_document(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The Evo lineage document inside ``doc`` (itself, or ``doc["lineage"]``), or None for a plain event."""
    if any(k in doc for k in _EVENT_KEYS):
        return None  # an event, whatever custom keys it has
    if type(doc.get("events")) is list:
        return doc
    inner = doc.get("lineage")
    if type(inner) is dict and type(inner.get("events")) is list and not any(k in inner for k in _EVENT_KEYS):
        return inner
    return None


def _decode_json(value: bytes, header_subject: dict[str, str] | None, max_depth: int) -> list[DecodedMessage]:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"JSON message is not valid UTF-8 ({exc})", code="decode.utf8") from exc
    if text.startswith("\ufeff"):
        raise DecodeError("JSON message starts with a byte-order mark (RFC 8259: JSON text in UTF-8 has none; "
                          "write it without one)", code="decode.bom", field="$")
    doc = _loads(text, max_depth, "JSON message")
    if type(doc) is not dict:
        raise DecodeError(f"JSON message is a {type(doc).__name__}, not an object (an OpenLineage event or an "
                          "Evo lineage document)", code="decode.json")
    evo = _evo_document(doc)
    if evo is None:
        return [DecodedMessage(doc, "json", header_subject, None)]
    events, self_link = evo["events"], evo.get("self_link")
    if self_link is not None and type(self_link) is not str:
        raise DecodeError("Evo lineage document: self_link must be a string (a JSON pointer)",
                          code="decode.document", field="self_link")
    if not events:
        raise DecodeError("Evo lineage document has no events", code="decode.document", field="events")
    out = []
    n = len(events)
    for i, ev in enumerate(events):
        if type(ev) is not dict:
            raise DecodeError(f"Evo lineage document: events[{i}] is a {type(ev).__name__}, not an object",
                              code="decode.document", field=f"events[{i}]")
        link = None if self_link is None else SelfLinkPointer(self_link, i, n)
        out.append(DecodedMessage(ev, "json", header_subject, link, i, n))
    return out


def decode_message(value: bytes | bytearray | memoryview | None,
                   headers: Iterable[tuple[str | bytes, bytes | str | None]] | Mapping[str, Any] | None = None,
                   *, registry: Any = None, max_bytes: int = DEFAULT_MAX_BYTES,
                   max_depth: int = DEFAULT_MAX_DEPTH) -> list[DecodedMessage]:
    """Decode one Kafka message value into its OpenLineage event(s); see the module docstring.

    Returns one :class:`DecodedMessage` per event (an Evo lineage document yields several, never
    zero). Raises :class:`DecodeError` / :class:`SchemaNotFoundError` and nothing else.
    """
    try:
        return _decode(value, headers, registry, max_bytes, max_depth)
    except DecodeError:
        raise
    except RecursionError as exc:
        raise DecodeError("message nested too deeply to decode", code="decode.too_deep") from exc
    except Exception as exc:  # noqa: BLE001 - the contract: nothing but DecodeError escapes
        raise DecodeError(f"undecodable message ({type(exc).__name__}: {exc})", code="decode.internal") from exc


def _decode(value: Any, headers: Any, registry: Any, max_bytes: int, max_depth: int) -> list[DecodedMessage]:
    if value is None:
        raise DecodeError("message has no value (a tombstone)", code="decode.empty")
    if type(value) is not bytes:
        if isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        else:
            raise DecodeError(f"message value is a {type(value).__name__}, not bytes", code="decode.type")
    n = len(value)
    if n == 0:
        raise DecodeError("message value is empty", code="decode.empty")
    if n > max_bytes:
        raise DecodeError(f"message of {n} bytes is over the limit of {max_bytes} bytes", code="decode.too_large")
    subject = _header_subject(headers, max_depth)
    b0 = value[0]
    if b0 == 0xC3:
        if n < 2 or value[1] != 0x01:
            raise DecodeError(f"bad magic bytes {value[:2].hex()} (single-object encoding starts c301)",
                              code="decode.bad_magic")
        return _decode_single_object(value, subject, max_depth)
    if b0 == 0x00:
        return _decode_confluent(value, subject, registry, max_depth)
    if b0 in _JSON_START:
        return _decode_json(value, subject, max_depth)
    raise DecodeError(f"unknown encoding: first byte 0x{b0:02x} is neither Avro single-object (c3 01), "
                      "Confluent (00) nor JSON", code="decode.bad_magic")


# --------------------------------------------------------------------------- other shipped records


def encode_record(schema_name: str, record: Mapping[str, Any]) -> bytes:
    """Single-object encoding of ``record`` with the latest version of shipped schema ``schema_name``
    (``enriched_record``, ``graph_change``, ``dead_letter``, ``openlineage_envelope``)."""
    schema = latest(schema_name)
    return SINGLE_OBJECT_MAGIC + schema.fingerprint + _write_body(schema.parsed, record)


def decode_record(value: bytes, schema_name: str | None = None) -> dict[str, Any]:
    """Inverse of :func:`encode_record`; raises DecodeError (also when the record is not a ``schema_name``)."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise DecodeError(f"value is a {type(value).__name__}, not bytes", code="decode.type")
    value = bytes(value)
    if len(value) < 10:
        raise DecodeError(f"single-object message of {len(value)} bytes is shorter than its header",
                          code="decode.truncated")
    if value[:2] != SINGLE_OBJECT_MAGIC:
        raise DecodeError(f"bad magic bytes {value[:2].hex()} (expected c301)", code="decode.bad_magic")
    writer = by_fingerprint(value[2:10])
    if writer is None:
        raise SchemaNotFoundError(f"no shipped schema has fingerprint {value[2:10].hex()}",
                                  code="decode.unknown_fingerprint")
    name = schema_name or writer.name
    if writer.name != name:
        raise DecodeError(f"record is a {writer.name}, expected {name}", code="decode.unexpected_schema")
    current = latest(name)
    return _read_envelope(value, 10, writer.parsed, None if writer is current else current.parsed,
                          f"{name} v{writer.version}")
