"""Chunking of messages larger than the producer's ``message.max.bytes``, and their reassembly.

Wire format (the value is cut into slices; nothing is re-encoded):

- ``lineage.chunk.id``: random UUID hex, the same on every chunk of one message;
- ``lineage.chunk.index``: ``0 .. count-1`` (ASCII decimal);
- ``lineage.chunk.count``: the number of chunks (ASCII decimal, at most :data:`MAX_CHUNKS`);
- ``lineage.chunk.sha256``: hex SHA-256 of the whole value, checked after reassembly.

The original headers travel on chunk 0 only (chunks 1.. carry the four chunk headers and nothing
else), so the reassembled message has chunk 0's key, timestamp, offset and original headers.
The chunks of a message are produced consecutively with the same key (same partition; the
idempotent producer keeps their order).

:class:`ChunkReassembler` is fed the messages of ONE partition in log order and returns complete
messages and :class:`ChunkFailure` s. Its decisions depend only on the log, relative to each
group's chunk 0 (its offset, broker timestamp and the bytes read since), so two readers that
start at different offsets agree on every group whose chunk 0 both have seen. A group fails:

- ``chunk.corrupt``: bad chunk headers, a count or checksum that differs between chunks, a
  duplicate index with different bytes, or joined bytes whose SHA-256 is not the announced one;
- ``chunk.incomplete``: a chunk index was skipped (chunks arrive in order, so a gap is a loss), or
  the group is still open when a message of the partition has a broker timestamp more than
  ``timeout_ms`` after chunk 0's, or when it spans more than ``max_span_messages`` offsets or
  ``max_span_bytes`` bytes from chunk 0, or when the reader gives up at the log end
  (:meth:`ChunkReassembler.give_up`);
- ``chunk.orphan``: a chunk whose group this reassembler never opened (``unknown_group``: the
  caller may look further back for its chunk 0) or had already closed.

An exact duplicate of a chunk already held (same index, same bytes) is absorbed.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from schemas.errors import LineageError

__all__ = [
    "CHUNK_ID_HEADER", "CHUNK_INDEX_HEADER", "CHUNK_COUNT_HEADER", "CHUNK_SHA256_HEADER", "CHUNK_ERROR_HEADER",
    "CHUNK_HEADERS", "DEFAULT_MESSAGE_MAX_BYTES", "HEADROOM_BYTES", "MAX_CHUNKS", "ChunkError", "ChunkFailure",
    "ChunkReassembler", "KafkaRecord", "Message", "TopicReassembler", "split_message", "is_chunk", "chunk_rejection", "chunk_error_header",
    "headers_size",
]

CHUNK_ID_HEADER = "lineage.chunk.id"
CHUNK_INDEX_HEADER = "lineage.chunk.index"
CHUNK_COUNT_HEADER = "lineage.chunk.count"
CHUNK_SHA256_HEADER = "lineage.chunk.sha256"
#: Set by a reader on the first chunk of a group it gave up on: JSON ``{"code": ..., "message": ...}``.
CHUNK_ERROR_HEADER = "lineage.chunk.error"
CHUNK_HEADERS = frozenset({CHUNK_ID_HEADER, CHUNK_INDEX_HEADER, CHUNK_COUNT_HEADER, CHUNK_SHA256_HEADER})
#: librdkafka's default ``message.max.bytes``.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: Bytes of ``message.max.bytes`` left for the key, the chunk headers and the record framing.
HEADROOM_BYTES = 16 * 1024
#: A group announcing more chunks than this is corrupt (~4 GB at the default limit).
MAX_CHUNKS = 4096
#: A group still open this many offsets after its chunk 0 is incomplete.
DEFAULT_MAX_SPAN_MESSAGES = 10_000
#: A group still open after this many bytes (keys + values, every message) from its chunk 0 is incomplete.
DEFAULT_MAX_SPAN_BYTES = 512 * 1024 * 1024

Headers = list[tuple[str, bytes | None]]


class ChunkError(LineageError, ValueError):
    """A chunked message that cannot be reassembled; ``code`` is ``chunk.incomplete|corrupt|orphan|unassembled``."""

    code = "chunk"


def headers_size(headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """Bytes of header keys and values."""
    return sum(len(k.encode("utf-8")) + len(v or b"") for k, v in headers or ())


def split_message(value: bytes, headers: Sequence[tuple[str, bytes | None]] | None,
                  max_bytes: int) -> list[tuple[bytes, Headers]]:
    """``[(value, headers)]`` when ``len(value) + headers <= max_bytes - HEADROOM_BYTES``, else N chunks.

    Each chunk value is a slice of at most ``max_bytes - HEADROOM_BYTES - headers_size(headers)``
    bytes; chunk 0 carries ``headers`` followed by the chunk headers, the others the chunk headers only.
    """
    original = list(headers or ())
    payload = max_bytes - HEADROOM_BYTES - headers_size(original)
    if len(value) <= payload:
        return [(value, original)]
    if payload < 1024:
        raise ValueError(f"message.max.bytes={max_bytes} leaves {payload} bytes per chunk after "
                         f"{HEADROOM_BYTES} bytes of headroom and {headers_size(original)} bytes of headers")
    count = -(-len(value) // payload)
    if count > MAX_CHUNKS:
        raise ValueError(f"a {len(value)}-byte value needs {count} chunks of {payload} bytes; at most {MAX_CHUNKS}")
    group = uuid.uuid4().hex.encode("ascii")
    digest = hashlib.sha256(value).hexdigest().encode("ascii")
    chunks = []
    for i in range(count):
        chunk_headers: Headers = list(original) if i == 0 else []
        chunk_headers += [(CHUNK_ID_HEADER, group), (CHUNK_INDEX_HEADER, str(i).encode("ascii")),
                          (CHUNK_COUNT_HEADER, str(count).encode("ascii")), (CHUNK_SHA256_HEADER, digest)]
        chunks.append((value[i * payload:(i + 1) * payload], chunk_headers))
    return chunks


def is_chunk(headers: Sequence[tuple[str, bytes | None]] | None) -> bool:
    """True when ``headers`` carry a ``lineage.chunk.id``."""
    return bool(headers) and any(k == CHUNK_ID_HEADER for k, _v in headers or ())


def chunk_error_header(code: str, message: str) -> tuple[str, bytes]:
    """The ``lineage.chunk.error`` header of a group a reader gave up on."""
    return CHUNK_ERROR_HEADER, json.dumps({"code": code, "message": message}).encode("utf-8")


def chunk_rejection(headers: Sequence[tuple[str, bytes | None]] | None) -> ChunkError | None:
    """Why a message must be rejected instead of decoded, or None (the decoder's first check).

    A ``lineage.chunk.error`` header gives its code and message; chunk headers without it mean the
    message reached the decoder unassembled (``chunk.unassembled``: a source that does not reassemble).
    """
    if not headers:
        return None
    errors = [v for k, v in headers if k == CHUNK_ERROR_HEADER]
    error = errors[-1] if errors else None  # the newest (a replayed dead letter may carry an older one)
    if error is not None:
        try:
            body = json.loads(error)
            return ChunkError(str(body.get("message") or "chunk group rejected"),
                              code=str(body.get("code") or "chunk.corrupt"))
        except (ValueError, AttributeError):
            return ChunkError(error.decode("utf-8", "replace")[:2000], code="chunk.corrupt")
    if is_chunk(headers):
        return ChunkError("a chunk of a message larger than message.max.bytes reached the decoder unassembled: "
                          "read the topic with the lineage_kafka source, which reassembles chunks",
                          code="chunk.unassembled")
    return None


@dataclass(frozen=True, slots=True)
class Message:
    """One Kafka message as the reassembler sees it; ``extra`` is the caller's (e.g. the timestamp type)."""

    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: Headers
    extra: Any = None

    @classmethod
    def from_kafka(cls, m: Any) -> Message:
        """A confluent-kafka message (``extra`` = its timestamp type)."""
        ts_type, ts = m.timestamp()
        return cls(m.offset(), ts if ts_type and ts >= 0 else None, m.key(), m.value(), m.headers() or [], ts_type)


class KafkaRecord:
    """A reassembled message with confluent-kafka's ``Message`` accessors, for readers that hand
    messages on (:func:`lineage.topic_reader.read_topic`). For a group that could not be reassembled,
    ``failure`` is set and the message is its first chunk with a ``lineage.chunk.error`` header."""

    __slots__ = ("_msg", "_topic", "_partition", "failure")

    def __init__(self, msg: Message, topic: str, partition: int, failure: ChunkFailure | None = None) -> None:
        self._msg, self._topic, self._partition = msg, topic, partition
        self.failure = failure

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._msg.offset

    def key(self) -> bytes | None:
        return self._msg.key

    def value(self) -> bytes | None:
        return self._msg.value

    def headers(self) -> Headers | None:
        return list(self._msg.headers) or None

    def timestamp(self) -> tuple[int, int]:
        if self._msg.timestamp_ms is None:
            return 0, -1
        return int(self._msg.extra or 1), self._msg.timestamp_ms

    def error(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._msg.value or b"")


@dataclass(frozen=True)
class ChunkFailure:
    """A chunk group that cannot be reassembled.

    ``first`` is the first chunk seen of the group, ``offset`` the group's anchor (chunk 0's offset
    when it was seen, else the orphan chunk's own), ``offsets`` every chunk offset seen.
    ``unknown_group``: an orphan whose group this reassembler never saw (its chunk 0 may lie before
    the offset the reader started at).
    """

    code: str
    message: str
    first: Message
    offset: int
    offsets: tuple[int, ...]
    unknown_group: bool = False

    def as_message(self) -> Message:
        """``first`` at ``offset`` with a ``lineage.chunk.error`` header, for the decoder to reject."""
        text = f"{self.message} (chunk offsets {', '.join(map(str, self.offsets[:20]))}" \
               f"{', ...' if len(self.offsets) > 20 else ''})"
        return replace(self.first, offset=self.offset,
                       headers=list(self.first.headers) + [chunk_error_header(self.code, text)])


@dataclass
class _Group:
    id: bytes
    count: int
    sha: bytes
    first: Message        # chunk 0 as it came (chunk headers included)
    headers: Headers      # chunk 0's original headers (without the chunk headers)
    ts0: int | None
    bytes0: int
    parts: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)


