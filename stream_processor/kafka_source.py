"""``lineage_kafka``: a Kafka streaming source on Spark's Python Data Source API.

Used where the native ``format("kafka")`` connector's jars are not on the classpath (the
embedded default). It gives the native source's columns::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>

Offsets are JSON ``{"topic": {"partition": next_offset}}`` as the native source writes them;
each micro-batch plans one input partition per Kafka partition range ``[start, end)``, read on
an executor with a group-less consumer (``assign()``) and returned as Arrow record batches.
Options: ``kafka.bootstrap.servers``, ``subscribe`` (comma list) or ``subscribePattern``,
``startingOffsets`` (``earliest`` | ``latest`` | JSON), ``maxOffsetsPerTrigger`` (a read limit),
``pollTimeoutMs``, ``chunkTimeoutSeconds`` (how long a chunk group may stay incomplete, see
:func:`read_range`), ``tickSeconds`` (below), ``minPartitions`` (:func:`split_ranges`), ``decode``, ``derive``
(``true``: the decoded rows carry their graph rows, ``LINEAGE_DERIVE_AT_DECODE``; default false) and ``registryUrl`` (below) and
any ``kafka.<librdkafka key>``.

**Decoding in the reader.** With ``decode`` = ``packed`` the source's schema is
:data:`stream_processor.decode.READER_PACKED_SCHEMA` (``PACKED_SCHEMA`` and ``planned_at``, when the batch's
ranges were planned: the dedupe's ``now``, stream_processor/dedupe.py) instead of Kafka's columns: each reader task puts the
messages it resolved (reassembled chunk groups, rejected groups with their ``lineage.chunk.error``
header, plain messages) through the same decode as ``mapInArrow(decode_batches(..., packed=True))``
(:class:`stream_processor.decode.DecodedColumns`, with the Schema Registry at ``registryUrl`` if given)
and yields its rows: rejected ones keep their ``topic[partition]@offset``, raw bytes, headers and reason
for the dead-letter topic. This saves a hop per micro-batch: unfused, every message goes from this
reader's Python worker to the JVM as Arrow and back to a second Python worker for the decode, a copy of its
~4.4 kB value each way. ``decode`` = ``none`` (the default) gives Kafka's columns.

**Ticks.** With ``tickSeconds`` > 0 the offset JSON carries ``"$tick": n``, the wall clock in units of
``tickSeconds``, so that its end offset changes once per tick even when no record arrived: Spark then
runs an (empty) micro-batch, whose writer emits the `$self` groups that became due (recombine.py). The
processor turns Spark's own no-data micro-batches off when it uses ticks
(:func:`stream_processor.pipeline.start_query`). Up to session 10 those ran on *every* trigger of an idle
query, because the `$self` operator's processing-time timeouts always asked for another batch, and cost
~40 % of a core at a 1 s trigger on the 2-core bench machine (``benchmarks/idle_cpu.py``); a tick costs
the same as such a batch, but only once per ``tickSeconds``.

**The end of a partition.** The embedded tansu broker's ListOffsets(latest) may answer the
base offset of the last record batch instead of the log end; the high watermark carried by a
fetch response is right. :class:`HighWatermarkProbe` (driver side, long-lived) therefore
seeks a group-less consumer to ``known_end - 1`` (or the ListOffsets answer when larger),
waits for the record there to arrive and then reads librdkafka's cached high watermark, which
that very fetch response set. ``end = max(ListOffsets, fetched high watermark, known end)``:
both are lower bounds of the true log end, so the tail of a quiet topic is never left unread.
It stops waiting as soon as every partition has answered (a few ms per plan against the embedded
broker; until session 43 each plan waited out a 50 ms ``consume`` timeout, ~61 ms of Spark's
``latestOffset`` per micro-batch against ~10-14 ms now).

**A topic recreated with an empty log** (the embedded broker keeps nothing across a restart).
The offset JSON also carries ``"$ids": {"topic": "<topic id>"}`` (``AdminClient.describe_topics``):
when a topic's id differs from the one the previous batch recorded, its partitions are read
from their low watermark again (the batch's end JSON says so in ``"$from"`` and
``"$reset"``; a WARNING is logged), and a batch planned against the old log (re-run after a
restart) reads nothing of that topic: those records are gone with the old log. Where the broker
reports no topic ids, a partition whose fetched log end fell below the checkpointed offset is
reset instead; that heuristic misses a log re-filled past the old offset before the next probe.
Like Spark's ``failOnDataLoss=false``, but records re-published to the new log are not skipped.
"""

from __future__ import annotations

