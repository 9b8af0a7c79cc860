"""The Structured Streaming query: Kafka -> decode -> dedupe -> graph (`$self` recombined in the store).

One linear plan, so the source is read once per micro-batch::

    read_kafka            native format("kafka") when its jars are present, else lineage_kafka
    .mapInArrow(decode)   executors: decode + validate, Arrow in / Arrow out (decode.py); lineage_kafka
                          decodes in its own reader tasks instead (decode=packed, :func:`decoded_stream`)
    dedupe                withWatermark + dropDuplicatesWithinWatermark on a clamped time (dedupe.py)
    .foreachBatch(GraphBatchWriter)   stage on executors (`$self` parts to stg_self_parts), recombine due
                          `$self` groups and merge on the driver, publish (writer.py, recombine.py)

Rejected rows travel the same plan with unique hashes and end in the DLQ from the writer.
"""

from __future__ import annotations

import logging
from typing import Any

from .settings import ProcessorSettings

__all__ = ["read_kafka", "native_kafka_available", "source_format", "decoded_stream", "build_stream", "start_query"]

log = logging.getLogger(__name__)


def native_kafka_available(spark: Any) -> bool:
    """True when Spark's own Kafka connector classes are on the classpath."""
    try:
        jvm = spark.sparkContext._jvm
        jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.KafkaSourceProvider")
        return True
    except Exception:  # noqa: BLE001 - py4j raises its own error types
        return False


def source_format(spark: Any, settings: ProcessorSettings) -> str:
    """``kafka`` (Spark's own connector) or ``lineage_kafka`` (ours), as ``settings.source_format`` says."""
    fmt = settings.source_format
    if fmt == "auto":
        fmt = "kafka" if native_kafka_available(spark) else "lineage_kafka"
    return fmt


def read_kafka(spark: Any, settings: ProcessorSettings, tick_seconds: float = 0.0, decode: bool = False) -> Any:
    """The input stream with the native Kafka columns, from whichever source is available.
    ``tick_seconds`` > 0: ``lineage_kafka``'s ticks (kafka_source.py module doc; ignored by the native source).
    ``decode``: ``lineage_kafka`` decodes in its reader tasks and the stream has ``PACKED_SCHEMA`` rows
    (kafka_source.py module doc, "Decoding in the reader"); the native source cannot."""
    from .checkpoint_upgrade import starting_offsets
    from .kafka_source import register

    fmt = source_format(spark, settings)
    if decode and fmt != "lineage_kafka":
        raise ValueError(f"only the lineage_kafka source decodes in its reader, not {fmt!r}: "
                         "decode its columns with mapInArrow (decoded_stream does)")
    if fmt == "lineage_kafka":
        register(spark)
    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", settings.bootstrap_servers)
    # The Python source hands kafka.* options to librdkafka: all client settings, SASL/SSL included.
    # Spark's native source speaks the Java client's names: only what kafka_extra says explicitly.
    options = (settings.source_options() if fmt == "lineage_kafka"
               else {f"kafka.{k}": v for k, v in settings.kafka_extra.items()})
    for key, value in options.items():
        reader = reader.option(key, value)
    if settings.subscribe_pattern:
        reader = reader.option("subscribePattern", settings.subscribe_pattern)
    else:
        reader = reader.option("subscribe", ",".join(settings.input_topics))
    reader = reader.option("startingOffsets", starting_offsets(settings))
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    if fmt == "kafka":
        reader = reader.option("failOnDataLoss", "false")
    elif tick_seconds > 0:
        reader = reader.option("tickSeconds", str(tick_seconds))
    if decode:
        reader = reader.option("decode", "packed")
        if settings.registry_url:
            reader = reader.option("registryUrl", settings.registry_url)
    log.info("input source: %s", fmt)
    return reader.load()


def decoded_stream(spark: Any, settings: ProcessorSettings, source: Any = None, tick_seconds: float = 0.0,
                   fuse_decode: bool = True) -> Any:
    """The input as decoded ``PACKED_SCHEMA`` rows (decode.py module doc).

    ``lineage_kafka`` decodes in its own reader tasks (``fuse_decode``, the default): one Python pass per
    message instead of reader worker -> JVM -> decode worker -> JVM, each hop an Arrow conversion and a copy of
    the event's bytes. The native ``kafka`` source, a ``source`` passed in (Kafka's columns) and
    ``fuse_decode=False`` (for A/B measurements) get ``mapInArrow(decode_batches)``; both give the same rows,
    and a checkpoint written by one plan resumes with the other (only stateless operators differ; both in
    tests/test_kafka_source_decode.py). Spark's input-row figures then count decoded rows, not messages."""
    from .decode import PACKED_SCHEMA, decode_batches

    if source is None and fuse_decode and source_format(spark, settings) == "lineage_kafka":
        return read_kafka(spark, settings, tick_seconds, decode=True)
    source = source if source is not None else read_kafka(spark, settings, tick_seconds)
    registry_url, derive = settings.registry_url, settings.derive_at_decode

    def decode(batches: Any) -> Any:
        return decode_batches(batches, registry_url, packed=True, derive=derive)

    return source.mapInArrow(decode, PACKED_SCHEMA)


def build_stream(spark: Any, settings: ProcessorSettings, source: Any = None, tick_seconds: float = 0.0,
                 fuse_decode: bool = True) -> Any:
    """The processed stream before the sink: deduplicated ``PACKED_SCHEMA`` rows (the writer reads them through
    :func:`stream_processor.decode.full_rows`; `$self` parts are recombined in the store, recombine.py).
    ``source``, ``fuse_decode``: :func:`decoded_stream`."""
    from .dedupe import dedupe_within_window

    decoded = decoded_stream(spark, settings, source, tick_seconds, fuse_decode)
    return dedupe_within_window(decoded, settings.dedupe_window_seconds)


def start_query(spark: Any, settings: ProcessorSettings, writer: Any, available_now: bool = False,
                query_name: str | None = None) -> Any:
    """Start the query with ``writer`` as its ``foreachBatch``; returns the ``StreamingQuery``.

    With ``lineage_kafka`` and a processing-time trigger, an idle query runs an empty micro-batch once per
    :meth:`~stream_processor.settings.ProcessorSettings.tick_interval` (the source's ticks) instead of
    Spark's no-data micro-batch on every trigger: those are turned off for this query.
    """
    from .checkpoint_upgrade import upgrade_checkpoint

    upgrade_checkpoint(spark, settings)   # a checkpoint of the `$self` operator's time (checkpoint_upgrade.py)
    # tick_interval() is 0 for a 0 s trigger; the native source cannot tick
    ticks = settings.tick_interval() if not available_now and source_format(spark, settings) == "lineage_kafka" else 0.0
    stream = build_stream(spark, settings, tick_seconds=ticks)
    spark.conf.set("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    # read when the query starts (the query keeps its own copy of the session's settings)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false" if ticks > 0 else "true")
    ws = (stream.writeStream.foreachBatch(writer)
          .option("checkpointLocation", settings.checkpoint_dir)
          .outputMode("append"))
    if query_name:
        ws = ws.queryName(query_name)
    if available_now:
        ws = ws.trigger(availableNow=True)
    elif settings.trigger_interval_seconds > 0:
        ws = ws.trigger(processingTime=f"{settings.trigger_interval_seconds} seconds")
    return ws.start()
