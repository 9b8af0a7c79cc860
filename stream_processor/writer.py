"""``foreachBatch``: one micro-batch -> PostgreSQL + Parquet graph, downstream topics, metrics.

Per batch (one unit of work, keyed by ``batch_id``):

1. executors, one task per partition (``mapInArrow``): accepted rows are staged with
   ``GraphStore.stage_partition(dsn, batch_id, part, events)`` (one connection per partition, replacing
   ``(batch_id, part)``, so a re-run is a no-op); rejected rows are published to the DLQ. Each task
   returns a handful of count rows - nothing per event reaches the driver;
2. driver, once the batch is marked, on a `$self` thread while the finisher finishes the batch before: the `$self`
   step (:func:`stream_processor.recombine.recombine_in_store`: the batch's parts absorbed, the due groups'
   recombined events staged with the batch, one transaction; idempotent, so finishing a batch again emits nothing
   twice); then, on the finisher thread while Spark goes on with the next batch (pipelining, below), once the step
   is done: ``GraphStore(dsn).merge(batch_id)`` (one transaction, a no-op for a batch already committed);
   the quality (WIA §4) and provenance (§3) annotations exist from here on;
3. driver: the enriched records, each with the ``quality`` and ``provenance`` the graph now holds for its
   event, to ``openlineage.events.enriched`` (:mod:`stream_processor.enrich`: from ``lineage_events`` and
   what the staging pass handed over in ``stg_event_keys``, two statements and a producer);
4. driver: the rows the batch changed (``sink.parquet.changed_rows``, read once) to Parquet, then the same rows as
   the batch's graph changes to ``openlineage.graph`` (key = row id; nodes, edges, column edges and runs,
   :func:`graph_topic_tables`) on a background thread
   (:meth:`GraphBatchWriter.flush_graph`);
5. metrics from the count rows and the :class:`~sink.model.BatchResult`; ``BatchReport.timings`` has
   ``stage``, ``merge``, ``enrich``, ``parquet``, ``graph`` (seconds), and ``after_wait`` (from the commit until the
   after-commit thread took the batch: its predecessor's steps 3-4 still running).

Why after the merge (and not the enriched records from the staging pass): the annotations are computed by
the merge - quality compares a dataset version with the previous version of the dataset, whichever batch it
came in - so a record published while staging could only carry nulls. Up to session 9 this step was a second
Spark pass over the persisted batch (``MEMORY_AND_DISK``), deriving each event again or reading its staged
keys, with a look-up and a producer per partition; the staging pass now hands over each event's annotation
keys, Kafka key and record (migration 010), the event text is ``lineage_events.payload``, and the batch is
no longer persisted.

Pipelining (migration 011): ``foreachBatch`` returns once batch N is staged and marked in
``lineage_staged_batches``; step 2 runs on one finisher thread (its own PostgreSQL connection) while
Spark plans, reads, decodes and stages batch N+1 - the database merges N on one core while the executors
stage on the other - and steps 3-4 (the export of N's changed rows, its enriched records, Parquet files and
graph publication, then its unmark and report) on an after-commit thread of their own (its own connection), in
commit order, so the finisher merges N+1 as soon as it is staged instead of after N's export (since session 44:
the last batch's merge of ``lineage bench`` waited ~0.8 s for its predecessor's Parquet files). The export reads
the rows whose ``last_batch_id`` is N: when N+1 commits first, the rows it changed again are in N+1's export
instead (both are committed states; the Parquet reader and the compacted graph topic keep the latest, as the
graph topic's catch-up always has), and the enrich step's look-up reads the annotation rows the export did not
bring, as they stand. Before marking N+2, ``foreachBatch`` waits for N's whole finishing, its after-commit steps
included (:data:`FINISH_DEPTH`), so a failure there fails N+2 (not committed, re-run) and at most two batches are
ever in flight; batches are merged, exported and unmarked in order: once a batch's finishing failed (its merge or
its after-commit steps), neither thread runs a step of a batch after it (N+1 stays marked), and the next run's
recovery finishes them in order (a merged batch's merge is a no-op). Spark
commits N's offsets when ``foreachBatch`` returns, before N is merged, so the staged rows are the only copy
of N until then: the staging tables are LOGGED (011) and a writer's first call finishes, in order, every
batch still marked (a crash, or a stop while PostgreSQL was down) before it stages anything. A batch marked
and then re-run by Spark (a crash between marking and the return) is finished twice: the merge is a no-op
the second time and its enriched records are published again (at-least-once, stable keys).
:meth:`GraphBatchWriter.drain` waits for the finisher (the runner calls it when the query stops,
``StreamHarness.drain`` after Spark committed). ``BatchReport.timings["finish_wait"]``: how long a staged
batch waited for its predecessor's finishing.

The driver's collector: the finishing, the `$self` step and the graph publication each run in a
:func:`sink.heap.frozen_heap` block, so the collections their allocations start walk what the blocks allocated,
not the driver's heap (PySpark, py4j, pandas, pyarrow: a full collection of it took ~110 ms and stopped every
driver thread). Measured with ``benchmarks/gc_pauses.py`` over ``lineage bench --events 40000`` (2026-11-26, 3
interleaved runs each): full collections 2.5-3.0 s -> 0.7-0.9 s per run, longest pause 211-262 -> 72-101 ms.
Session 13's ``gc.freeze()`` of the whole driver after start-up, which did not land, made these blocks pause the
collector instead of freezing (``sink/heap.py``: a process holding frozen objects of its own), and latency worse.

Enriched records are published only for events that are new in the graph with this batch
(``lineage_events.first_batch_id = batch_id``): an event already stored by an earlier batch (a replay
days later) gets no second record, and a re-run of a committed batch republishes exactly the same set,
with the same keys (at-least-once with stable keys). A record over the producer's ``message.max.bytes``
is published in chunks (:class:`~stream_processor.publish.RecordPublisher`; metric ``enriched_chunked``).

Store batch ids: Spark numbers the micro-batches of a checkpoint from 0, and the store skips a batch id it
has already committed (that is what makes a replay a no-op). A NEW checkpoint against a database that
already holds stream batches (a checkpoint deleted to re-read a topic; ``lineage up`` after its embedded
broker lost the topics) would therefore have its first batches skipped as "already committed". So each
checkpoint gets a store epoch, kept in the file ``<checkpoint>/lineage-store-epoch``: ``0`` on an empty
database (store ids = Spark ids) or for a checkpoint that committed batches before epochs existed,
otherwise ``1 + max(committed stream batch id) >> 40``; the store batch id is
``epoch * 2**40 + spark_batch_id`` (:meth:`GraphBatchWriter.store_batch_id`). A restart reads the same
file, so a re-run batch keeps its id; ids stay increasing across checkpoints. ``lineage load``'s negative
ids are not touched.

Graph publication is recoverable: ``lineage_publications`` (migration 004) holds the last batch whose
graph changes were fully published. Each publication first publishes every committed batch after that
mark (``lineage_transactions.batch_id >= 0``) that is not yet published, in order, advancing the mark
after each; the first call of a writer starts such a catch-up at once, so a batch committed before a
crash or a failed publication is published on restart. Rows a later batch changed again are exported
with that batch (``last_batch_id``): a compacted graph topic converges to the same state.

PostgreSQL outages: every database step (migrate, stage, merge, enrich, Parquet export, graph changes)
runs through a :class:`~stream_processor.retry.PostgresRetrier`, which waits with capped exponential
backoff while PostgreSQL is unreachable (up to ``postgres_retry_max_seconds``) *inside* ``foreachBatch``:
the batch, and so its Kafka offsets, is committed only once its work is in the database. Before the
executors stage, the driver waits until PostgreSQL answers, so an outage seen between batches does
not re-run the executor pass (and re-publish its DLQ records); a failure during staging or enriching
re-runs that pass (staging replaces ``(batch_id, part)``; published records are at-least-once).
"""

