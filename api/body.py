"""Read a request body within a byte limit, before and after ``Content-Encoding: gzip`` decompression.

- ``Content-Length`` over the limit: 413 before reading a byte.
- Streamed bytes over the limit (no or a lying ``Content-Length``): 413 as soon as they pass it.
- gzip: decompressed incrementally with ``max_length``, so a gzip bomb costs at most ``limit`` bytes
  of memory before it is refused with 413; corrupt gzip: 400. Other encodings: 415.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Mapping

from fastapi import HTTPException

__all__ = ["read_body", "BodyError"]


class BodyError(HTTPException):
    """An HTTP error about the body (413 / 415 / 400) with a JSON ``detail``."""


def _too_large(limit: int, what: str) -> BodyError:
    return BodyError(413, f"{what} is larger than the limit of {limit} bytes (LINEAGE_MAX_BODY_BYTES)")


class _Gunzip:
    """Incremental gzip (wbits 31: gzip header) decompression bounded by ``limit`` output bytes."""

    def __init__(self, limit: int) -> None:
        self._z = zlib.decompressobj(31)
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> None:
        try:
            while data:
                out = self._z.decompress(data, self._limit + 1 - self._size)
                self._size += len(out)
                if self._size > self._limit:
                    raise _too_large(self._limit, "the decompressed body")
                self._parts.append(out)
                data = self._z.unconsumed_tail
                if self._z.eof:
                    if self._z.unused_data.strip(b"\0"):
                        raise BodyError(400, "several gzip members or trailing bytes after the gzip stream")
                    return
        except zlib.error as exc:
            raise BodyError(400, f"the body is not valid gzip: {exc}") from exc

    def result(self) -> bytes:
        if not self._z.eof:
            raise BodyError(400, "the gzip body is truncated")
        return b"".join(self._parts)


async def read_body(headers: Mapping[str, str], chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The (decompressed) body of a request with ``headers`` (lower-case names) whose body arrives as
    ``chunks``; raises :class:`BodyError` (413 / 415 / 400) as described above."""
    length = headers.get("content-length")
    if length is not None:
        try:
            if int(length) > limit:
                raise _too_large(limit, "the body")
        except ValueError as exc:
            raise BodyError(400, "Content-Length is not a number") from exc
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", ""):
        raise BodyError(415, f"Content-Encoding {encoding!r} is not supported (use gzip or none)")
    gunzip = _Gunzip(limit) if encoding in ("gzip", "x-gzip") else None
    parts: list[bytes] = []
    received = 0
    async for chunk in chunks:
        received += len(chunk)
        if received > limit:
            raise _too_large(limit, "the body")
        if gunzip is not None:
            gunzip.feed(chunk)
        else:
            parts.append(chunk)
    return gunzip.result() if gunzip is not None else b"".join(parts)
