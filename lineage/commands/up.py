"""``lineage up``: the whole pipeline on one machine, with a live status line.

Starts, in order: the embedded broker (unless ``--bootstrap-servers``), the embedded PostgreSQL
under ``DIR/postgres`` (unless ``--postgres-dsn``), the processor as a child process
(``python -m lineage process ...``, when that subcommand is installed), the HTTP server (API and web UI,
``python -m lineage serve``, unless ``--no-serve``; its URL is printed and written to endpoints.json as
``http_url``) and, with ``--demo``
(default), synthetic traffic in a thread. Once the servers answer it writes
``DIR/endpoints.json`` (DESIGN.md) so that other commands find them. Ctrl-C / SIGTERM (or
``--duration``) stops everything in reverse order and removes endpoints.json.

With the embedded broker (memory storage, empty at each start), the previous run's processor
checkpoints are moved to ``DIR/checkpoints.stale``: their offsets point into a log that is gone.

One ``lineage up`` per data dir: ``DIR/up.lock`` is held with ``flock`` for the lifetime of the
process (the kernel releases it if the process dies, so a crash leaves no stale lock).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lineage.commands.broker import check_port_free, stop_signals
from lineage.commands.common import ENDPOINTS_FILE, add_data_dir, env_default
from schemas.errors import ConfigurationError, LineageError

__all__ = ["register", "run_up", "data_dir_lock", "scrape_processor_metrics", "LOCK_FILE"]

LOCK_FILE = "up.lock"
TOPIC_KEYS = ("events", "enriched", "graph", "dlq")
#: Processor metrics shown in the status line: label -> Prometheus sample name (summed over labels).
STATUS_METRICS = {
    "in": "lineage_events_consumed_total",
    "rejected": "lineage_events_rejected_total",
    "duplicates": "lineage_duplicates_dropped_total",
    "batches": "lineage_batches_committed_total",
    "lag": "lineage_consumer_lag_records",
}


def _flag_bool(value: Any, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() not in ("0", "false", "no", "off", "")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "up", help="run broker, PostgreSQL, processor and demo traffic with a live status line",
        description="Start the embedded broker and PostgreSQL (unless given), the streaming processor and demo "
                    "traffic; write DIR/endpoints.json when ready; Ctrl-C stops everything.")
    add_data_dir(parser)
    parser.add_argument("--demo", action=argparse.BooleanOptionalAction,
                        default=_flag_bool(env_default("--demo"), True),
                        help="publish synthetic traffic (env LINEAGE_DEMO, default on)")
    parser.add_argument("--processor", action=argparse.BooleanOptionalAction,
                        default=_flag_bool(env_default("--processor"), True),
                        help="run the streaming processor as a child process (env LINEAGE_PROCESSOR, default on; "
                             "--no-processor when it runs elsewhere)")
    parser.add_argument("--demo-rate", type=float, default=float(env_default("--demo-rate", 50)),
                        help="demo messages per second (env LINEAGE_DEMO_RATE, default 50)")
    parser.add_argument("--bootstrap-servers", default=env_default("--bootstrap-servers"),
                        help="use this Kafka instead of the embedded broker (env LINEAGE_BOOTSTRAP_SERVERS)")
    parser.add_argument("--postgres-dsn", default=env_default("--postgres-dsn"),
                        help="use this PostgreSQL instead of the embedded one (env LINEAGE_POSTGRES_DSN)")
    parser.add_argument("--metrics-port", type=int, default=int(env_default("--metrics-port", 0)),
                        help="port of the metrics endpoint, 0 for a free one (env LINEAGE_METRICS_PORT)")
    parser.add_argument("--broker-port", type=int, default=int(env_default("--broker-port", 0)),
                        help="port of the embedded broker, 0 for a free one (env LINEAGE_BROKER_PORT)")
    parser.add_argument("--partitions", type=int, default=int(env_default("--partitions", 3)),
                        help="partitions per topic (env LINEAGE_PARTITIONS, default 3)")
    parser.add_argument("--serve", action=argparse.BooleanOptionalAction,
                        default=_flag_bool(env_default("--serve"), True),
                        help="run the HTTP API and web UI (`lineage serve`) as a child process (env LINEAGE_SERVE, "
                             "default on)")
    parser.add_argument("--http-port", type=int, default=int(env_default("--http-port", 5000)),
                        help="port of the HTTP API and web UI, 0 for a free one (env LINEAGE_HTTP_PORT, default 5000; "
                             "a free one when 5000 is taken)")
    parser.add_argument("--duration", type=float, default=env_default("--duration"),
                        help="stop after this many seconds (env LINEAGE_DURATION; default: until Ctrl-C)")
    parser.set_defaults(func=run_up)


# -- the data-dir lock ----------------------------------------------------------------------------

@contextlib.contextmanager
def data_dir_lock(data_dir: Path) -> Iterator[None]:
    """Hold ``DIR/up.lock`` (flock, with our pid inside); LineageError naming the holder when taken."""
    import fcntl

    path = data_dir / LOCK_FILE
    handle: IO[str] = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole block
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise LineageError(f"another `lineage up` (pid {holder}) is already running on {data_dir}; "
                               "stop it (Ctrl-C) or pass another --data-dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()


# -- processor metrics ---------------------------------------------------------------------------

def scrape_processor_metrics(url: str, timeout_seconds: float = 1.0) -> dict[str, float] | None:
    """The status-line figures from a Prometheus text endpoint, or None when it does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=timeout_seconds) as response:  # noqa: S310 - our own URL
            text = response.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    wanted = {name: label for label, name in STATUS_METRICS.items()}
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    out[wanted[sample.name]] = out.get(wanted[sample.name], 0.0) + float(sample.value)
    except ValueError:
        return None
    return out


