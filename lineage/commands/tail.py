"""``lineage tail [--topic T] [--from-beginning] [--max N]``: print the enriched topic as typed records."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from .common import add_data_dir, env_default, read_endpoints, resolve_endpoint

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("tail", help="read the enriched topic back as typed records", description=__doc__)
    p.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"))
    p.add_argument("--topic", default=env_default("--topic"),
                   help="topic to read (default: the enriched topic; the DLQ and graph topics work too)")
    p.add_argument("--from-beginning", action="store_true", help="start at the oldest record, not the newest")
    p.add_argument("--max", type=int, default=None, help="stop after N records")
    p.add_argument("--follow", action="store_true", help="keep waiting for new records")
    p.add_argument("--json", action="store_true", help="one JSON object per record")
    add_data_dir(p)
    p.set_defaults(func=run)


def _line(record: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(record), default=lambda v: v.hex() if isinstance(v, bytes) else str(v))
    name = type(record).__name__
    if name == "EnrichedRecord":
        return (f"{record.event_time} {record.event_type or '-':9} {record.job_namespace}/{record.job_name} "
                f"run={record.run_id} rev={record.revision} outputs={len(record.event.get('outputs') or [])}")
    if name == "DeadLetter":
        return f"{record.topic}[{record.partition}]@{record.offset} {record.error_code}: {record.message}"
    return f"{record.op} {record.table} {record.id}"


def run(args: argparse.Namespace) -> int:
    from stream_processor.consumer import read_records

    bootstrap = resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap", "--bootstrap-servers")
    topic = args.topic or ((read_endpoints(args.data_dir) or {}).get("topics") or {}).get("enriched") \
        or env_default("--topic-enriched", "openlineage.events.enriched")
    n = 0
    for record in read_records(bootstrap, topic, from_beginning=args.from_beginning, max_records=args.max,
                               follow=args.follow):
        print(_line(record, args.json), flush=True)
        n += 1
    print(f"{n} records from {topic}", file=sys.stderr)
    return 0
