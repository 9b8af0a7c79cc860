"""``lineage bench [--events N] [--json FILE]``: the end-to-end benchmark (code in benchmarks/e2e_bench.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import env_default

#: The producer library's compression choices and default (producers/settings.py, not imported by the CLI's start-up;
#: tests/test_bench_traffic.py keeps them equal), which the bench's producers use (benchmarks/e2e_bench.py).
COMPRESSION = "lz4"
COMPRESSIONS = ("none", "lz4", "snappy", "gzip", "zstd")

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="measure end-to-end throughput and latency", description=__doc__)
    p.add_argument("--events", type=int, default=int(env_default("--events", 20000)))
    p.add_argument("--rate", type=int, default=2000, help="events/s of the latency phase")
    p.add_argument("--latency-seconds", type=float, default=20.0)
    p.add_argument("--max-batch-events", type=int, default=10000,
                   help="Kafka records per micro-batch of the throughput drain (maxOffsetsPerTrigger; 0: unlimited); "
                        "the default is lineage process's")
    p.add_argument("--traffic", choices=("demo", "real"), default="demo",
                   help="demo: the demo generator; real: the Spark, dbt, Flink and Hive fixtures of "
                        "tests/fixtures/openlineage/integrations replayed with fresh run ids (source checkout)")
    p.add_argument("--compression", choices=COMPRESSIONS, default=COMPRESSION,
                   help="compression.type of the bench's producers (default: the producer library's, %(default)s); "
                        "the embedded broker keeps the batches as sent, in memory")
    p.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"),
                   help="an existing Kafka (default: an embedded broker)")
    p.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                   help="an existing PostgreSQL (default: an embedded one)")
    p.add_argument("--json", dest="json_file", default=None, help="write the figures to this file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks.e2e_bench import BenchConfig, run_bench

    results = run_bench(BenchConfig(events=args.events, rate=args.rate, latency_seconds=args.latency_seconds,
                                    max_batch_events=args.max_batch_events, traffic=args.traffic,
                                    compression=args.compression,
                                    bootstrap=args.bootstrap_servers, postgres_dsn=args.postgres_dsn,
                                    status=lambda line: print(line, file=sys.stderr, flush=True)))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json_file:
        Path(args.json_file).write_text(text + "\n", encoding="utf-8")
    return 0
