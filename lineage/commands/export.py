"""``lineage export --format wia-json|jsonl|parquet|graphml|object-array [--output F] [--gzip] [--as-of T]``.

Writes to ``--output`` (a file; a directory for parquet) or stdout. For ``wia-json`` the
WIA-DATA-008 §7 violations (cycles, non-URI namespaces, ...) are reported on stderr and the
exit code stays 0: they describe the lineage, they do not make the export fail. The same holds
for the object-array format's rules. Exit 1 when the database cannot be read, 2 on bad flags.
"""

from __future__ import annotations

import argparse
import sys

from .common import add_data_dir, env_default, resolve_endpoint
from .query import parse_as_of

__all__ = ["register", "run", "MAX_VIOLATIONS_SHOWN"]

FORMATS = ("wia-json", "jsonl", "parquet", "graphml", "object-array")
MAX_VIOLATIONS_SHOWN = 50


def run(args: argparse.Namespace) -> int:
    import psycopg

    from schemas.errors import StoreError
    from sink.export import export

    dsn = resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn")
    as_of = parse_as_of(args.as_of)
    try:
        result = export(args.format, dsn, output=args.output, as_of=as_of, gzip=args.gzip,
                        environment=args.environment)
    except psycopg.errors.UndefinedTable as exc:
        raise StoreError("the lineage graph tables do not exist in this database (run `lineage load` or "
                         "`lineage process` first)") from exc
    except psycopg.OperationalError as exc:
        raise StoreError(f"cannot read the graph database: {str(exc).strip()}") from exc
    if result.violations:
        rules = "WIA-DATA-008 §7" if args.format == "wia-json" else "the object-array format's rules"
        print(f"{len(result.violations)} violation(s) of {rules} (reported, not fatal):", file=sys.stderr)
        for v in result.violations[:MAX_VIOLATIONS_SHOWN]:
            print(f"  {v}", file=sys.stderr)
        if len(result.violations) > MAX_VIOLATIONS_SHOWN:
            print(f"  ... and {len(result.violations) - MAX_VIOLATIONS_SHOWN} more", file=sys.stderr)
    detail = ", ".join(f"{k} {v}" for k, v in result.counts.items()) or f"{result.count} item(s)"
    summary = f"exported {args.format} to {result.output}: {detail}"
    print(summary, file=sys.stderr if result.output == "-" else sys.stdout)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "export", help="export the graph (WIA-DATA-008 JSON, JSONL, Parquet, GraphML, object-array)",
        description="Export the lineage graph, today's or --as-of a past time. wia-json violations of the "
                    "standard's §7 rules are reported on stderr, not fatal.")
    parser.add_argument("--format", required=env_default("--format") is None, choices=FORMATS,
                        default=env_default("--format"), help="export format (env LINEAGE_FORMAT)")
    parser.add_argument("--output", "-o", default=env_default("--output"),
                        help="output file (a directory for parquet); default stdout (env LINEAGE_OUTPUT)")
    parser.add_argument("--gzip", action="store_true", default=env_default("--gzip", "") not in ("", "0", "false"),
                        help="gzip the output (json, jsonl, graphml; env LINEAGE_GZIP)")
    parser.add_argument("--as-of", default=env_default("--as-of"),
                        help="the graph as of this ISO-8601 time with zone (env LINEAGE_AS_OF; default now)")
    parser.add_argument("--environment", default=env_default("--environment", "prod"),
                        choices=("dev", "staging", "prod"),
                        help="WIA metadata.environment (env LINEAGE_ENVIRONMENT, default prod)")
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                        help="graph database DSN (env LINEAGE_POSTGRES_DSN; default: the running `lineage up`)")
    add_data_dir(parser)
    parser.set_defaults(func=run)
