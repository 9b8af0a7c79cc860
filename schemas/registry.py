"""Schema Registry access for the Confluent wire format (``00`` + 4-byte schema id + Avro body).

Two implementations of one small interface that :func:`schemas.codec.decode_message` uses
(``registry=``): ``get_schema(schema_id) -> str`` (the writer schema's JSON text, raising
:class:`SchemaNotFoundError` for an unknown id):

- :class:`ConfluentSchemaRegistry` wraps ``confluent_kafka.schema_registry.SchemaRegistryClient``
  (production, docker-compose); lookups are cached, since schema ids are immutable.
- :class:`LocalSchemaRegistry` is an in-memory id -> schema map with the same interface, for
  tests and registry-free setups.

The subject name follows Confluent's TopicNameStrategy: ``<topic>-value``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from schemas.avro import ENVELOPE, latest, parsing_canonical_form
from schemas.errors import ConfigurationError, DecodeError, SchemaNotFoundError

__all__ = ["SchemaSource", "LocalSchemaRegistry", "ConfluentSchemaRegistry", "subject_for_topic"]


class SchemaSource(Protocol):
    """What the codec needs from a registry."""

    def get_schema(self, schema_id: int) -> str: ...


def subject_for_topic(topic: str) -> str:
    """Confluent TopicNameStrategy subject for a topic's values: ``f"{topic}-value"``."""
    return f"{topic}-value"


def _schema_text(schema: str | Mapping[str, Any]) -> str:
    return schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))


class LocalSchemaRegistry:
    """In-memory registry: ids are assigned from 1 in registration order; equal schemas share an id."""

    def __init__(self, schemas: Mapping[int, str | Mapping[str, Any]] | None = None) -> None:
        self._by_id: dict[int, str] = {int(k): _schema_text(v) for k, v in (schemas or {}).items()}
        self._lock = threading.Lock()

    def register(self, schema: str | Mapping[str, Any], subject: str | None = None) -> int:
        """Id of ``schema`` (Parsing Canonical Form identity), registering it when new. ``subject`` is ignored."""
        text = _schema_text(schema)
        pcf = parsing_canonical_form(text)
        with self._lock:
            for sid, known in self._by_id.items():
                if parsing_canonical_form(known) == pcf:
                    return sid
            sid = max(self._by_id, default=0) + 1
            self._by_id[sid] = text
            return sid

    def register_envelope(self, subject: str | None = None) -> int:
        """Id of the latest shipped ``openlineage_envelope`` schema."""
        return self.register(latest(ENVELOPE).json, subject)

    def get_schema(self, schema_id: int) -> str:
        try:
            return self._by_id[schema_id]
        except KeyError:
            raise SchemaNotFoundError(f"schema id {schema_id} is not registered", code="decode.unknown_schema_id") from None


class ConfluentSchemaRegistry:
    """A thin, caching wrapper of ``confluent_kafka.schema_registry.SchemaRegistryClient``.

    ``conf`` is the client's configuration (``{"url": "http://registry:8081", ...}``) or just the
    URL; pass ``client=`` to reuse an existing client instead.
    """

    def __init__(self, conf: Mapping[str, Any] | str | None = None, *, client: Any = None) -> None:
        if isinstance(conf, str):
            conf = {"url": conf}
        if client is None:
            if not conf or "url" not in conf:
                raise ConfigurationError("ConfluentSchemaRegistry needs a configuration with a 'url' "
                                         "(for example {'url': 'http://127.0.0.1:8081'})")
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:  # pragma: no cover - depends on the installation
                raise ConfigurationError(
                    "the Schema Registry client needs confluent-kafka's registry extras: "
                    "pip install 'confluent-kafka[schemaregistry]' (authlib, cachetools, httpx, attrs)"
                ) from exc
            client = SchemaRegistryClient(dict(conf))
        self._client = client
        self._by_id: dict[int, str] = {}
        self._ids: dict[tuple[str, str], int] = {}

    def register(self, schema: str | Mapping[str, Any], subject: str) -> int:
        """Register ``schema`` under ``subject`` (idempotent on the registry side) and cache its id."""
        from confluent_kafka.schema_registry import Schema

        text = _schema_text(schema)
        key = (subject, text)
        if key not in self._ids:
            sid = int(self._client.register_schema(subject, Schema(text, "AVRO")))
            self._ids[key] = sid
            self._by_id.setdefault(sid, text)
        return self._ids[key]

    def register_envelope(self, subject: str) -> int:
        """Register the latest shipped ``openlineage_envelope`` under ``subject`` (e.g. ``openlineage.events-value``)."""
        return self.register(latest(ENVELOPE).json, subject)

    def lookup_envelope(self, subject: str) -> int:
        """Id the registry already has for the latest envelope under ``subject`` (no registration)."""
        from confluent_kafka.schema_registry import Schema

        text = latest(ENVELOPE).json
        key = (subject, text)
        if key not in self._ids:
            self._ids[key] = int(self._client.lookup_schema(subject, Schema(text, "AVRO")).schema_id)
        return self._ids[key]

    def get_schema(self, schema_id: int) -> str:
        """Writer schema JSON for ``schema_id`` (cached; ids are immutable)."""
        text = self._by_id.get(schema_id)
        if text is not None:
            return text
        try:
            schema = self._client.get_schema(schema_id)
        except Exception as exc:  # noqa: BLE001 - the client raises its own error types and HTTP errors
            if getattr(exc, "http_status_code", None) == 404:
                raise SchemaNotFoundError(f"schema id {schema_id} is not in the registry",
                                          code="decode.unknown_schema_id") from exc
            raise DecodeError(f"schema registry lookup of id {schema_id} failed: {exc}", code="decode.registry") from exc
        if getattr(schema, "schema_type", "AVRO") not in (None, "AVRO"):
            raise DecodeError(f"schema id {schema_id} is a {schema.schema_type} schema, not Avro", code="decode.registry")
        text = schema.schema_str
        self._by_id[schema_id] = text
        return text
