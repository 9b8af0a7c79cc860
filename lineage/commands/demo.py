"""``lineage demo``: publish realistic synthetic OpenLineage traffic (see :mod:`producers.demo`)."""

from __future__ import annotations

import argparse
import sys

from lineage.commands.broker import stop_signals
from lineage.commands.common import add_data_dir, env_default, read_endpoints, resolve_endpoint
from schemas.errors import ConfigurationError

__all__ = ["register", "run_demo"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "demo", help="publish realistic synthetic traffic",
        description="Publish synthetic OpenLineage traffic (jobs, runs, parents, column lineage, quality "
                    "facets, Evo $self publishes, ~1%% duplicates and late events) until Ctrl-C or --duration.")
    parser.add_argument("--rate", type=float, default=float(env_default("--rate", 100)),
                        help="messages per second, 0 for as fast as possible (env LINEAGE_RATE, default 100)")
    parser.add_argument("--duration", type=float, default=env_default("--duration"),
                        help="stop after this many seconds (env LINEAGE_DURATION; default: until Ctrl-C)")
    parser.add_argument("--max-messages", type=int, default=env_default("--max-messages"),
                        help="stop after this many messages (env LINEAGE_MAX_MESSAGES)")
    parser.add_argument("--seed", type=int, default=int(env_default("--seed", 0)),
                        help="random seed: the same seed gives the same traffic (env LINEAGE_SEED)")
    parser.add_argument("--encoding", choices=("avro", "confluent", "json"),
                        default=env_default("--encoding", "avro"), help="wire encoding (env LINEAGE_ENCODING)")
    parser.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"),
                        help="Kafka bootstrap servers (env LINEAGE_BOOTSTRAP_SERVERS; default: the running "
                             "`lineage up`)")
    parser.add_argument("--topic", default=env_default("--topic"), help="input topic (env LINEAGE_TOPIC)")
    parser.add_argument("--registry-url", default=env_default("--registry-url"),
                        help="Schema Registry URL for --encoding confluent (env LINEAGE_REGISTRY_URL)")
    parser.add_argument("--metrics-port", type=int, default=env_default("--metrics-port"),
                        help="serve the producer's Prometheus metrics on this port (env LINEAGE_METRICS_PORT)")
    add_data_dir(parser)
    parser.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from producers.demo import DemoStats, publish_demo
    from producers.emitter import LineageEmitter
    from producers.metrics import ProducerMetrics
    from producers.settings import DEFAULT_TOPIC, EmitterSettings

    if args.rate < 0:
        raise ConfigurationError("--rate must be >= 0")
    bootstrap = resolve_endpoint(args.bootstrap_servers, args.data_dir, "kafka_bootstrap", "--bootstrap-servers")
    topic = args.topic or ((read_endpoints(args.data_dir) or {}).get("topics") or {}).get("events") or DEFAULT_TOPIC
    settings = EmitterSettings(bootstrap_servers=bootstrap, topic=topic, encoding=args.encoding,
                               registry_url=args.registry_url)
    metrics = ProducerMetrics()
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(int(args.metrics_port), registry=metrics.registry)
        print(f"lineage demo: metrics on http://127.0.0.1:{args.metrics_port}/metrics", file=sys.stderr)
    interactive = sys.stderr.isatty()

    def progress(stats: DemoStats) -> None:
        rate = stats.messages / stats.seconds if stats.seconds else 0.0
        line = f"lineage demo: {stats.messages} messages, {stats.events} events ({rate:.0f} msg/s)"
        print(("\r" + line) if interactive else line, end="" if interactive else "\n", file=sys.stderr, flush=True)

    with stop_signals() as stop, LineageEmitter(settings, metrics=metrics) as emitter:
        stats = publish_demo(emitter, rate=args.rate, seed=args.seed,
                             duration_seconds=float(args.duration) if args.duration is not None else None,
                             max_messages=int(args.max_messages) if args.max_messages is not None else None,
                             stop=stop, on_progress=progress, progress_every_seconds=1.0 if interactive else 5.0)
    if interactive:
        print(file=sys.stderr)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.kinds.items()))
    print(f"lineage demo: published {stats.messages} messages ({stats.events} events; {kinds}) to {topic} at "
          f"{bootstrap} in {stats.seconds:.1f}s")
    return 0
