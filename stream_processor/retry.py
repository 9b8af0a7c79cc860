"""Wait out an unavailable PostgreSQL inside ``foreachBatch``: capped exponential backoff.

Structured Streaming commits a micro-batch (and so advances its Kafka offsets) only when the
``foreachBatch`` function returns. Raising would stop the query; so the writer retries the
batch's database work *inside* the function, and the offsets stay where they were until the
work is done. Every step retried is idempotent (staging replaces ``(batch_id, part)``, the merge
of a committed batch is a no-op, the Parquet files are keyed by batch id).

Backoff: the delay before attempt ``n`` (0-based) is::

    delay(n) = min(initial_seconds * multiplier ** n, max_interval_seconds)

and the retrier gives up (raising :class:`PostgresUnavailableError`) once the time spent waiting
exceeds ``max_total_seconds`` (``ProcessorSettings.postgres_retry_max_seconds``).

While it waits it logs ``waiting for PostgreSQL at host:port: <error>, retry in Ns`` and sets
``lineage_waiting_for{dependency="postgres"}`` to 1 (0 again when the step succeeds); each retry
increments ``lineage_sink_retries_total{dependency="postgres",step=...}``. Passwords of the DSN
never reach the log: messages go through :func:`redact`.

Kafka: a batch that fails because the broker is unreachable is *not* retried inside
``foreachBatch`` (the broker may come back with a different log; the source must re-plan), so
:func:`is_postgres_unavailable` does not count a Kafka client error as a PostgreSQL outage. The
query fails, and the runner's supervisor waits for the broker (:func:`probe_kafka`, the same
backoff, ``lineage_waiting_for{dependency="kafka"}``) and restarts the query from its checkpoint.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from schemas.errors import LineageError

__all__ = ["BackoffPolicy", "DependencyMetrics", "PostgresRetrier", "PostgresUnavailableError",
           "RetryCancelled", "postgres_address", "redact", "is_postgres_unavailable", "is_kafka_error",
           "probe_kafka"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Texts of a failure (also inside a Spark job failure's message) that mean "the server is not reachable".
_UNAVAILABLE_MARKERS = (
    "connection refused", "could not connect", "connection failed", "server closed the connection",
    "terminating connection", "the database system is shutting down", "the database system is starting up",
    "connection is closed", "connection to server", "no connection to the server", "consuming input failed",
    "cannot connect to the graph database", "connection timeout expired", "timeout expired",
    "adminshutdown", "operationalerror", "connection reset", "broken pipe", "the connection is lost",
    "connection socket closed",  # psycopg, when the server ends a connection mid-COPY (seen in the flapping test)
)
#: Texts that mean a misconfiguration: waiting would not help.
_FATAL_MARKERS = ("password authentication failed", "no pg_hba.conf entry", "role \"", "does not exist")
#: Texts of a Kafka client failure (librdkafka / confluent-kafka, also inside a Spark job failure's message).
_KAFKA_MARKERS = ("kafkaerror", "kafkaexception", "deliveryerror", "_transport", "_all_brokers_down",
                  "_msg_timed_out", "message timed out", "_timed_out", "rdkafka", "not delivered within",
                  "unknown_topic_or_part", "_unknown_topic", "_unknown_partition", "not_leader_for_partition")


class PostgresUnavailableError(LineageError, ConnectionError):
    """PostgreSQL stayed unreachable for longer than ``postgres_retry_max_seconds``."""

    code = "sink.postgres_unavailable"


class RetryCancelled(LineageError):
    """The processor is stopping while a step waited for PostgreSQL."""

    code = "sink.retry_cancelled"


@dataclass(frozen=True)
class BackoffPolicy:
    """``delay(n) = min(initial_seconds * multiplier ** n, max_interval_seconds)``; give up after ``max_total_seconds``."""

    initial_seconds: float = 0.5
    multiplier: float = 2.0
    max_interval_seconds: float = 15.0
    max_total_seconds: float = 600.0

    def delay(self, attempt: int) -> float:
        return float(min(self.initial_seconds * self.multiplier ** max(attempt, 0), self.max_interval_seconds))


_PASSWORD_PATTERNS = (
    re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)([^@\s]*)(@)", re.IGNORECASE),
    re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE),
)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with DSN passwords (URL and ``key=value`` forms) and each of ``secrets`` replaced by ``***``."""
    for pattern in _PASSWORD_PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + "***" + (m.group(3) if m.lastindex == 3 else ""), text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def postgres_address(dsn: str) -> str:
    """``host:port`` of ``dsn`` (never its password), for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - a malformed DSN fails later with its own error
        return "<unparsable DSN>"
    return f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"


def _password(dsn: str) -> str:
    try:
        from psycopg.conninfo import conninfo_to_dict

        return str(conninfo_to_dict(dsn).get("password") or "")
    except Exception:  # noqa: BLE001
        return ""


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out and len(out) < 20:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def probe_postgres(dsn: str, timeout_seconds: float = 3.0) -> str | None:
    """None when a connection to ``dsn`` succeeds now, else the (redacted) error text."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=max(int(timeout_seconds), 1)) as conn:
            conn.execute("SELECT 1")
        return None
    except psycopg.Error as exc:
        return redact(" ".join(str(exc).split()), (_password(dsn),))


