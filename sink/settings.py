"""Settings of the PostgreSQL graph store: one pydantic-settings class, env prefix ``LINEAGE_``."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["StoreSettings"]


class StoreSettings(BaseSettings):
    """Where and how :class:`sink.postgres.GraphStore` writes.

    Environment variables: ``LINEAGE_POSTGRES_DSN``, ``LINEAGE_STORE_CONNECT_TIMEOUT_SECONDS``,
    ``LINEAGE_STORE_STATEMENT_TIMEOUT_SECONDS``, ``LINEAGE_STORE_DEADLOCK_RETRIES``,
    ``LINEAGE_TIMELINESS_WINDOW_SECONDS``, ``LINEAGE_STORE_COPY_CHUNK_BYTES``.
    """

    model_config = SettingsConfigDict(env_prefix="LINEAGE_", extra="forbid", frozen=True, hide_input_in_errors=True)

    postgres_dsn: SecretStr = Field(description="libpq DSN/URI of the graph database (env LINEAGE_POSTGRES_DSN)")
    store_connect_timeout_seconds: int = Field(10, gt=0, description="libpq connect_timeout, seconds")
    store_statement_timeout_seconds: float = Field(
        300.0, gt=0, description="statement_timeout of the store's sessions, seconds")
    store_deadlock_retries: int = Field(
        5, ge=0, description="how often a batch transaction is retried after a deadlock / serialization failure")
    timeliness_window_seconds: float = Field(
        3600.0, gt=0, description="quality timeliness decays from 1 to 0 over this many seconds past nominal end")
    store_copy_chunk_bytes: int = Field(1 << 20, gt=0, description="COPY write size, bytes")

    def dsn(self) -> str:
        return self.postgres_dsn.get_secret_value()