# -- the run ---------------------------------------------------------------------------------------

@dataclass
class _Stack:
    """What `lineage up` started, for the status line and the shutdown."""

    data_dir: Path
    bootstrap: str = ""
    postgres_dsn: str = ""
    metrics_url: str = ""
    broker: Any = None
    postgres: Any = None
    processor: subprocess.Popen[bytes] | None = None
    processor_note: str = ""
    server: subprocess.Popen[bytes] | None = None
    http_url: str = ""
    metrics_server: Any = None
    demo_thread: threading.Thread | None = None
    demo_stop: threading.Event = field(default_factory=threading.Event)
    demo_emitter: Any = None
    demo_metrics: Any = None
    demo_error: BaseException | None = None
    topics: dict[str, str] = field(default_factory=dict)


def _topics() -> dict[str, str]:
    from lineage.embedded.broker import DEFAULT_TOPICS

    return dict(zip(TOPIC_KEYS, DEFAULT_TOPICS, strict=True))


def _start_servers(stack: _Stack, args: argparse.Namespace, logs: Path) -> None:
    from lineage.embedded.broker import EmbeddedBroker, create_topics

    stack.topics = _topics()
    if args.bootstrap_servers:
        stack.bootstrap = args.bootstrap_servers
        create_topics(stack.bootstrap, stack.topics.values(), args.partitions)
    else:
        check_port_free("127.0.0.1", args.broker_port)
        stack.broker = EmbeddedBroker(port=args.broker_port, partitions=args.partitions,
                                      log_path=logs / "broker.log").start()
        stack.bootstrap = stack.broker.bootstrap
    _status(f"broker ready at {stack.bootstrap}")
    if args.postgres_dsn:
        stack.postgres_dsn = args.postgres_dsn
    else:
        from lineage.embedded.postgres import EmbeddedPostgres

        stack.postgres = EmbeddedPostgres(stack.data_dir / "postgres").start()
        stack.postgres_dsn = stack.postgres.dsn
    _status(f"PostgreSQL ready at {_redact(stack.postgres_dsn)}")


def _start_processor(stack: _Stack, args: argparse.Namespace, logs: Path) -> None:
    from lineage.embedded.ports import free_port

    check_port_free("127.0.0.1", args.metrics_port)
    port = args.metrics_port or free_port()
    stack.metrics_url = f"http://127.0.0.1:{port}/metrics"
    if not args.processor or importlib.util.find_spec("lineage.commands.process") is None:
        stack.processor_note = ("processor not started (--no-processor)" if not args.processor else
                                "processor not installed (no `lineage process`): broker, PostgreSQL and demo only")
        from prometheus_client import start_http_server

        from producers.metrics import ProducerMetrics

        stack.demo_metrics = ProducerMetrics()
        stack.metrics_server = start_http_server(port, addr="127.0.0.1", registry=stack.demo_metrics.registry)
        return
    checkpoints = stack.data_dir / "checkpoints"
    if stack.broker is not None and checkpoints.exists():
        # The embedded broker keeps topics in memory: offsets checkpointed against an earlier broker
        # point into a log that no longer exists. The sinks are idempotent, so start from the new log.
        stale = stack.data_dir / "checkpoints.stale"
        shutil.rmtree(stale, ignore_errors=True)
        checkpoints.rename(stale)
        _status(f"fresh embedded broker: moved the previous run's checkpoints to {stale}")
    command = [sys.executable, "-m", "lineage", "process", "--bootstrap-servers", stack.bootstrap,
               "--parquet-dir", str(stack.data_dir / "parquet"),
               "--checkpoint-dir", str(checkpoints), "--metrics-port", str(port), "--data-dir", str(stack.data_dir),
               *[arg for key in TOPIC_KEYS for arg in (f"--topic-{key}", stack.topics[key])]]
    # The DSN (which may hold a password) goes through the environment, not argv where `ps` shows it.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "LINEAGE_POSTGRES_DSN": stack.postgres_dsn}
    log = open(logs / "processor.log", "ab")  # noqa: SIM115 - the child keeps writing it
    stack.processor = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True)
    log.close()
    stack.processor_note = f"processor pid {stack.processor.pid} (log {logs / 'processor.log'})"


