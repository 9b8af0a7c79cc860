"""``foreachBatch``: one micro-batch -> PostgreSQL + Parquet graph, downstream topics, metrics.

Per batch (one unit of work, keyed by ``batch_id``):

1. executors, one task per partition, in ONE pass over the batch (``mapInArrow``): accepted rows
   are staged with ``GraphStore.stage_partition(dsn, batch_id, part, events)`` (one connection per
   partition, replacing ``(batch_id, part)``, so a re-run is a no-op) and published to the enriched
   topic; rejected rows are published to the DLQ. Each task returns a handful of count rows —
   nothing per event reaches the driver;
2. driver: ``GraphStore(dsn).merge(batch_id)`` (one transaction, a no-op for a batch already
   committed), then ``ParquetGraphStore(root).write_from_postgres(dsn, batch_id)`` and the graph
   changes of the batch to ``openlineage.graph`` (key = row id);
3. metrics from the count rows and the :class:`~sink.model.BatchResult`.

PostgreSQL outages: every database step (migrate, stage, merge, Parquet export, graph changes) runs
through a :class:`~stream_processor.retry.PostgresRetrier`, which waits with capped exponential backoff
while PostgreSQL is unreachable (up to ``postgres_retry_max_seconds``) *inside* ``foreachBatch``:
the batch, and so its Kafka offsets, is committed only once its work is in the database. Before the
executors stage, the driver waits until PostgreSQL answers, so an outage seen between batches does
not re-run the executor pass (and re-publish its DLQ / enriched records); a failure during staging
re-runs the whole pass (staging replaces ``(batch_id, part)``; published records are at-least-once).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sink.model import BatchResult, StoredEvent

__all__ = ["GraphBatchWriter", "BatchReport", "WriterConfig", "COUNTS_SCHEMA"]

log = logging.getLogger(__name__)

#: One count row: metric name, two labels, a value. ``ts_bucket`` rows count events per 10 ms of
#: Kafka timestamp (label1 = bucket start in ms), for the end-to-end latency histogram.
COUNTS_SCHEMA = "metric string, label1 string, label2 string, value long"
LATENCY_BUCKET_MS = 10


@dataclass(frozen=True)
class WriterConfig:
    """What an executor task needs (picklable)."""

    dsn: str
    kafka_conf: dict[str, Any]
    topic_enriched: str
    topic_dlq: str
    publish_enriched: bool = True


@dataclass
class BatchReport:
    """What one batch did, for metrics, the status line and the benchmark."""

    batch_id: int
    result: BatchResult
    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    committed_at: float = 0.0
    duration_seconds: float = 0.0
    #: seconds per step: ``stage`` (executors), ``merge``, ``parquet``, ``graph``
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


def _stage_and_publish(config: WriterConfig, batch_id: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        from .publish import RecordPublisher, encode_record, enriched_record

        part = TaskContext.get().partitionId()
        counts: dict[tuple[str, str, str], int] = {}

        def bump(metric: str, a: str = "", b: str = "", n: int = 1) -> None:
            counts[(metric, a, b)] = counts.get((metric, a, b), 0) + n

        events: list[StoredEvent] = []
        publisher = RecordPublisher(config.kafka_conf)
        limit = _record_limit(config.kafka_conf)
        for batch in batches:
            for row in batch.to_pylist():
                bump("consumed", row.get("source_topic") or "", row.get("encoding") or "unknown",
                     int(row.get("parts") or 1))
                ts = row.get("kafka_timestamp")
                if ts is not None:
                    bump("ts_bucket", str(int(ts.timestamp() * 1000) // LATENCY_BUCKET_MS * LATENCY_BUCKET_MS))
                if row["status"] != "ok":
                    bump("rejected", row.get("error_code") or "internal", row.get("error_class") or "")
                    publisher.publish(config.topic_dlq, row.get("key"), _bounded_dead_letter(row, limit, bump))
                    continue
                if row.get("has_self"):
                    bump("self_parts", n=int(row.get("parts") or 1))
                    if int(row.get("revision") or 0) > 0:
                        bump("recombined")
                events.append(StoredEvent(
                    event=json.loads(row["event_json"]), event_hash=row["event_hash"],
                    source=f"{row['source_topic']}[{row['source_partition']}]@{row['source_offset']}",
                    revision=int(row.get("revision") or 0)))
                if config.publish_enriched:
                    value = encode_record("enriched_record", enriched_record(row))
                    if len(value) > limit:
                        bump("enriched_too_large")
                        log.warning("enriched record of %s (%d bytes) is over message.max.bytes=%d: not published "
                                    "(it is in the graph)", events[-1].source, len(value), limit)
                    else:
                        publisher.publish(config.topic_enriched, row.get("key"), value)
        staged = _store_module().GraphStore.stage_partition(config.dsn, batch_id, part, events)
        bump("staged", n=int(staged or 0))
        publisher.flush()
        keys = list(counts)
        yield pa.RecordBatch.from_pydict({
            "metric": [k[0] for k in keys], "label1": [k[1] for k in keys], "label2": [k[2] for k in keys],
            "value": [counts[k] for k in keys]})

    return run


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
        self._graph_pool: Any = None
        self._graph_future: Any = None
        self._cancel = threading.Event()
        self.dependency_metrics = DependencyMetrics.for_registry(metrics_registry)
        policy = settings.retry_policy() if hasattr(settings, "retry_policy") else None
        self.retrier = PostgresRetrier(self.dsn, policy, self.dependency_metrics, cancel=self._cancel)

    def cancel(self) -> None:
        """Stop waiting for PostgreSQL (the processor is stopping): a waiting batch raises and is not committed."""
        self._cancel.set()

    def _reset_store(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.close()

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

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.time()
        self._wait_for_postgres()  # before the executor pass, so an outage does not re-run it
        rows = self.retrier.call(
            "stage", lambda: df.mapInArrow(_stage_and_publish(self.config, int(batch_id)), COUNTS_SCHEMA).collect())
        counts: dict[tuple[str, str, str], int] = {}
        for r in rows:
            key = (r["metric"], r["label1"] or "", r["label2"] or "")
            counts[key] = counts.get(key, 0) + int(r["value"])
        t1 = time.time()
        if not any(k[0] in ("staged", "rejected", "consumed") and v for k, v in counts.items()):
            return  # a no-data batch (the recombiner's timeouts ran): nothing to commit
        result = self.retrier.call("merge", lambda: self.store.merge(int(batch_id)), on_failure=self._reset_store)
        t2 = time.time()
        self.retrier.call("parquet", lambda: self._write_parquet(int(batch_id)))
        t3 = time.time()
        self._publish_graph_async(int(batch_id))
        now = time.time()
        report = BatchReport(int(batch_id), result, counts, committed_at=t2, duration_seconds=now - started,
                             timings={"stage": t1 - started, "merge": t2 - t1, "parquet": t3 - t2, "graph": now - t3})
        if self.on_batch is not None:
            self.on_batch(report)

    def _write_parquet(self, batch_id: int) -> None:
        if not self.settings.parquet_dir:
            return
        try:
            from sink.parquet import ParquetGraphStore
        except ImportError:  # TODO: sink/parquet.py not written yet
            log.warning("sink.parquet is not available; Parquet graph not written")
            return
        ParquetGraphStore(self.settings.parquet_dir).write_from_postgres(self.dsn, batch_id)

    def _publish_graph_async(self, batch_id: int) -> None:
        """Publish the batch's graph changes on a background thread, overlapping the next batch.

        At most one publication is outstanding: the previous one is awaited first, so its
        failure fails this batch (and the restart re-publishes: at-least-once, keys are stable).
        """
        from concurrent.futures import ThreadPoolExecutor

        if self._graph_pool is None:
            self._graph_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graph-publish")
        self.flush_graph()
        self._graph_future = self._graph_pool.submit(self.retrier.call, "graph",
                                                     lambda: self._publish_graph(batch_id))

    def flush_graph(self) -> None:
        """Wait for the outstanding graph publication (raises its error)."""
        future, self._graph_future = self._graph_future, None
        if future is not None:
            future.result()

    def _publish_graph(self, batch_id: int) -> None:
        if not self.settings.publish_graph:
            return
        try:
            from sink.parquet import changed_rows
        except ImportError:
            return
        from .publish import RecordPublisher, encode_record, graph_change

        publisher = RecordPublisher(self.settings.kafka_config())
        tables = changed_rows(self.dsn, batch_id)
        for table, arrow_table in tables.items():
            for row in arrow_table.to_pylist():
                row_id = str(row.get("id") or next((v for k, v in row.items() if k.endswith("_id")), ""))
                publisher.publish(self.settings.topic_graph, row_id.encode(),
                                  encode_record("graph_change", graph_change(table, row_id, row, batch_id)))
        publisher.flush()
