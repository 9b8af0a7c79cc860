"""``lineage upstream|downstream|route|impact|ancestors``: graph questions, as a tree for people or ``--json``.

Nodes are named as :mod:`sink.queries` documents: ``namespace/name`` or ``namespace:name`` (a
dataset), ``job:namespace/name`` (a job), ``<dataset>#column`` (a column), or a UUID.
An unknown node exits 1 with a message; bad flags exit 2.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from schemas.errors import ConfigurationError

from .common import add_data_dir, env_default, resolve_endpoint

__all__ = ["register", "parse_as_of", "render_tree"]


def parse_as_of(value: str | None) -> datetime | None:
    """``--as-of``: :func:`sink.queries.parse_as_of`; a bad or naive time is bad usage (exit 2)."""
    from sink.queries import QueryError
    from sink.queries import parse_as_of as parse

    try:
        return parse(value, "--as-of")
    except QueryError as exc:
        raise ConfigurationError(str(exc)) from exc


def _queries(args: argparse.Namespace) -> Any:
    from sink.queries import LineageQueries

    dsn = resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn")
    return LineageQueries(dsn)


def _bad_usage(exc: Exception) -> ConfigurationError:
    return ConfigurationError(str(exc))


def _call(fn: Any, *a: Any, **kw: Any) -> Any:
    from sink.queries import NodeNotFoundError, QueryError

    try:
        return fn(*a, **kw)
    except NodeNotFoundError:
        raise
    except QueryError as exc:
        if exc.code == "query":   # the question itself is malformed (depth, syntax): bad usage
            raise _bad_usage(exc) from exc
        raise


def _flag(node: Any) -> str:
    marks = []
    if getattr(node, "is_placeholder", False):
        marks.append("placeholder")
    return f" [{', '.join(marks)}]" if marks else ""


def render_tree(result: Any) -> str:
    """The walk as an indented tree from the root (each node under its first parent, once)."""
    arrow = "<-" if result.direction == "upstream" else "->"
    lines = [f"{result.direction} of {result.root.label} (depth {result.depth}"
             + (f", as of {result.as_of.isoformat()}" if result.as_of else "") + ")"]
    hits = {h.node.key: h for h in result.hits}
    if not result.edges:        # column walks: a table by level
        lines.append(result.root.label)
        for h in result.hits:
            lines.append(f"  {arrow} level {h.level}: {h.node.label}{' [terminal]' if h.terminal else ''}")
        return "\n".join(lines + [f"{len(result.hits)} column(s)"])
    children: dict[str, list[str]] = {}
    for e in result.edges:
        parent, child = (e.target_id, e.source_id) if result.direction == "upstream" else (e.source_id, e.target_id)
        children.setdefault(parent, []).append(child)
    placed = {result.root.key}
    lines.append(result.root.label + _flag(result.root))

    def walk(node_id: str, prefix: str, step: int) -> None:
        kids = sorted({c for c in children.get(node_id, []) if c in hits and hits[c].steps == step + 1},
                      key=lambda c: hits[c].node.label)
        for i, child in enumerate(kids):
            last = i == len(kids) - 1
            hit = hits[child]
            seen = child in placed
            extra = (" [terminal]" if hit.terminal else "") + _flag(hit.node) + (" (see above)" if seen else "")
            lines.append(f"{prefix}{'└── ' if last else '├── '}{hit.node.label}{extra}")
            if not seen:
                placed.add(child)
                walk(child, prefix + ("    " if last else "│   "), step + 1)

    walk(result.root.key, "", 0)
    lines.append(f"{len(result.datasets)} dataset(s), {len(result.jobs)} job(s)")
    return "\n".join(lines)


def _emit(args: argparse.Namespace, result: Any, human: str) -> int:
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2, default=str))
    else:
        print(human)
    return 0


def run_traverse(args: argparse.Namespace) -> int:
    as_of = parse_as_of(args.as_of)
    with _queries(args) as q:
        fn = q.upstream if args.command == "upstream" else q.downstream
        result = _call(fn, args.node, depth=args.depth, as_of=as_of, stop_at_terminal=not args.through_terminal,
                       version=args.version)
    return _emit(args, result, render_tree(result))


def run_route(args: argparse.Namespace) -> int:
    as_of = parse_as_of(args.as_of)
    with _queries(args) as q:
        result = _call(q.routes, args.a, args.b, max_length=args.max_length, as_of=as_of, limit=args.limit)
    src, dst = (result.target, result.source) if result.swapped else (result.source, result.target)
    lines = [f"routes from {src.label} to {dst.label} (at most {result.max_length} edges): {len(result.routes)}"]
    for i, route in enumerate(result.routes, start=1):
        lines.append(f"{i:>3}. " + " -> ".join(n.label for n in route))
    if not result.routes:
        lines.append("no route (try a larger --max-length)")
    return _emit(args, result, "\n".join(lines))


def run_impact(args: argparse.Namespace) -> int:
    as_of = parse_as_of(args.as_of)
    with _queries(args) as q:
        result = _call(q.impact, args.node, depth=args.depth, as_of=as_of, version=args.version)
    lines = [f"impact of a change to {result.root.label}: {len(result.datasets)} dataset(s), "
             f"{len(result.jobs)} job(s), {len(result.owners)} owner(s)"]
    for title, hits in (("datasets", result.datasets), ("jobs", result.jobs)):
        lines.append(f"{title}:")
        for h in hits:
            owners = ", ".join(h.node.owners)
            lines.append(f"  level {h.level:>2}  {h.node.label}" + (f"  (owner: {owners})" if owners else ""))
    lines.append("owners:")
    for owner, labels in result.owners.items():
        lines.append(f"  {owner}: {', '.join(labels)}")
    return _emit(args, result, "\n".join(lines))


def run_ancestors(args: argparse.Namespace) -> int:
    with _queries(args) as q:
        result = _call(q.ancestors, args.node, args.within, version=args.version)
    lines = [f"ancestors of {result.root.label}" + (f" version {result.root_version}" if result.root_version else "")
             + f" within {result.within.label}: {len(result.ancestors)}"]
    for a in result.ancestors:
        lines.append(f"  {a.version or '(unversioned)'}  at {a.event_time.isoformat() if a.event_time else '?'}"
                     f"  via run {a.run_id}  ({a.steps} step(s))")
    return _emit(args, result, "\n".join(lines))


def _common(parser: argparse.ArgumentParser, as_of: bool = True) -> None:
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                        help="graph database DSN (env LINEAGE_POSTGRES_DSN; default: the running `lineage up`)")
    if as_of:
        parser.add_argument("--as-of", default=env_default("--as-of"),
                            help="lineage as of this ISO-8601 time with zone (env LINEAGE_AS_OF; default now)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_data_dir(parser)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from exc
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    node_help = ("namespace/name, namespace:name, job:namespace/name, <dataset>#column, or a UUID; a dataset at a "
                 "version as its producer named it: namespace/<object_id>:<version> or namespace/name@version")
    version_help = ("walk from this version of the dataset NODE (a datasetVersion, an object version or a "
                    "version id; same as NODE@VERSION): the versions it came from / that it fed")
    for name, what in (("upstream", "what NODE is derived from"), ("downstream", "what is derived from NODE")):
        p = subparsers.add_parser(name, help=what, description=f"{what.capitalize()}, to --depth dataset-level hops; "
                                  "stops at transforms whose tracing properties mark them terminal.")
        p.add_argument("node", metavar="NODE", help=node_help)
        p.add_argument("--depth", type=_positive, default=env_default("--depth", "5"),
                       help="dataset-level hops (env LINEAGE_DEPTH, default 5)")
        p.add_argument("--through-terminal", action="store_true",
                       help="continue through terminal transforms (irreversible + privacy-preserving, or terminal)")
        p.add_argument("--version", default=env_default("--version"), help=version_help)
        _common(p)
        p.set_defaults(func=run_traverse)
    p = subparsers.add_parser("route", help="all routes between two nodes (LineageRoute)",
                              description="All simple routes between A and B, datasets and jobs alternating.")
    p.add_argument("a", metavar="A", help=node_help)
    p.add_argument("b", metavar="B", help=node_help)
    p.add_argument("--max-length", type=_positive, default=env_default("--max-length", "10"),
                   help="most edges on a route; dataset->job->dataset is 2 (env LINEAGE_MAX_LENGTH, default 10)")
    p.add_argument("--limit", type=_positive, default=env_default("--limit", "100"),
                   help="most routes listed (env LINEAGE_LIMIT, default 100)")
    _common(p)
    p.set_defaults(func=run_route)
    p = subparsers.add_parser("impact", help="datasets, jobs and owners a change to NODE affects",
                              description="Everything downstream of NODE (through terminal transforms too) "
                                          "and who owns it.")
    p.add_argument("node", metavar="NODE", help=node_help)
    p.add_argument("--depth", type=_positive, default=env_default("--depth", "10"),
                   help="dataset-level hops (env LINEAGE_DEPTH, default 10)")
    p.add_argument("--version", default=env_default("--version"), help=version_help)
    _common(p)
    p.set_defaults(func=run_impact)
    p = subparsers.add_parser("ancestors", help="revisions of one dataset a dataset revision derives from",
                              description="The paper's Ancestors(DS_out:R_y, DS_in).")
    p.add_argument("node", metavar="NODE", help="the dataset whose revision is traced")
    p.add_argument("--within", required=True, help="the dataset whose revisions are wanted")
    p.add_argument("--version", default=None, help="the revision of NODE (default: its latest)")
    _common(p, as_of=False)
    p.set_defaults(func=run_ancestors)
