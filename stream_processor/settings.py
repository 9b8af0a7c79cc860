"""Settings of the stream processor: one pydantic-settings object, env prefix ``LINEAGE_``.

Every field reads ``LINEAGE_<FIELD>`` (``LINEAGE_BOOTSTRAP_SERVERS``, ``LINEAGE_POSTGRES_DSN``, ...);
the CLI builds one instance at its entry point and passes it down. Units are in the names.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.errors import ConfigurationError
from schemas.kafka_security import KafkaSecurity

__all__ = ["DEFAULT_MAX_OFFSETS_PER_TRIGGER", "ProcessorSettings"]

#: Kafka records per micro-batch at most, by default. ``lineage bench --events 40000 --rate 1000 --latency-seconds 20
#: --max-batch-events N`` (2026-11-27, 2 interleaved runs each; docs/PERFORMANCE.md, session 18): peak RSS of the
#: process tree 2.67-2.99 GB at 5,000, 2.86-3.06 at 10,000, 3.22-3.37 at 20,000, 4.06 GB with no cap (the 40,000
#: events in one batch: the driver 1.26 GB, the Python workers 2.1 GB), while the CPU per event fell 0.87 -> 0.81
#: -> 0.73 ms (each micro-batch costs ~0.7-0.9 CPU-s whatever its size). Session 28 (2026-11-28) stopped the staging
#: workers holding every parsed event of their partition (writer.ParsedOnRead): at 10,000 the tree peaked at
#: 2.73-2.85 GB (4 runs; the previous code 2.87-2.99, 2 runs) and the drain cost a median 1.16 against 1.31 ms of CPU
#: per event at 5,000 (4 + 4 interleaved runs, a slow hour). 10,000 keeps the tree under the 3 GB of issue 18's
#: memory goal; raise it where memory allows.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 10_000


def _secret_key(key: str) -> bool:
    key = key.lower()
    return any(word in key for word in ("password", "secret", "jaas", "token", "credential"))


class ProcessorSettings(KafkaSecurity, BaseSettings):
    """Everything the Structured Streaming query needs, validated once at start."""

    model_config = SettingsConfigDict(env_prefix="LINEAGE_", extra="forbid", hide_input_in_errors=True)

    #: ``LINEAGE_BOOTSTRAP_SERVERS``: Kafka bootstrap servers (``host:port[,host:port]``).
    bootstrap_servers: str = "127.0.0.1:9092"
    #: ``LINEAGE_POSTGRES_DSN``: the graph database (None: no PostgreSQL sink, only for tests of the source).
    postgres_dsn: str | None = None
    #: ``LINEAGE_PARQUET_DIR``: root of the Parquet graph tables (None: no Parquet sink).
    parquet_dir: str | None = None
    #: ``LINEAGE_CHECKPOINT_DIR``: Structured Streaming checkpoint location (offsets, state, commits).
    checkpoint_dir: str = "./lineage-data/checkpoint"
    topic_events: str = "openlineage.events"
    topic_enriched: str = "openlineage.events.enriched"
    topic_graph: str = "openlineage.graph"
    topic_dlq: str = "openlineage.events.dlq"
    #: ``LINEAGE_SUBSCRIBE_PATTERN``: a regex of input topics, instead of ``topic_events``.
    subscribe_pattern: str | None = None
    #: ``LINEAGE_STARTING_OFFSETS``: ``earliest`` | ``latest`` | JSON ``{"topic": {"0": 12}}``.
    starting_offsets: str = "earliest"
    #: ``LINEAGE_REGISTRY_URL``: Confluent Schema Registry (None: registry-free decoding).
    registry_url: str | None = None
    #: ``LINEAGE_TRIGGER_INTERVAL_SECONDS``: micro-batch trigger interval (0: as fast as possible).
    trigger_interval_seconds: float = 1.0
    #: ``LINEAGE_MAX_OFFSETS_PER_TRIGGER``: cap on Kafka records per micro-batch (0 or None: no cap). A batch's
    #: memory follows its records (the workers' parsed events, the driver's changed rows for Parquet and the
    #: graph topic), so without a cap a backlog (a restart after an outage, a new processor reading a topic from
    #: the earliest offset) became one batch as large as the backlog (:data:`DEFAULT_MAX_OFFSETS_PER_TRIGGER`).
    max_offsets_per_trigger: int | None = Field(default=DEFAULT_MAX_OFFSETS_PER_TRIGGER, ge=0)
    #: ``LINEAGE_DEDUPE_WINDOW_SECONDS``: event-time window of the in-state dedupe (older: durable at the sink).
    dedupe_window_seconds: int = 3600
    #: ``LINEAGE_RECOMBINE_QUIET_SECONDS``: `$self` parts of a run are emitted after this long without a new part.
    recombine_quiet_seconds: float = 10.0
    #: ``LINEAGE_TICK_SECONDS``: how often an idle query runs an empty micro-batch, which emits the `$self`
    #: groups that have become due (``lineage_kafka`` source only; see :meth:`tick_interval`). None: half the
    #: quiet period, at least the trigger interval; 0: no ticks (due groups then wait for the next data).
    tick_seconds: float | None = Field(default=None, ge=0)
    #: ``LINEAGE_RECOMBINE_STATE_TTL_SECONDS``: a recombined run's state is dropped this long after its last part.
    recombine_state_ttl_seconds: float = 3600.0
    #: ``LINEAGE_METRICS_PORT``: Prometheus HTTP port (0: a free port, printed at start; None: no endpoint).
    metrics_port: int | None = None
    #: ``LINEAGE_SOURCE_FORMAT``: ``auto`` (native ``kafka`` when its jars are present) | ``kafka`` | ``lineage_kafka``.
    source_format: str = "auto"
    #: ``LINEAGE_SHUFFLE_PARTITIONS``: partitions of the stateful operators' shuffle.
    shuffle_partitions: int = 2
    #: ``LINEAGE_SOURCE_MIN_PARTITIONS``: at least this many read tasks per micro-batch (``lineage_kafka``
    #: splits the partitions' offset ranges; 0: one task per Kafka partition)
    source_min_partitions: int = Field(default=0, ge=0)
    #: ``LINEAGE_SPARK_MASTER``: Spark master URL (default ``local[2]``; a cluster's under spark-submit).
    spark_master: str | None = None
    #: ``LINEAGE_SPARK_PACKAGES``: Maven coordinates for ``spark.jars.packages``, e.g. the native Kafka
    #: connector ``org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1`` (docker-compose sets it).
    spark_packages: str | None = None
    #: ``LINEAGE_DERIVE_AT_DECODE``: true: decode derives each plain event's graph rows from the event it parsed, and
    #: the staging pass stages them without parsing the text again (issue 18, item 1: each event parsed once;
    #: docs/ARCHITECTURE.md, "Parsed once"). False (the default since session 42): decode hands on the text only,
    #: and the staging pass parses and derives it, so each event is parsed twice
    #: (``lineage_event_parses_total{stage="staging"}``). Why false: the parse it saves is ~14-20 us of orjson, the rows
    #: it hands on instead (~4.2 kB marshalled, larger than the ~3.9 kB text) cost as much in Python to marshal and
    #: compress and cross the JVM twice more (reader -> dedupe's shuffle -> staging worker); in 6 of 6 alternated
    #: pairs of the goals command the drain ran 10-17 % more CPU per event with it on; 4 later pairs against the
    #: previous main, in a very slow hour, were mixed (docs/PERFORMANCE.md, session 42). On, the derivation runs in
    #: the read tasks (one per Kafka partition) instead of the staging tasks.
    derive_at_decode: bool = False
    #: ``LINEAGE_PUBLISH_ENRICHED`` / ``LINEAGE_PUBLISH_GRAPH``: publish downstream topics.
    publish_enriched: bool = True
    publish_graph: bool = True
    #: ``LINEAGE_GRAPH_TOPIC_ANNOTATIONS``: also publish the provenance and quality rows on the graph topic (off: the
    #: graph topic carries nodes, edges, column edges and runs, rows a compacted topic keeps one of per id; the
    #: annotations are one row per (event, dataset) and per dataset version, so they never compact, and every
    #: enriched record already carries its event's; stream_processor.writer.graph_topic_tables).
    graph_topic_annotations: bool = False
    #: ``LINEAGE_KAFKA_EXTRA``: extra librdkafka properties (dotted keys) for every client.
    kafka_extra: dict[str, str] = Field(default_factory=dict)
    #: ``LINEAGE_POSTGRES_RETRY_MAX_SECONDS``: how long a batch waits for an unavailable PostgreSQL (seconds)
    #: before the query fails; meanwhile the batch (and its Kafka offsets) is not committed.
    postgres_retry_max_seconds: float = Field(default=600.0, gt=0)
    #: ``LINEAGE_POSTGRES_RETRY_INITIAL_SECONDS``: first backoff delay; it doubles per retry (seconds).
    postgres_retry_initial_seconds: float = Field(default=0.5, gt=0)
    #: ``LINEAGE_POSTGRES_RETRY_MAX_INTERVAL_SECONDS``: cap of one backoff delay (seconds).
    postgres_retry_max_interval_seconds: float = Field(default=15.0, gt=0)
    #: ``LINEAGE_CHUNK_TIMEOUT_SECONDS``: how long (broker time, or wall time at the log end) a message split
    #: into chunks by its producer may stay incomplete before it goes to the DLQ as ``chunk.incomplete`` (seconds).
    chunk_timeout_seconds: float = Field(default=60.0, gt=0)
    #: ``LINEAGE_SOURCE_POLL_TIMEOUT_SECONDS``: an executor's read of a planned offset range fails when no
    #: record arrives for this long (the broker lost the records, or is down: the runner then waits for it).
    source_poll_timeout_seconds: float = Field(default=120.0, gt=0)
    #: ``LINEAGE_SOURCE_PROBE_RETRY_SECONDS``: how long the driver's offset probe retries an unreachable broker
    #: itself before the query fails and the runner's wait for Kafka takes over.
    source_probe_retry_seconds: float = Field(default=15.0, ge=0)
    # SASL/SSL fields (LINEAGE_SECURITY_PROTOCOL, LINEAGE_SASL_*, LINEAGE_SSL_*): schemas.kafka_security.

    @field_validator("starting_offsets")
    @classmethod
    def _check_offsets(cls, value: str) -> str:
        if value not in ("earliest", "latest") and not value.lstrip().startswith("{"):
            raise ValueError("starting_offsets must be earliest, latest or a JSON object")
        return value

    def require_postgres(self) -> str:
        """The DSN, or a :class:`ConfigurationError` saying how to give one."""
        if not self.postgres_dsn:
            raise ConfigurationError("no PostgreSQL DSN: pass --postgres-dsn, set LINEAGE_POSTGRES_DSN, "
                                     "or start `lineage up` first")
        return self.postgres_dsn

    def kafka_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka's dotted-key configuration for a client of this processor (security included)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, **self.security_config(),
                                **self.kafka_extra}
        conf.update(overrides)
        return conf

    def source_options(self) -> dict[str, str]:
        """Options of the Spark Kafka source: ``kafka.<key>`` for every client property but the bootstrap.

        The ``lineage_kafka`` source passes them to librdkafka as they are. (Spark's native ``kafka``
        source speaks the Java client's names; SASL there wants ``kafka.sasl.jaas.config`` in
        ``kafka_extra``.)
        """
        options = {f"kafka.{k}": str(v) for k, v in self.kafka_config().items() if k != "bootstrap.servers"}
        options["chunkTimeoutSeconds"] = str(self.chunk_timeout_seconds)
        options["pollTimeoutMs"] = str(int(self.source_poll_timeout_seconds * 1000))
        options["probeRetrySeconds"] = str(self.source_probe_retry_seconds)
        if self.source_min_partitions:
            options["minPartitions"] = str(self.source_min_partitions)
        options["derive"] = "true" if self.derive_at_decode else "false"
        return options

    def tick_interval(self) -> float:
        """Seconds between the ticks of an idle query (``lineage_kafka``'s ``tickSeconds``; 0: no ticks).

        Without data, Spark runs no micro-batch, and the `$self` groups are recombined by the writer of a
        batch (recombine.py): the ticks are those batches of an idle query. A `$self` group is emitted at most
        ``recombine_quiet_seconds + tick_interval()`` (plus a batch) after its last part. With Spark's own Kafka
        source there are no ticks: an idle topic's due groups wait for its next record.
        """
        if self.tick_seconds is not None:
            return float(self.tick_seconds)
        return max(self.trigger_interval_seconds, self.recombine_quiet_seconds / 2)

    def retry_policy(self) -> Any:
        """The :class:`~stream_processor.retry.BackoffPolicy` of the sink's PostgreSQL retries."""
        from .retry import BackoffPolicy

        return BackoffPolicy(initial_seconds=self.postgres_retry_initial_seconds,
                             max_interval_seconds=self.postgres_retry_max_interval_seconds,
                             max_total_seconds=self.postgres_retry_max_seconds)

    def __repr_args__(self) -> Any:
        """Like pydantic's, with the DSN password and secret-looking ``kafka_extra`` values masked."""
        from .retry import redact

        for name, value in super().__repr_args__():
            if name == "postgres_dsn" and isinstance(value, str):
                value = redact(value)
            elif name == "kafka_extra" and isinstance(value, dict):
                value = {k: ("**********" if _secret_key(k) else v) for k, v in value.items()}
            yield name, value

    @property
    def input_topics(self) -> list[str]:
        return [t.strip() for t in self.topic_events.split(",") if t.strip()]
