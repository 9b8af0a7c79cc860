"""Publish lineage attached to an object version (seeds/evo-geoscience-object-lineage.md).

A producer that publishes an object version does not know the version's id yet, so the output
that stands for it is named ``$self``; the *subject* (the object version's namespace and
name, ``<object_id>:<version>``) travels beside the events, in the Kafka header
``lineage.subject``. The lineage of one publish is an Evo document::

    {"events": [...], "self_link": "/events/i/outputs/j"}

where ``self_link`` points at the ``$self`` output of the *latest* event that has one
(latest by ``eventTime``; among equal times, the later in the list).

On the wire: with ``encoding=json`` the document is one message (as Evo sends it); with the Avro
encodings each event is one envelope carrying the subject, and the event ``self_link`` points
at carries ``self_link = "/outputs/j"`` (the envelope schema's single-event form).

A run that creates several objects sends, per object, the event with that object's output
renamed ``$self`` and the other objects' outputs left out (:func:`split_object_outputs`);
the processor recombines them into one record.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from schemas.errors import SelfLinkError

from .emitter import LineageEmitter, as_event_dict
from .keys import message_key

__all__ = ["SELF", "self_link_for", "evo_document", "split_object_outputs", "publish_object_lineage",
           "resolve_pointer", "publish_document"]

SELF = "$self"


def _time_key(event: Mapping[str, Any]) -> float:
    try:
        return datetime.fromisoformat(str(event.get("eventTime"))).timestamp()
    except ValueError:
        return float("-inf")


def _self_index(event: Mapping[str, Any]) -> int | None:
    for j, output in enumerate(event.get("outputs") or []):
        if isinstance(output, Mapping) and output.get("name") == SELF:
            return j
    return None


def self_link_for(events: Sequence[Mapping[str, Any]]) -> str:
    """``/events/i/outputs/j`` of the latest event's ``$self`` output; SelfLinkError if none has one."""
    best: tuple[float, int, int] | None = None
    for i, event in enumerate(events):
        j = _self_index(event)
        if j is not None and (best is None or (_time_key(event), i) >= best[:2]):
            best = (_time_key(event), i, j)
    if best is None:
        raise SelfLinkError("no event has an output named $self: nothing for self_link to point at",
                            code="validation.self_link", field="self_link")
    return f"/events/{best[1]}/outputs/{best[2]}"


def resolve_pointer(document: Mapping[str, Any], pointer: str) -> Any:
    """The value at JSON pointer ``pointer`` (RFC 6901) in ``document``."""
    node: Any = document
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def evo_document(events: Sequence[Any]) -> dict[str, Any]:
    """The Evo lineage document of one object-version publish."""
    dicts = [as_event_dict(e) for e in events]
    return {"events": dicts, "self_link": self_link_for(dicts)}


def split_object_outputs(event: Mapping[str, Any], is_object: Callable[[Mapping[str, Any]], bool]
                         ) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """One ``(subject, event)`` per output for which ``is_object(output)`` holds.

    In each, that output is renamed ``$self`` (its facets kept) and the other object outputs are
    dropped; outputs that are not objects stay in every copy.
    """
    outputs = list(event.get("outputs") or [])
    objects = [o for o in outputs if is_object(o)]
    result = []
    for obj in objects:
        subject = {"namespace": str(obj["namespace"]), "name": str(obj["name"])}
        new_outputs = [{**o, "name": SELF} if o is obj else o for o in outputs if o is obj or not is_object(o)]
        result.append((subject, {**event, "outputs": new_outputs}))
    return result


def publish_object_lineage(emitter: LineageEmitter, events: Sequence[Any],
                           subject: Mapping[str, Any]) -> dict[str, Any]:
    """Publish the lineage of one object version; returns the Evo document it stands for."""
    document = evo_document(events)
    publish_document(emitter, document, subject)
    return document


def publish_document(emitter: LineageEmitter, document: Mapping[str, Any],
                     subject: Mapping[str, Any] | None) -> None:
    """Publish an Evo document as is (its ``self_link`` must resolve to a ``$self`` output)."""
    pointer = str(document.get("self_link") or "")
    parts = pointer.split("/")
    if len(parts) != 5 or parts[1] != "events" or parts[3] != "outputs":
        raise SelfLinkError(f"self_link {pointer!r} is not of the form /events/i/outputs/j", field="self_link")
    try:
        target = resolve_pointer(document, pointer)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise SelfLinkError(f"self_link {pointer!r} resolves to nothing", field="self_link") from exc
    if not isinstance(target, Mapping) or target.get("name") != SELF:
        raise SelfLinkError(f"self_link {pointer!r} does not point at a $self output", field="self_link")
    linked = int(parts[2])
    events = list(document["events"])
    if emitter.settings.encoding == "json":
        value = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        emitter.emit_raw(value, key=message_key(events[linked]), subject=subject)
        return
    for i, event in enumerate(events):
        emitter.emit(event, subject=subject, self_link=f"/outputs/{parts[4]}" if i == linked else None)