import heapq
import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from .decode import PLANNED_AT_COLUMN, READER_PACKED_SCHEMA, DecodedColumns

try:  # Spark >= 4.2: read limits and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older pyspark
    ReadLimit = object  # type: ignore[misc,assignment]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc,assignment]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

__all__ = ["KafkaDataSource", "KafkaStreamReader", "KafkaRange", "HighWatermarkProbe", "KAFKA_SCHEMA",
           "DECODE_SCHEMAS", "decode_option", "plan_end_offsets", "read_range", "split_ranges"]

SOURCE_NAME = "lineage_kafka"
KAFKA_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int, headers array<struct<key:string,value:binary>>")

#: Values of the ``decode`` option: the source's schema for each (module doc, "Decoding in the reader").
DECODE_SCHEMAS = {"none": KAFKA_SCHEMA, "packed": READER_PACKED_SCHEMA}

Offsets = dict[str, dict[str, int]]
T = TypeVar("T")

log = logging.getLogger(__name__)


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])


class KafkaRange(InputPartition):
    """One Kafka partition's offsets ``[start, end)`` for one micro-batch (picklable)."""

    def __init__(self, topic: str, partition: int, start: int, end: int, conf_json: str,
                 poll_timeout_ms: int = 120_000, planned_us: int | None = None) -> None:
        super().__init__(f"{topic}[{partition}]{start}..{end}")
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.conf_json = conf_json
        self.poll_timeout_ms = poll_timeout_ms
        #: when the micro-batch was planned (microseconds since the epoch, the driver's clock): the decoding
        #: reader's ``planned_at`` column (module doc, "Decoding in the reader")
        self.planned_us = planned_us if planned_us is not None else int(time.time() * 1_000_000)


def _consumer(conf: dict[str, Any], **extra: Any) -> Any:
    from confluent_kafka import Consumer

    base = {"group.id": "lineage-assign-only", "enable.auto.commit": False, "enable.partition.eof": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, "log_level": 3}
    base.update(conf)
    base.update(extra)
    return Consumer(base)


def _chunk_message(m: Any) -> Any:
    """A confluent-kafka message as :class:`producers.chunking.Message` (``extra`` = the timestamp type)."""
    from producers.chunking import Message

    return Message.from_kafka(m)


