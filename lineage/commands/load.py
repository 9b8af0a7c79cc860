"""``lineage load FILE|DIR...``: batch-ingest OpenLineage JSON / JSONL files into the graph.

Accepted files: JSON Lines (one event per line, as the OpenLineage client's file transport writes),
a JSON array of events, a single (possibly pretty-printed) event, or an Evo lineage document
(``{"events": [...], "self_link": ...}``; its ``$self`` outputs stand for the object version named by
a ``"subject": {"namespace", "name"}`` key next to ``events``). Directories are walked for ``*.json``,
``*.jsonl`` and ``*.ndjson``.

The files run through the stream processor's own pipeline in batch mode
(:mod:`stream_processor.batch`): the stream's decoder and validator, the event-hash dedupe (within the
run, and durably in ``lineage_events``), the `$self` recombination and the stream's batch writer.
``--engine spark`` (the default, env ``LINEAGE_ENGINE``) runs it on a SparkSession; ``--engine local``
runs the same functions in this process without a JVM (seconds faster to start, for a small file);
both give the same graph.

A line that fails is reported on stderr as ``path:line: reason`` before anything is written, and the
good lines are still loaded; the exit code is then 1 (2 for bad usage). Batch ids of ``lineage load``
are negative and derived from the content (:func:`stream_processor.batch.load_batch_id`), so loading
the same files twice is a no-op and never collides with the stream processor's micro-batch ids (>= 0) in
``lineage_transactions``. Beside a running ``lineage up`` (``--data-dir`` of it), the load writes the same
PostgreSQL graph and the same Parquet store while the stream writes: Parquet rows are ordered by the commit
sequence number of their batch (migration 008, :mod:`sink.parquet`), not by batch id.
Rejected lines are not published to the dead-letter topic; the enriched and graph topics are published
(Spark engine) only when Kafka bootstrap servers are configured.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from schemas.errors import ConfigurationError

from .common import add_data_dir, env_default, read_endpoints, resolve_endpoint

__all__ = ["register", "run", "build_settings", "ENGINES"]

ENGINES = ("spark", "local")


def build_settings(args: argparse.Namespace, dsn: str) -> Any:
    """The :class:`~stream_processor.settings.ProcessorSettings` of the batch writer: topics off without a broker."""
    from stream_processor.settings import ProcessorSettings

    endpoints = read_endpoints(args.data_dir) or {}
    bootstrap = args.bootstrap_servers or endpoints.get("kafka_bootstrap")
    values: dict[str, Any] = {"postgres_dsn": dsn, "parquet_dir": args.parquet_dir or endpoints.get("parquet_dir")}
    if bootstrap:
        values["bootstrap_servers"] = bootstrap
        topics = endpoints.get("topics") or {}
        values.update({f"topic_{k}": topics[k] for k in ("enriched", "graph", "dlq") if topics.get(k)})
    else:
        values.update(publish_enriched=False, publish_graph=False)
    if "LINEAGE_POSTGRES_RETRY_MAX_SECONDS" not in os.environ:
        values["postgres_retry_max_seconds"] = 30.0  # a command, not a service: fail soon when PostgreSQL is away
    return ProcessorSettings(**values)


def _spark_session(settings: Any) -> tuple[Any, bool]:
    """``(session, owned)``: the active SparkSession (in-process callers, tests), else a new one we stop."""
    from pyspark.sql import SparkSession

    from stream_processor.session import build_spark_session

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    return build_spark_session(app_name="lineage-load", master=settings.spark_master,
                               shuffle_partitions=settings.shuffle_partitions), True


def run(args: argparse.Namespace) -> int:
    from stream_processor.batch import read_sources, run_local, run_spark

    if args.batch_size < 1:
        raise ConfigurationError(f"--batch-size must be at least 1, not {args.batch_size}")
    if args.engine not in ENGINES:
        raise ConfigurationError(f"--engine must be one of {', '.join(ENGINES)}, not {args.engine!r}")
    dsn = resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn")
    settings = build_settings(args, dsn)
    source = read_sources(args.paths)

    printed = 0

    def report(rejections: list[Any]) -> None:  # decode rejections before the writer runs, the rest after
        nonlocal printed
        for rejection in rejections[printed:]:
            print(rejection, file=sys.stderr)
        printed = len(rejections)
        sys.stderr.flush()

    if args.engine == "local":
        outcome = run_local(source, dsn, args.batch_size, settings.parquet_dir, on_rejected=report)
    else:
        spark, owned = _spark_session(settings)
        try:
            outcome = run_spark(spark, source, settings, args.batch_size, on_rejected=report)
        finally:
            if owned:
                spark.stop()
    report(outcome.rejected)
    recombined = (f", {outcome.self_parts} $self part(s) recombined into {outcome.recombined} event(s)"
                  if outcome.self_parts else "")
    # a standard facet that broke its schema was dropped from an event that was stored: reported, not a failure
    dropped = sum(r.code == "validation.facet" for r in outcome.rejected)
    facets = f", {dropped} invalid facet(s) dropped" if dropped else ""
    print(f"loaded {len(source.files)} file(s), {outcome.lines} line(s): {outcome.events} event(s), "
          f"{outcome.events_new} new, {outcome.duplicates} duplicate(s), {len(outcome.rejected) - dropped} rejected"
          f"{facets}, {outcome.batches} batch(es){recombined} [{args.engine}]")
    return 1 if len(outcome.rejected) > dropped else 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "load", help="batch-ingest OpenLineage JSON / JSONL files into the graph",
        description="Ingest OpenLineage JSON / JSONL files (the OpenLineage file transport's output, JSON "
                    "arrays, single events, Evo lineage documents) through the stream's pipeline in batch mode.")
    parser.add_argument("paths", nargs="+", metavar="FILE|DIR")
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                        help="graph database DSN (env LINEAGE_POSTGRES_DSN; default: the running `lineage up`)")
    parser.add_argument("--batch-size", type=int, default=int(env_default("--batch-size", 5000)),
                        help="events per transaction (env LINEAGE_BATCH_SIZE, default 5000)")
    parser.add_argument("--engine", choices=ENGINES, default=env_default("--engine", "spark"),
                        help="spark: the stream's pipeline on a SparkSession (default); local: the same "
                             "functions without a JVM, faster to start for small files (env LINEAGE_ENGINE)")
    parser.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"),
                        help="Kafka, to publish the enriched and graph topics (spark engine; env "
                             "LINEAGE_BOOTSTRAP_SERVERS; default: the running `lineage up`'s; none: not published)")
    parser.add_argument("--parquet-dir", default=env_default("--parquet-dir"),
                        help="Parquet graph directory to update (env LINEAGE_PARQUET_DIR; default: the running "
                             "`lineage up`'s; none: PostgreSQL only)")
    add_data_dir(parser)
    parser.set_defaults(func=run)