def is_postgres_unavailable(exc: BaseException, dsn: str | None = None) -> bool:
    """True when ``exc`` (or a cause, or the text of a Spark job failure) says PostgreSQL is unreachable.

    When the text is inconclusive and ``dsn`` is given, PostgreSQL is probed: a failure while it is
    unreachable is counted as an outage.
    """
    import psycopg

    chain = _chain(exc)
    text = " ".join(str(e) for e in chain).lower()
    if any(m in text for m in _FATAL_MARKERS):
        return False
    if any(isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)) for e in chain):
        return True
    if is_kafka_error(exc) and (dsn is None or probe_postgres(dsn) is None):
        return False  # the broker's "connection refused", not PostgreSQL's: the runner waits for Kafka
    if any(m in text for m in _UNAVAILABLE_MARKERS):
        return True
    return dsn is not None and probe_postgres(dsn) is not None


def is_kafka_error(exc: BaseException) -> bool:
    """True when ``exc`` (or a cause, or the text of a Spark job / query failure) is a Kafka client failure."""
    chain = _chain(exc)
    if any(type(e).__name__ in ("KafkaException", "KafkaError", "DeliveryError") for e in chain):
        return True
    text = " ".join(str(e) for e in chain).lower()
    return any(m in text for m in _KAFKA_MARKERS)


def probe_kafka(conf: dict[str, Any], topics: list[str] | tuple[str, ...] = (), timeout_seconds: float = 5.0
                ) -> str | None:
    """None when the broker answers a metadata request and every one of ``topics`` exists, else why not."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**conf, "log_level": 0, "socket.connection.setup.timeout.ms": int(timeout_seconds * 1000)})
    try:
        md = admin.list_topics(timeout=timeout_seconds)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        return str(getattr(err, "str", lambda: err)())
    missing = [t for t in topics if t not in md.topics or md.topics[t].error is not None
               or not md.topics[t].partitions]
    if missing:
        return f"topic(s) {', '.join(missing)} do not exist (the broker lost them? recreate them)"
    return None


class DependencyMetrics:
    """``lineage_sink_retries_total{dependency,step}`` and ``lineage_waiting_for{dependency}`` in one registry."""

    _by_registry: weakref.WeakKeyDictionary[Any, DependencyMetrics] = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Gauge

        self.retries = Counter("lineage_sink_retries_total", "Retries of a sink step waiting for a dependency",
                               ["dependency", "step"], registry=registry)
        self.waiting = Gauge("lineage_waiting_for", "1 while the processor waits for the dependency",
                             ["dependency"], registry=registry)
        self.waiting.labels("postgres").set(0)
        self.waiting.labels("kafka").set(0)

    @classmethod
    def for_registry(cls, registry: Any = None) -> DependencyMetrics:
        """The one instance of ``registry`` (a private registry when None)."""
        if registry is None:
            from prometheus_client import CollectorRegistry

            return cls(CollectorRegistry())
        with cls._lock:
            found = cls._by_registry.get(registry)
            if found is None:
                found = cls._by_registry[registry] = cls(registry)
            return found


class PostgresRetrier:
    """Run a step; while PostgreSQL is unavailable, wait with backoff and run it again."""

    def __init__(self, dsn: str, policy: BackoffPolicy | None = None, metrics: DependencyMetrics | None = None,
                 cancel: threading.Event | None = None) -> None:
        self.dsn = dsn
        self.address = postgres_address(dsn)
        self.policy = policy or BackoffPolicy()
        self.metrics = metrics or DependencyMetrics.for_registry(None)
        self.cancel = cancel or threading.Event()
        self._secret = (_password(dsn),)
        self._waiting = 0  # steps waiting now (the graph thread and the batch thread may both wait)
        self._lock = threading.Lock()

    def _set_waiting(self, delta: int) -> None:
        with self._lock:
            self._waiting += delta
            self.metrics.waiting.labels("postgres").set(1 if self._waiting > 0 else 0)

    def _reason(self, exc: BaseException) -> str:
        probed = probe_postgres(self.dsn)
        if probed:
            return probed
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return redact(first[:300], self._secret)

    def call(self, step: str, fn: Callable[[], T], on_failure: Callable[[], None] | None = None) -> T:
        """``fn()``, retried while PostgreSQL is unavailable; ``on_failure`` runs after each failed attempt."""
        started = time.monotonic()
        attempt = 0
        waiting = False
        try:
            while True:
                try:
                    result = fn()
                except Exception as exc:
                    if on_failure is not None:
                        try:
                            on_failure()
                        except Exception:  # noqa: BLE001 - cleanup of a broken connection
                            log.debug("cleanup after a failed %s raised", step, exc_info=True)
                    if not is_postgres_unavailable(exc, self.dsn):
                        raise
                    elapsed = time.monotonic() - started
                    if elapsed >= self.policy.max_total_seconds:
                        raise PostgresUnavailableError(
                            f"PostgreSQL at {self.address} unavailable for {elapsed:.0f}s ({step}): "
                            f"{self._reason(exc)}; raise postgres_retry_max_seconds to wait longer") from exc
                    delay = min(self.policy.delay(attempt), max(self.policy.max_total_seconds - elapsed, 0.1))
                    if not waiting:
                        waiting = True
                        self._set_waiting(+1)
                    self.metrics.retries.labels("postgres", step).inc()
                    log.warning("waiting for PostgreSQL at %s: %s, retry in %.1fs (%s, attempt %d)",
                                self.address, self._reason(exc), delay, step, attempt + 1)
                    attempt += 1
                    if self.cancel.is_set() or self.cancel.wait(delay):  # stopping: give up, uncommitted
                        raise RetryCancelled(f"stopped while waiting for PostgreSQL at {self.address} ({step})"
                                             ) from None
                    continue
                if waiting:
                    log.warning("PostgreSQL at %s is back after %.1fs (%s)", self.address,
                                time.monotonic() - started, step)
                return result
        finally:
            if waiting:
                self._set_waiting(-1)
