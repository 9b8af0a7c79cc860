"""``lineage load FILE|DIR...``: batch-ingest OpenLineage JSON / JSONL files into the PostgreSQL graph.

Accepted files: JSON Lines (one event per line, as the OpenLineage client's file transport writes),
a JSON array of events, a single (possibly pretty-printed) event, or an Evo lineage document
(``{"events": [...], "self_link": ...}``). Directories are walked for ``*.json``, ``*.jsonl`` and
``*.ndjson``. Every event goes through the stream's decoder and validator
(:func:`schemas.codec.decode_message`, :func:`schemas.validate.validate_message`), the store's
storability check and the event-hash dedupe (within the run, and durably in ``lineage_events``).

A line that fails is reported on stderr as ``path:line: reason`` and the good lines are still loaded;
the exit code is then 1. Batch ids of ``lineage load`` are negative and derived from the content
(``-(1 + first 60 bits of sha256(event hashes))``), so loading the same file twice is a no-op and never
collides with the stream processor's (non-negative) micro-batch ids.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schemas.errors import ConfigurationError, LineageError

from .common import add_data_dir, env_default, resolve_endpoint

__all__ = ["register", "run", "read_events", "LoadReport", "load_batch_id"]

_SUFFIXES = (".json", ".jsonl", ".ndjson")


@dataclass
class LoadReport:
    files: int = 0
    lines: int = 0
    events: int = 0
    rejected: int = 0
    duplicates: int = 0
    events_new: int = 0
    batches: int = 0
    errors: list[str] = field(default_factory=list)


def _files(paths: list[str]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _SUFFIXES)
        else:
            yield path


def _chunks(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, JSON bytes of one message)``: whole-file JSON, array elements, or JSONL lines."""
    data = path.read_bytes()
    stripped = data.strip()
    if stripped.startswith(b"[") or stripped.startswith(b"{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
        if isinstance(doc, list):
            for item in doc:
                yield 1, json.dumps(item, ensure_ascii=False).encode("utf-8")
            return
        if isinstance(doc, dict):
            yield 1, stripped
            return
    for number, line in enumerate(data.splitlines(), start=1):
        if line.strip():
            yield number, line.strip()


def read_events(paths: list[str], report: LoadReport) -> Iterator[object]:
    """Validated :class:`sink.model.StoredEvent` of every good message; errors go to ``report.errors``."""
    from schemas.codec import decode_message
    from schemas.identity import event_hash
    from schemas.validate import validate_message
    from sink.derive import check_storable
    from sink.model import StoredEvent

    seen: set[str] = set()
    for path in _files(paths):
        report.files += 1
        try:
            chunks = list(_chunks(path))
        except OSError as exc:
            report.errors.append(f"{path}: {exc.strerror or exc}")
            report.rejected += 1
            continue
        for number, chunk in chunks:
            report.lines += 1
            try:
                for message in decode_message(chunk):
                    event = validate_message(message)
                    check_storable(event)
                    digest = event_hash(event)
                    report.events += 1
                    if digest in seen:
                        report.duplicates += 1
                        continue
                    seen.add(digest)
                    yield StoredEvent(event=event, event_hash=digest, source=f"{path}:{number}")
            except LineageError as exc:
                report.rejected += 1
                report.errors.append(f"{path}:{number}: {exc}")


def load_batch_id(hashes: list[str]) -> int:
    """``-(1 + int(sha256("".join(hashes))[:15], 16))``: content-derived, negative."""
    return -(1 + int(hashlib.sha256("".join(hashes).encode()).hexdigest()[:15], 16))


def run(args: argparse.Namespace) -> int:
    from sink.postgres import GraphStore

    if args.batch_size < 1:
        raise ConfigurationError(f"--batch-size must be at least 1, not {args.batch_size}")
    dsn = resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn")
    report = LoadReport()
    with GraphStore(dsn) as store:
        store.migrate()
        batch: list = []

        def flush() -> None:
            if not batch:
                return
            result = store.write_batch(load_batch_id([e.event_hash for e in batch]), batch,
                                       identity={"application": "lineage load"})
            report.batches += 1
            if result.already_committed:        # this very batch was loaded before: all duplicates
                report.duplicates += len(batch)
            else:
                report.events_new += result.events_new
                report.duplicates += result.duplicates
            for source, exc in store.last_rejections:
                report.rejected += 1
                report.errors.append(f"{source}: {exc}")
            batch.clear()

        for stored in read_events(args.paths, report):
            batch.append(stored)
            if len(batch) >= args.batch_size:
                flush()
        flush()
    for line in report.errors:
        print(line, file=sys.stderr)
    print(f"loaded {report.files} file(s), {report.lines} line(s): {report.events} event(s), "
          f"{report.events_new} new, {report.duplicates} duplicate(s), {report.rejected} rejected, "
          f"{report.batches} batch(es)")
    return 1 if report.rejected else 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "load", help="batch-ingest OpenLineage JSON / JSONL files into the graph",
        description="Ingest OpenLineage JSON / JSONL files (the OpenLineage file transport's output, JSON "
                    "arrays, single events, Evo lineage documents) with the stream's validation and dedupe.")
    parser.add_argument("paths", nargs="+", metavar="FILE|DIR")
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                        help="graph database DSN (env LINEAGE_POSTGRES_DSN; default: the running `lineage up`)")
    parser.add_argument("--batch-size", type=int, default=int(env_default("--batch-size", 5000)),
                        help="events per transaction (env LINEAGE_BATCH_SIZE, default 5000)")
    add_data_dir(parser)
    parser.set_defaults(func=run)
