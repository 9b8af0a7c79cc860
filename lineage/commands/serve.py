"""``lineage serve``: the HTTP API (OpenLineage ingest, Marquez-compatible reads, the graph API) and the web UI.

Every flag also reads ``LINEAGE_<FLAG>``; the broker, database and topics default to those of a
running ``lineage up`` on ``--data-dir`` (its endpoints.json). Ctrl-C / SIGTERM stops gracefully.
"""

from __future__ import annotations

import argparse
import sys

from lineage.commands.common import add_data_dir, env_default, read_endpoints, resolve_endpoint
from schemas.errors import ConfigurationError

__all__ = ["register", "run_serve", "build_settings"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "serve", help="the HTTP API (OpenLineage ingest, Marquez-compatible reads) and the web UI",
        description="Serve POST /api/v1/lineage (OpenLineage HTTP transport), Marquez's read API, the graph "
                    "API and the web UI; OpenAPI at /openapi.json, docs at /docs.")
    parser.add_argument("--host", default=env_default("--host", "127.0.0.1"),
                        help="listen address (env LINEAGE_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=int(env_default("--port", 5000)),
                        help="listen port, 0 for a free one (env LINEAGE_PORT, default 5000)")
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                        help="PostgreSQL DSN of the graph (env LINEAGE_POSTGRES_DSN; default: the running `lineage up`)")
    parser.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"),
                        help="Kafka bootstrap servers (env LINEAGE_BOOTSTRAP_SERVERS; default: the running "
                             "`lineage up`)")
    parser.add_argument("--topic-events", default=env_default("--topic-events"),
                        help="topic ingest publishes to (env LINEAGE_TOPIC_EVENTS)")
    parser.add_argument("--topic-dlq", default=env_default("--topic-dlq"),
                        help="dead-letter topic (env LINEAGE_TOPIC_DLQ)")
    parser.add_argument("--api-key", action="append", default=None,
                        help="accepted `Authorization: Bearer` key, repeatable (env LINEAGE_API_KEYS, "
                             "comma-separated); none: writes need no key")
    parser.add_argument("--read-requires-key", action=argparse.BooleanOptionalAction, default=None,
                        help="GET routes need a key too (env LINEAGE_READ_REQUIRES_KEY)")
    parser.add_argument("--max-body-bytes", type=int, default=None,
                        help="largest request body, bytes (env LINEAGE_MAX_BODY_BYTES, default 16 MiB)")
    add_data_dir(parser)
    parser.set_defaults(func=run_serve)


def build_settings(args: argparse.Namespace) -> object:
    from pydantic import ValidationError

    from api.settings import ApiSettings

    endpoints = read_endpoints(args.data_dir) or {}
    topics = endpoints.get("topics") or {}
    values: dict[str, object] = {
        "host": args.host,
        "port": args.port,
        "postgres_dsn": resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn"),
        "bootstrap_servers": resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap",
                                              "--bootstrap-servers"),
    }
    for name in ("events", "dlq"):
        value = getattr(args, f"topic_{name}") or topics.get(name)
        if value:
            values[f"topic_{name}"] = value
    if args.api_key:
        values["api_keys"] = args.api_key
    if args.read_requires_key is not None:
        values["read_requires_key"] = args.read_requires_key
    if args.max_body_bytes is not None:
        values["max_body_bytes"] = args.max_body_bytes
    try:
        return ApiSettings(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigurationError(f"invalid server settings: {exc}") from exc


def run_serve(args: argparse.Namespace) -> int:
    from api.server import serve

    settings = build_settings(args)

    def ready(url: str) -> None:
        print(f"lineage serve: listening on {url} (docs {url}/docs)", file=sys.stderr, flush=True)

    serve(settings, on_ready=ready, log_level=str(args.log_level).lower())  # type: ignore[arg-type]
    return 0
