"""Settings of the HTTP server: one pydantic-settings class, env prefix ``LINEAGE_``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from schemas.kafka_security import KafkaSecurity

__all__ = ["ApiSettings", "DEFAULT_PORT"]

DEFAULT_PORT = 5000  # Marquez's API port: tools that assume Marquez at :5000 find us there


def _split(value: Any) -> Any:
    """A comma-separated string (``LINEAGE_API_KEYS=a,b``) or a JSON list -> a list."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            import json

            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class ApiSettings(KafkaSecurity, BaseSettings):
    """Where the server listens, what it talks to, and its limits.

    Environment variables (prefix ``LINEAGE_``): ``LINEAGE_HOST``, ``LINEAGE_PORT``,
    ``LINEAGE_POSTGRES_DSN``, ``LINEAGE_BOOTSTRAP_SERVERS``, ``LINEAGE_TOPIC_EVENTS``,
    ``LINEAGE_TOPIC_DLQ``, ``LINEAGE_API_KEYS`` (comma-separated or a JSON list),
    ``LINEAGE_READ_REQUIRES_KEY``, ``LINEAGE_MAX_BODY_BYTES``, ``LINEAGE_CORS_ORIGINS`` ...
    """

    model_config = SettingsConfigDict(env_prefix="LINEAGE_", extra="forbid", frozen=True, hide_input_in_errors=True)

    host: str = Field("127.0.0.1", description="listen address (env LINEAGE_HOST)")
    port: int = Field(DEFAULT_PORT, ge=0, le=65535, description="listen port, 0 for a free one (env LINEAGE_PORT)")
    postgres_dsn: SecretStr = Field(description="libpq DSN of the graph database (env LINEAGE_POSTGRES_DSN)")
    bootstrap_servers: str = Field(description="Kafka bootstrap servers (env LINEAGE_BOOTSTRAP_SERVERS)")
    topic_events: str = Field("openlineage.events", description="input topic ingest publishes to")
    topic_dlq: str = Field("openlineage.events.dlq", description="dead-letter topic (dropped facets)")
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="accepted `Authorization: Bearer` keys; empty: no key needed to write "
        "(env LINEAGE_API_KEYS, comma-separated)")
    read_requires_key: bool = Field(False, description="GET routes also need a key (env LINEAGE_READ_REQUIRES_KEY)")
    max_body_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="largest request body, bytes, before and after gzip decompression "
        "(env LINEAGE_MAX_BODY_BYTES); larger: 413")
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="origins allowed by CORS; empty: no CORS headers (env LINEAGE_CORS_ORIGINS)")
    pool_min_size: int = Field(1, ge=0, description="PostgreSQL connections kept open")
    pool_max_size: int = Field(8, gt=0, description="PostgreSQL connections at most")
    pool_timeout_seconds: float = Field(5.0, gt=0, description="wait for a pooled connection, seconds; then 503")
    statement_timeout_seconds: float = Field(30.0, gt=0, description="statement_timeout of read queries, seconds")
    delivery_timeout_seconds: float = Field(
        10.0, gt=0, description="how long ingest waits for the broker's acknowledgement, seconds; then 503")
    retry_after_seconds: int = Field(5, ge=1, description="Retry-After of a 503, seconds")
    linger_ms: int = Field(0, ge=0, description="producer linger.ms, milliseconds (0: a lone request is not held back; "
                           "concurrent requests still share batches while earlier ones are in flight)")
    compression_type: str = Field("lz4", description="producer compression.type")

    @field_validator("api_keys", "cors_origins", mode="before")
    @classmethod
    def _split_lists(cls, value: Any) -> Any:
        return _split(value)

    @field_validator("bootstrap_servers")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        from producers.settings import bootstrap_servers_given

        return bootstrap_servers_given(value)

    def dsn(self) -> str:
        return self.postgres_dsn.get_secret_value()

    def producer_config(self) -> dict[str, str]:
        """librdkafka configuration of the ingest producer: idempotent, ``acks=all`` (never configurable)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": "lineage-http-ingest",
            "acks": "all",
            "enable.idempotence": "true",
            "linger.ms": str(self.linger_ms),
            "compression.type": self.compression_type,
            "delivery.timeout.ms": str(int(self.delivery_timeout_seconds * 1000)),
            **self.security_config(),
        }
