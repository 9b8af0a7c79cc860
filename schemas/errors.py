"""Errors shared by every component.

One base class, :class:`LineageError`; each specific error also inherits the
standard exception it refines, so ``except ValueError`` still works for callers
that do not know our types. Every error carries a stable ``code`` that the
dead-letter record and the ``reason`` metric label use; codes never change once
shipped (dashboards and alert rules select on them).
"""

from __future__ import annotations

__all__ = [
    "LineageError",
    "DecodeError",
    "EventValidationError",
    "SelfLinkError",
    "FacetValidationError",
    "SchemaNotFoundError",
    "DeliveryError",
    "StoreError",
    "ConfigurationError",
]


class LineageError(Exception):
    """Base class of every error this project raises on purpose."""

    code = "lineage_error"

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        #: JSON path of the offending field (``run.runId``, ``outputs[2].name``) where one is known.
        self.field = field

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class DecodeError(LineageError, ValueError):
    """Bytes that are not a message in any supported encoding.

    Codes: ``decode.empty``, ``decode.bad_magic``, ``decode.truncated``,
    ``decode.unknown_fingerprint``, ``decode.unknown_schema_id``,
    ``decode.avro``, ``decode.utf8``, ``decode.json`` (also a ``NaN`` / ``Infinity`` literal),
    ``decode.bom`` (JSON text after a UTF-8 byte-order mark), ``decode.too_deep``,
    ``decode.too_large``, ``decode.registry``.
    """

    code = "decode"


class SchemaNotFoundError(DecodeError, LookupError):
    """A fingerprint or registry schema id that no known schema has."""

    code = "decode.unknown_schema"


class EventValidationError(LineageError, ValueError):
    """A decoded document that breaks the OpenLineage spec; ``field`` names where.

    Codes: ``validation.missing``, ``validation.type``, ``validation.run_id``,
    ``validation.event_time``, ``validation.event_type``, ``validation.not_an_event``.
    """

    code = "validation"


class SelfLinkError(EventValidationError):
    """A ``$self`` output with no subject, or a ``self_link`` that resolves to no ``$self`` output."""

    code = "validation.self_link"


class FacetValidationError(EventValidationError):
    """A standard facet that breaks its own schema (``spec/facets/*.json``): the facet is dropped, the event is
    kept, and a dead-letter record with this code and ``field`` = the JSON path of the violation is published."""

    code = "validation.facet"


class DeliveryError(LineageError, IOError):
    """A message the broker did not acknowledge (the producer's delivery report said so)."""

    code = "delivery"


class StoreError(LineageError, RuntimeError):
    """The graph store could not apply a batch."""

    code = "store"


class ConfigurationError(LineageError, ValueError):
    """Settings that cannot work; the message says what to change."""

    code = "configuration"
