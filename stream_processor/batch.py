"""Batch mode of the stream's pipeline, for ``lineage load``: files in, the same graph out.

The files become rows with exactly the Kafka source's columns (:data:`~stream_processor.kafka_source.KAFKA_SCHEMA`),
``topic = "file:<path>"``, ``partition = 0``, ``offset`` = the line the message starts on, ``timestamp`` =
the file's modification time, and the ``lineage.subject`` header taken from an Evo document's ``subject``
key (a file has no Kafka headers; that key is where a file says which object version ``$self`` stands
for). The driver splits the files (:func:`read_sources`: one ``json.loads`` per whole-file document, a
byte split per JSON Lines file) and builds one Arrow table, a few Spark partitions per core (measured on
20,000 demo lines, 86 MB: 1.3 s to split and hand to Spark, against 3.1 s for ``spark.read.text``, which can
only number lines with an extra ``zipWithIndex`` pass); then the stream's own functions run on it:

    decode          :func:`stream_processor.decode.decode_batches` (``mapInArrow``)
    rejected rows   collected to the driver and reported as ``path:line: reason`` BEFORE anything is
                    written (no dead-letter topic: ``lineage load`` may run without a broker)
    dedupe          by ``event_hash``, keeping the first occurrence in load order (file, line) so the
                    stored ``source`` is deterministic (the stream's ``dropDuplicatesWithinWatermark``
                    is streaming-only, and ``dropDuplicates`` keeps an arbitrary row): the driver picks
                    the rows from their coordinates (:func:`first_occurrences`) and a broadcast semi-join
                    keeps them, so the events themselves are never shuffled
    recombine       :func:`stream_processor.recombine.recombine_self_parts_batch`: the stream's per-group
                    merge, every part of a group present at once, so each group is emitted once (revision 1)
    write           :class:`stream_processor.writer.GraphBatchWriter` called as ``writer(df, batch_id)``
                    once per load batch

Load batches: the accepted rows in load order ``(file, line, event_hash)``, ``batch_size`` at a time, with
the content-derived negative id :func:`load_batch_id`, so loading the same files again is a no-op batch
by batch and never collides with the processor's (non-negative) micro-batch ids. Both kinds of batch
project into one Parquet store, ordered by their commit sequence number (migration 008), so a load can run
beside the stream.

:func:`run_local` is the same pipeline without Spark (``lineage load --engine local``): the same
decoder on the same Arrow table, the same dedupe order, the same per-group recombination function and
the same batches, written with ``GraphStore.write_batches``; both engines give the same graph.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["FILE_TOPIC_PREFIX", "SUFFIXES", "LoadSource", "LoadOutcome", "Rejection", "list_files",
           "read_sources", "load_batch_id", "first_occurrences", "plan_batches", "run_spark", "run_local"]

log = logging.getLogger(__name__)

FILE_TOPIC_PREFIX = "file:"
SUFFIXES = (".json", ".jsonl", ".ndjson")
SUBJECT_KEY = "subject"
_SUBJECT_HEADER = "lineage.subject"


@dataclass(frozen=True)
class Rejection:
    """One message (or file) that could not be loaded: ``path:line: message``."""

    path: str
    line: int | None
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line is not None else f"{self.path}: {self.message}"


@dataclass
class LoadSource:
    """The files of one load as source rows: ``table`` has the Kafka source's columns."""

    table: Any
    files: list[str]
    unreadable: list[Rejection] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._order = {FILE_TOPIC_PREFIX + f: i for i, f in enumerate(self.files)}

    def file_number(self, topic: str) -> int:
        """The position of ``topic``'s file in the load (files named first come first)."""
        return self._order.get(topic, len(self.files))


@dataclass
class LoadOutcome:
    """What one load did (both engines fill it the same way)."""

    lines: int = 0
    events: int = 0              # accepted events decoded, duplicates and `$self` parts included
    duplicates: int = 0          # within the run and already in the graph
    events_new: int = 0
    batches: int = 0
    self_parts: int = 0          # `$self` parts ...
    recombined: int = 0          # ... merged into this many events
    rejected: list[Rejection] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)     # one sink.model.BatchResult per batch
    timings: dict[str, float] = field(default_factory=dict)   # seconds per step: decode, prepare, write


# -- files -> source rows --------------------------------------------------------------------------------


