"""Run the processor: session, metrics endpoint, listener, query; stream forever or drain and exit.

``--available-now`` cannot use Spark's ``Trigger.AvailableNow`` here: the `$self` recombiner's
processing-time timeouts make Spark schedule a no-data batch after every batch, so such a
query never ends. :func:`run_processor` drains instead: it records the log end offsets at
start (quirk-proof, :class:`~stream_processor.kafka_source.HighWatermarkProbe`), runs the
normal trigger until every partition's committed offset reaches them, then lets the query run
one recombination quiet period more (so pending `$self` groups are emitted) and stops it.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from schemas.errors import LineageError

from .metrics import MetricsListener, ProcessorMetrics
from .settings import ProcessorSettings

__all__ = ["run_processor", "drain_targets", "offsets_reached", "committed_offsets"]

log = logging.getLogger(__name__)


def drain_targets(settings: ProcessorSettings) -> dict[str, dict[str, int]]:
    """``{topic: {partition: end}}`` of the input topics now."""
    from .kafka_source import HighWatermarkProbe

    probe = HighWatermarkProbe(settings.kafka_config())
    try:
        tps = probe.partitions(settings.input_topics if not settings.subscribe_pattern else None,
                               settings.subscribe_pattern)
        ends = probe.ends(tps, {})
    finally:
        probe.close()
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in ends.items():
        out.setdefault(t, {})[str(p)] = off
    return out


def committed_offsets(query: Any) -> dict[str, dict[str, int]]:
    progress = query.lastProgress
    if not progress:
        return {}
    out: dict[str, dict[str, int]] = {}
    for src in progress.get("sources", []):
        end = src.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        for t, parts in (end or {}).items():
            for p, off in parts.items():
                out.setdefault(t, {})[str(p)] = int(off)
    return out


def offsets_reached(committed: dict[str, dict[str, int]], targets: dict[str, dict[str, int]]) -> bool:
    return all(committed.get(t, {}).get(p, 0) >= off for t, parts in targets.items() for p, off in parts.items())


def run_processor(settings: ProcessorSettings, available_now: bool = False, spark: Any = None,
                  status: Callable[[str], None] | None = None, status_interval_seconds: float = 5.0,
                  metrics: ProcessorMetrics | None = None, on_batch: Callable[[Any], None] | None = None,
                  stop_event: threading.Event | None = None, timeout_seconds: float | None = None) -> ProcessorMetrics:
    """Run the query until stopped (SIGTERM / SIGINT / ``stop_event``) or, with ``available_now``, drained."""
    from .pipeline import start_query
    from .session import build_spark_session
    from .writer import GraphBatchWriter

    settings.require_postgres()
    metrics = metrics or ProcessorMetrics()
    if settings.metrics_port is not None:
        port = metrics.serve(settings.metrics_port)
        (status or print)(f"metrics on http://127.0.0.1:{port}/metrics")
    spark = spark or build_spark_session(
        shuffle_partitions=settings.shuffle_partitions, master=settings.spark_master,
        extra_conf={"spark.jars.packages": settings.spark_packages} if settings.spark_packages else None)
    listener = MetricsListener(metrics)
    spark.streams.addListener(listener)

    def batch_done(report: Any) -> None:
        metrics.on_batch(report)
        if on_batch is not None:
            on_batch(report)

    stop = stop_event or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    targets = drain_targets(settings) if available_now else None
    writer = GraphBatchWriter(settings, on_batch=batch_done, metrics_registry=metrics.registry)
    query = start_query(spark, settings, writer)
    started = time.monotonic()
    last_status = 0.0
    reached_at: float | None = None
    try:
        while query.isActive and not stop.is_set():
            stop.wait(0.5)
            now = time.monotonic()
            if status and now - last_status >= status_interval_seconds:
                last_status = now
                status(metrics.status_line())
            if targets is not None:
                if reached_at is None and offsets_reached(committed_offsets(query), targets):
                    reached_at = now
                if reached_at is not None and now - reached_at > settings.recombine_quiet_seconds + \
                        2 * max(settings.trigger_interval_seconds, 0.5) + 1:
                    break
            if timeout_seconds is not None and now - started > timeout_seconds:
                raise LineageError(f"the processor did not finish within {timeout_seconds:.0f}s")
        exc = query.exception()
        if exc is not None:
            raise LineageError(f"the streaming query failed: {exc}") from None
    finally:
        writer.cancel()  # a batch waiting for PostgreSQL gives up (uncommitted) so that the stop is prompt
        if query.isActive:
            query.stop()
        writer.flush_graph()
        spark.streams.removeListener(listener)
        if status:
            status(metrics.status_line())
    return metrics
