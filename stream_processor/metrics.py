"""Prometheus metrics of the processor and a StreamingQueryListener that feeds them.

Counts from the executors come back to the driver as a few aggregate rows per batch
(:class:`stream_processor.writer.BatchReport`), never as per-event collects.

- ``lineage_events_consumed_total{topic,encoding}``: events that reached the sink stage
  (after the in-state dedupe; a `$self` record counts its parts);
- ``lineage_events_rejected_total{reason}``: DLQ rows by error code;
- ``lineage_duplicates_dropped_total{stage="state"|"sink"}``: state = Spark's
  ``numDroppedDuplicateRows`` of the dedupe operator, sink = ``BatchResult.duplicates``;
- ``lineage_end_to_end_latency_seconds``: commit time - Kafka record timestamp (10 ms buckets);
- ``lineage_consumer_lag_records{topic,partition}``: records behind the log end when the last batch was
  planned: its latest offset - its start offset (the committed position then; the batch's own records
  included). Not latest - end: without ``maxOffsetsPerTrigger`` a batch reads to the latest offset, so that
  was 0 whatever the backlog (a soak whose batches took 60-120 s behind a stalled broker showed lag 0);
- ``lineage_event_parses_total{stage}``: parses of event texts (or message bytes) into documents, by where:
  ``decode`` (the reader's decode, once per message), ``staging`` (the staging pass's parse of an event's text to
  derive its graph rows: every staged event by default; with ``LINEAGE_DERIVE_AT_DECODE=true``, issue 18's "parse
  once", only an event decode could not derive), ``recombine`` (a `$self` part's text, read back from the store to
  merge its group). Counted for the events and parts that reach the staging pass (after the dedupe), so on plain
  traffic ``decode`` equals the events consumed, and ``staging`` equals it too by default, 0 with parse once;
- ``lineage_source_offset_resets_total{topic,partition}``: partitions the ``lineage_kafka`` source read
  again from their low watermark because the topic was recreated (the broker lost its log): the
  ``$reset`` entry of a batch's end offset (stream_processor/kafka_source.py).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["ProcessorMetrics", "MetricsListener"]

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 20, 30, 60, 120, 300)


class ProcessorMetrics:
    """All processor metrics in one registry (its own, so tests can run several)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.consumed = Counter("lineage_events_consumed_total", "Events consumed", ["topic", "encoding"], registry=r)
        self.rejected = Counter("lineage_events_rejected_total", "Messages sent to the DLQ", ["reason"], registry=r)
        self.duplicates = Counter("lineage_duplicates_dropped_total", "Duplicates dropped", ["stage"], registry=r)
        self.parses = Counter("lineage_event_parses_total", "Event texts parsed, by stage (decode: once per message)",
                              ["stage"], registry=r)
        for stage in ("decode", "staging", "recombine"):
            self.parses.labels(stage)
        self.self_parts = Counter("lineage_self_parts_total", "`$self` parts recombined", registry=r)
        self.recombined = Counter("lineage_recombined_records_total", "Recombined records emitted", registry=r)
        self.self_groups = Gauge("lineage_self_groups", "`$self` groups in the store after the last batch: pending "
                                 "(waiting for their quiet period) or held (all, emitted ones kept for the TTL)",
                                 ["state"], registry=r)
        for state in ("pending", "held"):
            self.self_groups.labels(state)
        self.upserted = Counter("lineage_graph_rows_upserted_total", "Graph rows upserted", ["table"], registry=r)
        self.batch_duration = Histogram("lineage_batch_duration_seconds", "foreachBatch duration", registry=r,
                                        buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.latency = Histogram("lineage_end_to_end_latency_seconds", "Kafka timestamp to commit",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.lag = Gauge("lineage_consumer_lag_records", "Records behind the log end", ["topic", "partition"],
                         registry=r)
        self.state_rows = Gauge("lineage_state_rows", "Rows in Spark state (all stateful operators)", registry=r)
        self.state_memory = Gauge(
            "lineage_state_memory_bytes", "Memory the state stores report using, summed over stateful operators "
            "(Spark's memoryUsedBytes; RocksDB: memtables, table readers and block cache, the cache shared by all "
            "stores of a JVM and bounded by LINEAGE_SPARK_ROCKSDB_MEMORY_MB)", registry=r)
        self.state_disk = Gauge("lineage_state_sst_bytes", "Size of the RocksDB state stores' SST files on local "
                                "disk, summed over stateful operators", registry=r)
        self.batches = Counter("lineage_batches_committed_total", "Micro-batches committed", registry=r)
        self.last_commit = Gauge("lineage_last_batch_commit_timestamp_seconds", "Unix time of the last commit",
                                 registry=r)
        self.input_rate = Gauge("lineage_input_rows_per_second", "Input rows/s (Spark progress)", registry=r)
        self.processed_rate = Gauge("lineage_processed_rows_per_second", "Processed rows/s", registry=r)
        self.batch_id = Gauge("lineage_batch_id", "Last micro-batch id", registry=r)
        self.trigger_seconds = Gauge("lineage_trigger_execution_seconds", "Last trigger duration", registry=r)
        self.terminated = Counter("lineage_query_terminated_total", "Query terminations", ["error"], registry=r)
        for error in ("true", "false"):  # exported at 0 from the start, so alert rules always have a series
            self.terminated.labels(error)
        self.offset_resets = Counter("lineage_source_offset_resets_total", "Partitions read again from their "
                                     "low watermark (topic recreated, log lost)", ["topic", "partition"], registry=r)
        self.totals: dict[str, float] = {"consumed": 0, "rejected": 0, "state_duplicates": 0, "sink_duplicates": 0,
                                         "batches": 0, "lag": 0}

    def serve(self, port: int) -> int:
        """Expose ``/metrics`` on 127.0.0.1:``port`` (0: a free port); returns the port."""
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        return int(server.server_port)

    def on_batch(self, report: Any) -> None:
        """Record a :class:`~stream_processor.writer.BatchReport`."""
        for (metric, a, b), value in report.counts.items():
            if metric == "consumed":
                self.consumed.labels(a, b).inc(value)
                self.totals["consumed"] += value
            elif metric == "rejected":
                self.rejected.labels(a).inc(value)
                self.totals["rejected"] += value
            elif metric == "self_parts":
                self.self_parts.inc(value)
            elif metric == "parses":
                self.parses.labels(a).inc(value)
            elif metric == "recombined":
                self.recombined.inc(value)
            elif metric == "self_groups":
                self.self_groups.labels(a).set(value)
        result = report.result
        if result.duplicates:
            self.duplicates.labels("sink").inc(result.duplicates)
            self.totals["sink_duplicates"] += result.duplicates
        for table, n in (result.rows_by_table or {}).items():
            self.upserted.labels(table).inc(n)
        for latency, n in report.latency_samples():
            for _ in range(n):
                self.latency.observe(latency)
        self.batch_duration.observe(report.duration_seconds)
        self.batches.inc()
        self.totals["batches"] += 1
        self.last_commit.set(report.committed_at)

    def on_progress(self, progress: Any) -> None:
        """Record a ``StreamingQueryProgress``."""
        self.batch_id.set(progress.batchId)
        self.input_rate.set(progress.inputRowsPerSecond or 0)
        self.processed_rate.set(progress.processedRowsPerSecond or 0)
        self.trigger_seconds.set((progress.durationMs or {}).get("triggerExecution", 0) / 1000)
        state_rows = state_memory = state_disk = 0
        for op in progress.stateOperators or []:
            state_rows += op.numRowsTotal
            state_memory += getattr(op, "memoryUsedBytes", 0) or 0
            custom = op.customMetrics or {}
            state_disk += custom.get("rocksdbSstFileSize", 0) or 0
            dropped = custom.get("numDroppedDuplicateRows", 0)
            if dropped:
                self.duplicates.labels("state").inc(dropped)
                self.totals["state_duplicates"] += dropped
        self.state_rows.set(state_rows)
        self.state_memory.set(state_memory)
        self.state_disk.set(state_disk)
        total_lag = 0
        for src in progress.sources or []:
            try:
                end, start, latest = _offsets(src.endOffset), _offsets(src.startOffset), _offsets(src.latestOffset)
            except (TypeError, ValueError):
                continue
            for topic, parts in latest.items():
                if topic.startswith("$"):  # the source's meta keys (kafka_source.META_KEYS), not a topic
                    continue
                for part, off in parts.items():
                    # the committed position when the batch was planned; a partition the batch began (the first
                    # batch, a new partition) has none: its end, as the lag left after the batch
                    committed = (start.get(topic) or {}).get(part, (end.get(topic) or {}).get(part, off))
                    lag = max(int(off) - int(committed), 0)
                    self.lag.labels(topic, part).set(lag)
                    total_lag += lag
            for topic, parts in (end.get("$reset") or {}).items():
                for part in parts:
                    self.offset_resets.labels(topic, part).inc()
        self.totals["lag"] = total_lag

    def status_line(self) -> str:
        t = self.totals
        return (f"events in {int(t['consumed'])}, rejected {int(t['rejected'])}, duplicates "
                f"{int(t['state_duplicates'] + t['sink_duplicates'])}, batches {int(t['batches'])}, lag {int(t['lag'])}")


def _offsets(text: str | None) -> dict[str, Any]:
    """A progress source's offset JSON as a dict: absent, or the text "null" (a query's first batch has no start
    offset), is ``{}``."""
    return (json.loads(text) if text else None) or {}


def _listener_base() -> type:
    from pyspark.sql.streaming import StreamingQueryListener

    return StreamingQueryListener


def _json_bridge_class() -> type:
    """PySpark's Java-side listener bridge with ``onQueryProgress`` converted from the event's JSON.

    PySpark's own bridge builds ``StreamingQueryProgress`` with ``fromJObject``: one py4j round trip per
    field, map entry and operator, and the py4j look-ups behind them search every jar on the classpath.
    Measured in a rate-source query on the 2-core machine: 318 ms per progress event (the JVM's listener
    thread was 38 % of the JVM's sampled CPU in a ``lineage bench`` run, Java Flight Recorder), against
    2.9 ms for one ``progress().json()`` call parsed with ``StreamingQueryProgress.fromJson``.
    The events handed to the Python listener are the same classes with the same fields.
    """
    from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

    class JsonListenerBridge(JStreamingQueryListener):
        def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 - the Java interface's name
            self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": json.loads(jevent.progress().json())}))

    return JsonListenerBridge


class MetricsListener(_listener_base()):  # type: ignore[misc]
    """Feeds :class:`ProcessorMetrics` from Spark's query progress events (through :func:`_json_bridge_class`)."""

    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` registers: PySpark's wrapper around our JSON bridge."""
        from pyspark import SparkContext

        if getattr(self, "_jlistener_obj", None) is None:
            self._jlistener_obj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_json_bridge_class()(self))
        return self._jlistener_obj

    def __init__(self, metrics: ProcessorMetrics) -> None:
        self.metrics = metrics
        self.last_progress_at = time.time()

    def onQueryStarted(self, event: Any) -> None:
        log.info("query started: %s", event.id)

    def onQueryProgress(self, event: Any) -> None:
        self.last_progress_at = time.time()
        try:
            self.metrics.on_progress(event.progress)
        except Exception:  # noqa: BLE001 - metrics must never stop the query
            log.exception("metrics listener failed")

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        self.metrics.terminated.labels("true" if event.exception else "false").inc()
