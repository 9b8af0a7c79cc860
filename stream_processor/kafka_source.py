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
``pollTimeoutMs`` and any ``kafka.<librdkafka key>``.

**The end of a partition.** The embedded tansu broker's ListOffsets(latest) may answer the
base offset of the last record batch instead of the log end; the high watermark carried by a
fetch response is right. :class:`HighWatermarkProbe` (driver side, long-lived) therefore
seeks a group-less consumer to ``known_end - 1`` (or the ListOffsets answer when larger),
waits for the record there to arrive and then reads librdkafka's cached high watermark, which
that very fetch response set. ``end = max(ListOffsets, fetched high watermark, known end)``:
both are lower bounds of the true log end, so the tail of a quiet topic is never left unread.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

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
           "plan_end_offsets", "read_range"]

SOURCE_NAME = "lineage_kafka"
KAFKA_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int, headers array<struct<key:string,value:binary>>")

Offsets = dict[str, dict[str, int]]


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
                 poll_timeout_ms: int = 120_000) -> None:
        super().__init__(f"{topic}[{partition}]{start}..{end}")
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.conf_json = conf_json
        self.poll_timeout_ms = poll_timeout_ms


def _consumer(conf: dict[str, Any], **extra: Any) -> Any:
    from confluent_kafka import Consumer

    base = {"group.id": "lineage-assign-only", "enable.auto.commit": False, "enable.partition.eof": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, "log_level": 3}
    base.update(conf)
    base.update(extra)
    return Consumer(base)


def read_range(rng: KafkaRange, batch_rows: int = 10_000) -> Iterator[Any]:
    """Read ``[rng.start, rng.end)`` of one partition as Arrow record batches (executor side).

    Raises ``TimeoutError`` when no record arrives for ``poll_timeout_ms`` (the broker lost data,
    or the range was planned past the log end): failing the batch is safer than skipping offsets.
    """
    import pyarrow as pa
    from confluent_kafka import KafkaError, TopicPartition

    if rng.end <= rng.start:
        return
    schema = _arrow_schema()
    conf = json.loads(rng.conf_json)
    consumer = _consumer(conf, **{"queued.max.messages.kbytes": 65536, "fetch.max.bytes": 52428800})
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        cols: dict[str, list[Any]] = {n: [] for n in schema.names}
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
                off = m.offset()
                if off >= rng.end:
                    last = rng.end - 1
                    break
                last = off
                ts_type, ts = m.timestamp()
                cols["key"].append(m.key())
                cols["value"].append(m.value())
                cols["topic"].append(rng.topic)
                cols["partition"].append(rng.partition)
                cols["offset"].append(off)
                cols["timestamp"].append(ts * 1000 if ts_type and ts >= 0 else None)
                cols["timestampType"].append(max(ts_type - 1, 0) if ts_type else 0)
                hdrs = m.headers()
                cols["headers"].append([{"key": k, "value": v} for k, v in hdrs] if hdrs else [])
            if len(cols["offset"]) >= batch_rows:
                yield pa.RecordBatch.from_pydict(cols, schema=schema)
                cols = {n: [] for n in schema.names}
        if cols["offset"]:
            yield pa.RecordBatch.from_pydict(cols, schema=schema)
    finally:
        consumer.close()


class HighWatermarkProbe:
    """Driver-side, long-lived: the true end offset of partitions despite the ListOffsets quirk."""

    def __init__(self, conf: dict[str, Any], wait_seconds: float = 2.0) -> None:
        self.conf = conf
        self.wait_seconds = wait_seconds
        self._consumer: Any = None

    @property
    def consumer(self) -> Any:
        if self._consumer is None:
            # one record batch per partition is enough: the response's high watermark is what we want
            self._consumer = _consumer(self.conf, **{"max.partition.fetch.bytes": 1,
                                                     "queued.max.messages.kbytes": 1024})
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
            for m in c.consume(num_messages=1000, timeout=0.05):
                if m.error() is None:
                    pending.discard((m.topic(), m.partition()))
        for tp in probe:
            _lo, hi = c.get_watermark_offsets(TopicPartition(*tp), cached=True)
            if hi is not None and hi > result[tp]:
                result[tp] = hi
        c.unassign()
        return result

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _to_offsets(d: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, p), off in sorted(d.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def _from_offsets(o: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(off) for t, parts in (o or {}).items() for p, off in parts.items()}


def plan_end_offsets(start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
                     max_rows: int | None) -> dict[tuple[str, int], int]:
    """End offsets of the next batch: ``latest``, or at most ``max_rows`` records spread over partitions.

    With a cap, each partition p with lag ``l_p = latest_p - start_p`` gets
    ``floor(max_rows * l_p / sum(l))`` records (at least 1 while it lags), as Spark's native
    Kafka source rate-limits; the total never exceeds ``max_rows`` by more than the partition count.
    """
    ends = {tp: max(latest.get(tp, 0), start.get(tp, 0)) for tp in set(start) | set(latest)}
    if not max_rows:
        return ends
    lags = {tp: ends[tp] - start.get(tp, 0) for tp in ends}
    total = sum(lags.values())
    if total <= max_rows:
        return ends
    return {tp: start.get(tp, 0) + (max(1, (max_rows * lag) // total) if lag > 0 else 0) for tp, lag in lags.items()}


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
        self._probe: HighWatermarkProbe | None = None
        self._known: dict[tuple[str, int], int] = {}
        self._target: dict[tuple[str, int], int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_probe"] = None
        return state

    @property
    def probe(self) -> HighWatermarkProbe:
        if self._probe is None:
            self._probe = HighWatermarkProbe(self.conf)
        return self._probe

    def _latest(self) -> dict[tuple[str, int], int]:
        tps = self.probe.partitions(self.topics, self.pattern)
        ends = self.probe.ends(tps, self._known)
        for tp, off in ends.items():
            self._known[tp] = max(self._known.get(tp, 0), off)
        return ends

    def initialOffset(self) -> dict:
        tps = self.probe.partitions(self.topics, self.pattern)
        if self.starting == "latest":
            return _to_offsets(self._latest())
        if self.starting == "earliest":
            return _to_offsets({tp: self.probe.low(tp) for tp in tps})
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
        return _to_offsets(out)

    def getDefaultReadLimit(self) -> Any:
        if self.max_rows and ReadMaxRows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        begin = _from_offsets(start or {})
        for tp, off in begin.items():
            self._known[tp] = max(self._known.get(tp, 0), off)
        latest = dict(self._target) if self._target is not None else self._latest()
        for tp in latest:  # a partition that appeared after start begins at its low watermark
            begin.setdefault(tp, self.probe.low(tp))
        max_rows = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is None:
            max_rows = self.max_rows
        return _to_offsets(plan_end_offsets(begin, latest, max_rows))

    def reportLatestOffset(self) -> dict | None:
        return _to_offsets(self._known) if self._known else None

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        begin, finish = _from_offsets(start), _from_offsets(end)
        conf_json = json.dumps(self.conf)
        return [KafkaRange(t, p, begin.get((t, p), 0), e, conf_json, self.poll_timeout_ms)
                for (t, p), e in sorted(finish.items()) if e > begin.get((t, p), 0)]

    def read(self, partition: KafkaRange) -> Iterator[Any]:  # type: ignore[override]
        yield from read_range(partition)

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
        return KAFKA_SCHEMA

    def streamReader(self, schema: Any) -> KafkaStreamReader:
        return KafkaStreamReader(dict(self.options))


def register(spark: Any) -> None:
    """Register ``lineage_kafka`` with ``spark`` (idempotent)."""
    spark.dataSource.register(KafkaDataSource)