def _start_server(stack: _Stack, args: argparse.Namespace, logs: Path) -> None:
    """`lineage serve` as a child process; waits (up to 60 s) until /healthz answers."""
    from lineage.embedded.ports import free_port

    if not args.serve or importlib.util.find_spec("lineage.commands.serve") is None:
        return
    port = args.http_port
    if port == 5000 and env_default("--http-port") is None:
        try:
            check_port_free("127.0.0.1", port)
        except ConfigurationError:
            port = 0  # the default port is taken: use a free one rather than fail
    else:
        check_port_free("127.0.0.1", port)
    port = port or free_port()
    command = [sys.executable, "-m", "lineage", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--bootstrap-servers", stack.bootstrap, "--topic-events", stack.topics["events"],
               "--topic-dlq", stack.topics["dlq"], "--data-dir", str(stack.data_dir)]
    env = {**os.environ, "LINEAGE_POSTGRES_DSN": stack.postgres_dsn}  # not in argv, where `ps` shows it
    log = open(logs / "server.log", "ab")  # noqa: SIM115 - the child keeps writing it
    stack.server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and stack.server.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/openapi.json", timeout=1.0):  # noqa: S310 - our own URL
                stack.http_url = url
                break
        except OSError:
            time.sleep(0.3)
    if stack.http_url:
        _status(f"HTTP API and web UI at {url} (docs {url}/docs; log {logs / 'server.log'})")
    else:
        _status(f"the HTTP server did not answer at {url}; see {logs / 'server.log'}")


