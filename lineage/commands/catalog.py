"""``lineage search TEXT`` and ``lineage show NODE``: find nodes, and everything the graph knows about one.

Search matches names, namespaces and column names (exact > prefix > substring; :mod:`sink.catalog`).
Show takes any name ``lineage upstream`` takes. Human-readable by default, ``--json`` for programs.
An unknown node exits 1; bad flags exit 2.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from schemas.errors import ConfigurationError

from .common import add_data_dir, env_default, resolve_endpoint

__all__ = ["register", "render_search", "render_show"]


def _connect(args: argparse.Namespace) -> Any:
    from sink.queries import LineageQueries

    dsn = resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn")
    return LineageQueries(dsn)


def _bounded(low: int, high: int) -> Any:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from exc
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {number}")
        return number
    return parse


def render_search(page: Any) -> str:
    """One line per hit: score, type, the name to pass to other commands."""
    if not page.results:
        return f"nothing matches {page.query!r}"
    lines = [f"{'score':>6}  {'type':<7}  name"]
    for hit in page.results:
        extra = f"  (alias {hit.alias})" if hit.alias else ""
        lines.append(f"{hit.score:6.2f}  {hit.type:<7}  {hit.label}{extra}")
    if page.next_offset is not None:
        lines.append(f"... more: --offset {page.next_offset}")
    return "\n".join(lines)


def _section(lines: list[str], title: str, rows: list[str]) -> None:
    if rows:
        lines.append(f"{title}:")
        lines.extend(f"  {r}" for r in rows)


def render_show(d: dict[str, Any]) -> str:
    """The node detail as sections; empty sections are left out."""
    lines = [f"{d['type']} {d['label']}" + (" [placeholder]" if d["placeholder"] else ""),
             f"  id: {d['id']}"]
    for key in ("node_type", "description", "first_seen", "last_seen"):
        if d.get(key):
            lines.append(f"  {key.replace('_', ' ')}: {d[key]}")
    if d["owners"]:
        lines.append(f"  owners: {', '.join(d['owners'])}")
    if d["tags"]:
        lines.append(f"  tags: {', '.join(d['tags'])}")
    if d["aliases"]:
        lines.append(f"  aliases: {', '.join(d['aliases'])}")
    if d.get("job_type"):
        lines.append("  job type: " + "/".join(str(v) for v in d["job_type"].values()))
    if d.get("source_code_location"):
        scl = d["source_code_location"]
        lines.append("  source: " + " ".join(str(scl[k]) for k in ("type", "url", "path", "version") if scl.get(k)))
    _section(lines, "schema", [f"{f['name']}  {f['type'] or '?'}" + (f"  -- {f['description']}" if f["description"]
                                                                   else "") for f in d["schema"]])
    if d.get("constraints"):
        c = d["constraints"]
        rows = [f"primary key ({', '.join(c['primaryKey'])})"] if c.get("primaryKey") else []
        for fk in c.get("foreignKeys") or []:
            ref = fk.get("references") or {}
            rows.append(f"foreign key {fk.get('name') or ''} ({', '.join(fk.get('columns') or [])}) -> "
                        f"{ref.get('namespace', '')}/{ref.get('name', '')} ({', '.join(ref.get('columns') or [])})")
        _section(lines, "constraints", rows)
    if d.get("sql"):
        lines.append("sql:")
        lines.extend(f"  {line}" for line in d["sql"].strip().splitlines())
    _section(lines, "versions", [f"{v['created_at']}  {v['version']}" for v in d["versions"]])
    _section(lines, "runs", [
        f"{r['started_at'] or r['ended_at'] or '?'}  {r['state'] or '?':<8}"
        + (f"  {r['duration_s']:.1f}s" if r["duration_s"] is not None else "") + f"  {r['run_id']}"
        + (f"  {r['job']}" if d["type"] != "job" and r.get("job") else "")
        + (f"  error: {r['error_message']}" if r.get("error_message") else "") for r in d["runs"]])
    _section(lines, "quality", [
        f"{q['measured_at']}  {q['version'] or q['version_id']}  "
        + ", ".join(f"{k} {v:.2f}" if isinstance(v, int | float) else f"{k} {v}" for k, v in q["scores"].items()
                    if v is not None)
        + (f"  failed: {', '.join(str(v.get('rule_name')) for v in q['failed_validations'])}"
           if q["failed_validations"] else "")
        + (f"  anomalies: {', '.join(str(a.get('type', a)) if isinstance(a, dict) else str(a) for a in q['anomalies'])}"
           if q["anomalies"] else "") for q in d["quality"]])
    _section(lines, "provenance", [
        f"{p['timestamp']}  {p['event_type']:<9} by {(p['agent'] or {}).get('name', '?')}"
        f"  ({(p['operation'] or {}).get('type', '?')})" for p in d["provenance"]])
    return "\n".join(lines)


def run_search(args: argparse.Namespace) -> int:
    from sink.catalog import search
    from sink.queries import QueryError

    with _connect(args) as q:
        try:
            page = search(q.conn, args.text, types=[args.type] if args.type else None, limit=args.limit,
                          offset=args.offset)
        except QueryError as exc:
            if exc.code == "query":
                raise ConfigurationError(str(exc)) from exc
            raise
    print(json.dumps(page.to_dict(), ensure_ascii=False, indent=2) if args.json else render_search(page))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from sink.catalog import show
    from sink.queries import NodeNotFoundError, QueryError

    with _connect(args) as q:
        try:
            detail = show(q.conn, args.node)
        except NodeNotFoundError:
            raise
        except QueryError as exc:
            if exc.code == "query":
                raise ConfigurationError(str(exc)) from exc
            raise
    print(json.dumps(detail, ensure_ascii=False, indent=2, default=str) if args.json else render_show(detail))
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                        help="graph database DSN (env LINEAGE_POSTGRES_DSN; default: the running `lineage up`)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_data_dir(parser)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("search", help="find datasets, jobs and columns by name, namespace or column",
                              description="Prefix and substring match on names, namespaces and column names, "
                                          "ranked exact > prefix > substring (substrings need 3+ characters).")
    p.add_argument("text", metavar="TEXT")
    p.add_argument("--type", choices=("dataset", "job", "column"), default=env_default("--type"),
                   help="only this kind of node (env LINEAGE_TYPE)")
    p.add_argument("--limit", type=_bounded(1, 500), default=env_default("--limit", "20"),
                   help="results per page (env LINEAGE_LIMIT, default 20)")
    p.add_argument("--offset", type=_bounded(0, 999), default=0, help="skip this many results (paging)")
    _common(p)
    p.set_defaults(func=run_search)
    p = subparsers.add_parser("show", help="everything the graph knows about one node",
                              description="Type, schema, owners, tags, versions, latest runs, quality, provenance, "
                                          "aliases; for a job its SQL, source code location and job type.")
    p.add_argument("node", metavar="NODE",
                   help="namespace/name, namespace:name, job:namespace/name, <dataset>#column, or a UUID")
    _common(p)
    p.set_defaults(func=run_show)