class _RangeRows:
    """The Arrow columns of one range's output, filled in the order messages are resolved."""

    def __init__(self, rng: KafkaRange, batch_rows: int) -> None:
        self.rng = rng
        self.batch_rows = batch_rows
        self.schema = _arrow_schema()
        self.cols: dict[str, list[Any]] = {n: [] for n in self.schema.names}

    def append_kafka(self, m: Any, headers: Any) -> None:
        """A confluent-kafka message as it is (the fast path: no chunk group involved)."""
        ts_type, ts = m.timestamp()
        self._push(m.key(), m.value(), m.offset(), ts if ts_type and ts >= 0 else None, ts_type, headers)

    def append(self, msg: Any) -> None:
        """A :class:`producers.chunking.Message` (reassembled, rejected or passed through)."""
        self._push(msg.key, msg.value, msg.offset, msg.timestamp_ms, msg.extra, msg.headers)

    def _push(self, key: Any, value: Any, offset: int, ts_ms: int | None, ts_type: int | None, headers: Any) -> None:
        cols = self.cols
        cols["key"].append(key)
        cols["value"].append(value)
        cols["topic"].append(self.rng.topic)
        cols["partition"].append(self.rng.partition)
        cols["offset"].append(offset)
        cols["timestamp"].append(ts_ms * 1000 if ts_ms is not None else None)
        cols["timestampType"].append(max(ts_type - 1, 0) if ts_type else 0)
        cols["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else [])

    def take(self, final: bool = False) -> Any:
        """A record batch when ``batch_rows`` rows are waiting (or any, when ``final``), else None."""
        import pyarrow as pa

        n = len(self.cols["offset"])
        if not n or (n < self.batch_rows and not final):
            return None
        batch = pa.RecordBatch.from_pydict(self.cols, schema=self.schema)
        self.cols = {name: [] for name in self.schema.names}
        return batch


class _DecodedRangeRows(_RangeRows):
    """``decode=packed``: each resolved message goes straight through decode (:class:`DecodedColumns`) in the
    reader task, and the batches are :data:`~stream_processor.decode.PACKED_SCHEMA` rows.

    Why: unfused, every message crosses from this Python worker to the JVM as Kafka columns and back to
    another Python worker for ``mapInArrow(decode)``, each time as Arrow with a copy of its ~4.4 kB value;
    the JVM was the pipeline's largest CPU consumer.
    """

    def __init__(self, rng: KafkaRange, batch_rows: int, decoded: DecodedColumns) -> None:
        self.rng = rng
        self.batch_rows = batch_rows
        self.decoded = decoded

    def _push(self, key: Any, value: Any, offset: int, ts_ms: int | None, ts_type: int | None, headers: Any) -> None:
        self.decoded.add(value, headers or [], self.rng.topic, self.rng.partition, offset,
                         ts_ms * 1000 if ts_ms is not None else None, key)

    def take(self, final: bool = False) -> Any:
        """The decoded rows of the last ``batch_rows`` messages (or of any, when ``final``), else None."""
        n = self.decoded.messages
        if not n or (n < self.batch_rows and not final):
            return None
        batch = self.decoded.take()
        if batch is None:
            return None
        import pyarrow as pa

        kind = batch.schema.field("event_time").type
        return batch.append_column(PLANNED_AT_COLUMN, pa.array([self.rng.planned_us] * batch.num_rows, kind))


class _ChunkRouter:
    """What of a reassembler's output belongs to the range ``[start, end)``.

    A chunk group belongs to the range holding its chunk 0. Orphan chunks of groups never seen in
    this range (their chunk 0 may lie before ``start``, handled by the previous range) are held back
    for :func:`_resolve_orphans`.
    """

    def __init__(self, rng: KafkaRange, rows: _RangeRows) -> None:
        self.rng = rng
        self.rows = rows
        self.unresolved: dict[int, Any] = {}

    def route(self, items: list[Any]) -> None:
        from producers.chunking import ChunkFailure

        for item in items:
            if not self.rng.start <= item.offset < self.rng.end:
                continue  # read ahead: the next range's
            if isinstance(item, ChunkFailure):
                if item.unknown_group:
                    self.unresolved[item.offset] = item
                else:
                    self.rows.append(item.as_message())
            else:
                self.rows.append(item)


def _range_messages(consumer: Any, rng: KafkaRange, batch_rows: int, leftover: list[Any]) -> Iterator[Any]:
    """confluent-kafka messages of ``[rng.start, rng.end)`` in log order; those past the end go to ``leftover``.

    Raises ``TimeoutError`` when no record arrives for ``poll_timeout_ms`` (the broker lost data,
    or the range was planned past the log end): failing the batch is safer than skipping offsets.
    """
    from confluent_kafka import KafkaError

    last = rng.start - 1
    deadline = time.monotonic() + rng.poll_timeout_ms / 1000
    while last < rng.end - 1:
        msgs = consumer.consume(num_messages=min(batch_rows, rng.end - 1 - last), timeout=0.5)
        if not msgs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{rng.topic}[{rng.partition}]: no record after offset {last} "
                                   f"within {rng.poll_timeout_ms} ms (planned end {rng.end})")
            continue
        deadline = time.monotonic() + rng.poll_timeout_ms / 1000
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"{rng.topic}[{rng.partition}]: {err}")
            if m.offset() >= rng.end or last >= rng.end - 1:
                last = rng.end - 1
                leftover.append(m)
                continue
            last = m.offset()
            yield m


def _read_ahead(consumer: Any, rng: KafkaRange, reassembler: Any, router: _ChunkRouter, leftover: list[Any],
                timeout_seconds: float) -> None:
    """Read past ``rng.end`` until every chunk group anchored in the range is closed.

    The reassembler closes a group when it completes, when a message's broker timestamp is more
    than the timeout after its chunk 0's, or at its span bounds. At the log end the reader waits
    up to ``timeout_seconds`` of wall time (less once the wall clock is past chunk 0's timestamp
    plus the timeout), then gives the group up as ``chunk.incomplete``.
    """
    pending = list(leftover)
    idle_since = time.monotonic()
    while any(a < rng.end for a in reassembler.open_anchors()):
        if not pending:
            pending = [m for m in consumer.consume(num_messages=500, timeout=0.5) if m.error() is None]
        if pending:
            for m in pending:
                router.route(reassembler.add(_chunk_message(m)))
            pending = []
            idle_since = time.monotonic()
            continue
        ts0 = reassembler.oldest_open_timestamp_ms(before_offset=rng.end)
        overdue = ts0 is not None and time.time() * 1000 > ts0 + timeout_seconds * 1000
        if overdue or time.monotonic() - idle_since >= timeout_seconds:
            router.route(reassembler.give_up(f"the log ended and no further chunk came within "
                                             f"{timeout_seconds:g}s", before_offset=rng.end))


