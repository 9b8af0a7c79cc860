"""Hand-written Avro single-object encoders of the records the finisher publishes most: one
``enriched_record`` per new event and one ``graph_change`` per changed graph row.

:func:`stream_processor.publish.encode_record` (fastavro's ``schemaless_writer``, which walks the schema on
every call) took 9.6 µs per demo enriched record and 3.1 µs per graph change (2026-11-26, a loop over 20,000);
the finisher publishes ~1 of the first and ~5 of the second per event. These write the same bytes field by
field for the shipped schema version they were written for (:data:`WRITTEN_FOR`: its fingerprint); for any
other latest version they hand the record to ``encode_record``, so a new schema version is never written
with an old layout. tests/test_avro_records.py compares them with fastavro on generated records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["encode_enriched", "encode_graph_change", "encode_graph_upserts", "WRITTEN_FOR"]

#: The schema versions (CRC-64-AVRO fingerprints of their canonical form) these encoders write.
WRITTEN_FOR = {"enriched_record": bytes.fromhex("25e58c8e570d4f40"),
               "graph_change": bytes.fromhex("4604e7d4dd90c4d4")}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GRAPH_OPS = {"upsert": b"\x00", "delete": b"\x02"}   # enum GraphOp index, as an Avro int


def _varint(n: int) -> bytes:
    """Avro ``int`` / ``long``: zig-zag, then base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


#: The encodings of 0 .. 16,383 (string lengths, most batch ids and offsets), made once: an enriched record writes
#: ~12 varints, which were ~a third of its encoding (cProfile of the enrich step, 2026-11-27).
_SMALL = tuple(_varint(n) for n in range(1 << 14))


def _long(n: int) -> bytes:
    """:func:`_varint`, from :data:`_SMALL` when ``0 <= n < 16384``."""
    return _SMALL[n] if 0 <= n < 16384 else _varint(n)


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _long(len(raw)) + raw


def _optional_string(s: str | None) -> bytes:
    """``["null", "string"]``."""
    return b"\x00" if s is None else b"\x02" + _string(s)


def _micros(t: datetime | int) -> int:
    """``timestamp-micros`` of an aware datetime (as fastavro computes it), or an int as it is."""
    if not isinstance(t, datetime):
        return int(t)
    delta = t - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _header(name: str) -> bytes | None:
    """Magic + fingerprint of the latest shipped ``name``, or None when it is not the version written for."""
    from schemas.avro import latest

    from .publish import SINGLE_OBJECT_MAGIC

    shipped = latest(name)
    return SINGLE_OBJECT_MAGIC + shipped.fingerprint if shipped.fingerprint == WRITTEN_FOR[name] else None


_HEADERS: dict[str, bytes | None] = {}


def _cached_header(name: str) -> bytes | None:
    """:func:`_header` of ``name``, worked out once (kept in :data:`_HEADERS`)."""
    if name not in _HEADERS:
        _HEADERS[name] = _header(name)
    return _HEADERS[name]


def _encoder(name: str, body: Callable[[Mapping[str, Any]], bytes]) -> Callable[[Mapping[str, Any]], bytes]:
    def encode(record: Mapping[str, Any]) -> bytes:
        header = _cached_header(name)
        if header is None:   # another schema version is the latest: the generic writer
            from .publish import encode_record

            return encode_record(name, dict(record))
        return header + body(record)

    encode.__name__ = f"encode_{name}"
    return encode


def _enriched_body(r: Mapping[str, Any]) -> bytes:
    source, subject = r.get("source"), r.get("subject")
    return b"".join((
        _string(r["event"]), _string(r["event_hash"]), _string(r["kind"]),
        _optional_string(r.get("event_type")), _optional_string(r.get("event_time")),
        _optional_string(r.get("run_id")), _optional_string(r.get("job_namespace")),
        _optional_string(r.get("job_name")), _long(int(r["revision"])),
        b"\x00" if source is None else b"\x02" + _string(source["topic"]) + _long(int(source["partition"]))
        + _long(int(source["offset"])),
        b"\x00" if subject is None else b"\x02" + _string(subject["namespace"]) + _string(subject["name"]),
        _optional_string(r.get("quality")), _optional_string(r.get("provenance")),
        _processed_at(r["processed_at"]),
    ))


#: ``(time, its encoding)`` of the last ``processed_at`` encoded: the enrich step gives every record of a batch the
#: same ``datetime`` object, so its ``timestamp-micros`` varint is worked out once a batch, not once a record.
_LAST_PROCESSED: tuple[Any, bytes] = (None, b"")


def _processed_at(t: datetime | int) -> bytes:
    global _LAST_PROCESSED
    last = _LAST_PROCESSED   # one read: another thread may replace it, never half of it
    if last[0] is t and t is not None:
        return last[1]
    encoded = _long(_micros(t))
    _LAST_PROCESSED = (t, encoded)
    return encoded


def _graph_change_body(r: Mapping[str, Any]) -> bytes:
    return b"".join((_GRAPH_OPS[r["op"]], _string(r["table"]), _string(r["id"]),
                     _optional_string(r.get("payload")), _long(int(r["batch_id"]))))


#: ``encode_record("enriched_record", record)``, the same bytes.
encode_enriched = _encoder("enriched_record", _enriched_body)
#: ``encode_record("graph_change", record)``, the same bytes.
encode_graph_change = _encoder("graph_change", _graph_change_body)


def encode_graph_upserts(table: str, rows: Iterable[Mapping[str, Any]], id_column: str,
                         batch_id: int) -> Iterator[tuple[bytes, bytes]]:
    """``(key, encode_graph_change(graph_change(table, row_id, row, batch_id)))`` of each upserted ``row``, its
    ``row_id = str(row[id_column] or "")`` and the key that id in UTF-8: the same bytes, with what the records of
    one table and batch share (header, op, table, batch id) encoded once and each payload's JSON kept as the UTF-8
    bytes orjson writes (``dumps_sorted`` decoded them to text and ``_string`` encoded them again). The finisher
    publishes ~5 graph changes per event; one took ~8.8 us through the dicts of :func:`graph_change` and the
    generic encoder (benchmark: a 5,000-event demo batch's ~30,700 changed rows)."""
    from sink.fastjson import dumps_sorted_utf8

    header = _cached_header("graph_change")
    if header is None:   # another schema version is the latest: record by record, through the generic writer
        from .publish import graph_change

        for row in rows:
            row_id = str(row[id_column] or "")
            yield row_id.encode("utf-8"), encode_graph_change(graph_change(table, row_id, dict(row), batch_id))
        return
    prefix = header + _GRAPH_OPS["upsert"] + _string(table)
    suffix = _long(int(batch_id))
    for row in rows:
        key = str(row[id_column] or "").encode("utf-8")
        payload = dumps_sorted_utf8(row)
        yield key, b"".join((prefix, _long(len(key)), key, b"\x02", _long(len(payload)), payload, suffix))
