"""`lineage dlq list|replay`: look at rejected messages and re-submit them once the cause is fixed.

Records on the dead-letter topic are the ``dead_letter`` Avro record (schemas/avro/dead_letter.v1.avsc):
original key, value and headers, where they came from (topic[partition]@offset), the error class,
code, field and message, and when they failed. ``replay`` publishes the original bytes, key and
headers again to the input topic (adding header ``lineage.replayed_from``); the processor handles them
like any message, and the sink's dedupe by event hash makes a second replay of the same record land
nothing twice.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from schemas.errors import ConfigurationError, DecodeError, DeliveryError

from .common import add_data_dir, env_default, read_endpoints, resolve_endpoint

__all__ = ["register", "read_dead_letters", "replay_dead_letters"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("dlq", help="list or replay rejected (dead-letter) messages")
    sub = parser.add_subparsers(dest="dlq_command", metavar="ACTION")
    for name, helptext in (("list", "show rejected messages with their reasons"),
                           ("replay", "re-submit rejected messages to the input topic")):
        p = sub.add_parser(name, help=helptext)
        add_data_dir(p)
        p.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"))
        p.add_argument("--topic-dlq", default=env_default("--topic-dlq"), help="dead-letter topic")
        p.add_argument("--since", default=None, help="only records that failed at or after this ISO-8601 time")
        p.add_argument("--reason", default=None, help="only records whose error code or class starts with this")
        if name == "list":
            p.add_argument("--json", action="store_true", help="one JSON object per line")
            p.add_argument("--max", type=int, default=None, help="at most this many records")
            p.set_defaults(func=_list)
        else:
            p.add_argument("--topic-events", default=env_default("--topic-events"), help="input topic to replay into")
            p.set_defaults(func=_replay)
    parser.set_defaults(func=lambda args: parser.print_help(sys.stderr) or 2)


def _topics(args: argparse.Namespace) -> dict[str, str]:
    topics = dict((read_endpoints(args.data_dir) or {}).get("topics") or {})
    return {"dlq": args.topic_dlq or topics.get("dlq", "openlineage.events.dlq"),
            "events": getattr(args, "topic_events", None) or topics.get("events", "openlineage.events")}


def _parse_since(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigurationError(f"--since {value!r} is not an ISO-8601 time (e.g. 2026-11-22T10:00:00Z)") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _decode(msg: Any) -> dict[str, Any]:
    from schemas.codec import decode_record

    position = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
    try:
        record = decode_record(msg.value(), "dead_letter")
    except DecodeError as exc:
        record = {"key": msg.key(), "value": msg.value(), "headers": [], "topic": "", "partition": -1,
                  "offset": -1, "error_class": type(exc).__name__, "error_code": "dlq.unreadable",
                  "message": f"not a dead_letter record: {exc}", "field": None, "failed_at": None}
    record["dlq_position"] = position
    return record


def _failed_at(record: dict[str, Any]) -> datetime | None:
    value = record.get("failed_at")
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int):
        return datetime.fromtimestamp(value / 1e6, tz=UTC)
    return None


def _matches(record: dict[str, Any], since: datetime | None, reason: str | None) -> bool:
    if reason and not (str(record.get("error_code", "")).startswith(reason)
                       or str(record.get("error_class", "")).startswith(reason)):
        return False
    if since is not None:
        failed = _failed_at(record)
        if failed is None or failed < since:
            return False
    return True


def read_dead_letters(bootstrap: str, topic: str, since: datetime | None = None,
                      reason: str | None = None, max_records: int | None = None) -> list[dict[str, Any]]:
    """Dead-letter records of ``topic`` matching the filters, each with ``dlq_position`` (topic[p]@o).

    A message on the DLQ topic that is not a dead_letter record is returned with
    ``error_code = "dlq.unreadable"`` rather than skipped, so nothing is hidden.
    """
    from lineage.topic_reader import read_topic

    records = []
    for msg in read_topic(bootstrap, topic):
        record = _decode(msg)
        if _matches(record, since, reason):
            records.append(record)
            if max_records is not None and len(records) >= max_records:
                break
    return records


def replay_dead_letters(bootstrap: str, records: list[dict[str, Any]], topic: str) -> int:
    """Publish the original key/value/headers of ``records`` to ``topic``; returns how many were acknowledged."""
    from confluent_kafka import Producer

    failures: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    for record in records:
        if record.get("value") is None:
            continue
        headers = [(h["key"], h["value"]) for h in record.get("headers") or []]
        headers.append(("lineage.replayed_from", record["dlq_position"].encode()))
        producer.produce(topic, key=record.get("key"), value=record["value"], headers=headers, on_delivery=on_delivery)
        sent += 1
        producer.poll(0)
    remaining = producer.flush(30)
    if failures or remaining:
        raise DeliveryError(f"{len(failures) + remaining} of {sent} replayed messages were not acknowledged: "
                            f"{failures[:3]}")
    return sent


def _json_safe(record: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in record.items():
        if isinstance(value, bytes):
            out[key] = base64.b64encode(value).decode()
        elif isinstance(value, datetime):
            out[key] = value.isoformat()
        elif key == "headers":
            out[key] = [{"key": h["key"], "value": base64.b64encode(h["value"]).decode() if h["value"] else None}
                        for h in value]
        else:
            out[key] = value
    failed = _failed_at(record)
    out["failed_at"] = failed.isoformat() if failed else None
    return out


def _list(args: argparse.Namespace) -> int:
    bootstrap = resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap", "--bootstrap-servers")
    records = read_dead_letters(bootstrap, _topics(args)["dlq"], _parse_since(args.since), args.reason, args.max)
    if args.json:
        for record in records:
            print(json.dumps(_json_safe(record), ensure_ascii=False))
        return 0
    for record in records:
        failed = _failed_at(record)
        source = f"{record.get('topic')}[{record.get('partition')}]@{record.get('offset')}"
        field = f" field={record['field']}" if record.get("field") else ""
        message = str(record.get("message", "")).replace("\n", " ")[:160]
        print(f"{failed.isoformat() if failed else '-':32} {source:40} {record.get('error_code')}{field}: {message}")
    counts = Counter(str(r.get("error_code")) for r in records)
    summary = ", ".join(f"{code} {n}" for code, n in counts.most_common()) or "none"
    print(f"{len(records)} rejected message(s): {summary}", file=sys.stderr)
    return 0


def _replay(args: argparse.Namespace) -> int:
    bootstrap = resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap", "--bootstrap-servers")
    topics = _topics(args)
    records = read_dead_letters(bootstrap, topics["dlq"], _parse_since(args.since), args.reason)
    sent = replay_dead_letters(bootstrap, records, topics["events"])
    print(f"replayed {sent} message(s) from {topics['dlq']} to {topics['events']}")
    return 0