def _chunk_headers(headers: Headers) -> tuple[dict[str, bytes | None], Headers]:
    chunk: dict[str, bytes | None] = {}
    rest: Headers = []
    for k, v in headers:
        if k in CHUNK_HEADERS:
            chunk[k] = v
        else:
            rest.append((k, v))
    return chunk, rest


def _parse(chunk: dict[str, bytes | None]) -> tuple[bytes, int, int, bytes] | str:
    """``(id, index, count, sha)`` or the reason the chunk headers are unusable."""
    try:
        group = chunk.get(CHUNK_ID_HEADER) or b""
        index = int((chunk.get(CHUNK_INDEX_HEADER) or b"").decode("ascii"))
        count = int((chunk.get(CHUNK_COUNT_HEADER) or b"").decode("ascii"))
        sha = chunk.get(CHUNK_SHA256_HEADER) or b""
    except (ValueError, UnicodeDecodeError):
        return "chunk index or count is not a decimal number"
    if not 0 < len(group) <= 64:
        return "chunk id is empty or longer than 64 bytes"
    if not 1 <= count <= MAX_CHUNKS or not 0 <= index < count:
        return f"chunk index {index} / count {count} out of range (count 1..{MAX_CHUNKS})"
    if len(sha) != 64:
        return "chunk sha256 is not 64 hex characters"
    return group, index, count, sha