def list_files(paths: Iterable[str]) -> Iterator[Path]:
    """The files named, and those under the directories named (``*.json``, ``*.jsonl``, ``*.ndjson``)."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
        else:
            yield path


def _subject_headers(doc: Any) -> list[dict[str, Any]]:
    """The ``lineage.subject`` header of an Evo document that names its subject (``{"subject": {...}}``)."""
    if not isinstance(doc, dict) or SUBJECT_KEY not in doc:
        return []
    if not ("events" in doc or "lineage" in doc):
        return []  # an event with some custom "subject" key: not ours to read
    value = json.dumps(doc[SUBJECT_KEY], ensure_ascii=False, sort_keys=True).encode("utf-8")
    return [{"key": _SUBJECT_HEADER, "value": value}]


def _array_elements(text: str) -> Iterator[tuple[int, str, Any]]:
    """``(line, source text, value)`` of each element of a JSON array that is known to parse."""
    decoder = json.JSONDecoder()
    pos, line, counted = text.index("[") + 1, 1, 0
    end = len(text)
    while pos < end:
        ch = text[pos]
        if ch in " \t\r\n,":
            pos += 1
            continue
        if ch == "]":
            return
        value, stop = decoder.raw_decode(text, pos)
        line += text.count("\n", counted, pos)
        counted = pos
        yield line, text[pos:stop], value
        pos = stop


def _messages(path: Path) -> Iterator[tuple[int, bytes, list[dict[str, Any]]]]:
    """``(line, message bytes, headers)``: a whole-file JSON document, array elements, or JSON Lines."""
    data = path.read_bytes()
    stripped = data.strip()
    if stripped[:1] in (b"[", b"{"):
        try:
            text = stripped.decode("utf-8")
            doc = json.loads(text)
        except ValueError:
            doc = None
        first = data.count(b"\n", 0, len(data) - len(data.lstrip())) + 1
        if isinstance(doc, list):
            for line, item, value in _array_elements(text):
                yield first + line - 1, item.encode("utf-8"), _subject_headers(value)
            return
        if isinstance(doc, dict):
            yield first, stripped, _subject_headers(doc)
            return
    for number, line in enumerate(data.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        headers: list[dict[str, Any]] = []
        if b'"subject"' in line:  # only then is the line parsed here; the decoder parses every line anyway
            try:
                headers = _subject_headers(json.loads(line))
            except ValueError:
                pass
        yield number, line, headers


def read_sources(paths: Iterable[str]) -> LoadSource:
    """Split the files into source rows (Kafka columns, see the module doc); unreadable files are reported."""
    import pyarrow as pa

    from .kafka_source import _arrow_schema

    schema = _arrow_schema()
    cols: dict[str, list[Any]] = {n: [] for n in schema.names}
    files: list[str] = []
    unreadable: list[Rejection] = []
    for path in list_files(paths):
        files.append(str(path))
        try:
            messages = list(_messages(path))
            mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        except OSError as exc:
            unreadable.append(Rejection(str(path), None, "load.unreadable", str(exc.strerror or exc)))
            continue
        topic = FILE_TOPIC_PREFIX + str(path)
        for line, value, headers in messages:
            cols["key"].append(None)
            cols["value"].append(value)
            cols["topic"].append(topic)
            cols["partition"].append(0)
            cols["offset"].append(line)
            cols["timestamp"].append(mtime)
            cols["timestampType"].append(0)
            cols["headers"].append(headers)
    return LoadSource(pa.Table.from_pydict(cols, schema=schema), files, unreadable)


# -- batches ---------------------------------------------------------------------------------------------


def load_batch_id(hashes: list[str]) -> int:
    """``-(1 + int(sha256("".join(hashes))[:15], 16))``: content-derived, negative."""
    return -(1 + int(hashlib.sha256("".join(hashes).encode()).hexdigest()[:15], 16))


def _load_order(source: LoadSource) -> Callable[[Any], tuple[int, int, str]]:
    return lambda r: (source.file_number(r["source_topic"]), int(r["source_offset"]), r["event_hash"])


def first_occurrences(rows: Iterable[Any], source: LoadSource) -> list[Any]:
    """``rows`` (``event_hash``, ``source_topic``, ``source_offset``) in load order, each hash's first only."""
    seen: set[str] = set()
    out = []
    for r in sorted(rows, key=_load_order(source)):
        if r["event_hash"] not in seen:
            seen.add(r["event_hash"])
            out.append(r)
    return out


def plan_batches(rows: list[Any], source: LoadSource, batch_size: int) -> list[tuple[int, list[str]]]:
    """``[(batch_id, event hashes)]``: the hashes of ``rows`` (``event_hash``, ``source_topic``,
    ``source_offset``) in load order, each once, ``batch_size`` at a time."""
    ordered = [r["event_hash"] for r in first_occurrences(rows, source)]
    chunks = [ordered[i:i + batch_size] for i in range(0, len(ordered), batch_size)]
    return [(load_batch_id(chunk), chunk) for chunk in chunks]


def _rejections(rows: Iterable[Any], source: LoadSource) -> list[Rejection]:
    out = [Rejection(str(r["source_topic"]).removeprefix(FILE_TOPIC_PREFIX), int(r["source_offset"]),
                     r["error_code"] or "internal", r["error_message"] or "rejected") for r in rows]
    return sorted(out, key=lambda j: (source.file_number(FILE_TOPIC_PREFIX + j.path), j.line or 0))