def _resolve_orphans(rng: KafkaRange, router: _ChunkRouter, timeout_seconds: float, look_back: int) -> None:
    """Decide the orphan chunks of the range by replaying the log from ``look_back`` offsets before it.

    A fresh reassembler reads ``[start - look_back, last orphan]``: an orphan it absorbs into a group
    anchored before ``start`` was that range's (skipped here); one it still reports as an orphan
    (chunk 0 not found, or the group already closed) goes out as a ``chunk.orphan`` row.
    """
    from confluent_kafka import TopicPartition

    from producers.chunking import ChunkFailure, ChunkReassembler

    replay = ChunkReassembler(int(timeout_seconds * 1000))
    last = max(router.unresolved)
    conf = json.loads(rng.conf_json)
    consumer = _consumer(conf, **{"queued.max.messages.kbytes": 65536, "fetch.max.bytes": 52428800})
    orphans: dict[int, Any] = {}
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, max(rng.start - look_back, 0))])
        deadline = time.monotonic() + rng.poll_timeout_ms / 1000
        at = -1
        while at < last:
            msgs = [m for m in consumer.consume(num_messages=500, timeout=0.5) if m.error() is None]
            if not msgs:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{rng.topic}[{rng.partition}]: look-back for chunk groups stalled after "
                                       f"offset {at} (needed up to {last})")
                continue
            deadline = time.monotonic() + rng.poll_timeout_ms / 1000
            for m in msgs:
                at = m.offset()
                if at > last:
                    break
                for item in replay.add(_chunk_message(m)):
                    if isinstance(item, ChunkFailure) and item.offset in router.unresolved:
                        orphans[item.offset] = item
    finally:
        consumer.close()
    for off in sorted(router.unresolved):
        if off in orphans:
            router.rows.append(router.unresolved[off].as_message())


def read_range(rng: KafkaRange, batch_rows: int = 10_000, chunk_timeout_seconds: float = 60.0,
               look_back: int | None = None, decoded: DecodedColumns | None = None) -> Iterator[Any]:
    """Read ``[rng.start, rng.end)`` of one partition as Arrow record batches (executor side): Kafka's
    columns, or with ``decoded`` the rows it makes of the messages (the ``decode=packed`` option).

    Chunked messages (:mod:`producers.chunking`) are reassembled: a group belongs to the range
    holding its chunk 0 and goes out as one row with chunk 0's offset, key, timestamp and original
    headers; the reader reads past ``rng.end`` until such a group closes (:func:`_read_ahead`).
    Chunks whose group lies before ``rng.start`` are checked against the log there
    (:func:`_resolve_orphans`, ``look_back`` offsets, default the reassembler's span bound). A group
    that cannot be reassembled goes out as one row: its first chunk's bytes with a
    ``lineage.chunk.error`` header, which the decoder turns into a dead-letter row.

    Raises ``TimeoutError`` when no record arrives for ``poll_timeout_ms`` (the broker lost data,
    or the range was planned past the log end): failing the batch is safer than skipping offsets.
    """
    from confluent_kafka import TopicPartition

    from producers.chunking import DEFAULT_MAX_SPAN_MESSAGES, ChunkReassembler, is_chunk

    if rng.end <= rng.start:
        return
    rows = _RangeRows(rng, batch_rows) if decoded is None else _DecodedRangeRows(rng, batch_rows, decoded)
    router = _ChunkRouter(rng, rows)
    reassembler = ChunkReassembler(int(chunk_timeout_seconds * 1000))
    consumer = _consumer(json.loads(rng.conf_json), **{"queued.max.messages.kbytes": 65536,
                                                      "fetch.max.bytes": 52428800})
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        leftover: list[Any] = []
        for m in _range_messages(consumer, rng, batch_rows, leftover):
            headers = m.headers()
            if reassembler.idle and not (headers and is_chunk(headers)):
                rows.append_kafka(m, headers)
            else:
                router.route(reassembler.add(_chunk_message(m)))
            batch = rows.take()
            if batch is not None:
                yield batch
        _read_ahead(consumer, rng, reassembler, router, leftover, chunk_timeout_seconds)
    finally:
        consumer.close()
    if router.unresolved:
        _resolve_orphans(rng, router, chunk_timeout_seconds,
                         DEFAULT_MAX_SPAN_MESSAGES if look_back is None else look_back)
    batch = rows.take(final=True)
    if batch is not None:
        yield batch