def _stop_server(proc: subprocess.Popen[bytes], grace_seconds: float = 20.0) -> list[str]:
    """SIGTERM (uvicorn finishes running requests and flushes the producer), SIGKILL after the grace period."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            return [f"HTTP server did not stop within {grace_seconds:.0f}s: killed"]
    return []


def _start_demo(stack: _Stack, args: argparse.Namespace) -> None:
    from lineage.embedded.broker import DEMO_BURST_SECONDS, DEMO_LINGER_MS
    from producers.demo import publish_demo
    from producers.emitter import LineageEmitter
    from producers.settings import EmitterSettings

    settings = EmitterSettings(bootstrap_servers=stack.bootstrap, topic=stack.topics["events"],
                               linger_ms=DEMO_LINGER_MS)   # fewer record batches in the embedded broker
    stack.demo_emitter = LineageEmitter(settings, metrics=stack.demo_metrics)

    def run() -> None:
        try:
            publish_demo(stack.demo_emitter, rate=args.demo_rate, stop=stack.demo_stop, seed=0,
                         burst_seconds=DEMO_BURST_SECONDS)   # ~8x fewer record batches (broker.py)
        except BaseException as exc:  # noqa: BLE001 - reported on the status line and at exit
            stack.demo_error = exc

    stack.demo_thread = threading.Thread(target=run, name="lineage-demo", daemon=True)
    stack.demo_thread.start()


def _write_endpoints(stack: _Stack) -> Path:
    endpoints: dict[str, Any] = {
        "kafka_bootstrap": stack.bootstrap,
        "postgres_dsn": stack.postgres_dsn,
        "metrics_url": stack.metrics_url,
        "parquet_dir": str(stack.data_dir / "parquet"),
        "topics": stack.topics,
        "pids": {"broker": stack.broker.pid if stack.broker else None,
                 "processor": stack.processor.pid if stack.processor else None,
                 "server": stack.server.pid if stack.server else None},
    }
    if stack.http_url:
        endpoints["http_url"] = stack.http_url
    path = stack.data_dir / ENDPOINTS_FILE
    tmp = path.with_suffix(".json.tmp")
    # Readable by its owner only: the DSN in it may hold a password (other commands need it to connect).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(endpoints, indent=2) + "\n")
    tmp.replace(path)
    return path


def _redact(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    from stream_processor.retry import redact

    return redact(dsn)


def _status(text: str) -> None:
    print(f"lineage up: {text}", file=sys.stderr, flush=True)


def _status_line(stack: _Stack, started: float) -> str:
    published = stack.demo_emitter.delivered if stack.demo_emitter else 0
    parts = [f"{time.monotonic() - started:5.0f}s", f"published {published}"]
    if stack.demo_error:
        parts.append(f"demo stopped: {stack.demo_error}")
    if stack.processor is not None:
        figures = scrape_processor_metrics(stack.metrics_url, 0.5)
        if figures is None:
            parts.append("processor: starting (metrics not answering yet)")
        else:
            parts.append("processor: " + ", ".join(f"{k} {figures.get(k, 0):.0f}" for k in STATUS_METRICS))
    else:
        parts.append(stack.processor_note)
    return " | ".join(parts)


def _stop_processor(proc: subprocess.Popen[bytes], grace_seconds: float = 30.0) -> list[str]:
    """SIGTERM the processor alone (it stops its query and Spark), then clean up its process group
    (the Spark JVM): SIGTERM, and SIGKILL for whatever is still there after a grace period."""
    problems = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_seconds)
        except subprocess.TimeoutExpired:
            problems.append(f"processor did not stop within {grace_seconds:.0f}s: killed")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(2.0 if sig == signal.SIGTERM else 0)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
    return problems


def _stop(stack: _Stack) -> list[str]:
    """Stop in reverse order; returns problems met (never raises)."""
    problems: list[str] = []
    stack.demo_stop.set()
    if stack.demo_thread is not None:
        stack.demo_thread.join(30)
    if stack.demo_emitter is not None:
        try:
            stack.demo_emitter.close(10)
        except LineageError as exc:
            problems.append(f"demo: {exc}")
    if stack.server is not None:
        problems.extend(_stop_server(stack.server))
    if stack.processor is not None:
        problems.extend(_stop_processor(stack.processor))
    if stack.metrics_server is not None:
        server, _thread = stack.metrics_server
        server.shutdown()
        server.server_close()
    for name, server in (("PostgreSQL", stack.postgres), ("broker", stack.broker)):
        if server is not None:
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the rest
                problems.append(f"{name}: {exc}")
    with contextlib.suppress(FileNotFoundError):
        (stack.data_dir / ENDPOINTS_FILE).unlink()
    return problems


def run_up(args: argparse.Namespace) -> int:
    if args.partitions < 1:
        raise ConfigurationError("--partitions must be at least 1")
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    logs = data_dir / "logs"
    logs.mkdir(exist_ok=True)
    duration = float(args.duration) if args.duration is not None else None
    interactive = sys.stderr.isatty()
    with data_dir_lock(data_dir), stop_signals() as stop:
        stack = _Stack(data_dir)
        code = 0
        try:
            _start_servers(stack, args, logs)
            _start_processor(stack, args, logs)
            _start_server(stack, args, logs)
            if args.demo:
                _start_demo(stack, args)
            path = _write_endpoints(stack)
            web = f"open {stack.http_url}; " if stack.http_url else ""
            _status(f"ready: {web}endpoints in {path}; {stack.processor_note}; Ctrl-C to stop")
            started = last = time.monotonic()
            while not stop.wait(0.5):
                now = time.monotonic()
                if duration is not None and now - started >= duration:
                    break
                if stack.processor is not None and stack.processor.poll() is not None:
                    _status(f"the processor exited with code {stack.processor.returncode}; "
                            f"see {logs / 'processor.log'}")
                    code = 1
                    break
                if stack.server is not None and stack.server.poll() is not None:
                    _status(f"the HTTP server exited with code {stack.server.returncode}; see {logs / 'server.log'}")
                    code = 1
                    break
                if stack.broker is not None and not stack.broker.is_running():
                    _status(f"the broker exited unexpectedly; see {logs / 'broker.log'}")
                    code = 1
                    break
                if now - last >= (1.0 if interactive else 10.0):
                    line = _status_line(stack, started)
                    print(f"\rlineage up: {line}\033[K" if interactive else f"lineage up: {line}",
                          end="" if interactive else "\n", file=sys.stderr, flush=True)
                    last = now
        finally:
            if interactive:
                print(file=sys.stderr)
            _status("stopping")
            problems = _stop(stack)
        for problem in problems:
            _status(problem)
        if stack.demo_error is not None and code == 0:
            _status(f"demo traffic failed: {stack.demo_error}")
            code = 1
        _status("stopped")
        return code