class ChunkReassembler:
    """Reassembles the chunked messages of one partition, fed in log order (see the module docstring)."""

    def __init__(self, timeout_ms: int | None = 60_000, *, max_span_messages: int = DEFAULT_MAX_SPAN_MESSAGES,
                 max_span_bytes: int = DEFAULT_MAX_SPAN_BYTES, remember_closed: int = 10_000) -> None:
        self.timeout_ms = timeout_ms
        self.max_span_messages = max_span_messages
        self.max_span_bytes = max_span_bytes
        self._open: dict[bytes, _Group] = {}
        self._closed: OrderedDict[bytes, str] = OrderedDict()
        self._remember = remember_closed
        self._bytes = 0  # keys + values fed so far

    # -- state ------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No group is open: a message that is not a chunk would pass through unchanged (readers' fast path)."""
        return not self._open

    def open_anchors(self) -> list[int]:
        """Chunk-0 offsets of the groups still open."""
        return [g.first.offset for g in self._open.values()]

    def oldest_open_timestamp_ms(self, before_offset: int | None = None) -> int | None:
        """The smallest chunk-0 broker timestamp of the open groups (anchored before ``before_offset``)."""
        stamps = [g.ts0 for g in self._open.values() if g.ts0 is not None
                  and (before_offset is None or g.first.offset < before_offset)]
        return min(stamps) if stamps else None

    # -- feeding ----------------------------------------------------------------------------

    def add(self, msg: Message) -> list[Message | ChunkFailure]:
        """Feed the next message of the partition; returns what it completed or failed (in that order)."""
        self._bytes += len(msg.key or b"") + len(msg.value or b"")
        out: list[Message | ChunkFailure] = []
        if msg.headers and is_chunk(msg.headers):
            out.extend(self._add_chunk(msg))
        else:
            out.append(msg)
        if self._open:
            out.extend(self._expire(msg))
        return out

    def give_up(self, reason: str, before_offset: int | None = None) -> list[ChunkFailure]:
        """Fail every open group (anchored before ``before_offset``) as ``chunk.incomplete``."""
        return [self._fail(g, "chunk.incomplete", f"{self._progress(g)}: {reason}")
                for g in list(self._open.values()) if before_offset is None or g.first.offset < before_offset]

    # -- internals --------------------------------------------------------------------------

    @staticmethod
    def _progress(g: _Group) -> str:
        return f"chunk group {g.id.decode('ascii', 'replace')} has {len(g.parts)} of {g.count} chunks"

    def _close(self, g: _Group, how: str) -> None:
        self._open.pop(g.id, None)
        self._closed[g.id] = f"{how} at chunk-0 offset {g.first.offset}"
        while len(self._closed) > self._remember:
            self._closed.popitem(last=False)

    def _fail(self, g: _Group, code: str, message: str) -> ChunkFailure:
        self._close(g, "failed")
        return ChunkFailure(code, message, g.first, g.first.offset, tuple(g.offsets))

    def _add_chunk(self, msg: Message) -> list[Message | ChunkFailure]:
        chunk, rest = _chunk_headers(msg.headers)
        parsed = _parse(chunk)
        if isinstance(parsed, str):
            return [ChunkFailure("chunk.corrupt", parsed, msg, msg.offset, (msg.offset,))]
        group_id, index, count, sha = parsed
        value = msg.value or b""
        g = self._open.get(group_id)
        if g is None:
            if group_id in self._closed or index != 0:
                closed = self._closed.get(group_id)
                why = f"its group was {closed}" if closed else "its chunk 0 was not seen"
                return [ChunkFailure("chunk.orphan", f"chunk {index} of {count} of group "
                                     f"{group_id.decode('ascii', 'replace')}: {why}", msg, msg.offset,
                                     (msg.offset,), unknown_group=closed is None)]
            g = _Group(group_id, count, sha, msg, rest, msg.timestamp_ms,
                       self._bytes - len(msg.key or b"") - len(value))
            self._open[group_id] = g
        elif count != g.count or sha != g.sha:
            g.offsets.append(msg.offset)
            return [self._fail(g, "chunk.corrupt", f"{self._progress(g)}; chunk {index} announces count {count} "
                               "or a checksum different from chunk 0's")]
        elif index < len(g.parts):
            if g.parts[index] == value:
                return []  # an exact duplicate (a re-sent chunk): already held
            g.offsets.append(msg.offset)
            return [self._fail(g, "chunk.corrupt", f"{self._progress(g)}; chunk {index} came twice with "
                               "different bytes")]
        elif index > len(g.parts):
            g.offsets.append(msg.offset)
            return [self._fail(g, "chunk.incomplete", f"{self._progress(g)}; chunk {index} came before chunk "
                               f"{len(g.parts)} (chunks arrive in order: chunk {len(g.parts)} is lost)")]
        g.parts.append(value)
        g.offsets.append(msg.offset)
        if len(g.parts) < g.count:
            return []
        whole = b"".join(g.parts)
        if hashlib.sha256(whole).hexdigest().encode("ascii") != g.sha:
            return [self._fail(g, "chunk.corrupt", f"chunk group {g.id.decode('ascii', 'replace')}: the "
                               f"{len(whole)} reassembled bytes do not match the announced sha256")]
        self._close(g, "complete")
        return [replace(g.first, value=whole, headers=g.headers)]

    def _expire(self, msg: Message) -> list[ChunkFailure]:
        out = []
        for g in list(self._open.values()):
            if g.first.offset == msg.offset:
                continue
            if msg.offset - g.first.offset >= self.max_span_messages:
                why = f"{msg.offset - g.first.offset} offsets after chunk 0 (read-ahead bound {self.max_span_messages})"
            elif self._bytes - g.bytes0 > self.max_span_bytes:
                why = f"{self._bytes - g.bytes0} bytes after chunk 0 (read-ahead bound {self.max_span_bytes})"
            elif (self.timeout_ms is not None and g.ts0 is not None and msg.timestamp_ms is not None
                  and msg.timestamp_ms - g.ts0 > self.timeout_ms):
                why = (f"offset {msg.offset} is {(msg.timestamp_ms - g.ts0) / 1000:.1f}s after chunk 0 "
                       f"(timeout {self.timeout_ms / 1000:g}s)")
            else:
                continue
            out.append(self._fail(g, "chunk.incomplete", f"{self._progress(g)} at {why}"))
        return out