class HighWatermarkProbe:
    """Driver-side, long-lived: the true end offset of partitions despite the ListOffsets quirk."""

    def __init__(self, conf: dict[str, Any], wait_seconds: float = 2.0) -> None:
        self.conf = conf
        self.wait_seconds = wait_seconds
        self._consumer: Any = None
        self._admin: Any = None
        #: ``{tp: end}`` of the last :meth:`ends` for partitions a record was actually fetched from
        self.fetched: dict[tuple[str, int], int] = {}

    def topic_ids(self, topics: list[str]) -> dict[str, str | None]:
        """``{topic: id}`` of the existing ``topics`` (None: the broker reports no topic ids); missing ones left out."""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient

        if not topics:
            return {}
        if self._admin is None:
            self._admin = AdminClient({**self.conf, "log_level": 0})
        out: dict[str, str | None] = {}
        for topic, fut in self._admin.describe_topics(TopicCollection(sorted(set(topics))),
                                                      request_timeout=10).items():
            try:
                desc = fut.result(timeout=15)
            except KafkaException as exc:
                if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise
            tid = str(desc.topic_id) if getattr(desc, "topic_id", None) is not None else ""
            out[topic] = None if not tid or tid.strip("A=") == "" else tid  # all-zero Uuid: not supported
        return out

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            # one record batch per partition is enough: the response's high watermark is what we want; it is
            # assigned only inside ends(), at records that exist, so the broker need not hold a fetch (the 50 ms
            # long poll _consumer sets held the next plan's metadata request behind it: ~26 ms per plan, session 43)
            self._consumer = _consumer(self.conf, **{"max.partition.fetch.bytes": 1,
                                                     "queued.max.messages.kbytes": 1024, "fetch.wait.max.ms": 1,
                                                     "log_level": 0})  # outages surface as exceptions
        return self._consumer

    def partitions(self, topics: list[str] | None, pattern: str | None) -> list[tuple[str, int]]:
        """Topic-partitions to read: the listed topics, or those whose name matches ``pattern``."""
        md = self.consumer.list_topics(timeout=10)
        regex = re.compile(pattern) if pattern else None
        out = []
        for name, tmd in md.topics.items():
            if tmd.error is not None:
                continue
            if (topics and name in topics) or (regex and regex.fullmatch(name)):
                out.extend((name, p) for p in tmd.partitions)
        return sorted(out)

    def low(self, tp: tuple[str, int]) -> int:
        from confluent_kafka import TopicPartition

        lo, _hi = self.consumer.get_watermark_offsets(TopicPartition(tp[0], tp[1]), timeout=10, cached=False)
        return max(lo, 0)

    def ends(self, tps: list[tuple[str, int]], known: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """``{tp: end}`` where end is the log end offset as the last fetch response told it."""
        from confluent_kafka import TopicPartition

        c = self.consumer
        result: dict[tuple[str, int], int] = {}
        probe: dict[tuple[str, int], int] = {}
        for tp in tps:
            _lo, listed = c.get_watermark_offsets(TopicPartition(*tp), timeout=10, cached=False)
            base = max(listed, known.get(tp, 0))
            result[tp] = base
            if base > 0:
                probe[tp] = base - 1
        if not probe:
            return result
        c.assign([TopicPartition(t, p, off) for (t, p), off in probe.items()])
        pending = set(probe)
        deadline = time.monotonic() + self.wait_seconds
        while pending and time.monotonic() < deadline:
            # as many as partitions still to hear from: consume() returns once that many messages are queued, and
            # with more asked for it waits out its whole timeout (a fixed 50 ms on every plan, session 43)
            for m in c.consume(num_messages=len(pending), timeout=0.05):
                if m.error() is None:
                    pending.discard((m.topic(), m.partition()))
        self.fetched = {}
        for tp in probe:
            _lo, hi = c.get_watermark_offsets(TopicPartition(*tp), cached=True)
            if hi is not None and hi >= 0 and tp not in pending:
                self.fetched[tp] = hi  # from a fetch response: the log end, even if below ``known``
            if hi is not None and hi > result[tp]:
                result[tp] = hi
        c.unassign()
        return result

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._admin = None


#: Keys of the offset JSON that are not topics ("$" is not allowed in a Kafka topic name):
#: ``$ids`` {topic: topic id}, ``$from`` / ``$reset`` {topic: {partition: offset}}, ``$tick`` n (see the module docs).
META_KEYS = ("$ids", "$from", "$reset", "$tick")


def _to_offsets(d: dict[tuple[str, int], int], **meta: Any) -> Offsets:
    out: dict[str, Any] = {}
    for (t, p), off in sorted(d.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    for key, value in sorted(meta.items()):  # ids={topic: id}; from= / reset={(topic, partition): offset}
        if value:
            out[f"${key}"] = dict(sorted(value.items())) if key == "ids" else _to_offsets(value)
    return out


def _from_offsets(o: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(off) for t, parts in (o or {}).items() if not t.startswith("$")
            for p, off in parts.items()}


def _offset_ids(o: dict | None) -> dict[str, str | None]:
    """The ``$ids`` of an offset JSON (``{}`` for one written before topic ids were recorded)."""
    return dict((o or {}).get("$ids") or {})


def plan_end_offsets(start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
                     max_rows: int | None) -> dict[tuple[str, int], int]:
    """End offsets of the next batch: ``latest``, or at most ``max_rows`` records spread over partitions.

    With a cap, each partition p with lag ``l_p = latest_p - start_p`` gets its share
    ``max_rows * l_p / sum(l)`` of the batch, rounded so that the shares add up to exactly ``max_rows``
    (largest remainders: every partition gets the floor of its share, and the records left over go one
    each to the partitions whose shares lost the most to the floor, ties in (topic, partition) order), and
    at least 1 record while it lags, taken from the largest shares: a partition's share is never above its
    lag, and the total exceeds ``max_rows`` only when more partitions lag than ``max_rows`` records are
    allowed (each then reads 1).

    Why not Spark's rounding (the native Kafka source floors each share): a batch then reads up to one
    record per partition less than the cap, and a backlog of N records took a micro-batch more than
    ``ceil(N / max_rows)`` for the few records left at the end (``lineage bench --events 40000``: an
    eight-batch drain ended with a ninth batch of 14 records, which paid a whole batch's fixed cost).
    """
    ends = {tp: max(latest.get(tp, 0), start.get(tp, 0)) for tp in set(start) | set(latest)}
    if not max_rows:
        return ends
    lags = {tp: ends[tp] - start.get(tp, 0) for tp in ends}
    total = sum(lags.values())
    if total <= max_rows:
        return ends
    shares, remainders = {}, []
    for tp, lag in lags.items():
        shares[tp], rest = divmod(max_rows * lag, total)   # rest < total: the share is below the lag
        if rest:
            remainders.append((-rest, tp))
    for _, tp in sorted(remainders)[:max_rows - sum(shares.values())]:
        shares[tp] += 1
    raised = [tp for tp, lag in lags.items() if lag > 0 and shares[tp] == 0]   # every lagging partition moves
    largest = [(-n, tp) for tp, n in shares.items() if n > 1] if raised else []
    heapq.heapify(largest)
    for tp in raised:
        shares[tp] = 1
        if largest:   # the record comes from the largest share (a share never drops below 1)
            _, top = heapq.heappop(largest)
            shares[top] -= 1
            if shares[top] > 1:
                heapq.heappush(largest, (-shares[top], top))
    return {tp: start.get(tp, 0) + shares[tp] for tp in lags}


def split_ranges(ranges: dict[tuple[str, int], tuple[int, int]], min_partitions: int
                 ) -> list[tuple[tuple[str, int], tuple[int, int]]]:
    """``ranges`` (``(topic, partition) -> [start, end)``) cut into at least ``min_partitions`` ranges when
    there are fewer, each partition's in proportion to its share of the offsets (as Spark's Kafka source
    does with ``minPartitions``), in partition and offset order. A cut falls between offsets; a chunk group
    across it is read by the range holding its chunk 0 (:func:`read_range`).

    Why: a micro-batch reads one task per Kafka partition, and 3 partitions on 2 cores leave one core
    idle for a third of the read-and-decode stage."""
    out: list[tuple[tuple[str, int], tuple[int, int]]] = []
    total = sum(b - a for a, b in ranges.values())
    if min_partitions <= len(ranges) or total <= 0:
        return list(ranges.items())
    for tp, (a, b) in ranges.items():
        pieces = max(1, min(b - a, -(-(b - a) * min_partitions // total)))
        cuts = [a + (b - a) * i // pieces for i in range(pieces)] + [b]
        out.extend((tp, (x, y)) for x, y in zip(cuts, cuts[1:], strict=False) if y > x)
    return out


def decode_option(options: Any) -> str:
    """The ``decode`` option's value (``none`` when not given); anything but :data:`DECODE_SCHEMAS`' keys fails."""
    value = next((str(v).strip().lower() for k, v in dict(options).items() if k.lower() == "decode"), "") or "none"
    if value not in DECODE_SCHEMAS:
        raise ValueError(f"option decode of the {SOURCE_NAME} source must be one of {sorted(DECODE_SCHEMAS)}, "
                         f"not {value!r}")
    return value


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets, planning and reading of the ``lineage_kafka`` source."""

    def __init__(self, options: dict[str, str]) -> None:
        opts = {k.lower(): v for k, v in options.items()}
        self.conf = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        if "bootstrap.servers" not in self.conf:
            raise ValueError("option kafka.bootstrap.servers is required")
        self.topics = [t.strip() for t in opts.get("subscribe", "").split(",") if t.strip()] or None
        self.pattern = opts.get("subscribepattern")
        if not self.topics and not self.pattern:
            raise ValueError("option subscribe or subscribePattern is required")
        self.starting = opts.get("startingoffsets", "earliest")
        self.max_rows = int(opts["maxoffsetspertrigger"]) if opts.get("maxoffsetspertrigger") else None
        self.poll_timeout_ms = int(opts.get("polltimeoutms", "120000"))
        self.chunk_timeout_seconds = float(opts.get("chunktimeoutseconds", "60"))  # see read_range
        #: how long the driver's offset probe waits out an unreachable broker before the query fails
        self.probe_retry_seconds = float(opts.get("proberetryseconds", "15"))
        #: > 0: an end offset changes every ``tick_seconds`` even without records (module doc: ticks)
        self.tick_seconds = float(opts.get("tickseconds", "0"))
        #: at least this many read tasks per micro-batch (Spark's Kafka ``minPartitions``): ranges are split
        self.min_partitions = int(opts.get("minpartitions") or 0)
        #: "packed": the reader tasks decode (module doc, "Decoding in the reader"); "none": Kafka's columns
        self.decode = decode_option(options)
        self.registry_url = opts.get("registryurl") or None
        #: with decode=packed: decode derives the events' graph rows too (``LINEAGE_DERIVE_AT_DECODE``, default off;
        #: decode.py); the processor always passes it
        self.derive = str(opts.get("derive", "false")).lower() == "true"
        self._probe: HighWatermarkProbe | None = None
        self._known: dict[tuple[str, int], int] = {}
        self._target: dict[tuple[str, int], int] | None = None
        self._ids: dict[str, str | None] = {}  # topic ids as the last plan saw them (this process)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_probe"] = None
        return state

    @property
    def probe(self) -> HighWatermarkProbe:
        if self._probe is None:
            self._probe = HighWatermarkProbe(self.conf)
        return self._probe

    def _wait_briefly(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried with backoff while the broker is unreachable, for ``probe_retry_seconds``.

        A short blip does not fail the query; a longer outage does, and the runner's supervisor
        (:func:`stream_processor.runner.run_processor`) waits for the broker and restarts it.
        """
        from confluent_kafka import KafkaException

        started = time.monotonic()
        attempt = 0
        while True:
            try:
                return fn()
            except KafkaException as exc:
                elapsed = time.monotonic() - started
                if elapsed >= self.probe_retry_seconds:
                    raise
                delay = min(0.5 * 2 ** attempt, 4.0, max(self.probe_retry_seconds - elapsed, 0.1))
                log.warning("waiting for Kafka at %s: %s, retry in %.1fs (%s)", self.conf.get("bootstrap.servers"),
                            exc, delay, what)
                attempt += 1
                time.sleep(delay)

    def _latest(self, tps: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        tps = self.probe.partitions(self.topics, self.pattern) if tps is None else tps
        ends = self.probe.ends(tps, self._known)
        for tp, off in ends.items():
            self._known[tp] = max(self._known.get(tp, 0), off)
        return ends

    def initialOffset(self) -> dict:
        return self._wait_briefly("initial offsets", self._initial)

    def _initial(self) -> dict:
        tps = self.probe.partitions(self.topics, self.pattern)
        self._ids = self.probe.topic_ids(sorted({t for t, _ in tps}))
        ids = {t: v for t, v in self._ids.items() if v}
        if self.starting == "latest":
            return _to_offsets(self._latest(tps), ids=ids)
        if self.starting == "earliest":
            return _to_offsets({tp: self.probe.low(tp) for tp in tps}, ids=ids)
        given = json.loads(self.starting)
        out: dict[tuple[str, int], int] = {}
        latest = None
        for tp in tps:
            off = int(given.get(tp[0], {}).get(str(tp[1]), -2))
            if off == -1:
                latest = latest or self._latest()
                off = latest[tp]
            elif off == -2:
                off = self.probe.low(tp)
            out[tp] = off
        return _to_offsets(out, ids=ids)

    def getDefaultReadLimit(self) -> Any:
        if self.max_rows and ReadMaxRows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        return self._wait_briefly("plan the next batch", lambda: self._plan(start, limit))

    def _plan(self, start: dict | None, limit: Any) -> dict:
        begin = _from_offsets(start or {})
        old_ids = _offset_ids(start)
        tps = self.probe.partitions(self.topics, self.pattern)
        ids = self.probe.topic_ids(sorted({t for t, _ in tps}))
        recreated = sorted(t for t, tid in ids.items() if tid and old_ids.get(t) and old_ids[t] != tid)
        reset: dict[tuple[str, int], int] = {}
        for tp in [tp for tp in begin if tp[0] in recreated]:  # a new log: the old offsets mean nothing there
            reset[tp] = begin.pop(tp)
            self._known.pop(tp, None)
        for tp, off in begin.items():
            self._known[tp] = max(self._known.get(tp, 0), off)
        latest = dict(self._target) if self._target is not None else self._latest(tps)
        if self._target is None:  # no topic ids to compare: a log end below the checkpoint means a new log
            for tp in [tp for tp in begin if not (ids.get(tp[0]) and old_ids.get(tp[0]))]:
                fetched = self.probe.fetched.get(tp)
                if fetched is not None and fetched < begin[tp] and tp in latest:
                    reset[tp] = begin.pop(tp)
                    self._known[tp] = latest[tp] = fetched
        starts = {tp: self.probe.low(tp) for tp in latest if tp not in begin}  # new partitions and resets
        for tp, old in sorted(reset.items()):
            why = (f"topic {tp[0]!r} was recreated (id {old_ids.get(tp[0])} -> {ids.get(tp[0])})"
                   if tp[0] in recreated else f"its log ends at {latest.get(tp)}, below the checkpointed offset")
            log.warning("%s[%d]: %s; reading it again from offset %d instead of %d (records of the old log "
                        "that were not processed are lost unless re-published)", tp[0], tp[1], why,
                        starts.get(tp, 0), old)
        self._ids = {**{t: v for t, v in old_ids.items() if t not in ids}, **{t: v for t, v in ids.items() if v}}
        max_rows = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is None:
            max_rows = self.max_rows
        ends = plan_end_offsets({**begin, **starts}, latest, max_rows)
        out = _to_offsets(ends, ids=self._ids, **{"from": starts, "reset": reset})
        if self.tick_seconds > 0:
            out["$tick"] = int(time.time() // self.tick_seconds)
        return out

    def reportLatestOffset(self) -> dict | None:
        return _to_offsets(self._known) if self._known else None

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        begin, finish = _from_offsets(start), _from_offsets(end)
        begin.update(_from_offsets(end.get("$from") or {}))  # new partitions, logs read again (recreated topic)
        planned = {t: v for t, v in _offset_ids(end).items() if v}
        stale: set[str] = set()
        if planned and any(self._ids.get(t) != v for t, v in planned.items()):  # planned by another process
            now = self._wait_briefly("check topic ids", lambda: self.probe.topic_ids(sorted(planned)))
            stale = {t for t, v in planned.items() if now.get(t) != v}
            for t in sorted(stale):
                lost = {p: (begin.get((tt, p), 0), e) for (tt, p), e in finish.items() if tt == t}
                log.warning("topic %r is not the log this batch was planned against (id %s, now %s): its "
                            "ranges %s are gone with the old log and are not read", t, planned[t], now.get(t), lost)
        conf_json = json.dumps(self.conf)
        ranges = {(t, p): (begin.get((t, p), 0), e) for (t, p), e in sorted(finish.items())
                  if e > begin.get((t, p), 0) and t not in stale}
        planned_us = int(time.time() * 1_000_000)
        return [KafkaRange(t, p, a, b, conf_json, self.poll_timeout_ms, planned_us)
                for (t, p), (a, b) in split_ranges(ranges, self.min_partitions)]

    def read(self, partition: KafkaRange) -> Iterator[Any]:  # type: ignore[override]
        from .worker_heap import freeze_imports

        freeze_imports()
        decoded = DecodedColumns(self.registry_url, packed=True, derive=self.derive) if self.decode == "packed" else None
        yield from read_range(partition, chunk_timeout_seconds=self.chunk_timeout_seconds, decoded=decoded)

    def commit(self, end: dict) -> None:
        return None

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()


class KafkaDataSource(DataSource):
    """``spark.readStream.format("lineage_kafka")``: see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return DECODE_SCHEMAS[decode_option(self.options)]

    def streamReader(self, schema: Any) -> KafkaStreamReader:
        return KafkaStreamReader(dict(self.options))


def register(spark: Any) -> None:
    """Register ``lineage_kafka`` with ``spark`` (idempotent)."""
    spark.dataSource.register(KafkaDataSource)
