"""``lineage emit FILE|-``: validate OpenLineage events from JSON / JSONL and publish the valid ones.

Input: one JSON event, a JSON array of events, an Evo lineage document
(``{"events": [...], "self_link": ...}``), or JSON Lines (one of those per line). Every item is
validated first (:func:`schemas.validate.validate_event`); errors go to stderr with their line
number (JSONL) or item number (array); the valid items are published; the exit code is 1 when
any item failed, after publishing the others.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lineage.commands.common import add_data_dir, env_default, read_endpoints, resolve_endpoint
from schemas.errors import ConfigurationError, LineageError

__all__ = ["register", "run_emit", "read_items", "Item"]


@dataclass
class Item:
    """One thing to publish: an event or an Evo document, and where it came from (``line 3``)."""

    where: str
    value: Any
    error: str | None = None


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "emit", help="validate and publish events from JSON / JSONL",
        description="Validate OpenLineage events (JSON event, array, Evo document, or JSONL) and publish "
                    "the valid ones; exit 1 if any line failed.")
    parser.add_argument("file", metavar="FILE|-", help="input file, or - for stdin")
    parser.add_argument("--encoding", choices=("avro", "confluent", "json"),
                        default=env_default("--encoding", "avro"), help="wire encoding (env LINEAGE_ENCODING)")
    parser.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"),
                        help="Kafka bootstrap servers (env LINEAGE_BOOTSTRAP_SERVERS; default: the running "
                             "`lineage up`)")
    parser.add_argument("--topic", default=env_default("--topic"),
                        help="input topic (env LINEAGE_TOPIC; default: the running `lineage up`'s, "
                             "else openlineage.events)")
    parser.add_argument("--subject-namespace", default=env_default("--subject-namespace"),
                        help="namespace of the object version that $self outputs stand for")
    parser.add_argument("--subject-name", default=env_default("--subject-name"),
                        help="name of the object version that $self outputs stand for")
    parser.add_argument("--confluent-schema-id", type=int, default=env_default("--confluent-schema-id"),
                        help="registry id of the envelope schema, for --encoding confluent")
    add_data_dir(parser)
    parser.set_defaults(func=run_emit)


def _items_of(value: Any, where: str) -> list[Item]:
    if isinstance(value, list):
        return [Item(f"{where} item {i + 1}" if where else f"item {i + 1}", v) for i, v in enumerate(value)]
    return [Item(where or "document", value)]


def read_items(text: str) -> list[Item]:
    """Items of a JSON document (event, array, Evo document) or of JSON Lines, with their position."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        return _items_of(json.loads(stripped), "")
    except json.JSONDecodeError:
        pass
    items: list[Item] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.extend(_items_of(json.loads(line), f"line {number}"))
        except json.JSONDecodeError as exc:
            items.append(Item(f"line {number}", None, f"not JSON: {exc.msg} at column {exc.colno}"))
    return items


def _validate(item: Item, subject: dict[str, str] | None) -> None:
    from schemas.validate import validate_event

    value = item.value
    if not isinstance(value, dict):
        item.error = f"expected a JSON object, got {type(value).__name__}"
        return
    try:
        if isinstance(value.get("events"), list):
            events, link = value["events"], value.get("self_link")
            for i, event in enumerate(events):
                try:
                    validate_event(event, subject, link, event_index=i, event_count=len(events))
                except LineageError as exc:
                    raise type(exc)(f"events[{i}]: {exc}", code=exc.code, field=exc.field) from exc
            if link is None:
                item.error = "Evo document has no self_link"
        else:
            validate_event(value, subject)
    except LineageError as exc:
        field = f" [{exc.field}]" if exc.field else ""
        item.error = f"{exc}{field} ({exc.code})"


def run_emit(args: argparse.Namespace) -> int:
    from producers.emitter import LineageEmitter
    from producers.evo import publish_document
    from producers.settings import DEFAULT_TOPIC, EmitterSettings

    bootstrap = resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap", "--bootstrap-servers")
    topic = args.topic or ((read_endpoints(args.data_dir) or {}).get("topics") or {}).get("events") or DEFAULT_TOPIC
    subject = None
    if args.subject_namespace or args.subject_name:
        if not (args.subject_namespace and args.subject_name):
            raise ConfigurationError("pass both --subject-namespace and --subject-name")
        subject = {"namespace": args.subject_namespace, "name": args.subject_name}
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read {args.file}: {exc}") from exc

    items = read_items(text)
    for item in items:
        if item.error is None:
            _validate(item, subject)
    bad = [i for i in items if i.error]
    for item in bad:
        print(f"{args.file}: {item.where}: {item.error}", file=sys.stderr)

    settings = EmitterSettings(bootstrap_servers=bootstrap, topic=topic, encoding=args.encoding,
                               confluent_schema_id=args.confluent_schema_id)
    published = 0
    with LineageEmitter(settings) as emitter:
        for item in items:
            if item.error:
                continue
            if isinstance(item.value.get("events"), list):
                publish_document(emitter, item.value, subject)
                published += len(item.value["events"])
            else:
                emitter.emit(item.value, subject=subject)
                published += 1
    print(f"lineage emit: published {published} event(s) to {topic} at {bootstrap} ({args.encoding}); "
          f"{len(bad)} of {len(items)} item(s) rejected")
    return 1 if bad or not items else 0