class TopicReassembler:
    """One :class:`ChunkReassembler` per partition, for consumers reading a whole topic.

    :meth:`add` takes confluent-kafka messages and returns what to hand on: the message itself when
    it is not a chunk, a :class:`KafkaRecord` for a reassembled message or (``failure`` set) for a
    group that cannot be reassembled.
    """

    def __init__(self, timeout_ms: int | None = 60_000) -> None:
        self.timeout_ms = timeout_ms
        self._parts: dict[tuple[str, int], ChunkReassembler] = {}

    def add(self, m: Any) -> list[Any]:
        headers = m.headers()
        tp = (m.topic(), m.partition())
        r = self._parts.get(tp)
        if r is None:
            if not is_chunk(headers):
                return [m]  # the common case: no chunk seen on this partition
            r = self._parts[tp] = ChunkReassembler(self.timeout_ms)
        out: list[Any] = []
        for item in r.add(Message.from_kafka(m)):
            if isinstance(item, ChunkFailure):
                out.append(KafkaRecord(item.as_message(), tp[0], tp[1], item))
            elif item.offset == m.offset() and not is_chunk(headers):
                out.append(m)
            else:
                out.append(KafkaRecord(item, tp[0], tp[1]))
        return out

    def give_up(self, reason: str) -> list[KafkaRecord]:
        """Fail every group still open (the reader stops)."""
        return [KafkaRecord(f.as_message(), tp[0], tp[1], f)
                for tp, r in self._parts.items() for f in r.give_up(reason)]