from __future__ import annotations

import logging
import marshal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.errors import StoreError
from sink.derive import DerivedEvent
from sink.fastjson import loads
from sink.heap import frozen_heap
from sink.model import BatchResult, StoredEvent

from .decode import full_rows, source_of

__all__ = ["GraphBatchWriter", "ParsedOnRead", "graph_tables_of", "BatchReport", "WriterConfig", "COUNTS_SCHEMA", "graph_topic_tables"]

log = logging.getLogger(__name__)

#: One count row: metric name, two labels, a value. ``ts_bucket`` rows count events per 10 ms of
#: Kafka timestamp (label1 = bucket start in ms), for the end-to-end latency histogram.
COUNTS_SCHEMA = "metric string, label1 string, label2 string, value long"
LATENCY_BUCKET_MS = 10
#: Store batch id = epoch * 2**EPOCH_BITS + Spark batch id (module doc: store batch ids).
EPOCH_BITS = 40
EPOCH_SPAN = 1 << EPOCH_BITS
EPOCH_FILE = "lineage-store-epoch"
#: How long the first batch waits at most for the driver's publishers to connect (:meth:`GraphBatchWriter._warm_publishers`;
#: a cluster that does not answer by then is waited for by the records' own flush, as before).
WARM_TIMEOUT_SECONDS = 2.0
#: The last batch whose graph changes were fully published (migration 004).
GRAPH_MARK_SQL = "SELECT last_batch_id FROM lineage_publications WHERE stream = 'graph'"


@dataclass(frozen=True)
class WriterConfig:
    """What an executor task needs (picklable)."""

    dsn: str
    kafka_conf: dict[str, Any]
    topic_enriched: str
    topic_dlq: str
    publish_enriched: bool = True
    #: the driver's text spool directory (stream_processor/text_spool.py; local mode only), else None
    text_spool: str | None = None


@dataclass
class BatchReport:
    """What one batch did, for metrics, the status line and the benchmark."""

    batch_id: int
    result: BatchResult
    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    committed_at: float = 0.0
    duration_seconds: float = 0.0
    #: when Spark handed the batch to ``foreachBatch`` (``time.time()``)
    started_at: float = 0.0
    #: seconds per step: ``stage`` (executors), ``merge``, ``enrich`` (executors), ``parquet``, ``graph``
    timings: dict[str, float] = field(default_factory=dict)

    def total(self, metric: str) -> int:
        return sum(v for (m, _a, _b), v in self.counts.items() if m == metric)

    def latency_samples(self) -> list[tuple[float, int]]:
        """``[(latency_seconds, count)]``: commit time minus each 10 ms bucket of Kafka timestamps."""
        return [(max(self.committed_at - (int(a) + LATENCY_BUCKET_MS / 2) / 1000, 0.0), v)
                for (m, a, _b), v in self.counts.items() if m == "ts_bucket"]


def _store_module() -> Any:
    from sink import postgres

    return postgres


def _record_limit(kafka_conf: dict[str, Any]) -> int:
    """Largest record value we publish: librdkafka's ``message.max.bytes`` less 4 KiB of framing."""
    return int(kafka_conf.get("message.max.bytes") or 1_000_000) - 4096


