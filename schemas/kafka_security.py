"""Kafka client security settings shared by every component that talks to Kafka.

One mixin, :class:`KafkaSecurity`, holds the SASL/SSL fields (env ``LINEAGE_SECURITY_PROTOCOL``,
``LINEAGE_SASL_MECHANISM``, ``LINEAGE_SASL_USERNAME``, ``LINEAGE_SASL_PASSWORD``,
``LINEAGE_SSL_CA_LOCATION``, ``LINEAGE_SSL_CERTIFICATE_LOCATION``, ``LINEAGE_SSL_KEY_LOCATION``,
``LINEAGE_SSL_KEY_PASSWORD``) and renders them as librdkafka's dotted keys, so the producer library
and the processor pass exactly the same properties to their clients. Secrets are ``SecretStr``:
revealed only in :meth:`KafkaSecurity.security_config`, never in reprs, logs or errors.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr

__all__ = ["KafkaSecurity"]


class KafkaSecurity(BaseModel):
    """SASL/SSL settings of a Kafka client (mixed into the components' settings classes)."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = Field(
        default=None, description="security.protocol (None: librdkafka's default, PLAINTEXT)")
    sasl_mechanism: str | None = Field(default=None, description="sasl.mechanism, e.g. PLAIN, SCRAM-SHA-512")
    sasl_username: str | None = None
    sasl_password: SecretStr | None = Field(default=None, description="sasl.password (a secret)")
    ssl_ca_location: str | None = Field(default=None, description="PEM file of the CA")
    ssl_certificate_location: str | None = Field(default=None, description="PEM file of the client certificate")
    ssl_key_location: str | None = Field(default=None, description="PEM file of the client key")
    ssl_key_password: SecretStr | None = Field(default=None, description="password of the client key (a secret)")

    def security_config(self) -> dict[str, str]:
        """The set SASL/SSL properties as librdkafka's dotted keys (secrets revealed here only)."""
        values = {
            "security.protocol": self.security_protocol,
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password.get_secret_value() if self.sasl_password else None,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password.get_secret_value() if self.ssl_key_password else None,
        }
        return {key: str(value) for key, value in values.items() if value is not None}
