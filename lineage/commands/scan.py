"""``lineage scan PATH...``: lineage from SQL and Python code (the :mod:`scanner` producer).

Where the events go: ``--output FILE`` (JSONL, or ``-`` for stdout), ``--publish`` (the producer
library, to the input topic; the default when a `lineage up` stack is running), ``--load`` (the
batch path `lineage load` uses). ``--format object-array`` writes the seed's object array instead.
Exit 1 when any statement or file could not be scanned (each reported as ``path:line: reason``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from lineage.commands.common import add_data_dir, env_default, read_endpoints, resolve_endpoint
from schemas.errors import ConfigurationError

__all__ = ["register", "run"]


def _pairs(values: list[str] | None) -> list[tuple[str, str]]:
    out = []
    for v in values or []:
        if "=" not in v:
            raise ConfigurationError(f"--namespace-map takes PREFIX=NAMESPACE, not {v!r}")
        prefix, ns = v.split("=", 1)
        out.append((prefix.strip(), ns.strip()))
    return out


def _publish(events: list[dict[str, Any]], args: argparse.Namespace) -> str:
    from producers.emitter import LineageEmitter
    from producers.settings import DEFAULT_TOPIC, EmitterSettings

    bootstrap = resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap", "--bootstrap-servers")
    topic = args.topic or ((read_endpoints(args.data_dir) or {}).get("topics") or {}).get("events") or DEFAULT_TOPIC
    settings = EmitterSettings(bootstrap_servers=bootstrap, topic=topic, encoding=args.encoding)
    with LineageEmitter(settings) as emitter:
        for event in events:
            emitter.emit(event)
    return f"published {len(events)} event(s) to {topic} at {bootstrap}"


def _load(events: list[dict[str, Any]], args: argparse.Namespace) -> str:
    from scanner.events import canonical_json
    from stream_processor.batch import read_sources, run_local

    dsn = resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn")
    with tempfile.TemporaryDirectory(prefix="lineage-scan-") as tmp:
        path = Path(tmp) / "scan.jsonl"
        path.write_text("".join(canonical_json(e) + "\n" for e in events), encoding="utf-8")
        outcome = run_local(read_sources([str(path)]), dsn, 5000)
    for rejection in outcome.rejected:
        print(rejection, file=sys.stderr)
    return (f"loaded {outcome.events} event(s), {outcome.events_new} new, {outcome.duplicates} duplicate(s), "
            f"{len(outcome.rejected)} rejected")


def run(args: argparse.Namespace) -> int:
    from scanner.codebase import scan
    from scanner.dialects import canonical_dialect
    from scanner.events import canonical_json
    from scanner.files import Limits
    from scanner.object_array import object_array

    try:
        canonical_dialect(args.dialect)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    for p in args.paths:
        if not os.path.exists(p):
            raise ConfigurationError(f"no such file or directory: {p}")
    modes = [m for m in ("publish", "load") if getattr(args, m)] + (["output"] if args.output else [])
    if len(modes) > 1:
        raise ConfigurationError("choose one of --publish, --load, --output")
    mode = modes[0] if modes else ("publish" if read_endpoints(args.data_dir) else "output")
    if mode != "output" and args.format == "object-array":
        raise ConfigurationError("--format object-array is written with --output FILE only")
    limits = Limits(max_statement_chars=args.max_statement_chars,
                    statement_timeout_seconds=args.statement_timeout_seconds)
    result = scan(args.paths, dialect=args.dialect, default_database=args.default_database or "",
                  default_schema=args.default_schema or "", namespace=args.namespace,
                  job_namespace=args.job_namespace, namespace_map=_pairs(args.namespace_map),
                  schema_files=args.schema_file or [], jobs=args.jobs, state_path=args.state,
                  limits=limits, repo_url=args.repo_url or "", progress=None if not args.quiet else False)
    for issue in result.issues:
        if issue.kind == "error" or args.verbose:
            print(f"{issue}" if issue.kind == "error" else f"{issue} (warning)", file=sys.stderr)
    if args.format == "object-array":
        data = object_array(result.units, result.tables, default_schema=args.default_schema or "dbo",
                            logging_objects=args.logging_objects.split(",") if args.logging_objects is not None
                            else _default_logging())
        text = json.dumps(data, indent=2) + "\n"
        _write(args.output or "-", text)
        what = f"wrote {len(data)} object(s)"
    elif mode == "output":
        _write(args.output or "-", "".join(canonical_json(e) + "\n" for e in result.events))
        what = f"wrote {len(result.events)} event(s) to {args.output or 'stdout'}"
    elif mode == "publish":
        what = _publish(result.events, args)
    else:
        what = _load(result.events, args)
    print(f"lineage scan: {result.files} file(s), {result.statements} statement(s), {len(result.units)} job(s), "
          f"{len(result.tables)} table(s) from DDL, {len(result.retracted)} retracted, {result.failed} failed; "
          f"{what}", file=sys.stderr)
    return 1 if result.failed else 0


def _default_logging() -> list[str]:
    from scanner.dialects import DEFAULT_LOGGING_OBJECTS
    return list(DEFAULT_LOGGING_OBJECTS)


def _write(target: str, text: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(text, encoding="utf-8")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "scan", help="lineage from SQL and Python code into the graph",
        description="Scan SQL and Python files into OpenLineage JobEvents (column lineage, ERD from DDL). "
                    "Exit 1 if any statement could not be scanned.")
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("--dialect", default=env_default("--dialect", ""),
                        help="sqlglot dialect (tsql, snowflake, bigquery, spark, hive, databricks, postgres, mysql, "
                             "redshift, oracle, duckdb...; aliases ansi, sparksql; env LINEAGE_DIALECT)")
    parser.add_argument("--default-database", default=env_default("--default-database"),
                        help="database (catalog) for names written without one")
    parser.add_argument("--default-schema", default=env_default("--default-schema"),
                        help="schema for names written without one")
    parser.add_argument("--namespace", default=env_default("--namespace", "sql://default"),
                        help="dataset namespace (default sql://default)")
    parser.add_argument("--namespace-map", action="append", metavar="PREFIX=NAMESPACE",
                        help="datasets whose name starts with PREFIX go to NAMESPACE (repeatable)")
    parser.add_argument("--job-namespace", default=env_default("--job-namespace", "code-scan"),
                        help="namespace of the scanned jobs (default code-scan)")
    parser.add_argument("--schema-file", action="append", metavar="JSON",
                        help='known schemas {"db.schema.table": {"col": "TYPE"}} to expand SELECT * (repeatable)')
    out = parser.add_argument_group("where the events go (default: --publish when `lineage up` runs, else stdout)")
    out.add_argument("--publish", action="store_true", help="send through the producer library to the input topic")
    out.add_argument("--load", action="store_true", help="write through the batch path (`lineage load`)")
    out.add_argument("--output", metavar="FILE", help="write JSONL (or the object array); - for stdout")
    parser.add_argument("--format", choices=("openlineage", "object-array"), default="openlineage")
    parser.add_argument("--logging-objects", default=None,
                        help="object-array: comma-separated objects to leave out (default: ADMIN.Logs, "
                             "dbo.LogMessage, dbo.spLastRowCount)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel worker processes (default: core count)")
    parser.add_argument("--state", default=env_default("--state"),
                        help="scan manifest (JSON): keeps unchanged events byte-identical and retracts jobs "
                             "whose statements disappeared")
    parser.add_argument("--repo-url", default=None, help="prefix of sourceCodeLocation.url (default file:PATH)")
    parser.add_argument("--max-statement-chars", type=int, default=1_000_000)
    parser.add_argument("--statement-timeout-seconds", type=float, default=20.0)
    parser.add_argument("--encoding", choices=("avro", "confluent", "json"), default=env_default("--encoding", "avro"))
    parser.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"))
    parser.add_argument("--topic", default=env_default("--topic"))
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"))
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--verbose", action="store_true", help="also print warnings")
    add_data_dir(parser)
    parser.set_defaults(func=run)
