"""The contracts every component shares: Avro schemas, the wire codec, validation, identity, errors.

``schemas/avro/*.avsc`` are the source of truth for the wire formats; this package has no
project imports and installs light (fastavro only; confluent-kafka's Schema Registry client is
imported lazily by :mod:`schemas.registry`).
"""

from __future__ import annotations

import schemas._compiled  # noqa: F401 - first: installs the finder of the compiled modules (schemas/_compiled.py)
from schemas.avro import ENVELOPE, SCHEMA_NAMES, ShippedSchema, crc64_avro, fingerprint, latest, load_schema
from schemas.codec import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    SUBJECT_HEADER,
    DecodedMessage,
    SelfLinkPointer,
    decode_message,
    decode_record,
    detect_encoding,
    encode_confluent,
    encode_evo_document,
    encode_json,
    encode_record,
    encode_single_object,
    subject_header,
)
from schemas.errors import (
    ConfigurationError,
    DecodeError,
    DeliveryError,
    EventValidationError,
    LineageError,
    SchemaNotFoundError,
    SelfLinkError,
    StoreError,
)
from schemas.identity import (
    LINEAGE_NAMESPACE,
    canonical_json,
    dataset_id,
    edge_id,
    event_hash,
    hash_canonical,
    job_id,
    node_uuid,
    run_node_id,
)
from schemas.validate import (
    EVENT_TYPES,
    classify_event,
    normalise_event_time,
    validate_event,
    validate_message,
)

__all__ = [
    # avro
    "ENVELOPE",
    "SCHEMA_NAMES",
    "ShippedSchema",
    "crc64_avro",
    "fingerprint",
    "latest",
    "load_schema",
    # codec
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "SUBJECT_HEADER",
    "DecodedMessage",
    "SelfLinkPointer",
    "decode_message",
    "decode_record",
    "detect_encoding",
    "encode_confluent",
    "encode_evo_document",
    "encode_json",
    "encode_record",
    "encode_single_object",
    "subject_header",
    # errors
    "ConfigurationError",
    "DecodeError",
    "DeliveryError",
    "EventValidationError",
    "LineageError",
    "SchemaNotFoundError",
    "SelfLinkError",
    "StoreError",
    # identity
    "LINEAGE_NAMESPACE",
    "canonical_json",
    "dataset_id",
    "edge_id",
    "event_hash",
    "hash_canonical",
    "job_id",
    "node_uuid",
    "run_node_id",
    # validate
    "EVENT_TYPES",
    "classify_event",
    "normalise_event_time",
    "validate_event",
    "validate_message",
]
