"""The `lineage` console script: parse flags, build settings, call the library, map errors to exit codes.

Exit codes: 0 success, 1 the work failed (the message says why and what to do), 2 bad usage.
Each subcommand group lives in ``lineage/commands/<name>.py`` and exposes
``register(subparsers)``; the parser sets ``func`` to a callable ``(args) -> int``.
Every flag also reads ``LINEAGE_<FLAG>`` (see :func:`lineage.commands.common.env_default`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from schemas.errors import ConfigurationError, LineageError

__all__ = ["main", "build_parser", "schema_hint"]

#: Subcommand modules, in the order `lineage --help` lists them. A module that is
#: missing (a feature not built yet) is skipped, never a crash.
COMMAND_MODULES = (
    "up", "broker", "process", "emit", "load", "demo", "query", "catalog", "export", "tail", "dlq", "bench", "serve",
    "scan",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lineage",
        description="Event-streaming data lineage: OpenLineage over Kafka into a queryable graph.",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (env LINEAGE_LOG_LEVEL)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"lineage.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"lineage.commands.{name}":
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `lineage upstream X | head`: the reader has gone, which is not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except ConfigurationError as exc:
        print(f"lineage {args.command}: {exc}", file=sys.stderr)
        return 2
    except LineageError as exc:
        print(f"lineage {args.command}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        hint = schema_hint(exc)
        if hint is None:
            raise
        print(f"lineage {args.command}: {hint}", file=sys.stderr)
        return 1


def schema_hint(exc: BaseException) -> str | None:
    """What to do when a command met a database whose schema is older than this version's (a table, column or
    function a later migration adds is missing); None for any other error."""
    kind = type(exc)
    if not kind.__module__.startswith("psycopg") or kind.__name__ not in (
            "UndefinedTable", "UndefinedColumn", "UndefinedFunction"):
        return None
    detail = str(exc).splitlines()[0] if str(exc) else kind.__name__
    return (f"the graph database's schema is older than this version of lineage ({detail}): run "
            "`lineage process` or `lineage load` against it once, they apply the missing migrations")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
