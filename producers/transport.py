"""An openlineage-python transport that publishes through :class:`producers.emitter.LineageEmitter`.

A job that already uses ``OpenLineageClient`` switches to our topic and Avro single-object
encoding with configuration only. openlineage-python (checked on 1.54) resolves a transport
``type`` in its own registry or as a *dotted class path*; it does not read the
``openlineage.transport`` entry points that pyproject.toml declares. So, in ``openlineage.yml``::

    transport:
      type: producers.transport.LineageKafkaTransport
      bootstrap_servers: 127.0.0.1:9092
      topic: openlineage.events          # optional
      encoding: avro                     # avro | confluent | json; optional
      flush: true                        # flush after each event, like the official transport
      config:                            # optional librdkafka pass-through (dotted keys)
        security.protocol: SASL_SSL

Importing this module also registers the short name ``lineage_kafka_avro`` in the client's
default transport factory, so code that has imported :mod:`producers.transport` may write
``type: lineage_kafka_avro``. From code::

    OpenLineageClient(transport=LineageKafkaTransport(LineageKafkaConfig(bootstrap_servers="...")))

Unlike the official Kafka transport, delivery failures are not only logged: ``emit`` (with
``flush: true``) and ``close`` raise :class:`schemas.errors.DeliveryError`.
"""

from __future__ import annotations

from typing import Any

try:
    import attr
    from openlineage.client.serde import Serde
    from openlineage.client.transport import get_default_factory
    from openlineage.client.transport.transport import Config, Transport
except ImportError as exc:  # pragma: no cover - depends on the optional extra
    raise ImportError("producers.transport needs openlineage-python: "
                      "pip install 'lineage-stream[openlineage]'") from exc

from schemas.errors import ConfigurationError

from .emitter import LineageEmitter
from .settings import DEFAULT_TOPIC, EmitterSettings

__all__ = ["LineageKafkaTransport", "LineageKafkaConfig", "TRANSPORT_TYPE"]

TRANSPORT_TYPE = "lineage_kafka_avro"


@attr.define
class LineageKafkaConfig(Config):
    """Configuration of :class:`LineageKafkaTransport` (the keys of the ``transport:`` mapping)."""

    bootstrap_servers: str
    topic: str = DEFAULT_TOPIC
    encoding: str = "avro"
    flush: bool = True
    config: dict[str, str] = attr.field(factory=dict)
    confluent_schema_id: int | None = None

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> LineageKafkaConfig:
        params = {k: v for k, v in params.items() if k not in ("type", "name", "priority")}
        config = dict(params.pop("config", None) or {})
        bootstrap = params.pop("bootstrap_servers", None) or config.pop("bootstrap.servers", None)
        if not bootstrap:
            raise ConfigurationError("transport lineage_kafka_avro needs `bootstrap_servers` "
                                     "(or `config: {bootstrap.servers: ...}`)")
        known = {f.name for f in attr.fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ConfigurationError(f"unknown key(s) for transport lineage_kafka_avro: {', '.join(unknown)}; "
                                     f"known: {', '.join(sorted(known))}")
        flush = params.pop("flush", True)
        if isinstance(flush, str):
            flush = flush.strip().lower() in ("1", "true", "yes")
        return cls(bootstrap_servers=str(bootstrap), config={str(k): str(v) for k, v in config.items()},
                   flush=bool(flush), **params)

    def settings(self) -> EmitterSettings:
        return EmitterSettings(bootstrap_servers=self.bootstrap_servers, topic=self.topic,
                               encoding=self.encoding,  # type: ignore[arg-type]
                               confluent_schema_id=self.confluent_schema_id, extra_config=self.config)


class LineageKafkaTransport(Transport):
    """OpenLineage client transport: our topic, our keys, Avro single-object encoding by default."""

    kind = TRANSPORT_TYPE
    config_class = LineageKafkaConfig

    def __init__(self, config: LineageKafkaConfig) -> None:
        self.config = config
        self.emitter = LineageEmitter(config.settings())

    def emit(self, event: Any) -> None:
        self.emitter.emit(Serde.to_dict(event))
        if self.config.flush:
            self.emitter.flush()

    def wait_for_completion(self, timeout: float = -1) -> bool:
        self.emitter.flush(None if timeout is None or timeout < 0 else timeout)
        return True

    def close(self, timeout: float = -1) -> bool:
        return self.wait_for_completion(timeout)


get_default_factory().register_transport(TRANSPORT_TYPE, LineageKafkaTransport)
