"""Settings of the producer library: one pydantic-settings class, env prefix ``LINEAGE_``.

Every field reads ``LINEAGE_<FIELD>`` (``bootstrap_servers`` -> ``LINEAGE_BOOTSTRAP_SERVERS``);
unknown keys are refused. :meth:`EmitterSettings.librdkafka_config` renders librdkafka's dotted
keys. Reliability settings are fixed, not configurable: ``acks=all`` and
``enable.idempotence=true`` (a retried send never duplicates or reorders a key's messages).

Batching and compression defaults were chosen by measurement (``benchmarks/producer_throughput.py``,
3.8 kB demo events, embedded broker, medians of 3 rounds on a loaded 2-core machine): ``lz4`` with
``linger.ms=20`` and 256 KiB batches produced pre-encoded events at ~13k/s and read back at ~68k/s,
against ~10k/s and ~37k/s uncompressed; zstd and snappy were no better, and DESIGN.md records
zstd's high broker-side cost for small batches. End to end the producer is bound by Avro
encoding (~4-10k events/s for these events), not by Kafka.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.kafka_security import KafkaSecurity

__all__ = ["EmitterSettings", "Encoding", "DEFAULT_TOPIC", "bootstrap_servers_given"]

DEFAULT_TOPIC = "openlineage.events"
Encoding = Literal["avro", "confluent", "json"]
Compression = Literal["none", "lz4", "snappy", "gzip", "zstd"]
_FIXED = {"acks": "all", "enable.idempotence": "true"}


def bootstrap_servers_given(value: str) -> str:
    """``bootstrap_servers`` stripped; empty is a configuration error (the settings' validators share this)."""
    if not value.strip():
        raise ValueError("bootstrap_servers is empty: set LINEAGE_BOOTSTRAP_SERVERS or pass --bootstrap-servers")
    return value.strip()


class EmitterSettings(KafkaSecurity, BaseSettings):
    """Where and how :class:`producers.emitter.LineageEmitter` publishes.

    Environment variables (prefix ``LINEAGE_``): ``LINEAGE_BOOTSTRAP_SERVERS``, ``LINEAGE_TOPIC``,
    ``LINEAGE_ENCODING``, ``LINEAGE_LINGER_MS``, ``LINEAGE_COMPRESSION_TYPE``, ``LINEAGE_SASL_PASSWORD`` ...
    """

    model_config = SettingsConfigDict(env_prefix="LINEAGE_", extra="forbid", frozen=True, hide_input_in_errors=True)

    bootstrap_servers: str = Field(
        description="Kafka bootstrap servers, host:port[,host:port] (env LINEAGE_BOOTSTRAP_SERVERS); required")
    topic: str = Field(default=DEFAULT_TOPIC, description="input topic (env LINEAGE_TOPIC)")
    encoding: Encoding = Field(
        default="avro", description="avro (single-object, registry-free) | confluent (wire format, needs "
        "confluent_schema_id or registry_url) | json (as the OpenLineage clients send it) (env LINEAGE_ENCODING)")
    confluent_schema_id: int | None = Field(
        default=None, description="Schema Registry id of the envelope schema, for encoding=confluent "
        "(env LINEAGE_CONFLUENT_SCHEMA_ID)")
    registry_url: str | None = Field(
        default=None, description="Confluent Schema Registry URL: with encoding=confluent and no "
        "confluent_schema_id, the envelope schema is registered there under <topic>-value (env LINEAGE_REGISTRY_URL)")
    client_id: str = Field(default="lineage-producer", description="librdkafka client.id (env LINEAGE_CLIENT_ID)")
    linger_ms: int = Field(default=20, ge=0, description="linger.ms: how long a batch waits to fill, milliseconds")
    batch_size_bytes: int = Field(default=262_144, gt=0, description="batch.size, bytes per partition batch")
    compression_type: Compression = Field(default="lz4", description="compression.type (env LINEAGE_COMPRESSION_TYPE)")
    message_max_bytes: int | None = Field(
        default=None, gt=0, description="message.max.bytes, bytes; set 1048588 to behave as Apache Kafka's default")
    delivery_timeout_ms: int = Field(
        default=30_000, gt=0, description="delivery.timeout.ms: a message not acknowledged by then is reported failed")
    queue_buffering_max_messages: int = Field(
        default=500_000, gt=0, description="queue.buffering.max.messages: local queue bound, messages")
    flush_timeout_seconds: float = Field(default=60.0, gt=0, description="how long flush()/close() wait, seconds")
    extra_config: dict[str, str] = Field(
        default_factory=dict, description="any other librdkafka property, dotted keys, passed as is "
        "(env LINEAGE_EXTRA_CONFIG as a JSON object)")

    @field_validator("bootstrap_servers")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return bootstrap_servers_given(value)

    @field_validator("extra_config", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value

    @field_validator("extra_config")
    @classmethod
    def _keep_reliability(cls, value: dict[str, str]) -> dict[str, str]:
        for key, fixed in _FIXED.items():
            if key in value and value[key].lower() != fixed:
                raise ValueError(f"extra_config cannot set {key}={value[key]}: the emitter always uses {key}={fixed} "
                                 "(no loss, no duplicates on retry)")
        return value

    def librdkafka_config(self) -> dict[str, str]:
        """The producer configuration with librdkafka's dotted keys (secrets revealed here only)."""
        config: dict[str, str] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            **_FIXED,
            "linger.ms": str(self.linger_ms),
            "batch.size": str(self.batch_size_bytes),
            "compression.type": self.compression_type,
            "delivery.timeout.ms": str(self.delivery_timeout_ms),
            "queue.buffering.max.messages": str(self.queue_buffering_max_messages),
        }
        if self.message_max_bytes is not None:
            config["message.max.bytes"] = str(self.message_max_bytes)
        config.update(self.security_config())
        config.update(self.extra_config)
        return config
