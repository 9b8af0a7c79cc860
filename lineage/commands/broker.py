"""``lineage broker``: the embedded Kafka-protocol broker alone, in the foreground, topics created.

Stops cleanly on Ctrl-C or SIGTERM (the broker child gets SIGTERM, then SIGKILL after a grace
period). Memory storage only: the topics' content does not survive a stop.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lineage.commands.common import env_default
from schemas.errors import ConfigurationError, LineageError

__all__ = ["register", "run_broker", "stop_signals", "check_port_free"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "broker", help="run the embedded Kafka broker in the foreground",
        description="Run the embedded Kafka-protocol broker (tansu, memory storage) with the pipeline's "
                    "topics created; Ctrl-C or SIGTERM stops it.")
    parser.add_argument("--port", type=int, default=int(env_default("--port", 9092)),
                        help="TCP port, 0 for a free one (env LINEAGE_PORT, default 9092)")
    parser.add_argument("--host", default=env_default("--host", "127.0.0.1"),
                        help="address to listen on (env LINEAGE_HOST, default 127.0.0.1)")
    parser.add_argument("--partitions", type=int, default=int(env_default("--partitions", 3)),
                        help="partitions per topic (env LINEAGE_PARTITIONS, default 3)")
    parser.add_argument("--log-file", default=env_default("--log-file"),
                        help="keep the broker's own log in this file (env LINEAGE_LOG_FILE)")
    parser.set_defaults(func=run_broker)


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An Event set by SIGINT / SIGTERM while the block runs (previous handlers restored after)."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_port_free(host: str, port: int) -> None:
    """ConfigurationError when something already listens on host:port (0 is always fine)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigurationError(f"{host}:{port} is in use ({exc.strerror}): pass another --port "
                                     "(0 picks a free one)") from exc


def run_broker(args: argparse.Namespace) -> int:
    from lineage.embedded.broker import DEFAULT_TOPICS, EmbeddedBroker

    if args.partitions < 1:
        raise ConfigurationError("--partitions must be at least 1")
    check_port_free(args.host, args.port)
    broker = EmbeddedBroker(port=args.port, host=args.host, partitions=args.partitions,
                            log_path=Path(args.log_file) if args.log_file else None)
    with stop_signals() as stop:
        broker.start()
        try:
            print(f"lineage broker: listening on {broker.bootstrap} (pid {broker.pid}); topics "
                  f"{', '.join(DEFAULT_TOPICS)} with {args.partitions} partition(s); Ctrl-C to stop", flush=True)
            while not stop.wait(0.5):
                if not broker.is_running():
                    raise LineageError(f"the broker process exited unexpectedly "
                                       f"(log: {args.log_file or 'pass --log-file to keep it'})")
        finally:
            broker.stop()
    print("lineage broker: stopped", file=sys.stderr, flush=True)
    return 0
