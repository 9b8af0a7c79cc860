"""A hand-written Avro reader of the ``openlineage_envelope`` version producers write (v2).

fastavro's ``schemaless_reader`` walks the schema on every call: 10.5 µs per demo envelope (2026-11-29, compiled
codec, a loop over 960 demo messages), ~20 % of the decoder's time per message. :func:`read_envelope` reads the same
record field by field for the version it was written for (:data:`READ_FOR`, its fingerprint) and gives the same
dict; :func:`schemas.codec._read_envelope` uses it only when the writer's schema is that version and no reader schema
differs. Anything it does not find well formed (truncated, an index out of range, a negative length, invalid UTF-8,
bytes left over) it leaves to fastavro (it returns None), so every error is still fastavro's and worded by the
codec as before. tests/test_envelope_reader.py compares the two on generated, real and broken envelopes.
"""

from __future__ import annotations

from typing import Any

try:
    import cython
except ImportError:  # pragma: no cover - an installation without Cython runs it as Python
    from schemas import _pure_cython as cython

__all__ = ["READ_FOR", "read_envelope"]

#: The CRC-64-AVRO fingerprint (little-endian, as single-object headers carry it) of the schema this reader reads:
#: schemas/avro/openlineage_envelope.v2.avsc.
READ_FOR = bytes.fromhex("cacc66e5e5cdf8b4")

_KINDS = ("RUN", "DATASET", "JOB", "UNKNOWN")
#: The ``[null, string]`` fields after ``kind``, in schema order; then the records and arrays; then these again.
_STRINGS_1 = ("eventTime", "eventType", "producer", "schemaURL")
_STRINGS_2 = ("self_link", "trace_id")


class _Malformed(Exception):
    """Not well formed for this reader: fastavro decides (and words the error)."""


@cython.cclass
class _Reader:
    data = cython.declare(bytes)
    pos = cython.declare(cython.Py_ssize_t)
    end = cython.declare(cython.Py_ssize_t)

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)

    @cython.cfunc
    @cython.locals(shift=cython.int, b=cython.int, z=cython.ulonglong, v=cython.longlong, p=cython.p_uchar)
    def long(self) -> Any:
        """An Avro long: zig-zag, base-128 varint of at most 64 bits (anything longer: malformed)."""
        p = self.data
        z = 0
        shift = 0
        while True:
            if self.pos >= self.end:
                raise _Malformed()
            b = p[self.pos]
            self.pos += 1
            if shift == 63 and b > 1:
                raise _Malformed()
            z |= cython.cast(cython.ulonglong, b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise _Malformed()
        v = z >> 1
        return ~v if z & 1 else v

    @cython.cfunc
    @cython.locals(n=cython.Py_ssize_t, start=cython.Py_ssize_t)
    def string(self) -> Any:
        n = self.long()
        if n < 0 or self.pos + n > self.end:
            raise _Malformed()
        start = self.pos
        self.pos += n
        try:
            return self.data[start:self.pos].decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed() from None

    @cython.cfunc
    def present(self) -> Any:
        """A ``[null, X]`` union's branch: False for null, True for X."""
        branch = self.long()
        if branch == 0:
            return False
        if branch == 1:
            return True
        raise _Malformed()

    @cython.cfunc
    def optional_string(self) -> Any:
        return self.string() if self.present() else None

    @cython.cfunc
    def names(self) -> Any:
        """An optional record of two strings (``namespace``, ``name``): Job, StaticDataset, Subject."""
        if not self.present():
            return None
        namespace = self.string()
        return {"namespace": namespace, "name": self.string()}

    @cython.cfunc
    @cython.locals(count=cython.longlong)
    def datasets(self) -> Any:
        """An optional array of (namespace, name) records, in Avro's blocks."""
        if not self.present():
            return None
        items = []
        while True:
            count = self.long()
            if count == 0:
                return items
            if count < 0:
                count = -count
                self.long()   # the block's size in bytes
            for _ in range(count):
                namespace = self.string()
                items.append({"namespace": namespace, "name": self.string()})

    def envelope(self) -> dict[str, Any]:
        kind = self.long()
        if not 0 <= kind < 4:
            raise _Malformed()
        rec: dict[str, Any] = {"kind": _KINDS[kind]}
        for key in _STRINGS_1:
            rec[key] = self.optional_string()
        rec["run"] = {"runId": self.string()} if self.present() else None
        rec["job"] = self.names()
        rec["dataset"] = self.names()
        rec["inputs"] = self.datasets()
        rec["outputs"] = self.datasets()
        rec["rest"] = self.optional_string()
        rec["subject"] = self.names()
        for key in _STRINGS_2:
            rec[key] = self.optional_string()
        if self.pos != self.end:
            raise _Malformed()
        return rec


def read_envelope(body: bytes, offset: int) -> dict[str, Any] | None:
    """The v2 envelope record at ``body[offset:]`` (which it must fill exactly), as fastavro's ``schemaless_reader``
    gives it, or None when it is not well formed (fastavro then reads it and raises)."""
    try:
        return _Reader(bytes(body), offset).envelope()
    except _Malformed:
        return None