def _count_parts(outcome: LoadOutcome, rows: Iterable[Any]) -> int:
    """Tally `$self` parts and recombined events of the recombined ``rows``; returns the events before
    recombination (for the within-run duplicate count)."""
    before = 0
    for r in rows:
        parts = int(r["parts"] or 1)
        before += parts
        if r["has_self"] and r["revision"]:   # a job event's `$self` output is no part (recombine.is_self_part)
            outcome.self_parts += parts
            outcome.recombined += 1
    return before


def _tally(outcome: LoadOutcome, result: Any, size: int) -> None:
    outcome.batches += 1
    outcome.results.append(result)
    if result.already_committed:  # this very batch was loaded before: all duplicates
        outcome.duplicates += size
    else:
        outcome.events_new += result.events_new
        outcome.duplicates += result.duplicates


# -- Spark -----------------------------------------------------------------------------------------------


def _keep_first(spark: Any, ok: Any, first: list[Any]) -> Any:
    """The rows of ``ok`` at the coordinates ``first`` (:func:`first_occurrences`, picked on the driver from
    the few coordinates it collects anyway): a broadcast semi-join, so the events are never shuffled."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    keep = spark.createDataFrame(pa.table({
        "source_topic": pa.array([r["source_topic"] for r in first], pa.string()),
        "source_offset": pa.array([r["source_offset"] for r in first], pa.int64()),
        "event_hash": pa.array([r["event_hash"] for r in first], pa.string())}))
    return ok.join(F.broadcast(keep), ["source_topic", "source_offset", "event_hash"], "left_semi")


def run_spark(spark: Any, source: LoadSource, settings: Any, batch_size: int,
              on_rejected: Callable[[list[Rejection]], None] | None = None) -> LoadOutcome:
    """Load ``source`` through the stream's functions on ``spark`` and its ``GraphBatchWriter`` (``settings``:
    a :class:`~stream_processor.settings.ProcessorSettings`). ``on_rejected`` sees the rejections before
    anything is written."""
    import time

    import pyarrow as pa
    from pyspark.sql import functions as F

    from schemas.errors import StoreError

    from .decode import DECODED_SCHEMA, decode_batches
    from .recombine import plain_rows_batch, self_parts_batch
    from .writer import GraphBatchWriter

    outcome = LoadOutcome(lines=source.table.num_rows, rejected=list(source.unreadable))
    registry_url = settings.registry_url
    started = time.perf_counter()

    def decode(batches: Any) -> Any:
        return decode_batches(batches, registry_url)

    if not source.table.num_rows:
        if on_rejected is not None:
            on_rejected(outcome.rejected)
        return outcome
    # createDataFrame makes one partition per Arrow batch: a few per core, and no shuffle to spread them
    tasks = 2 * max(int(spark.sparkContext.defaultParallelism), 1)
    chunk = min(max(-(-source.table.num_rows // tasks), 1), 10_000)
    raw = spark.createDataFrame(pa.Table.from_batches(source.table.to_batches(max_chunksize=chunk),
                                                      source.table.schema))
    decoded = raw.mapInArrow(decode, DECODED_SCHEMA).persist()
    merged = None
    try:
        rejected = decoded.filter(F.col("status") != "ok").select(
            "source_topic", "source_offset", "error_code", "error_message").collect()
        outcome.rejected += _rejections(rejected, source)
        if on_rejected is not None:
            on_rejected(outcome.rejected)
        ok = decoded.filter(F.col("status") == "ok")
        coordinates = ok.select("event_hash", "source_topic", "source_offset").collect()
        outcome.events = len(coordinates)
        outcome.timings["decode"] = time.perf_counter() - started
        if not coordinates:
            return outcome
        deduped = _keep_first(spark, ok, first_occurrences(coordinates, source))
        # recombine_self_parts_batch, with only the (few) merged `$self` rows cached: the plain rows are
        # a filter over the decoded cache, not worth a second copy of every event
        merged = self_parts_batch(deduped).persist()
        recombined = plain_rows_batch(deduped).unionByName(merged)
        keys = recombined.select("event_hash", "source_topic", "source_offset", "has_self", "parts",
                                 "revision").collect()
        outcome.duplicates = outcome.events - _count_parts(outcome, keys)
        plan = plan_batches(keys, source, batch_size)
        outcome.timings["prepare"] = time.perf_counter() - started - outcome.timings["decode"]
        if not plan:
            return outcome
        numbered = recombined.join(F.broadcast(spark.createDataFrame(pa.table({
            "event_hash": [h for _, hashes in plan for h in hashes],
            "_batch": pa.array([i for i, (_, hashes) in enumerate(plan) for _ in hashes], pa.int32())}))),
            "event_hash")  # batch number of every row: a broadcast join, no shuffle
        reports: list[Any] = []
        writer = GraphBatchWriter(settings, on_batch=reports.append)
        try:
            for i, (batch_id, hashes) in enumerate(plan):
                before = len(reports)
                writer(numbered.filter(F.col("_batch") == i).drop("_batch"), batch_id)
                writer.drain()
                if len(reports) == before:
                    raise StoreError(f"load batch {batch_id} ({len(hashes)} events) was not written",
                                     code="store.load")
                _tally(outcome, reports[-1].result, len(hashes))
        finally:
            writer.cancel()
            writer._reset_store()  # the driver's connection (the writer is ours alone)
        outcome.timings["write"] = time.perf_counter() - started - outcome.timings["decode"] - outcome.timings[
            "prepare"]
        log.info("lineage load on Spark: %s", {k: round(v, 2) for k, v in outcome.timings.items()})
        return outcome
    finally:
        decoded.unpersist()
        if merged is not None:
            merged.unpersist()


# -- local (no Spark) ------------------------------------------------------------------------------------


def _recombine_local(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`~stream_processor.recombine.recombine_group` over the `$self` groups of ``rows`` (plain rows
    pass through with revision 0), as ``recombine_self_parts_batch`` does in Spark."""
    import pandas as pd

    from .recombine import recombine_group, self_group_key

    groups: dict[str, list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        key = self_group_key(row)
        if key is None:
            out.append({**row, "revision": 0, "parts": 1})
        else:
            groups.setdefault(key, []).append(row)
    for key, members in groups.items():
        frame = recombine_group((key,), pd.DataFrame(members))
        out.extend({k: (None if v is pd.NaT else v) for k, v in r.items()} for r in frame.to_dict("records"))
    return out


def run_local(source: LoadSource, dsn: str, batch_size: int, parquet_dir: str | None = None,
              on_rejected: Callable[[list[Rejection]], None] | None = None,
              identity: dict[str, Any] | None = None) -> LoadOutcome:
    """The same pipeline as :func:`run_spark` in this process, written with ``GraphStore.write_batches``
    (each batch one transaction, as ``write_batch`` writes it; the next batch is staged while one merges)."""
    import time

    import pyarrow as pa

    from sink.model import StoredEvent
    from sink.postgres import GraphStore

    from .decode import decode_batches

    outcome = LoadOutcome(lines=source.table.num_rows, rejected=list(source.unreadable))
    started = time.perf_counter()
    decoded: list[dict[str, Any]] = []
    for batch in decode_batches(iter(source.table.to_batches(max_chunksize=2000))):
        decoded.extend(pa.Table.from_batches([batch]).to_pylist())
    outcome.rejected += _rejections([r for r in decoded if r["status"] != "ok"], source)
    if on_rejected is not None:
        on_rejected(outcome.rejected)
    ok = [r for r in decoded if r["status"] == "ok"]
    outcome.events = len(ok)
    outcome.timings["decode"] = time.perf_counter() - started
    rows = _recombine_local(first_occurrences(ok, source))
    outcome.duplicates = outcome.events - _count_parts(outcome, rows)
    by_hash = {r["event_hash"]: r for r in rows}
    outcome.timings["prepare"] = time.perf_counter() - started - outcome.timings["decode"]
    plan = list(plan_batches(rows, source, batch_size))

    def batches() -> Iterator[tuple[int, list[StoredEvent]]]:
        for batch_id, hashes in plan:     # built on the store's staging thread, one batch ahead
            yield batch_id, [StoredEvent(event=json.loads(r["event_json"]), event_hash=r["event_hash"],
                                         source=f"{r['source_topic']}[{r['source_partition']}]@{r['source_offset']}",
                                         revision=int(r["revision"] or 0), text=r["event_json"])
                             for r in (by_hash[h] for h in hashes)]

    with GraphStore(dsn) as store:
        store.migrate()
        with closing(store.write_batches(batches(), identity=identity or {"application": "lineage load"})) as writes:
            for (batch_id, hashes), (result, rejected) in zip(plan, writes, strict=True):
                _tally(outcome, result, len(hashes))
                for where, exc in rejected:
                    outcome.rejected.append(Rejection(where, None, getattr(exc, "code", "store"), str(exc)))
                if parquet_dir:     # on this thread while the next batch is staged
                    from sink.parquet import ParquetGraphStore

                    ParquetGraphStore(parquet_dir).write_from_postgres(dsn, batch_id)
    outcome.timings["write"] = time.perf_counter() - started - outcome.timings["decode"] - outcome.timings["prepare"]
    log.info("lineage load (local): %s", {k: round(v, 2) for k, v in outcome.timings.items()})
    return outcome
