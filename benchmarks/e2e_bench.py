"""End-to-end benchmark: Kafka -> Spark Structured Streaming processor -> PostgreSQL + Parquet.

Measured in one run, on the same machine and servers (embedded broker and PostgreSQL unless
given), and printed / written as JSON with the keys of DESIGN.md:

- ``e2e_events_per_s``: N demo events drained by the real query, divided by the time from the
  query's start to the last batch commit (includes Spark planning and JVM warm-up of the query).
- ``e2e_sustained_events_per_s``: the same drain, in micro-batches of at most ``max_batch_events`` Kafka
  records, counting only the batches after the first: events of batches 2..n divided by the time from the
  first batch's commit to the last one's. The first batch pays for the cold JVM and Python workers (JIT,
  imports, code generation: seconds, once per process); this is the rate a running processor keeps up.
- ``latency_p50_s`` / ``p95`` / ``p99``: Kafka record timestamp (produce time) -> commit of its batch,
  while a producer sends at a steady ``--rate`` (default 2,000 events/s) for ``--latency-seconds``.
- ``kafka_consume_events_per_s``: a plain confluent-kafka consume of the same topic;
  ``pg_copy_rows_per_s``: raw ``COPY`` of the same events into a jsonb table;
  ``naive_events_per_s``: a consumer inserting each event in its own transaction (a sample).
- ``latency_parts_s``: where a latency-phase record's time goes, medians over that phase's batches (and the
  batch at the 95th percentile of ``oldest``): ``waited`` from its oldest record's produce time to the batch's
  start (the trigger, the batch before it), ``stage`` (Spark's staging job), ``queue`` (from the hand-over to the
  finisher until it takes the batch: the batch before it still finishing, the mark), ``recombine`` (waiting for
  the `$self` step), ``merge``; ``oldest`` = their sum = that record's latency; ``events`` per batch.
- ``peak_rss_bytes``: peak resident memory of this process and its children (JVM, Python workers, and the
  embedded broker and PostgreSQL when the bench starts them: the broker keeps every record of the run in memory).
- ``compression``: the ``compression.type`` the bench's producers sent with (``--compression``; the producer
  library's default, lz4, unless told otherwise).
- ``drain_batches``: the throughput drain's micro-batches one by one (:func:`drain_batches`): events consumed,
  staged rows, recombined `$self` events, when each started and merged (seconds from the first batch's merge
  commit, the sustained window's start; the first batch's are negative) and its step timings; whether a batch
  counts in ``e2e_sustained_events_per_s`` (it staged or rejected something). What the sustained window holds
  (a last batch of a few records, a merge waiting behind its predecessor's finishing) shows here.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, get_args

from producers.settings import Compression, EmitterSettings

__all__ = ["run_bench", "BenchConfig", "latency_parts", "drain_batches", "COMPRESSION", "COMPRESSIONS"]

#: ``compression.type`` of the bench's producers: the producer library's default (producers/settings.py, chosen
#: there by measurement), so the bench sends what a producer of this project sends. The embedded broker keeps the
#: record batches as they arrive, in memory: 40,000 demo events held 171 MB of its RSS uncompressed and 37 MB as
#: lz4 (docs/PERFORMANCE.md, session 35). ``--compression none`` sends them as before.
COMPRESSION: str = EmitterSettings.model_fields["compression_type"].default
COMPRESSIONS: tuple[str, ...] = get_args(Compression)


class BenchConfig:
    def __init__(self, events: int = 20_000, rate: int = 2_000, latency_seconds: float = 20.0,
                 bootstrap: str | None = None, postgres_dsn: str | None = None, work_dir: str | None = None,
                 naive_sample: int = 2_000, status: Any = print, max_batch_events: int = 10_000,
                 traffic: str = "demo", compression: str = COMPRESSION) -> None:
        if traffic not in TRAFFIC:
            raise ValueError(f"traffic must be one of {sorted(TRAFFIC)}, not {traffic!r}")
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {list(COMPRESSIONS)}, not {compression!r}")
        self.compression = compression
        self.events, self.rate, self.latency_seconds = events, rate, latency_seconds
        self.traffic = traffic
        self.max_batch_events = max_batch_events
        self.bootstrap, self.postgres_dsn, self.work_dir = bootstrap, postgres_dsn, work_dir
        self.naive_sample, self.status = naive_sample, status


def _tree_rss(pid: int) -> int:
    """RSS of ``pid`` and all its descendants, from /proc (Linux)."""
    from .rss_by_process import _rss, tree_pids

    return sum(_rss(p) or 0 for p in tree_pids(pid))


class _RssSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        # every 2 s: the sampler runs in the driver's process, beside the query's foreachBatch; at 0.5 s,
        # reading /proc for every process took ~4 % of a core (py-spy)
        while not self.stop.wait(2.0):
            self.peak = max(self.peak, _tree_rss(os.getpid()))


def _demo_values(n: int) -> Iterator[tuple[bytes, list[tuple[str, bytes]] | None]]:
    """The first ``n`` demo messages (seed 7), encoded as the bench sends them, one at a time.

    A generator, so the bench's own process does not grow with ``--events``: built as a list, the messages
    peaked at ~15 kB of Python objects per event (~3 GB at 200,000 events) in the process whose tree
    ``peak_rss_bytes`` measures. Every call yields the same messages.
    """
    from schemas.codec import encode_single_object

    try:
        from producers.demo import DemoTraffic
    except ImportError:  # fallback generator
        from stream_processor.testing import run_event

        for i in range(n):
            yield encode_single_object(run_event(job=f"job{i % 50}", inputs=[f"in{i % 500}"],
                                                 outputs=[f"out{i}"])), None
        return
    for m in itertools.islice(DemoTraffic(seed=7).messages(), n):
        if m.subject:
            yield json.dumps(m.value).encode(), [("lineage.subject", json.dumps(m.subject).encode())]
        else:
            yield encode_single_object(m.value), None


#: Producers of the real-producer corpus the ``real`` traffic replays (the issue names these four).
REAL_PRODUCERS = ("spark", "dbt", "flink", "hive")


def _fresh_run_ids(value: Any, cycle: int) -> Any:
    """``value`` with every ``runId`` string replaced by a UUID derived from it and ``cycle`` (the same old id
    gives the same new one within a cycle, so a run's START and COMPLETE and its parent facets still agree)."""
    if isinstance(value, dict):
        return {key: str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/{cycle}/{item}"))
                if key == "runId" and isinstance(item, str) else _fresh_run_ids(item, cycle)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_fresh_run_ids(item, cycle) for item in value]
    return value


def _real_values(n: int) -> Iterator[tuple[bytes, list[tuple[str, bytes]] | None]]:
    """``n`` events of the real-producer corpus (tests/fixtures/openlineage/integrations: Spark, dbt, Flink,
    Hive; its templates filled as tests/test_real_producers.py fills them), replayed in cycles with fresh run
    ids, Avro single-object encoded. Needs the source checkout (the corpus and its loader are test files)."""
    from schemas.codec import encode_single_object
    from tests.test_real_producers import VALID_EVENTS

    corpus = [e.event for e in VALID_EVENTS if e.producer in REAL_PRODUCERS]
    for i in range(n):
        cycle, index = divmod(i, len(corpus))
        yield encode_single_object(_fresh_run_ids(corpus[index], cycle)), None


def _values(traffic: str, n: int) -> Iterator[tuple[bytes, list[tuple[str, bytes]] | None]]:
    return TRAFFIC[traffic](n)


TRAFFIC = {"demo": _demo_values, "real": _real_values}


def _produce(bootstrap: str, topic: str, values: Iterable[Any], rate: float | None = None,
             compression: str = COMPRESSION) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": compression})
    started = time.monotonic()
    for i, (value, headers) in enumerate(values):
        if rate:
            ahead = i / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        while True:
            try:
                producer.produce(topic, value=value, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)


def spool(values: Iterable[tuple[bytes, list[tuple[str, bytes]] | None]], path: Path) -> int:
    """Write ``values`` (messages as :func:`_values` yields them) to ``path``; returns how many. The latency phase
    encodes its messages before it sends them (encoding costs ~0.65 CPU-ms per demo event, more than the sending
    loop can spare at its rate) and keeps them in a file, not in a list: at 2,000 events/s for 20 s the list held
    ~180 MB of the bench's own process, whose tree the bench's peak RSS measures."""
    count = 0
    with open(path, "wb") as f:
        pickler = pickle.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
        for item in values:
            pickler.dump(item)
            pickler.clear_memo()
            count += 1
    return count


def unspool(path: Path) -> Iterator[tuple[bytes, list[tuple[str, bytes]] | None]]:
    """The messages :func:`spool` wrote to ``path``, in order, one at a time."""
    with open(path, "rb") as f:
        unpickler = pickle.Unpickler(f)
        while True:
            try:
                yield unpickler.load()
            except EOFError:
                return


def _kafka_consume_rate(bootstrap: str, topic: str, n: int) -> float:
    from stream_processor.kafka_source import HighWatermarkProbe, KafkaRange, read_range

    probe = HighWatermarkProbe({"bootstrap.servers": bootstrap})
    ends = probe.ends(probe.partitions([topic], None), {})
    probe.close()
    started = time.monotonic()
    count = 0
    conf = json.dumps({"bootstrap.servers": bootstrap})
    for (t, p), end in ends.items():
        for batch in read_range(KafkaRange(t, p, 0, end, conf, 30_000)):
            count += batch.num_rows
    return count / (time.monotonic() - started)


def _pg_copy_rate(dsn: str, values: Iterable[Any], chunk: int = 5_000) -> float:
    """Rows/s of ``COPY`` of the events (decoded JSON) into a jsonb table; the decoding, done per chunk of
    ``chunk`` events so that the events are never all in memory, is not timed."""
    import psycopg

    from schemas.codec import decode_message

    rows = 0
    timed = 0.0
    it = iter(values)
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE bench_copy (payload jsonb)")
        with conn.cursor().copy("COPY bench_copy (payload) FROM STDIN") as cp:
            while docs := [json.dumps(decode_message(v, h)[0].document) for v, h in itertools.islice(it, chunk)]:
                started = time.monotonic()
                for d in docs:
                    cp.write_row((d,))
                timed += time.monotonic() - started
                rows += len(docs)
            started = time.monotonic()
        conn.commit()
        timed += time.monotonic() - started
        return rows / max(timed, 1e-9)


def _naive_rate(dsn: str, bootstrap: str, topic: str, sample: int) -> float:
    """A plain consumer: decode, validate and INSERT each event in its own transaction."""
    import psycopg
    from confluent_kafka import Consumer, TopicPartition

    from schemas.codec import decode_message
    from schemas.identity import canonical_json, event_hash
    from schemas.validate import validate_message

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-naive", "log_level": 3})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    done = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_naive (event_hash text PRIMARY KEY, payload jsonb)")
        started = time.monotonic()
        while done < sample and time.monotonic() - started < 120:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            try:
                for m in decode_message(msg.value(), msg.headers()):
                    ev = validate_message(m)
                    with conn.transaction():
                        conn.execute("INSERT INTO bench_naive VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                     (event_hash(ev), canonical_json(ev)))
            except ValueError:
                pass
            done += 1
        elapsed = time.monotonic() - started
    consumer.close()
    return done / elapsed


def _percentile(samples: list[tuple[float, int]], q: float) -> float | None:
    total = sum(n for _, n in samples)
    if not total:
        return None
    seen = 0
    for value, n in sorted(samples):
        seen += n
        if seen >= q * total:
            return round(value, 3)
    return round(max(v for v, _ in samples), 3)


def latency_parts(reports: Iterable[Any]) -> dict[str, Any]:
    """``latency_parts_s`` (module doc) of the batches ``reports`` (``BatchReport``) that carried records."""
    from stream_processor.writer import LATENCY_BUCKET_MS

    parts = []
    for r in reports:
        buckets = [int(a) for (m, a, _b) in r.counts if m == "ts_bucket"]
        if not buckets or not r.started_at:
            continue
        produced = (min(buckets) + LATENCY_BUCKET_MS / 2) / 1000   # the oldest record's bucket midpoint
        steps = {k: r.timings.get(k, 0.0) for k in ("stage", "recombine", "merge")}
        parts.append({"events": r.total("consumed"), "waited": r.started_at - produced, **steps,
                      "queue": r.committed_at - r.started_at - sum(steps.values()),
                      "oldest": r.committed_at - produced})
    if not parts:
        return {}

    def median(key: str) -> float:
        values = sorted(p[key] for p in parts)
        return round(values[len(values) // 2], 3)

    by_oldest = sorted(parts, key=lambda p: p["oldest"])
    p95 = by_oldest[min(int(0.95 * len(by_oldest)), len(by_oldest) - 1)]
    keys = ("events", "waited", "stage", "queue", "recombine", "merge", "oldest")
    return {"batches": len(parts), "median": {k: median(k) for k in keys},
            "p95_batch": {k: round(p95[k], 3) for k in keys}}


def _counted(report: Any) -> bool:
    """Whether a drain batch counts in the throughput figures: it staged or rejected something."""
    return bool(report.total("staged") or report.total("rejected"))


def drain_batches(reports: Iterable[Any]) -> list[dict[str, Any]]:
    """``drain_batches`` (module doc) of the drain's ``reports`` (``BatchReport``), in the order they were reported."""
    reports = list(reports)
    origin = next((r.committed_at for r in reports if _counted(r)), 0.0)
    return [{"batch_id": r.batch_id, "consumed": r.total("consumed"), "staged": r.total("staged"),
             "recombined": r.total("recombined"), "counted": _counted(r),
             "started_s": round(r.started_at - origin, 3), "merged_s": round(r.committed_at - origin, 3),
             "timings_s": {k: round(v, 3) for k, v in r.timings.items()}} for r in reports]


def run_bench(cfg: BenchConfig) -> dict[str, Any]:
    from lineage.embedded.broker import EmbeddedBroker, create_topics
    from stream_processor.runner import run_processor
    from stream_processor.settings import ProcessorSettings

    say = cfg.status
    work = Path(cfg.work_dir or tempfile.mkdtemp(prefix="lineage-bench-"))
    sampler = _RssSampler()
    sampler.start()
    broker = pg = None
    try:
        bootstrap = cfg.bootstrap
        if not bootstrap:
            broker = EmbeddedBroker(partitions=3, topics=(), log_path=work / "tansu.log").start()
            bootstrap = broker.bootstrap
        dsn = cfg.postgres_dsn
        if not dsn:
            from lineage.embedded.postgres import EmbeddedPostgres

            pg = EmbeddedPostgres(work / "pg").start()
            dsn = pg.create_database(f"bench_{uuid.uuid4().hex[:8]}")
        suffix = uuid.uuid4().hex[:6]
        topics = {k: f"bench{suffix}.{k}" for k in ("events", "enriched", "graph", "dlq", "latency")}
        create_topics(bootstrap, topics.values(), partitions=3)
        say(f"producing {cfg.events} demo events")
        _produce(bootstrap, topics["events"], _values(cfg.traffic, cfg.events), compression=cfg.compression)
        results: dict[str, Any] = {"events": cfg.events, "traffic": cfg.traffic, "compression": cfg.compression}
        results["kafka_consume_events_per_s"] = round(_kafka_consume_rate(bootstrap, topics["events"], cfg.events))
        results["pg_copy_rows_per_s"] = round(_pg_copy_rate(dsn, _values(cfg.traffic, cfg.events)))
        results["naive_events_per_s"] = round(_naive_rate(dsn, bootstrap, topics["events"], cfg.naive_sample), 1)
        say(f"raw limits: {results}")

        def settings(topic: str, name: str, **extra: Any) -> ProcessorSettings:
            return ProcessorSettings(**extra, bootstrap_servers=bootstrap, postgres_dsn=dsn, topic_events=topic,
                                     topic_enriched=topics["enriched"], topic_graph=topics["graph"],
                                     topic_dlq=topics["dlq"], checkpoint_dir=str(work / f"ck-{name}"),
                                     parquet_dir=str(work / "parquet"), trigger_interval_seconds=0.5,
                                     recombine_quiet_seconds=2.0)

        reports: list[Any] = []
        started = time.time()
        run_processor(settings(topics["events"], "throughput", max_offsets_per_trigger=cfg.max_batch_events or None),
                      available_now=True, status=say, on_batch=reports.append, status_interval_seconds=10)
        committed = [r for r in reports if _counted(r)]
        if len(committed) > 1:
            warm = committed[1:]
            results["e2e_sustained_events_per_s"] = round(
                sum(r.total("consumed") for r in warm) / max(warm[-1].committed_at - committed[0].committed_at, 1e-9), 1)
        else:
            results["e2e_sustained_events_per_s"] = None  # one batch: nothing after the warm-up to measure
        last_commit = max((r.committed_at for r in committed), default=time.time())
        consumed = sum(r.total("consumed") for r in committed)
        results["e2e_events_per_s"] = round(consumed / max(last_commit - started, 1e-9), 1)
        first_start = min((r.committed_at - r.timings.get("stage", 0) - r.timings.get("merge", 0)
                           for r in committed), default=started)
        # the same, from the first batch's start: without session start-up and query planning
        results["e2e_batches_events_per_s"] = round(consumed / max(last_commit - first_start, 1e-9), 1)
        results["profile_seconds"] = {k: round(sum(r.timings.get(k, 0) for r in committed), 2)
                                      for k in ("stage", "finish_wait", "recombine", "merge", "enrich", "parquet",
                                                "graph")}
        results["batches"] = len(committed)
        results["drain_batches"] = drain_batches(reports)

        say(f"latency phase: {cfg.rate} events/s for {cfg.latency_seconds:.0f}s")
        lat_reports: list[Any] = []
        stop = threading.Event()
        spooled = work / "latency-messages"   # encoded beforehand (spool's doc)
        n_lat = spool(_values(cfg.traffic, int(cfg.rate * cfg.latency_seconds)), spooled)
        producer = threading.Thread(target=_produce, args=(bootstrap, topics["latency"], unspool(spooled), cfg.rate,
                                                           cfg.compression))
        lat_settings = settings(topics["latency"], "latency")
        runner = threading.Thread(target=run_processor, kwargs={
            "settings": lat_settings, "on_batch": lat_reports.append, "stop_event": stop})
        runner.start()
        time.sleep(15)  # let the query start before the steady load begins
        producer.start()
        producer.join()
        deadline = time.monotonic() + max(120.0, cfg.latency_seconds * 3)
        while time.monotonic() < deadline and sum(r.total("consumed") for r in lat_reports) < n_lat:
            time.sleep(0.5)
        stop.set()
        runner.join(120)
        samples = [s for r in lat_reports for s in r.latency_samples()]
        for q, key in ((0.5, "latency_p50_s"), (0.95, "latency_p95_s"), (0.99, "latency_p99_s")):
            results[key] = _percentile(samples, q)
        results["latency_events"] = sum(n for _, n in samples)
        results["latency_parts_s"] = latency_parts(lat_reports)
        sampler.stop.set()
        results["peak_rss_bytes"] = max(sampler.peak, _tree_rss(os.getpid()))
        return results
    finally:
        sampler.stop.set()
        if broker is not None:
            from stream_processor.publish import close_shared_publishers

            close_shared_publishers()   # else their librdkafka handles log reconnects to the stopped broker until exit
            broker.stop()
        if pg is not None:
            pg.stop()
        if not cfg.work_dir:   # a directory of its own (~1.6 GB after 40,000 events: the database, the broker's log,
            shutil.rmtree(work, ignore_errors=True)   # checkpoints, Parquet); each run used to leave one behind
