"""The shipped Avro schemas: loading, parsing canonical form, CRC-64-AVRO fingerprints.

The ``.avsc`` files under ``schemas/avro/`` are the source of truth; they are named
``<schema>.v<N>.avsc``. Everything here is computed once at import and cached.

Fingerprint (Avro specification, "Schema Fingerprints")::

    fp = CRC-64-AVRO(UTF-8(parsing_canonical_form(schema)))

a Rabin fingerprint with ``EMPTY = 0xc15d213aa4d7a795``, computed as the spec's
reference code: for each byte ``b``: ``fp = (fp >> 8) ^ TABLE[(fp ^ b) & 0xff]``, where
``TABLE[i]`` is ``i`` shifted right 8 times, xoring ``EMPTY`` after every shift whose
dropped bit was 1. The single-object encoding carries it as 8 little-endian bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import to_parsing_canonical_form

__all__ = [
    "SCHEMA_DIR",
    "SCHEMA_NAMES",
    "ENVELOPE",
    "ShippedSchema",
    "crc64_avro",
    "fingerprint",
    "parsing_canonical_form",
    "load_schema",
    "shipped_schemas",
    "latest",
    "by_fingerprint",
    "parse_schema",
]

SCHEMA_DIR = Path(__file__).resolve().parent / "avro"
ENVELOPE = "openlineage_envelope"
SCHEMA_NAMES = (ENVELOPE, "enriched_record", "graph_change", "dead_letter")

_EMPTY = 0xC15D213AA4D7A795


def _make_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY & -(fp & 1))
        table.append(fp)
    return tuple(table)


_TABLE = _make_table()


def crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO (Rabin) fingerprint of ``data`` as an unsigned 64-bit integer."""
    fp = _EMPTY
    table = _TABLE
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def parsing_canonical_form(schema: dict[str, Any] | str) -> str:
    """The Avro Parsing Canonical Form of a schema (JSON text or already-loaded dict)."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    return to_parsing_canonical_form(schema)


def fingerprint(schema: dict[str, Any] | str) -> bytes:
    """8-byte little-endian CRC-64-AVRO of the schema's parsing canonical form (single-object header)."""
    return crc64_avro(parsing_canonical_form(schema).encode("utf-8")).to_bytes(8, "little")


def parse_schema(schema: dict[str, Any] | str) -> Any:
    """fastavro-parsed schema from JSON text or a dict (a fresh named-type scope each time)."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    return fastavro.parse_schema(schema, named_schemas={})


@dataclass(frozen=True)
class ShippedSchema:
    """One ``.avsc`` file: its name, version, JSON, parsed form and fingerprint."""

    name: str
    version: int
    raw: dict[str, Any]
    parsed: Any
    canonical_form: str
    fingerprint: bytes

    @property
    def json(self) -> str:
        """The schema as compact JSON text (what a schema registry stores)."""
        return json.dumps(self.raw, separators=(",", ":"), ensure_ascii=False)


def load_schema(name: str, version: int | None = None) -> dict[str, Any]:
    """The JSON of shipped schema ``name`` (latest version when ``version`` is None)."""
    return (latest(name) if version is None else _find(name, version)).raw


@cache
def shipped_schemas() -> tuple[ShippedSchema, ...]:
    """Every shipped schema version, sorted by (name, version)."""
    out = []
    for path in sorted(SCHEMA_DIR.glob("*.v*.avsc")):
        stem = path.name[: -len(".avsc")]
        name, _, ver = stem.rpartition(".v")
        raw = json.loads(path.read_text(encoding="utf-8"))
        pcf = parsing_canonical_form(raw)
        out.append(ShippedSchema(
            name=name, version=int(ver), raw=raw, parsed=parse_schema(raw), canonical_form=pcf,
            fingerprint=crc64_avro(pcf.encode("utf-8")).to_bytes(8, "little"),
        ))
    out.sort(key=lambda s: (s.name, s.version))
    return tuple(out)


def _find(name: str, version: int) -> ShippedSchema:
    for s in shipped_schemas():
        if s.name == name and s.version == version:
            return s
    raise KeyError(f"no shipped schema {name!r} version {version}")


@cache
def latest(name: str) -> ShippedSchema:
    """The highest shipped version of schema ``name``."""
    found = [s for s in shipped_schemas() if s.name == name]
    if not found:
        raise KeyError(f"no shipped schema named {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    return found[-1]


@cache
def _fingerprint_index() -> dict[bytes, ShippedSchema]:
    return {s.fingerprint: s for s in shipped_schemas()}


def by_fingerprint(fp: bytes) -> ShippedSchema | None:
    """The shipped schema whose 8-byte little-endian fingerprint is ``fp``, or None."""
    return _fingerprint_index().get(fp)