def _bounded_dead_letter(row: dict[str, Any], limit: int, bump: Callable[..., None]) -> bytes:
    """The encoded ``dead_letter`` of ``row``, its raw value cut to fit ``limit`` bytes when needed.

    A hostile message can be larger than the producer's ``message.max.bytes``; publishing it whole
    would fail the batch forever. The cut record keeps the coordinates, the reason and the first
    ``limit / 2`` bytes of the value, and its message says how large the original was.
    """
    from .publish import dead_letter, encode_record

    record = dead_letter(row)
    value = encode_record("dead_letter", record)
    if len(value) <= limit:
        return value
    raw = record.get("value") or b""
    bump("dlq_truncated")
    record["value"] = raw[: limit // 2]
    record["headers"] = [h for h in record["headers"] if len(h.get("value") or b"") < 1024]
    record["message"] = (f"{record['message'][:2000]} [value truncated from {len(raw)} to {limit // 2} bytes "
                         f"for the dead-letter topic; the original is at {record['topic']}"
                         f"[{record['partition']}]@{record['offset']}]")
    return encode_record("dead_letter", record)


def _counts_batch(counts: dict[tuple[str, str, str], int]) -> Any:
    import pyarrow as pa

    keys = list(counts)
    return pa.RecordBatch.from_pydict({
        "metric": [k[0] for k in keys], "label1": [k[1] for k in keys], "label2": [k[2] for k in keys],
        "value": [counts[k] for k in keys]})


def _heap_apart(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` in a :func:`sink.heap.frozen_heap` block: the collections its allocations start walk what it
    allocated, not the driver's heap (module doc: the driver's collector)."""
    import functools

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        with frozen_heap():
            return method(*args, **kwargs)
    return run


def _profiled(step: str, batch_id: int) -> Callable[[Any], Any]:
    """With ``LINEAGE_PROFILE_DIR`` set, run an executor pass under cProfile and dump its statistics to
    ``<dir>/<step>-<batch>-<pid>-<n>.prof`` (``python -m pstats``); otherwise the pass as it is."""
    import os

    def wrap(fn: Callable[[Iterator[Any]], Iterator[Any]]) -> Callable[[Iterator[Any]], Iterator[Any]]:
        directory = os.environ.get("LINEAGE_PROFILE_DIR")
        if not directory:
            return fn

        def run(batches: Iterator[Any]) -> Iterator[Any]:
            import cProfile

            profile = cProfile.Profile()
            profile.enable()
            try:
                out = list(fn(batches))
            finally:
                profile.disable()
                profile.dump_stats(os.path.join(directory, f"{step}-{batch_id}-{os.getpid()}-{time.time_ns()}.prof"))
            yield from out

        return run

    return wrap


#: Rows of an input Arrow batch made Python dicts at a time in the staging pass: Spark hands ``mapInArrow`` batches of up
#: to ``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000) rows, and the dicts of a whole batch (each with its
#: event's text) held ~70 MB at once.
ROWS_PER_SLICE = 500


def _rows_of(batches: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """The rows of ``batches`` as :func:`~stream_processor.decode.full_rows` dicts, :data:`ROWS_PER_SLICE` at a time."""
    for batch in batches:
        for start in range(0, batch.num_rows, ROWS_PER_SLICE):
            yield from full_rows(batch.slice(start, ROWS_PER_SLICE))


def _stage_and_publish(config: WriterConfig, batch_id: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The staging pass: accepted rows to the staging tables, rejected rows to the DLQ."""
    @_profiled("stage", batch_id)
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        from sink.heap import frozen_heap

        from .publish import RecordPublisher, handover_record
        from .recombine import is_self_part, part_doc
        from .worker_heap import freeze_imports

        freeze_imports()
        part = TaskContext.get().partitionId()
        counts: dict[tuple[str, str, str], int] = {}

        def bump(metric: str, a: str = "", b: str = "", n: int = 1) -> None:
            counts[(metric, a, b)] = counts.get((metric, a, b), 0) + n

        events = ParsedOnRead()
        self_parts: list[tuple[str, str, str]] = []
        handover: dict[str, tuple[bytes | None, str]] | None = {} if config.publish_enriched else None
        made: list[Any] = []  # the producer, made on the first record to publish (a file load may have no broker)

        def publisher() -> Any:
            if not made:
                made.append(RecordPublisher.shared(config.kafka_conf))
            return made[0]

        limit = _record_limit(config.kafka_conf)
        # the collector paused while the batch's rows pile up (sink/heap.py)
        with frozen_heap():
            for row in _rows_of(batches):
                if row.get("error_code") != "validation.facet":  # a dropped facet's record: its event counts
                    bump("consumed", row.get("source_topic") or "", row.get("encoding") or "unknown",
                         int(row.get("parts") or 1))
                ts = row.get("kafka_timestamp")
                if ts is not None:
                    bump("ts_bucket", str(int(ts.timestamp() * 1000) // LATENCY_BUCKET_MS * LATENCY_BUCKET_MS))
                if row["status"] != "ok":
                    bump("rejected", row.get("error_code") or "internal", row.get("error_class") or "")
                    publisher().publish(config.topic_dlq, row.get("key"), _bounded_dead_letter(row, limit, bump))
                    continue
                if row.get("parses"):
                    bump("parses", "decode", n=int(row["parses"]))
                if is_self_part(row):   # recombined in the store (recombine.py), not staged as an event
                    bump("self_parts")
                    self_parts.append(part_doc(row))
                    continue
                if row.get("has_self") and row.get("revision"):  # lineage load's recombined rows
                    bump("self_parts", n=int(row.get("parts") or 1))
                    bump("recombined")
                events.append(row)
                if handover is not None:
                    handover[row["event_hash"]] = (row.get("key"), handover_record(row))
            staged = _store_module().GraphStore.stage_partition(config.dsn, batch_id, part, events, handover, self_parts)
            if config.text_spool is not None:   # for the driver's export of the batch (text_spool.py)
                from .text_spool import write_texts

                write_texts(config.text_spool, batch_id, part, *events.texts())
            if events.parses:
                bump("parses", "staging", n=events.parses)
            # freed while the collector is still paused: objects that die are dropped from its young generation,
            # live ones would all be walked by the collection the next allocation starts (33 of the workers'
            # 655 py-spy samples in lineage bench --events 20000, 2026-11-26, on the line leaving the block)
            events.clear()
            self_parts.clear()
            if handover is not None:
                handover.clear()
        bump("staged", n=int(staged or 0))
        if made:
            made[0].flush()
        yield _counts_batch(counts)

    return run


def _event_texts(changed: dict[str, Any] | None) -> dict[str, str] | None:
    """``{event_hash: payload}`` of the exported ``lineage_events`` rows (the events new with the batch), or None."""
    events = None if changed is None else changed.get("lineage_events")
    if events is None:
        return None
    return dict(zip(events.column("event_hash").to_pylist(), events.column("payload").to_pylist(), strict=True))


#: What :class:`ParsedOnRead` keeps of an accepted row: its text, hash, source, revision and the graph rows decode
#: derived, marshalled (None: the staging pass parses the text).
_Kept = tuple[str, str, str, int, bytes | None]


class ParsedOnRead(Sequence[Any]):
    """The staging pass's accepted events, each kept as what :func:`stored_event` needs and read a slice at a time:
    an event decode derived (its row's ``graph``, stream_processor/decode.py: marshalled rows, kept as bytes until
    read) as a :class:`sink.derive.DerivedEvent` with those rows, any other as a fresh :class:`~sink.model.StoredEvent`
    parsed from its text on read.
    ``GraphStore.stage_partition`` derives a partition :data:`sink.postgres._STREAM_EVENTS` events at a time, so
    only one chunk's parsed events are alive at once, not the whole partition's (a parsed demo event holds ~30 kB
    of Python objects against its 4 kB text: with all of them kept, each staging worker grew by ~235 MB from 5,000-
    to 20,000-event batches, ``lineage bench`` 2026-11-28, session 28). ``parses``: the texts parsed so far (the
    ``stage="staging"`` count of ``lineage_event_parses_total``: 0 when decode derived every event)."""

    __slots__ = ("_rows", "parses")

    def __init__(self) -> None:
        self._rows: list[_Kept] = []
        self.parses = 0

    def append(self, row: dict[str, Any]) -> None:
        """Keep what :func:`stored_event` needs of an accepted decoded row (not the row)."""
        self._rows.append(_kept(row))

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._read(r) for r in self._rows[index]]
        return self._read(self._rows[index])

    def _read(self, kept: _Kept) -> Any:
        text, event_hash, source, revision, graph = kept
        if graph is not None:
            return DerivedEvent(event_hash=event_hash, source=source, text=text, revision=revision,
                                tables=marshal.loads(graph))
        self.parses += 1
        return _parsed(kept)

    def texts(self) -> tuple[list[str], list[str]]:
        """The events' hashes and texts, in order."""
        rows = self._rows
        return [r[1] for r in rows], [r[0] for r in rows]

    def clear(self) -> None:
        self._rows.clear()


def _parsed(kept: _Kept) -> StoredEvent:
    text, event_hash, source, revision, _graph = kept
    return StoredEvent(event=loads(text), event_hash=event_hash, source=source, revision=revision, text=text)


def _kept(row: dict[str, Any]) -> _Kept:
    return row["event_json"], row["event_hash"], source_of(row), int(row.get("revision") or 0), row.get("graph")


def stored_event(row: dict[str, Any]) -> StoredEvent:
    """The :class:`~sink.model.StoredEvent` of an accepted decoded row, parsed from its text (the staging pass's
    events decode did not derive, through :class:`ParsedOnRead`)."""
    return _parsed(_kept(row))


#: Batches staged, marked and handed to the finisher thread but not finished, at most (module doc: pipelining). With
#: 1, a batch waited for its predecessor's finishing before it was marked: 0.15-0.22 s per 5,000-event batch in
#: lineage bench --events 40000 (finish_wait, 2026-11-26), while the finisher (merge, export, enrich, Parquet: ~2.2 s)
#: was on average faster than Spark's side of a batch (~2.5 s) and only its variance made the wait.
FINISH_DEPTH = 2


def _finish_result(future: Any) -> None:
    """Wait for a batch's finishing: its merge (``future``, the finisher's) and then its after-commit steps (the
    future the merge's returns, when they run on their own thread); raises the first failure of either."""
    after = future.result()
    if after is not None:
        after.result()


def _finish_done(future: Any) -> bool:
    """Whether a batch's finishing (:func:`_finish_result`) has ended, with or without a failure."""
    if not future.done():
        return False
    if future.exception() is not None:
        return True
    after = future.result()
    return after is None or after.done()

#: The Parquet tables whose changed rows go to the graph topic: the graph (nodes, edges, column edges) and its runs,
#: rows keyed by an id that later batches update, so a compacted topic keeps one current record each (DESIGN: node /
#: edge / column-edge upserts, compaction-friendly). Not ``lineage_events``: the event log is the enriched topic's,
#: one record per new event with its text; on the graph topic it was the same text again (~90 % of the
#: topic's bytes, and its key was the run id, so compaction kept one event per run).
GRAPH_TOPIC_TABLES = ("lineage_nodes", "lineage_edges", "lineage_column_lineage", "lineage_runs")
#: Published on the graph topic too with ``graph_topic_annotations`` (``LINEAGE_GRAPH_TOPIC_ANNOTATIONS``; the
#: default until session 22). One provenance row per (event, dataset) and one quality row per dataset version: ~3
#: records per demo event that a compacted topic never folds, each already in its event's enriched record. Off,
#: the graph topic's records fell from 4.2 to 1.2 per demo event and the drain's driver CPU by ~0.02-0.03 ms
#: per event (docs/PERFORMANCE.md, session 22).
GRAPH_TOPIC_ANNOTATION_TABLES = ("lineage_provenance", "lineage_quality")


def graph_topic_tables(settings: Any) -> tuple[str, ...]:
    """The tables whose changed rows a writer with ``settings`` publishes on the graph topic."""
    extra = GRAPH_TOPIC_ANNOTATION_TABLES if settings.graph_topic_annotations else ()
    return GRAPH_TOPIC_TABLES + extra


def graph_tables_of(changed: dict[str, Any] | None, settings: Any) -> dict[str, Any] | None:
    """Of a batch's changed rows (``sink.parquet.changed_rows``), the tables its graph publication reads."""
    if changed is None:
        return None
    return {name: changed[name] for name in graph_topic_tables(settings) if name in changed}


class GraphBatchWriter:
    """The ``foreachBatch`` callable of the query (runs on the driver)."""

    def __init__(self, settings: Any, on_batch: Callable[[BatchReport], None] | None = None,
                 metrics_registry: Any = None) -> None:
        import threading

        from .retry import DependencyMetrics, PostgresRetrier

        self.settings = settings
        self.dsn = settings.require_postgres()
        self.config = WriterConfig(dsn=self.dsn, kafka_conf=settings.kafka_config(),
                                   topic_enriched=settings.topic_enriched, topic_dlq=settings.topic_dlq,
                                   publish_enriched=settings.publish_enriched)
        self.on_batch = on_batch
        self._store: Any = None
        self._finish_store: Any = None     # the finisher thread's own connection (the merge's transaction)
        self._finish_pool: Any = None
        self._post_store: Any = None       # the after-commit thread's own connection (the unmark)
        self._post_pool: Any = None
        self._self_store: Any = None       # the `$self` step's thread's own connection
        self._self_pool: Any = None
        self._finish_futures: Any = None   # deque of the finisher's futures not yet seen done, oldest first (each
        #                                    resolves to its batch's after-commit future, or None: _finish_result)
        self._finish_failed: int | None = None   # a batch whose finishing failed: the ones after it are not run
        self._graph_pool: Any = None
        self._graph_future: Any = None
        self._spool: Any = None            # the staging tasks' event texts for the export (local mode: text_spool.py)
        self._cancel = threading.Event()
        self._first_call = True
        self._epoch: int | None = None
        self.dependency_metrics = DependencyMetrics.for_registry(metrics_registry)
        policy = settings.retry_policy() if hasattr(settings, "retry_policy") else None
        self.retrier = PostgresRetrier(self.dsn, policy, self.dependency_metrics, cancel=self._cancel)

    def cancel(self) -> None:
        """Stop waiting for PostgreSQL (the processor is stopping): a waiting batch raises and is not committed."""
        self._cancel.set()

    def _drop(self, slot: str) -> None:
        """Close and forget the connection in attribute ``slot`` (``_store``, ``_finish_store``, ``_self_store``)."""
        store = getattr(self, slot)
        setattr(self, slot, None)
        if store is not None:
            store.close()

    def _connected(self, slot: str) -> Any:
        """The connection in attribute ``slot``, made (with the retrier) when there is none."""
        if getattr(self, slot) is None:
            setattr(self, slot, self.retrier.call("connect", lambda: _store_module().GraphStore(self.dsn)))
        return getattr(self, slot)

    def _reset_store(self) -> None:
        self._drop("_store")

    def _reset_finish_store(self) -> None:
        self._drop("_finish_store")

    def _reset_self_store(self) -> None:
        self._drop("_self_store")

    def _reset_post_store(self) -> None:
        self._drop("_post_store")

    def close(self) -> None:
        """Close the writer's PostgreSQL connections (after :meth:`drain`)."""
        self._reset_store()
        self._reset_finish_store()
        self._reset_self_store()
        self._reset_post_store()
        self.close_spool()

    def close_spool(self) -> None:
        """Remove the text spool (after :meth:`drain`: no batch of this writer is exported any more)."""
        spool, self._spool = self._spool, None
        if spool is not None:
            spool.close()

    @property
    def store(self) -> Any:
        if self._store is None:
            def connect() -> Any:
                store = _store_module().GraphStore(self.dsn)
                try:
                    store.migrate()
                except BaseException:
                    store.close()
                    raise
                return store

            self._store = self.retrier.call("migrate", connect)
        return self._store

    def _wait_for_postgres(self) -> None:
        """Return once PostgreSQL answers on the driver's connection (re-connecting, with backoff)."""
        def check() -> None:
            try:
                self.store.conn.execute("SELECT 1")
            except Exception:
                self._reset_store()
                raise

        self.retrier.call("connect", check)

    def store_batch_id(self, spark_batch_id: int) -> int:
        """The store's batch id of a micro-batch of this checkpoint (module doc: store batch ids)."""
        if spark_batch_id < 0:          # lineage load's content-derived ids
            return spark_batch_id
        if self._epoch is None:
            self._epoch = self.retrier.call("epoch", self._checkpoint_epoch)
        return self._epoch * EPOCH_SPAN + spark_batch_id

    def _checkpoint_epoch(self) -> int:
        from pathlib import Path

        checkpoint = getattr(self.settings, "checkpoint_dir", None)
        if not checkpoint or "://" in str(checkpoint):
            return 0  # no local checkpoint directory to keep the epoch in: Spark's ids as they are
        path = Path(checkpoint) / EPOCH_FILE
        if path.exists():
            return int(path.read_text(encoding="utf-8").strip())
        commits = Path(checkpoint) / "commits"
        if commits.is_dir() and any(commits.iterdir()):
            epoch = 0   # a checkpoint that committed batches before epochs existed: its ids are Spark's
        else:
            row = self.store.conn.execute(
                "SELECT max(batch_id) FROM lineage_transactions WHERE batch_id >= 0").fetchone()
            epoch = 0 if row is None or row[0] is None else (int(row[0]) >> EPOCH_BITS) + 1
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{epoch}\n", encoding="utf-8")
        tmp.replace(path)
        if epoch:
            log.info("new checkpoint %s on a database with earlier stream batches: store batch ids start at "
                     "%d * 2^%d", checkpoint, epoch, EPOCH_BITS)
        return epoch

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.time()
        self._wait_for_postgres()  # before the executor pass, so an outage does not re-run it
        batch_id = self.store_batch_id(int(batch_id))
        if self._first_call:
            self._first_call = False
            self._recover()               # batches a previous run staged and did not finish (module doc)
            self._publish_graph_async(None)  # committed batches a previous run did not publish (module doc)
            # the query is planned and running: the driver's data-source planning workers idle from here on
            from .session import release_planner_workers

            release_planner_workers(df.sparkSession)
            self._open_spool(df.sparkSession)
            self._warm_publishers()
        self._write(df, int(batch_id), started)

    def _open_spool(self, spark: Any) -> None:
        """Give the staging tasks a text spool when they run on this machine (a local master) and
        ``LINEAGE_TEXT_SPOOL`` is not ``false`` (stream_processor/text_spool.py)."""
        import dataclasses
        import os

        if os.environ.get("LINEAGE_TEXT_SPOOL", "true").strip().lower() in ("false", "0", "no", "off"):
            return
        if not str(spark.sparkContext.master).startswith("local") or self.settings.parquet_dir is None:
            return   # a cluster's executors do not share this disk; without Parquet files nothing is exported
        from .text_spool import TextSpool

        self._spool = TextSpool()
        self.config = dataclasses.replace(self.config, text_spool=str(self._spool.root))

    def _warm_publishers(self) -> None:
        """Connect the driver's publishers (the enrich step's, the graph publication's) while Spark stages the first
        batch: a cold idempotent producer's first flush waits ~0.5 s (:meth:`RecordPublisher.warm`), and the enrich
        step's is on the finisher's path, which sets the pipeline's pace (the first batch's enrich step took
        1.35 s of wall time for 0.36 s of its thread's CPU in ``lineage bench --events 40000``, 2026-12-01)."""
        from .publish import RecordPublisher

        if self.config.publish_enriched:
            RecordPublisher.shared(self.config.kafka_conf).warm([self.config.topic_enriched], WARM_TIMEOUT_SECONDS)
        if self.settings.publish_graph:
            self._graph_publisher().warm([self.settings.topic_graph], WARM_TIMEOUT_SECONDS)

    def _graph_publisher(self) -> Any:
        """The writer's one producer for its graph publications, made again only after a failure
        (:meth:`RecordPublisher.shared`; a client.id of its own keeps it apart from the enrich step's): a producer
        per batch was a librdkafka handle, its threads and a thread-local key per batch until the cyclic collector
        freed it, and the processor died after ~1,000 batches of a soak with "Failed to initialize thread local
        storage"."""
        from .publish import RecordPublisher

        conf = self.settings.kafka_config()
        return RecordPublisher.shared({**conf, "client.id": f"{conf.get('client.id') or 'lineage'}-graph"})

    def _run_pass(self, step: str, df: Any, fn: Callable[[Iterator[Any]], Iterator[Any]],
                  counts: dict[tuple[str, str, str], int]) -> None:
        for r in self.retrier.call(step, lambda: df.mapInArrow(fn, COUNTS_SCHEMA).collect()):
            key = (r["metric"], r["label1"] or "", r["label2"] or "")
            counts[key] = counts.get(key, 0) + int(r["value"])

    def _write(self, df: Any, batch_id: int, started: float) -> None:
        """Stage ``batch_id`` (executors), then hand its finishing to the finisher thread (module doc:
        pipelining) once the previous batch's finishing succeeded."""
        counts: dict[tuple[str, str, str], int] = {}
        self._run_pass("stage", df, _stage_and_publish(self.config, batch_id), counts)
        staged_at = time.time()
        has_data = any(k[0] in ("staged", "rejected", "consumed") and v for k, v in counts.items())
        if not has_data and not (batch_id >= 0 and self._self_groups_due()):
            return  # an empty batch (a tick of the idle source) with no `$self` group due: nothing to commit
        # the failure of an earlier batch's finishing fails this one, before it is marked
        self._wait_finished(keep=FINISH_DEPTH - 1)
        waited = time.time() - staged_at
        self.retrier.call("mark", lambda: self.store.conn.execute(
            "INSERT INTO lineage_staged_batches (batch_id) VALUES (%s) ON CONFLICT DO NOTHING", (batch_id,)),
            on_failure=self._reset_store)
        timings = {"stage": staged_at - started, "finish_wait": waited}
        self._hand_to_finisher(batch_id, counts, started, timings)

    def _hand_to_finisher(self, batch_id: int, counts: dict[tuple[str, str, str], int], started: float,
                          timings: dict[str, float]) -> None:
        """Queue marked batch ``batch_id`` for the finisher thread (module doc: pipelining)."""
        if self._finish_pool is None:
            from collections import deque
            from concurrent.futures import ThreadPoolExecutor

            self._finish_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lineage-finish")
            self._post_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lineage-after-commit")
            self._self_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lineage-self")
            self._finish_futures = deque()
        # the `$self` step of a batch runs on a thread of its own while the finisher merges the batch before it
        # (it only adds rows to this batch's staging); the finisher waits for it before this batch's merge
        step = self._self_pool.submit(self._recombine, batch_id, counts) if batch_id >= 0 else None
        self._finish_futures.append(
            self._finish_pool.submit(self._finish_in_order, batch_id, counts, started, timings, True, step))

    def _finish_in_order(self, batch_id: int, counts: dict[tuple[str, str, str], int], started: float,
                         timings: dict[str, float], report: bool, step: Any = None) -> Any:
        """:meth:`_finish` on the finisher thread, unless an earlier batch's finishing failed: batches are merged in
        order, so the later ones stay staged (and marked) for the next run's recovery, in order. Returns the future
        of the batch's after-commit steps (:meth:`_after_commit`, on their own thread)."""
        return self._in_order(batch_id, self._finish, batch_id, counts, started, timings, report, step,
                              self._post_pool)

    def _in_order(self, batch_id: int, step: Callable[..., Any], *args: Any) -> Any:
        """``step(*args)`` for ``batch_id`` (its merge, or its after-commit steps), unless an earlier batch's finishing
        failed; a failure here stops every later batch's steps the same way."""
        if self._finish_failed is not None:
            raise StoreError(f"batch {batch_id} not finished: the finishing of batch {self._finish_failed} before it "
                             "failed (both stay staged; the next run finishes them in order)", code="store.finish")
        try:
            return step(*args)
        except BaseException:
            self._finish_failed = batch_id
            raise

    def _self_groups_due(self) -> bool:
        """True when a `$self` group is due (recombine.py): an empty batch then carries its emission."""
        from .recombine import groups_due

        return bool(self.retrier.call("due", lambda: groups_due(self.store.conn, self.settings.recombine_quiet_seconds),
                                      on_failure=self._reset_store))

    def settled(self) -> bool:
        """True when no batch waits to be finished and no `$self` group waits in the store (a drain may end)."""
        if self._finish_futures and not _finish_done(self._finish_futures[-1]):   # in order: the last is done last
            return False
        import psycopg

        try:   # its own connection: called from the runner's thread while a batch may use the writer's
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SELECT EXISTS (SELECT 1 FROM lineage_self_groups WHERE pending)").fetchone()
        except psycopg.Error:   # PostgreSQL away: not settled; the batches' own retries report it
            return False
        return not row[0]

    def wait_finished(self) -> None:
        """Wait until every batch handed to the finisher thread is finished (raises the finisher's error)."""
        self._wait_finished(keep=0)

    def _wait_finished(self, keep: int) -> None:
        """Wait until at most ``keep`` batches handed to the finisher are unfinished; raise the first error of any
        finishing (one that failed stays in the queue: every later wait raises it again)."""
        futures = self._finish_futures
        if not futures:
            return
        while len(futures) > keep:
            _finish_result(futures[0])
            futures.popleft()
        for future in futures:
            if _finish_done(future):
                _finish_result(future)

    def drain(self) -> None:
        """Wait for the finisher and the outstanding graph publication: everything committed is written."""
        self.wait_finished()
        self.flush_graph()

    @property
    def finish_store(self) -> Any:
        return self._connected("_finish_store")

    @property
    def post_store(self) -> Any:
        return self._connected("_post_store")

    @_heap_apart
    def _finish(self, batch_id: int, counts: dict[tuple[str, str, str], int], started: float,
                timings: dict[str, float], report: bool, step: Any = None, after: Any = None) -> Any:
        """Merge staged batch ``batch_id``, then run its after-commit steps (:meth:`_after_commit`: export, enrich,
        Parquet, the graph publication, the unmark and the report) inline, or on the executor ``after`` while this
        thread merges the next batch; returns their future then (None inline). Idempotent: a batch finished before
        (merged, its records published) is a no-op but for the Parquet export of its changed rows, which writes the
        same files again."""
        t0 = time.time()
        if step is not None:
            step.result()   # the batch's `$self` step, run beside the previous batch's finishing (a failure fails this)
        elif batch_id >= 0:   # a recovered batch (lineage load's, negative ids, bring their groups recombined)
            self._recombine(batch_id, counts)
        t1 = time.time()
        result = self.retrier.call("merge", lambda: self.finish_store.merge(batch_id),
                                   on_failure=self._reset_finish_store)
        t2 = time.time()
        timings = {**timings, "recombine": t1 - t0, "merge": t2 - t1}
        if after is None:
            self._after_commit(batch_id, counts, started, timings, report, result, t2)
            return None
        return after.submit(self._after_commit_in_order, batch_id, counts, started, timings, report, result, t2)

    def _after_commit_in_order(self, batch_id: int, counts: dict[tuple[str, str, str], int], started: float,
                               timings: dict[str, float], report: bool, result: BatchResult, committed_at: float
                               ) -> None:
        """:meth:`_after_commit` on its thread, in commit order, unless an earlier batch's finishing failed (this
        one stays marked: the next run's recovery runs its after-commit steps again, the merge a no-op)."""
        self._in_order(batch_id, self._after_commit, batch_id, counts, started, timings, report, result, committed_at)

    @_heap_apart
    def _after_commit(self, batch_id: int, counts: dict[tuple[str, str, str], int], started: float,
                      timings: dict[str, float], report: bool, result: BatchResult, committed_at: float) -> None:
        """The steps of committed batch ``batch_id`` after its merge: its changed rows read once (the rows whose
        ``last_batch_id`` is this batch: the next batch's merge, which may commit first, takes the rows it changes
        again into its own export, as the graph topic's catch-up always has), the enriched records, the Parquet
        files, the graph publication started, the batch unmarked and reported (module doc: pipelining)."""
        t2 = time.time()
        changed = self.retrier.call("export", lambda: self._changed_rows(batch_id, counts))
        t3 = time.time()
        if self.config.publish_enriched:
            self.retrier.call("enrich", lambda: self._enrich(batch_id, counts, changed))
        t4 = time.time()
        self.retrier.call("parquet", lambda: self._write_parquet(batch_id, changed))
        if self._spool is not None:
            self._spool.discard(batch_id)
        t5 = time.time()
        # only the graph topic's tables outlive this call (the publication overlaps the next batch's finishing):
        # the events' texts, the provenance and quality documents are freed here
        self._publish_graph_async(batch_id, graph_tables_of(changed, self.settings))
        changed = None   # (the closures above share this binding)
        self.retrier.call("unmark", lambda: self.post_store.conn.execute(
            "DELETE FROM lineage_staged_batches WHERE batch_id = %s", (batch_id,)), on_failure=self._reset_post_store)
        now = time.time()
        if report and self.on_batch is not None:
            self.on_batch(BatchReport(batch_id, result, counts, committed_at=committed_at,
                                      duration_seconds=now - started, started_at=started,
                                      timings={**timings, "after_wait": t2 - committed_at, "enrich": t4 - t3,
                                               "parquet": (t3 - t2) + (t5 - t4), "graph": now - t5}))

    @property
    def self_store(self) -> Any:
        return self._connected("_self_store")

    @_heap_apart
    def _recombine(self, batch_id: int, counts: dict[tuple[str, str, str], int]) -> None:
        """The `$self` step of marked ``batch_id`` (recombine.py, :func:`recombine_in_store`), before its merge: on
        the `$self` thread (its own connection) for a batch of this run, inline for a recovered one. Idempotent:
        finishing a batch again (:meth:`_recover`, a re-run) finds its parts absorbed and its emission recorded
        (``emitted_batch``), or the batch merged, and emits nothing more with it."""
        from .recombine import recombine_in_store

        settings = self.settings
        step = self.retrier.call("recombine", lambda: recombine_in_store(
            self.self_store.conn, batch_id, settings.recombine_quiet_seconds, settings.recombine_state_ttl_seconds,
            handover=self.config.publish_enriched), on_failure=self._reset_self_store)
        if step.emitted:
            counts[("recombined", "", "")] = counts.get(("recombined", "", ""), 0) + step.emitted
        if step.parses:
            counts[("parses", "recombine", "")] = counts.get(("parses", "recombine", ""), 0) + step.parses
        # gauges, not sums: the groups the store holds after this batch's step
        counts[("self_groups", "pending", "")] = step.pending
        counts[("self_groups", "held", "")] = step.held

    def _recover(self) -> None:
        """Finish, in order, every batch a previous run staged completely and did not finish (a crash or a
        stop after Spark committed its offsets; migration 011). Not reported as batches of this run."""
        pending = [int(b) for (b,) in self.retrier.call("recover", lambda: self.store.conn.execute(
            "SELECT batch_id FROM lineage_staged_batches ORDER BY batch_id").fetchall(), on_failure=self._reset_store)]
        for batch_id in pending:
            log.info("finishing batch %d, staged by an earlier run", batch_id)
            self._finish(batch_id, {}, time.time(), {}, False)

    def _enrich(self, batch_id: int, counts: dict[tuple[str, str, str], int], changed: dict[str, Any] | None = None
                ) -> None:
        """The enriched records of committed batch ``batch_id``, from PostgreSQL (stream_processor/enrich.py), with
        the event texts and the annotation documents of the rows the export read (``changed``) when it read them.
        Counted into ``counts`` only once it succeeded (a retried call starts over)."""
        from sink.annotations_lookup import found_in_rows
        from sink.settings import StoreSettings

        from .enrich import enrich_batch
        from .publish import RecordPublisher

        done: dict[tuple[str, str, str], int] = {}

        def bump(metric: str, n: int) -> None:
            done[(metric, "", "")] = done.get((metric, "", ""), 0) + n

        with _store_module().GraphStore.connect(StoreSettings(postgres_dsn=self.dsn)) as conn:
            known = None if changed is None else found_in_rows(changed.get("lineage_provenance"),
                                                               changed.get("lineage_quality"))
            enrich_batch(conn, batch_id, RecordPublisher.shared(self.config.kafka_conf), self.config.topic_enriched,
                         bump, _event_texts(changed), known)
        for key, n in done.items():
            counts[key] = counts.get(key, 0) + n

    def _changed_rows(self, batch_id: int, counts: dict[tuple[str, str, str], int] | None = None
                      ) -> dict[str, Any] | None:
        """The rows committed batch ``batch_id`` changed (Arrow tables by name, one snapshot), when there are Parquet
        tables to write them to: the enrich step takes the new events' texts from them, and the graph publication
        the rest, so neither reads them from PostgreSQL again. ``None`` without a Parquet directory. With a text spool
        (local mode) the new events' texts come from the staging tasks' files where they have them; ``counts`` gets
        ``export_texts`` by where they came from (``spool``, ``postgres``)."""
        if not self.settings.parquet_dir:
            return None
        from sink.parquet import changed_rows

        spool = self._spool
        texts = spool.texts(batch_id) if spool is not None else None
        if texts is None:
            return changed_rows(self.dsn, batch_id)
        stats: dict[str, int] = {}
        changed = changed_rows(self.dsn, batch_id, texts=texts, stats=stats)
        if counts is not None:
            for where, key in (("spool", "texts_given"), ("postgres", "texts_read")):
                counts[("export_texts", where, "")] = counts.get(("export_texts", where, ""), 0) + stats.get(key, 0)
        return changed

    def _write_parquet(self, batch_id: int, tables: dict[str, Any] | None) -> None:
        """Write the rows ``batch_id`` changed (:meth:`_changed_rows`) to the Parquet tables."""
        if tables is None:
            return
        from sink.parquet import ParquetGraphStore

        ParquetGraphStore(self.settings.parquet_dir).write_batch(batch_id, tables)

    def _publish_graph_async(self, batch_id: int | None, changed: dict[str, Any] | None = None) -> None:
        """Publish the graph changes of ``batch_id`` - and first of every committed batch not yet published
        (``None``: only those) - on a background thread, overlapping the next batch.

        At most one publication is outstanding: the previous one is awaited first, so its failure fails
        this batch; the batches it did not publish stay after the ``lineage_publications`` mark and are
        published by the next publication or after a restart (at-least-once, keys are stable).
        """
        from concurrent.futures import ThreadPoolExecutor

        if not self.settings.publish_graph:
            return
        if self._graph_pool is None:
            self._graph_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graph-publish")
        self.flush_graph()
        self._graph_future = self._graph_pool.submit(self.retrier.call, "graph",
                                                     lambda: self.publish_pending_graph(batch_id, changed))

    def flush_graph(self) -> None:
        """Wait for the outstanding graph publication (raises its error)."""
        future, self._graph_future = self._graph_future, None
        if future is not None:
            future.result()

    def publish_pending_graph(self, batch_id: int | None = None, changed: dict[str, Any] | None = None) -> list[int]:
        """Publish every committed batch after the ``graph`` mark (and ``batch_id``); returns the batches published.

        Each batch's changes are delivered (flushed) before the mark moves past it. ``changed``: the rows
        ``batch_id`` changed, as the Parquet export read them (else they are read here).
        """
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(GRAPH_MARK_SQL).fetchone()
            mark = int(row[0]) if row is not None else -1
            pending = [int(b) for (b,) in conn.execute(
                "SELECT batch_id FROM lineage_transactions WHERE batch_id > %s AND batch_id >= 0 "
                "AND (%s::bigint IS NULL OR batch_id < %s) ORDER BY batch_id",
                (mark, batch_id, batch_id)).fetchall()]
            if batch_id is not None:
                pending.append(batch_id)
            for b in pending:
                self._publish_graph(b, changed if b == batch_id else None)
                conn.execute(
                    "INSERT INTO lineage_publications AS p (stream, last_batch_id) VALUES ('graph', %s) "
                    "ON CONFLICT (stream) DO UPDATE SET last_batch_id = greatest(p.last_batch_id, EXCLUDED.last_batch_id),"
                    " published_at = now()", (b,))
        if pending:
            log.info("graph changes of batch(es) %s published", pending)
        return pending

    @_heap_apart
    def _publish_graph(self, batch_id: int, changed: dict[str, Any] | None = None) -> None:
        """The graph changes of committed batch ``batch_id``: one ``graph_change`` per row the batch changed in each
        table of :func:`graph_topic_tables`, keyed by the row's id (the table's id column), so a compacted topic
        keeps the current row of each node, edge, column edge and run (and provenance and quality record, when
        ``graph_topic_annotations`` publishes them)."""
        from sink.parquet import TABLES, changed_rows

        from .avro_records import encode_graph_upserts
        from .publish import payload_rows

        publisher = self._graph_publisher()
        published = graph_topic_tables(self.settings)
        tables = changed if changed is not None else changed_rows(self.dsn, batch_id, published)
        for table in published:
            arrow_table = tables.get(table)
            if arrow_table is None or arrow_table.num_rows == 0:
                continue
            for key, value in encode_graph_upserts(table, payload_rows(arrow_table), TABLES[table].id_column,
                                                   batch_id):
                publisher.publish(self.settings.topic_graph, key, value)
        publisher.flush()
