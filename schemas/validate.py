"""Validate and normalise decoded OpenLineage events (spec 2-0-x, ``spec/OpenLineage.json``).

Rules (from the spec's JSON schema, plus the pipeline's normalisation):

- The document is an object and one of: a **RunEvent** (has ``run``), a **JobEvent** (has ``job``,
  no ``run``), a **DatasetEvent** (has ``dataset``, no ``job``/``run``) — :func:`classify_event`.
- Every event: ``eventTime`` (ISO-8601 date-time *with* an offset; a naive time is rejected),
  ``producer`` and ``schemaURL`` (absolute URIs; both required, as ``BaseEvent`` says).
- RunEvent: ``run.runId`` a UUID (8-4-4-4-12 hex), ``job.namespace`` / ``job.name`` strings (the spec
  puts no length on them: an empty string is a valid name and is kept, not rejected); ``eventType``, optional in the spec, must be one of START, RUNNING, COMPLETE, ABORT,
  FAIL, OTHER when present.
- JobEvent: ``job``; DatasetEvent: ``dataset`` with ``namespace`` / ``name``.
- ``inputs`` / ``outputs``: lists of objects with string ``namespace`` and ``name`` (empty allowed, as above);
  ``facets`` / ``inputFacets`` / ``outputFacets`` / ``run.facets`` / ``job.facets``: objects.
- Every facet, standard or custom (``BaseFacet``): an object with ``_producer`` and ``_schemaURL``
  (absolute URIs); ``_deleted``, where the spec has it (job and dataset facets), a boolean.
- An explicit ``null`` for an optional field is read as absent (producers built on attrs / dataclasses
  write them): a ``null`` ``facets`` object, facet or ``_deleted`` is no violation. A ``null`` required
  field is missing.

All of the above is the *core*: a violation raises :class:`EventValidationError` naming the field, and
the message goes to the dead-letter topic. The *standard facets* (``spec/facets/*.json``) are checked by
:func:`validate_openlineage_event` on top (:mod:`schemas.facets`): a facet that breaks its own schema is
dropped from the event and reported as a :class:`schemas.facets.FacetViolation`; the event is kept.

Normalisation (the returned dict is new; the input is not modified):

- ``eventTime`` -> UTC ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (fractions beyond microseconds truncated);
- ``run.runId`` -> lower case;
- RunEvent ``inputs`` / ``outputs`` present (``[]`` when absent);
- ``$self`` outputs -> the subject's ``namespace`` and ``name`` (no subject: :class:`SelfLinkError`).

``self_link`` (seeds/evo-geoscience-object-lineage.md) is a JSON pointer into the Evo lineage
document, ``/events/{i}/outputs/{j}``; for an event that travelled alone, ``/outputs/{j}`` (or any
``i``) points into the event itself. With ``event_index`` (this event's position in the document,
see :class:`schemas.codec.DecodedMessage`) the pointer is checked only on event ``i``, where
``outputs[j]`` must exist and be named ``$self``; with ``event_count``, ``i`` must be in range.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, NamedTuple

from schemas.errors import EventValidationError, SelfLinkError
from schemas.facets import FacetViolation, check_facet, event_facets_validator, json_path

__all__ = ["EVENT_TYPES", "SELF", "ValidatedEvent", "classify_event", "validate_event", "validate_message",
           "validate_openlineage_event", "check_standard_facets", "drop_invalid_facets", "normalise_event_time"]

EVENT_TYPES = frozenset({"START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"})
SELF = "$self"

_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s]+\Z")
_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)\Z",
    re.ASCII,
)
_NAIVE_TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}([.,]\d+)?)?\Z", re.ASCII)
_POINTER_RE = re.compile(r"(?:/events/(0|[1-9][0-9]*))?/outputs/(0|[1-9][0-9]*)\Z")
_UTC = UTC


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _fail(field: str, message: str, code: str) -> EventValidationError:
    return EventValidationError(f"{field}: {message}", code=code, field=field)


def classify_event(doc: Any) -> str:
    """``"run"`` (has ``run``), ``"job"`` (has ``job``, no ``run``) or ``"dataset"`` (has ``dataset`` only)."""
    if type(doc) is not dict:
        raise EventValidationError(f"event must be a JSON object, not {type(doc).__name__}",
                                   code="validation.not_an_event", field="$")
    if "run" in doc:
        return "run"
    if "job" in doc:
        return "job"
    if "dataset" in doc:
        return "dataset"
    raise EventValidationError("not an OpenLineage event: no run, job or dataset", code="validation.not_an_event",
                               field="$")


#: Calendar dates already checked (``(year, month, day)`` text -> valid), bounded: event times of a stream fall on few
#: days, and hostile input cannot grow it past the bound.
_DATES: dict[tuple[str, str, str], bool] = {}
_DATES_MAX = 4096


def _valid_date(y: str, mo: str, d: str) -> bool:
    key = (y, mo, d)
    ok = _DATES.get(key)
    if ok is None:
        try:
            datetime(int(y), int(mo), int(d))
            ok = True
        except ValueError:
            ok = False
        if len(_DATES) < _DATES_MAX:
            _DATES[key] = ok
    return ok


def normalise_event_time(value: Any, field: str = "eventTime") -> str:
    """ISO-8601 date-time with offset -> UTC ``YYYY-MM-DDTHH:MM:SS.ffffffZ``; EventValidationError otherwise."""
    if type(value) is not str:
        raise _fail(field, f"must be an ISO-8601 string, not {type(value).__name__}", "validation.event_time")
    m = _TIME_RE.match(value)
    if m is None:
        if _NAIVE_TIME_RE.match(value):
            raise _fail(field, f"{_short(value)} has no UTC offset (add Z or +hh:mm)", "validation.event_time")
        raise _fail(field, f"{_short(value)} is not an ISO-8601 date-time with offset", "validation.event_time")
    y, mo, d, h, mi, s, frac, z, sign, oh, om = m.groups()
    if (z or (oh == "00" and om in (None, "00"))) and _valid_date(y, mo, d) and h < "24" and mi < "60" \
            and s < "60":
        # UTC already (Z, or a zero offset as Python's isoformat() writes it): the text from the matched digits (the
        # regex has their widths; datetime's checks are the calendar date's, memoised, and the clock's ranges
        # above), ~3x faster than building the datetime
        return f"{y}-{mo}-{d}T{h}:{mi}:{s}.{(frac or '')[:6].ljust(6, '0')}Z"
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        if z:
            tz = _UTC
        else:
            hours, minutes = int(oh), int(om or 0)
            if hours > 23 or minutes > 59:
                raise ValueError(f"offset {sign}{oh}:{om or '00'} out of range")
            delta = timedelta(hours=hours, minutes=minutes)
            tz = timezone(-delta if sign == "-" else delta)
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro, tzinfo=tz)
        if not z:
            dt = dt.astimezone(_UTC)
    except (ValueError, OverflowError) as exc:
        raise _fail(field, f"{_short(value)} is not a valid date-time ({exc})", "validation.event_time") from exc
    return (f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}."
            f"{dt.microsecond:06d}Z")


def _name(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        raise _fail(f"{where}.{key}", "is required", "validation.missing")
    if type(value) is not str:
        raise _fail(f"{where}.{key}", f"must be a string, not {_short(value)}", "validation.type")
    return value


def _object(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        raise _fail(where, "is required", "validation.missing")
    if type(value) is not dict:
        raise _fail(where, f"must be an object, not {type(value).__name__}", "validation.type")
    return value


def _optional_object(obj: dict[str, Any], key: str, where: str) -> None:
    value = obj.get(key)
    if value is not None and type(value) is not dict:
        raise _fail(f"{where}.{key}", f"must be an object, not {type(value).__name__}", "validation.type")


#: URI strings already checked (producers repeat the same few ``_producer`` / ``_schemaURL`` values on every
#: facet of every event): a dict look-up instead of a regex match, bounded so hostile input cannot grow it.
_URIS: dict[str, bool] = {}
_URIS_MAX = 4096


def _uri(obj: dict[str, Any], key: str, where: str) -> None:
    """``obj[key]`` is a required absolute URI string (``format: uri``); ``where`` is the path of ``key``."""
    value = obj.get(key)
    if type(value) is str:
        ok = _URIS.get(value)
        if ok is None:
            ok = _URI_RE.match(value) is not None
            if len(_URIS) < _URIS_MAX:
                _URIS[value] = ok
        if ok:
            return
    if value is None:
        raise _fail(where, "is required", "validation.missing")
    raise _fail(where, f"must be an absolute URI string, not {_short(value)}", "validation.type")


def _facets(container: Any, where: str, deletable: bool) -> None:
    """Every facet of one facets object is a ``BaseFacet``: an object with ``_producer`` / ``_schemaURL``
    (and a boolean ``_deleted`` for job / dataset facets). A ``null`` container or facet is absent."""
    if not container:
        return
    uris = _URIS
    for name, facet in container.items():
        if type(facet) is dict:  # fast path: URIs seen before, no path built
            producer, schema_url = facet.get("_producer"), facet.get("_schemaURL")
            if type(producer) is str and type(schema_url) is str and uris.get(producer) and uris.get(schema_url):
                if not deletable:
                    continue
                deleted = facet.get("_deleted")
                if deleted is None or type(deleted) is bool:
                    continue
        elif facet is None:
            continue
        _facet(name, facet, where, deletable)


def _facet(name: str, facet: Any, where: str, deletable: bool) -> None:
    """:func:`_facets` for one facet the fast path did not pass: raises naming the field, or learns its URIs."""
    path = json_path(where, (name,))
    if type(facet) is not dict:
        raise _fail(path, f"a facet must be an object, not {_short(facet)}", "validation.type")
    _uri(facet, "_producer", path + "._producer")
    _uri(facet, "_schemaURL", path + "._schemaURL")
    if deletable:
        deleted = facet.get("_deleted")
        if deleted is not None and type(deleted) is not bool:
            raise _fail(path + "._deleted", f"must be true or false, not {_short(deleted)}", "validation.type")


def _datasets(doc: dict[str, Any], key: str, facet_key: str) -> list[dict[str, Any]] | None:
    if key not in doc:
        return None
    items = doc[key]
    if type(items) is not list:
        raise _fail(key, f"must be a list, not {type(items).__name__}", "validation.type")
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if type(item) is not dict:
            raise _fail(where, f"must be an object, not {type(item).__name__}", "validation.type")
        _name(item, "namespace", where)
        _name(item, "name", where)
        _optional_object(item, "facets", where)
        _optional_object(item, facet_key, where)
        _facets(item.get("facets"), f"{where}.facets", True)
        _facets(item.get(facet_key), f"{where}.{facet_key}", False)
    return items


def _check_subject(subject: Any) -> dict[str, str]:
    if type(subject) is not dict:
        raise SelfLinkError(f"subject must be an object {{namespace, name}}, not {type(subject).__name__}",
                            field="subject")
    ns, name = subject.get("namespace"), subject.get("name")
    if type(ns) is not str or not ns or type(name) is not str or not name:
        raise SelfLinkError("subject needs non-empty string namespace and name", field="subject")
    if name == SELF:
        raise SelfLinkError("subject name cannot itself be $self", field="subject.name")
    return subject


def _check_self_link(doc: dict[str, Any], self_link: Any, event_index: int | None, event_count: int | None) -> None:
    if not isinstance(self_link, str):
        raise SelfLinkError(f"self_link must be a JSON pointer string, not {type(self_link).__name__}",
                            field="self_link")
    m = _POINTER_RE.match(self_link)
    if m is None:
        raise SelfLinkError(f"self_link {_short(self_link)} is not a pointer /events/i/outputs/j", field="self_link")
    i = None if m.group(1) is None else int(m.group(1))
    j = int(m.group(2))
    if event_index is not None:
        if i is None:
            raise SelfLinkError(f"self_link {self_link} must be /events/i/outputs/j in an Evo lineage document",
                                field="self_link")
        if event_count is not None and i >= event_count:
            raise SelfLinkError(f"self_link {self_link} points at event {i} of a document with {event_count}",
                                field="self_link")
        if i != event_index:
            return
    outputs = doc.get("outputs")
    if type(outputs) is not list or j >= len(outputs):
        raise SelfLinkError(f"self_link {self_link} points at no output (the event has "
                            f"{len(outputs) if type(outputs) is list else 0})", field="self_link")
    target = outputs[j]
    if type(target) is not dict or target.get("name") != SELF:
        raise SelfLinkError(f"self_link {self_link} points at an output that is not named $self", field="self_link")


def _resolve_self(outputs: list[dict[str, Any]], subject: Any) -> list[dict[str, Any]]:
    resolved = None
    for j, item in enumerate(outputs):
        if item["name"] == SELF:
            if subject is None:
                raise SelfLinkError(f"outputs[{j}].name: $self output but the message carries no subject "
                                    f"(Kafka header lineage.subject)", field=f"outputs[{j}].name")
            if resolved is None:
                resolved = list(outputs)
            resolved[j] = {**item, "namespace": subject["namespace"], "name": subject["name"]}
    return outputs if resolved is None else resolved


def validate_event(document: Any, subject: dict[str, str] | None = None, self_link: str | None = None, *,
                   event_index: int | None = None, event_count: int | None = None) -> dict[str, Any]:
    """The normalised event (a new dict); raises EventValidationError / SelfLinkError naming the field.

    ``event_index`` / ``event_count``: this event's position in its Evo lineage document and the
    document's size (``DecodedMessage.event_index`` / ``event_count``), for the ``self_link`` check.
    """
    if self_link is not None and event_index is None:
        # A SelfLinkPointer from decode_message knows which event of its document it came with.
        event_index = getattr(self_link, "event_index", None)
        event_count = getattr(self_link, "event_count", None) if event_count is None else event_count
    kind = classify_event(document)
    doc: dict[str, Any] = document
    if subject is not None:
        subject = _check_subject(subject)
    out = dict(doc)
    if "eventTime" not in doc:
        raise _fail("eventTime", "is required", "validation.missing")
    out["eventTime"] = normalise_event_time(doc["eventTime"])
    _uri(doc, "producer", "producer")
    _uri(doc, "schemaURL", "schemaURL")

    if kind == "dataset":
        ds = _object(doc, "dataset", "dataset")
        _name(ds, "namespace", "dataset")
        _name(ds, "name", "dataset")
        _optional_object(ds, "facets", "dataset")
        _facets(ds.get("facets"), "dataset.facets", True)
        if self_link is not None:
            raise SelfLinkError("self_link given for a DatasetEvent, which has no outputs", field="self_link")
        return out

    job = _object(doc, "job", "job")
    _name(job, "namespace", "job")
    _name(job, "name", "job")
    _optional_object(job, "facets", "job")
    _facets(job.get("facets"), "job.facets", True)
    if kind == "run":
        run = _object(doc, "run", "run")
        run_id = run.get("runId")
        if run_id is None:
            raise _fail("run.runId", "is required", "validation.missing")
        if type(run_id) is not str or _UUID_RE.match(run_id) is None:
            raise _fail("run.runId", f"must be a UUID string, not {_short(run_id)}", "validation.run_id")
        _optional_object(run, "facets", "run")
        _facets(run.get("facets"), "run.facets", False)
        lowered = run_id.lower()
        if lowered != run_id:
            out["run"] = {**run, "runId": lowered}
        if "eventType" in doc:
            et = doc["eventType"]
            if type(et) is not str or et not in EVENT_TYPES:
                raise _fail("eventType", f"must be one of {'|'.join(sorted(EVENT_TYPES))}, not {_short(et)}",
                            "validation.event_type")

    inputs = _datasets(doc, "inputs", "inputFacets")
    outputs = _datasets(doc, "outputs", "outputFacets")
    if inputs is not None:
        for i, item in enumerate(inputs):
            if item["name"] == SELF:
                raise SelfLinkError(f"inputs[{i}].name: $self stands for the published object version and can "
                                    "only be an output", field=f"inputs[{i}].name")
    elif kind == "run":
        out["inputs"] = []
    if self_link is not None:
        _check_self_link(doc, self_link, event_index, event_count)
    if outputs is not None:
        out["outputs"] = _resolve_self(outputs, subject)
    elif kind == "run":
        out["outputs"] = []
    return out


def validate_message(message: Any) -> dict[str, Any]:
    """``validate_event`` for a :class:`schemas.codec.DecodedMessage` (document, subject, self_link, position)."""
    return validate_event(message.document, message.subject, message.self_link,
                          event_index=message.event_index, event_count=message.event_count)


class ValidatedEvent(NamedTuple):
    """What :func:`validate_openlineage_event` returns.

    ``event``: the normalised event (a new dict) without the standard facets that broke their schema;
    ``facet_violations``: one :class:`schemas.facets.FacetViolation` per dropped facet (``path`` is the
    JSON path of the violation, e.g. ``outputs[0].facets.ownership.owners[1].name``), in event order.
    """

    event: dict[str, Any]
    facet_violations: tuple[FacetViolation, ...]


def _facet_containers(event: dict[str, Any]) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """``[(level, location, facets)]``: every non-empty facets object of a (core-valid) event, where
    ``location`` is the key path from the event to it, e.g. ``("outputs", 0, "outputFacets")``."""
    out: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    static = "run" not in event and "job" not in event  # a DatasetEvent: only then is `dataset` core
    for key in ("run", "job", "dataset") if static else ("run", "job"):
        node = event.get(key)
        facets = node.get("facets") if type(node) is dict else None
        if facets:
            out.append(("dataset" if key == "dataset" else key, (key, "facets"), facets))
    for key, own, level in (("inputs", "inputFacets", "input"), ("outputs", "outputFacets", "output")):
        for i, item in enumerate(event.get(key) or ()):
            if item.get("facets"):
                out.append(("dataset", (key, i, "facets"), item["facets"]))
            if item.get(own):
                out.append((level, (key, i, own), item[own]))
    return out


def _without(node: Any, location: tuple[Any, ...], names: set[str]) -> Any:
    """A copy of ``node`` where the facets object at ``location`` lacks ``names`` (copies only that path)."""
    if not location:
        return {k: v for k, v in node.items() if k not in names}
    head, rest = location[0], location[1:]
    copy = list(node) if isinstance(node, list) else dict(node)
    copy[head] = _without(node[head], rest, names)
    return copy


def check_standard_facets(event: dict[str, Any]) -> ValidatedEvent:
    """``event`` (core-valid) without the standard facets that break their schema, and the violations.

    Fast path: one compiled check of every standard facet of the event (:func:`schemas.facets.event_facets_validator`);
    only when it fails is each facet checked on its own, explicit nulls read as absent. A facet marked
    ``"_deleted": true`` is a deletion marker with no content, so only the core checks apply to it."""
    if event_facets_validator().is_valid(event):
        return ValidatedEvent(event, ())
    violations: list[FacetViolation] = []
    drops: list[tuple[tuple[Any, ...], set[str]]] = []
    for level, location, facets in _facet_containers(event):
        where = json_path("", location).lstrip(".")
        bad = set()
        for name, facet in facets.items():
            if facet is None or facet.get("_deleted") is True:
                continue
            found = check_facet(level, name, facet, json_path(where, (name,)))
            if found is not None:
                violations.append(found)
                bad.add(name)
        if bad:
            drops.append((location, bad))
    for location, names in drops:
        event = _without(event, location, names)
    return ValidatedEvent(event, tuple(violations))


def validate_openlineage_event(document: Any, subject: dict[str, str] | None = None, self_link: str | None = None,
                               *, event_index: int | None = None,
                               event_count: int | None = None) -> ValidatedEvent:
    """THE public validation entry point: one parsed OpenLineage event -> ``(event, facet_violations)``.

    ``document`` is the already-parsed JSON object (never parsed again here). Two layers (module doc):

    1. the core, :func:`validate_event`: raises :class:`schemas.errors.EventValidationError` (or its
       :class:`schemas.errors.SelfLinkError`) whose ``field`` is the JSON path of the offending field and
       whose ``code`` (``validation.missing``, ``validation.type``, ...) the dead-letter record carries;
    2. the standard facets, :func:`check_standard_facets`: each facet the spec defines is checked against its
       schema; one that fails is left out of the returned ``event`` and reported in ``facet_violations``
       (publish each as a dead-letter record with code ``validation.facet``, the message's original bytes,
       ``field`` = ``violation.path``). Custom facets get the core's ``_producer`` / ``_schemaURL`` only.

    ``subject`` / ``self_link`` / ``event_index`` / ``event_count``: as for :func:`validate_event` (``$self``
    outputs of Evo lineage documents). Strict JSON (no ``NaN`` / ``Infinity``) and UTF-8 without a BOM are
    the decoder's part (:func:`schemas.codec.decode_message`), before there is a parsed document.
    """
    event = validate_event(document, subject, self_link, event_index=event_index, event_count=event_count)
    return check_standard_facets(event)


def drop_invalid_facets(document: dict[str, Any]) -> ValidatedEvent:
    """:func:`check_standard_facets` on a document that passed :func:`validate_event`, as sent (not normalised):
    ``(document without the broken standard facets, violations)``. For a front door that validates, then
    publishes the document itself (the HTTP ingest); the processor checks again and reports to the DLQ."""
    return check_standard_facets(document)
