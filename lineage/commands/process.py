"""``lineage process``: the Spark Structured Streaming job against given endpoints.

Every flag also reads ``LINEAGE_<FLAG>``; endpoints default to those a running ``lineage up``
wrote into ``--data-dir``. ``--available-now`` drains the input topics and exits (backfills).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .common import add_data_dir, env_default, read_endpoints, resolve_endpoint

__all__ = ["register", "run", "build_settings"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("process", help="run the streaming processor (Kafka -> lineage graph)",
                              description=__doc__)
    e = env_default
    p.add_argument("--bootstrap-servers", default=e("--bootstrap-servers"), help="Kafka bootstrap servers")
    p.add_argument("--postgres-dsn", default=e("--postgres-dsn"), help="PostgreSQL DSN of the graph")
    p.add_argument("--parquet-dir", default=e("--parquet-dir"), help="Parquet graph directory")
    p.add_argument("--checkpoint-dir", default=e("--checkpoint-dir"), help="Spark checkpoint directory")
    p.add_argument("--metrics-port", type=int, default=e("--metrics-port"),
                   help="Prometheus port (0: a free one, printed)")
    p.add_argument("--available-now", action="store_true",
                   default=str(e("--available-now", "")).lower() in ("1", "true", "yes"),
                   help="drain what the topics hold now, then exit")
    p.add_argument("--trigger-interval-seconds", type=float, default=e("--trigger-interval-seconds", 1.0))
    p.add_argument("--topic-events", default=e("--topic-events"))
    p.add_argument("--topic-enriched", default=e("--topic-enriched"))
    p.add_argument("--topic-graph", default=e("--topic-graph"))
    p.add_argument("--topic-dlq", default=e("--topic-dlq"))
    p.add_argument("--registry-url", default=e("--registry-url"))
    p.add_argument("--max-offsets-per-trigger", type=int, default=e("--max-offsets-per-trigger"),
                   # the number is stream_processor.settings.DEFAULT_MAX_OFFSETS_PER_TRIGGER (not imported here:
                   # pydantic would add ~0.1 s to every command's start; tests/test_pipeline_cli.py compares them)
                   help="Kafka records per micro-batch at most (default 10,000; 0: no cap, a backlog is then "
                        "read in one batch)")
    p.add_argument("--starting-offsets", default=e("--starting-offsets", "earliest"))
    p.add_argument("--recombine-quiet-seconds", type=float, default=e("--recombine-quiet-seconds", 10.0))
    p.add_argument("--dedupe-window-seconds", type=int, default=e("--dedupe-window-seconds", 3600))
    p.add_argument("--master", default=e("--master"),
                   help="Spark master URL: local[N] (default local[2]), spark://HOST:PORT for a standalone "
                        "cluster (also LINEAGE_SPARK_MASTER)")
    p.add_argument("--tick-seconds", type=float, default=e("--tick-seconds"),
                   help="an idle query's empty micro-batch, in which `$self` groups time out, every this many "
                        "seconds (default: half the quiet period, at least the trigger; 0: every trigger)")
    add_data_dir(p)
    p.set_defaults(func=run)


def build_settings(args: argparse.Namespace) -> Any:
    """:class:`~stream_processor.settings.ProcessorSettings` from flags, env and ``endpoints.json``."""
    from stream_processor.settings import ProcessorSettings

    endpoints = read_endpoints(args.data_dir) or {}
    topics = endpoints.get("topics") or {}
    values: dict[str, Any] = {
        "bootstrap_servers": resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap",
                                              "--bootstrap-servers"),
        "postgres_dsn": resolve_endpoint(args.postgres_dsn, args.data_dir, "postgres_dsn", "--postgres-dsn"),
        "parquet_dir": args.parquet_dir or endpoints.get("parquet_dir"),
        "checkpoint_dir": args.checkpoint_dir or f"{args.data_dir}/checkpoints",
        "trigger_interval_seconds": float(args.trigger_interval_seconds),
        "registry_url": args.registry_url,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "metrics_port": args.metrics_port,
        "starting_offsets": args.starting_offsets,
        "recombine_quiet_seconds": float(args.recombine_quiet_seconds),
        "dedupe_window_seconds": int(args.dedupe_window_seconds),
        "tick_seconds": float(args.tick_seconds) if args.tick_seconds is not None else None,
        "spark_master": args.master,
    }
    for name in ("events", "enriched", "graph", "dlq"):
        value = getattr(args, f"topic_{name}") or topics.get(name)
        if value:
            values[f"topic_{name}"] = value
    return ProcessorSettings(**{k: v for k, v in values.items() if v is not None})


def run(args: argparse.Namespace) -> int:
    from stream_processor.runner import run_processor

    settings = build_settings(args)
    started = time.monotonic()

    def status(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {line}", file=sys.stderr, flush=True)

    mode = "draining" if args.available_now else "streaming"
    status(f"{mode} {settings.topic_events} from {settings.bootstrap_servers} into the graph "
           f"(checkpoint {settings.checkpoint_dir})")
    run_processor(settings, available_now=args.available_now, status=status)
    return 0
