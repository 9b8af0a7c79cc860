"""Run the processor: session, metrics endpoint, listener, query; stream forever or drain and exit.

``--available-now`` does not use Spark's ``Trigger.AvailableNow``: the `$self` groups are emitted a quiet
period after their last part, by micro-batches that come after the data. :func:`run_processor` drains
instead: it records the log end offsets at start (quirk-proof,
:class:`~stream_processor.kafka_source.HighWatermarkProbe`), runs the normal trigger with the source
ticking every :data:`DRAIN_TICK_SECONDS` until every partition's committed offset reaches them and the
writer has settled (its last batch finished, no `$self` group waiting in the store), and stops it.

**Kafka outages.** The source's offset probe waits out a short blip itself
(:class:`~stream_processor.kafka_source.KafkaStreamReader`, ``probeRetrySeconds``). A longer outage
fails the query (the planning, an executor's read or a publisher's flush raises), or stalls it: a
query without progress for :data:`STALL_PROBE_AFTER_SECONDS` gets the broker probed, and is stopped
once the broker has been unreachable for :data:`KAFKA_DOWN_STOP_SECONDS` (an executor's read would
only time out after ``pollTimeoutMs``). The supervisor loop here then logs ``waiting for Kafka at <bootstrap>: <error>, retry in Ns``, sets
``lineage_waiting_for{dependency="kafka"}`` to 1, probes the broker with capped exponential backoff
(:class:`~stream_processor.retry.BackoffPolicy`) until it answers and every topic the processor reads
or writes exists, and restarts the query from its checkpoint: the uncommitted batch is re-run and
the sinks are idempotent, so the graph gets every event once. It waits as long as the broker is
away (a stream processor outlives its broker); a Kafka error while the broker answers is retried
:data:`MAX_RESTARTS_WITHOUT_PROGRESS` times without a committed batch in between, then the
processor fails. Any other failure of the query fails the processor as before.
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
from .retry import BackoffPolicy, DependencyMetrics, is_kafka_error, probe_kafka, redact
from .settings import ProcessorSettings

__all__ = ["run_processor", "drain_targets", "offsets_reached", "committed_offsets", "kafka_topics",
           "MAX_RESTARTS_WITHOUT_PROGRESS"]

log = logging.getLogger(__name__)

#: Kafka-caused query failures in a row, while the broker answers, with no batch committed in between.
MAX_RESTARTS_WITHOUT_PROGRESS = 10
#: Restarts of a query whose Python worker or source runner did not connect back to the JVM in time.
#: Spark waits 10 s for that (not configurable); a loaded machine (load average 20+ on 2 cores) misses it.
MAX_WORKER_START_TIMEOUTS = 3
#: Backoff of the broker probe while the processor waits for Kafka (no total limit: it waits).
KAFKA_BACKOFF = (1.0, 2.0, 15.0)  # initial seconds, multiplier, cap
#: A running query with no progress for this long gets its broker probed (every 2 s) ...
STALL_PROBE_AFTER_SECONDS = 5.0
#: Ticks of a drain's idle query (``--available-now``): how soon after its quiet period a `$self` group is emitted.
DRAIN_TICK_SECONDS = 0.5
#: ... and is stopped (uncommitted, to be restarted from its checkpoint) once the broker has been
#: unreachable for this long: an executor's read or a publisher's flush would only time out later.
KAFKA_DOWN_STOP_SECONDS = 10.0


def kafka_topics(settings: ProcessorSettings) -> list[str]:
    """The topics the processor reads or writes (the input pattern's matches are not known in advance)."""
    topics = [] if settings.subscribe_pattern else list(settings.input_topics)
    topics.append(settings.topic_dlq)
    if settings.publish_enriched:
        topics.append(settings.topic_enriched)
    if settings.publish_graph:
        topics.append(settings.topic_graph)
    return topics


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
            if t.startswith("$"):  # the source's topic ids and resets (kafka_source.META_KEYS), not a topic
                continue
            for p, off in parts.items():
                out.setdefault(t, {})[str(p)] = int(off)
    return out


def offsets_reached(committed: dict[str, dict[str, int]], targets: dict[str, dict[str, int]]) -> bool:
    return all(committed.get(t, {}).get(p, 0) >= off for t, parts in targets.items() for p, off in parts.items())


class _KafkaWaiter:
    """Wait for the broker (and the processor's topics) with capped exponential backoff; log and meter it."""

    def __init__(self, settings: ProcessorSettings, metrics: DependencyMetrics, stop: threading.Event) -> None:
        self.conf = settings.kafka_config()
        self.bootstrap = settings.bootstrap_servers
        self.topics = kafka_topics(settings)
        self.metrics = metrics
        self.stop = stop
        initial, multiplier, cap = KAFKA_BACKOFF
        self.policy = BackoffPolicy(initial_seconds=initial, multiplier=multiplier, max_interval_seconds=cap)

    def probe(self) -> str | None:
        return probe_kafka(self.conf, self.topics)

    def caused(self, exc: BaseException) -> bool:
        """True when the query failure ``exc`` is Kafka's: a Kafka client error, or the broker does not answer now."""
        return is_kafka_error(exc) or self.probe() is not None

    def wait(self, exc: BaseException | None = None) -> bool:
        """Block until the broker answers and the topics exist (True), or the processor is stopping (False)."""
        first = next((line.strip() for line in str(exc or "").splitlines() if line.strip()), "")
        reason = self.probe() or f"the query failed on a Kafka error ({redact(first[:300])})"
        attempt = 0
        started = time.monotonic()
        self.metrics.waiting.labels("kafka").set(1)
        try:
            while reason is not None:
                delay = self.policy.delay(attempt)
                log.warning("waiting for Kafka at %s: %s, retry in %.1fs (attempt %d)", self.bootstrap, reason,
                            delay, attempt + 1)
                self.metrics.retries.labels("kafka", "restart").inc()
                attempt += 1
                if self.stop.wait(delay):
                    return False
                reason = self.probe()
            log.warning("Kafka at %s is back after %.1fs: restarting the query from its checkpoint", self.bootstrap,
                        time.monotonic() - started)
            return True
        finally:
            self.metrics.waiting.labels("kafka").set(0)

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` (a driver-side Kafka call), waiting for the broker while it fails on a Kafka error."""
        while True:
            try:
                return fn()
            except Exception as exc:
                if not self.caused(exc) or not self.wait(exc):
                    raise


def _watch(query: Any, stop: threading.Event, settings: ProcessorSettings, metrics: ProcessorMetrics,
           status: Callable[[str], None] | None, status_interval_seconds: float,
           targets: dict[str, dict[str, int]] | None, started: float, timeout_seconds: float | None,
           kafka: _KafkaWaiter, listener: MetricsListener, settled: Callable[[], bool] | None = None) -> str:
    """Follow ``query`` until ``"done"`` (stopped, drained), ``"ended"`` (the query terminated by itself) or
    ``"kafka"`` (no progress and the broker unreachable for :data:`KAFKA_DOWN_STOP_SECONDS`). A drain
    (``targets``) is done once the offsets are reached and ``settled()`` (no batch left to finish, no `$self`
    group waiting), or at the latest one quiet period and a tick later."""
    last_status = 0.0
    reached_at: float | None = None
    watch_started = time.time()
    last_probe = 0.0
    down_since: float | None = None
    while query.isActive and not stop.is_set():
        stop.wait(0.5)
        now = time.monotonic()
        idle = time.time() - max(listener.last_progress_at, watch_started)
        if idle > STALL_PROBE_AFTER_SECONDS and now - last_probe >= 2.0:
            last_probe = now
            reason = kafka.probe()
            down_since = None if reason is None else (down_since or now)
            if down_since is not None and now - down_since >= KAFKA_DOWN_STOP_SECONDS and query.isActive:
                log.warning("Kafka at %s unreachable for %.0fs with the query stalled (%s): stopping the query; "
                            "its uncommitted batch is re-run from the checkpoint when the broker is back",
                            kafka.bootstrap, now - down_since, reason)
                return "kafka"
        if status and now - last_status >= status_interval_seconds:
            last_status = now
            status(metrics.status_line())
        if targets is not None:
            if reached_at is None and offsets_reached(committed_offsets(query), targets):
                reached_at = now
            if reached_at is not None and (settled is not None and settled() or now - reached_at > (
                    settings.recombine_quiet_seconds + settings.tick_interval()
                    + 2 * max(settings.trigger_interval_seconds, 0.5) + 1)):
                return "done"
        if timeout_seconds is not None and now - started > timeout_seconds:
            raise LineageError(f"the processor did not finish within {timeout_seconds:.0f}s")
    return "done" if stop.is_set() else "ended"


#: On a requested stop, how long the running micro-batch may take to finish before the query is interrupted.
STOP_GRACE_SECONDS = 30.0


def _worker_start_timeout(exc: BaseException) -> bool:
    """True when ``exc`` is Spark's "Python worker failed to connect back" (a start-up timeout)."""
    return "Python worker failed to connect back" in str(exc)


def wait_for_trigger_end(query: Any, grace_seconds: float) -> None:
    """Wait (at most ``grace_seconds``) until ``query`` runs no micro-batch, so that stopping it does not
    interrupt a batch half-way (its data would be safe — checkpoint and idempotent sinks — but Spark prints
    the interrupted batch's py4j tracebacks and the work is done twice)."""
    deadline = time.monotonic() + grace_seconds
    while query.isActive and time.monotonic() < deadline:
        try:
            if not query.status.get("isTriggerActive"):
                return
        except Exception:  # noqa: BLE001 - the query ended meanwhile (py4j error types)
            return
        time.sleep(0.02)  # no-data batches can follow each other closely: the gap between them is short


def _stop_query(query: Any, writer: Any, outcome: str | None) -> None:
    """Stop ``query`` and wait for the writer's last batch to be finished (merged, enriched, exported) and its
    outstanding graph publication.

    A requested stop lets the running micro-batch finish first (up to :data:`STOP_GRACE_SECONDS`). When the
    query is stopped because Kafka is unreachable (``outcome == "kafka"``) neither the batch nor the
    finishing and publication are awaited (they would only time out); they finish or fail on their own threads.
    """
    writer.cancel()  # a batch waiting for PostgreSQL gives up (uncommitted) so that the stop is prompt
    failed = not query.isActive and query.exception() is not None
    if query.isActive and outcome != "kafka":
        wait_for_trigger_end(query, STOP_GRACE_SECONDS)
    if query.isActive:
        query.stop()
    if outcome == "kafka":
        return
    from .retry import RetryCancelled

    try:
        writer.drain()
        writer.close_spool()
    except RetryCancelled as exc:   # PostgreSQL is down as we stop: the staged batch waits for the next start
        log.warning("the last batch is staged and will be finished when the processor starts again: %s", exc)
    except Exception as exc:
        if not failed:
            raise
        log.warning("finishing the last batch failed with the query: %s", exc)


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
    kafka = _KafkaWaiter(settings, DependencyMetrics.for_registry(metrics.registry), stop)
    targets = kafka.call(lambda: drain_targets(settings)) if available_now else None
    started = time.monotonic()
    failures_without_progress = 0
    start_timeouts = 0
    try:
        while not stop.is_set():
            writer = GraphBatchWriter(settings, on_batch=batch_done, metrics_registry=metrics.registry)
            batches_before = metrics.totals["batches"]
            # a drain is short: frequent ticks, so that the last `$self` groups are emitted soon after their
            # quiet period (the wait in _watch)
            run_settings = settings.model_copy(update={"tick_seconds": DRAIN_TICK_SECONDS}) if available_now else settings
            query = start_query(spark, run_settings, writer)
            outcome = None
            try:
                outcome = _watch(query, stop, run_settings, metrics, status, status_interval_seconds, targets,
                                 started, timeout_seconds, kafka, listener, writer.settled if available_now else None)
            finally:
                _stop_query(query, writer, outcome)
            if outcome == "done":
                break
            exc = query.exception()
            if exc is None and outcome == "ended":  # stopped from outside (another thread): nothing to resume
                break
            if exc is not None and _worker_start_timeout(exc) and start_timeouts < MAX_WORKER_START_TIMEOUTS:
                start_timeouts += 1   # start the query again from its checkpoint (idempotent sinks)
                log.warning("a Python process of Spark's did not start in time (%d of %d); restarting the query",
                            start_timeouts, MAX_WORKER_START_TIMEOUTS)
                continue
            if exc is not None and not kafka.caused(exc):
                raise LineageError(f"the streaming query failed: {exc}") from None
            if metrics.totals["batches"] > batches_before:
                failures_without_progress = 0
            if outcome == "ended" and kafka.probe() is None:  # a Kafka error, yet the broker answers
                failures_without_progress += 1
            if failures_without_progress > MAX_RESTARTS_WITHOUT_PROGRESS:
                raise LineageError(f"the streaming query failed {failures_without_progress} times in a row on "
                                   f"Kafka errors while the broker answered: {exc}") from None
            if not kafka.wait(exc):
                break  # stopping
            if available_now:
                targets = kafka.call(lambda: drain_targets(settings))  # the broker may have a new log now
    finally:
        spark.streams.removeListener(listener)
        if status:
            status(metrics.status_line())
    return metrics
