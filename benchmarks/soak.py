"""Soak benchmark: ``lineage demo`` traffic at a steady rate into ``lineage process``, for a long time.

Not a test (pytest never collects it): run ``python benchmarks/soak.py`` (one hour, 200 msg/s)
or ``python benchmarks/soak.py --duration-seconds 120`` for a short run.

It starts the embedded broker and an embedded PostgreSQL (temp dir), runs the processor as a
subprocess exactly as users do (``python -m lineage process --bootstrap-servers ... --metrics-port P``),
waits for its metrics endpoint, then publishes demo traffic in-process
(:func:`producers.demo.publish_demo` into a :class:`producers.emitter.LineageEmitter`) at ``--rate``
messages/s for ``--duration-seconds``. Every ``--sample-seconds`` it samples:

- ``jvm_heap_committed`` / ``rss_jvm_beyond_heap``: the heap the JVM has committed, and its RSS beyond that
  (:func:`jvm_heap`; a lower bound of its native memory, the heap's own RSS being at most what is committed): a
  flat committed heap under a rising RSS is not G1 growing the heap (session 18: 592 MB flat, RSS +170 MB in 12 min);
- ``jvm_committed`` / ``rss_jvm_beyond_committed``: what the JVM has committed in every category its Native Memory
  Tracking knows (heap, metaspace, code, threads, GC...; ``jcmd PID VM.native_memory summary``: the soak turns NMT on,
  ``--no-nmt`` leaves it off), and its RSS beyond that: memory the JVM does not account for (RocksDB's and other
  native libraries' own allocations). RSS rising below ``jvm_committed`` is the JVM touching memory it had committed
  (session 19: 535 -> 737 MB under a committed 745 -> 775 MB in 15 minutes), not a leak;
  ``jvm_committed_beyond_heap``: what it committed beyond the heap (metaspace, code, threads, GC, direct buffers);
- ``jvm_old_used``: the Spark driver JVM's old-generation heap in use (MiB, ``jstat -gc``): the JVM's RSS
  grows towards ``-Xmx`` by itself, a leak shows here;
- RSS (MiB) of the processor's process tree, split by command line: ``rss_jvm`` (java: the Spark
  driver JVM), ``rss_driver_py`` (the ``lineage process`` Python process itself), ``rss_workers``
  (Python processes running ``-m pyspark.*``: ``pyspark.daemon`` and its forked workers, the
  ``python_streaming_source_runner`` of the Python Kafka source), ``rss_other`` (anything else);
  RSS counts pages shared by forked workers once per process, so ``rss_workers`` overstates;
- from ``http://127.0.0.1:P/metrics``: ``state_rows`` (``lineage_state_rows``), ``state_memory`` (MiB,
  ``lineage_state_memory_bytes``: what the RocksDB state stores report holding, memtables and block cache, beside
  ``rss_jvm_beyond_committed``, the JVM's memory NMT does not see), ``lag``
  (sum of ``lineage_consumer_lag_records`` over partitions), ``consumed``
  (``lineage_events_consumed_total``, summed) and ``batches`` (``lineage_batches_committed_total``).

Verdict per series, over the samples at ``t`` in ``[0, T]`` (``T`` = last sample time):

- ``slope``: least-squares slope over the second half (``t >= T/2``), in units per hour:
  ``slope = sum((t_i - t̄)(y_i - ȳ)) / sum((t_i - t̄)²)`` with ``t`` in hours;
- for RSS, state rows and lag: **grows without bound** iff ``slope > 0`` AND
  ``mean(y | t in [3T/4, T]) > 1.2 * mean(y | t in [S, S + T/4))`` (the last-quarter mean is more than 20 % above
  the reference quarter's), where ``S = min(max(T/4, 2 x dedupe window), T/2)``: the second quarter, or a later
  one when the state and RocksDB's memory are still filling then (:data:`SETTLE_WINDOWS`), and for the lag only when that last-quarter mean is also more
  than :data:`LAG_FLOOR_SECONDS` of the offered rate (a lag of a few records is the batch in flight), and for
  ``rss_jvm_beyond_committed`` only when that mean is also above RocksDB's memory bound (what NMT does not see may
  fill up to it; the series starts near zero, where a 20 % rise is noise); the committed heap never above
  ``-Xmx`` (``LINEAGE_SPARK_DRIVER_MEMORY``) is bounded by it (G1 sizes it within the cap), and ``jvm_committed``
  is bounded when that heap and ``jvm_committed_beyond_heap`` are (session 34's hour: heap 293 -> 418 MiB of 640,
  called growing before). Counters
  (consumed, batches) only report their slope (their rate), they are expected to grow.

Short runs: the processor's dedupe state is evicted only after ``--dedupe-window-seconds``
(default 3600 s), and the first quarter holds JVM and worker warm-up, so only a run well past an
hour says anything about boundedness; a shorter run is a smoke run of the harness.

At 200 msg/s the embedded broker (tansu, memory storage) stalled after ~20-25 minutes on 2026-11-26: 1.8 GB RSS,
166 % CPU, fetches waiting, micro-batches of 60-120 s while the processor idled. Plain produce and fetch did not
reproduce it with large record batches (280,000 records of 4.4 kB), but one record per batch did: tansu's memory
storage spends CPU linear in a partition's record batches on every ListOffsets and Fetch (3 ms at 2,000 batches, 54 ms
at 40,000; docs/PERFORMANCE.md, session 14), and demo traffic made ~1-2 records per batch; it is now published with
``linger.ms`` :data:`lineage.embedded.broker.DEMO_LINGER_MS` (250) in bursts of
:data:`lineage.embedded.broker.DEMO_BURST_SECONDS` (5 s; session 15: ~1,400 record batches per partition and hour
at 50 msg/s against ~11,000 evenly paced), which delays the stall. Watch ``batches`` keep pace with the rate: a run
that outlives the broker says nothing about the processor.

Prints a table of samples and the verdicts; ``--json FILE`` writes both. Everything stops at the
end: SIGTERM to the processor's process group (SIGKILL after a grace period), then the broker and
PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["main", "run_soak", "classify_rss", "scrape_metrics", "verdicts", "GROWTH_RULE"]

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
BOUNDED_SERIES = ("rss_jvm", "jvm_old_used", "jvm_heap_committed", "rss_jvm_beyond_heap", "jvm_committed",
                  "jvm_committed_beyond_heap", "rss_jvm_beyond_committed", "rss_driver_py", "rss_workers",
                  "state_rows", "state_memory", "lag")
#: Native Memory Tracking for the processor's JVM (summary level: a few percent of the JVM's time), added to
#: ``LINEAGE_SPARK_DRIVER_JAVA_OPTIONS`` (or to the default options when that is not set) so ``jvm_committed`` can
#: be sampled; ``--no-nmt`` leaves the JVM's options as they are.
NMT_OPTION = "-XX:NativeMemoryTracking=summary"
COUNTER_SERIES = ("consumed", "batches")
GROWTH_RULE = ("grows without bound := slope over the second half > 0 AND mean over the last quarter "
               "[3T/4, T] > 1.2 x mean over the reference quarter [S, S + T/4), S = min(max(T/4, 2 x dedupe "
               "window), T/2) (RSS, state rows, lag); for the lag, "
               "the last quarter's mean must also exceed 10 s of the offered rate, for the JVM's RSS beyond what it "
               "committed the RocksDB memory bound (LINEAGE_SPARK_ROCKSDB_MEMORY_MB); the committed heap never above "
               "-Xmx is bounded by it, and what the JVM committed when that heap and the rest are bounded")
#: A lag below this many seconds of the offered traffic is the batch in flight, not a backlog: a 25-minute soak at
#: 200 msg/s (2026-11-26) had quarter means of 1.6 and 6.7 records (a 0-119 record jitter) and was called growing.
LAG_FLOOR_SECONDS = 10.0
#: The series fill for about this many dedupe windows (the state until its first evictions, RocksDB's memory until
#: its budget): the verdict's reference quarter starts there (:func:`reference_window`). Session 32's 50-minute soak
#: (window 600 s): the state levelled at t ~1,300 s, the stores' memory at ~1,170 s, and the rule's second quarter
#: (750-1,500 s) still held the filling, so a level series was called growing.
SETTLE_WINDOWS = 2.0


def classify_rss(root_pid: int) -> dict[str, float]:
    """RSS (MiB) of ``root_pid`` and its descendants, by kind: jvm, driver_py, workers, other."""
    import psutil

    out = {"rss_jvm": 0.0, "rss_driver_py": 0.0, "rss_workers": 0.0, "rss_other": 0.0, "workers": 0}
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for p in procs:
        try:
            rss = p.memory_info().rss / MIB
            cmd = " ".join(p.cmdline())
            exe = (p.cmdline() or [p.name()])[0]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if p.pid == root_pid:
            key = "rss_driver_py"
        elif Path(exe).name.startswith("java"):
            key = "rss_jvm"
        elif "python" in Path(exe).name and "pyspark." in cmd:  # daemon, workers, streaming source runner
            key = "rss_workers"
            out["workers"] += 1
        else:
            key = "rss_other"
        out[key] += rss
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}


def _spark_jvm(root_pid: int) -> Any:
    """The Spark driver JVM under ``root_pid`` (a psutil process), or None."""
    import psutil

    try:
        procs = psutil.Process(root_pid).children(recursive=True)
        return next((p for p in procs if Path((p.cmdline() or [p.name()])[0]).name.startswith("java")), None)
    except psutil.Error:
        return None


def _jdk_tool(name: str, java: Any) -> str | None:
    """Path of the JDK tool ``name`` (``jstat``, ``jcmd``): on PATH, else beside the JVM's own ``java``."""
    found = shutil.which(name)
    if found is None:
        candidate = Path(java.exe()).with_name(name)
        found = str(candidate) if candidate.exists() else None
    return found


def jvm_heap(root_pid: int) -> dict[str, float | None]:
    """``jvm_old_used`` (old-generation heap in use) and ``jvm_heap_committed`` (the heap the JVM has committed:
    survivor, eden and old capacities), in MiB, of the Spark driver JVM under ``root_pid``, from ``jstat -gc``
    (the sampler adds ``rss_jvm_beyond_heap``: ``rss_jvm`` less the committed heap; metaspace, code, threads,
    RocksDB, Netty).

    RSS of a JVM grows towards ``-Xmx`` whether or not anything leaks (G1 commits heap as it sizes its young
    generation); the old generation's occupancy is what a leak raises, and RSS beyond the committed heap is at
    least what native memory holds (session 18's hour: the JVM's RSS 526 -> 1,100 MB with its old generation flat).
    None values when no JVM or no ``jstat`` is found."""
    none: dict[str, float | None] = {"jvm_old_used": None, "jvm_heap_committed": None}
    java = _spark_jvm(root_pid)
    jstat = _jdk_tool("jstat", java) if java is not None else None
    if java is None or jstat is None:
        return none
    try:
        out = subprocess.run([jstat, "-gc", str(java.pid)], capture_output=True, text=True, timeout=10).stdout
        header, values = out.split("\n")[:2]
        fields = dict(zip(header.split(), values.split(), strict=False))
        committed = sum(float(fields[k]) for k in ("S0C", "S1C", "EC", "OC")) / 1024   # jstat reports KiB
        return {"jvm_old_used": round(float(fields["OU"]) / 1024, 1), "jvm_heap_committed": round(committed, 1)}
    except (OSError, ValueError, KeyError, subprocess.SubprocessError):
        return none


_NMT_TOTAL = re.compile(r"^Total: reserved=(\d+)KB, committed=(\d+)KB", re.MULTILINE)


def nmt_committed_mib(summary: str) -> float | None:
    """The total memory the JVM has committed (MiB), from the text of ``jcmd PID VM.native_memory summary``
    (``Total: reserved=...KB, committed=...KB``); None when Native Memory Tracking is off (jcmd says so instead)."""
    found = _NMT_TOTAL.search(summary)
    return round(int(found.group(2)) / 1024, 1) if found else None


def jvm_committed(root_pid: int) -> float | None:
    """What the Spark driver JVM under ``root_pid`` has committed, every category Native Memory Tracking knows
    (heap, metaspace, code, threads, GC, ...), in MiB; None without NMT (the soak turns it on: :data:`NMT_OPTION`).
    The JVM's RSS can only exceed it by memory NMT does not see: RocksDB's and other native libraries' own
    allocations (session 19: a 15-minute soak's JVM RSS rose 535 -> 737 MB while staying below its committed
    745 -> 775 MB)."""
    java = _spark_jvm(root_pid)
    jcmd = _jdk_tool("jcmd", java) if java is not None else None
    if java is None or jcmd is None:
        return None
    try:
        return nmt_committed_mib(subprocess.run([jcmd, str(java.pid), "VM.native_memory", "summary"],
                                                capture_output=True, text=True, timeout=20).stdout)
    except (OSError, subprocess.SubprocessError):
        return None


def scrape_metrics(port: int, timeout_seconds: float = 5.0) -> dict[str, float] | None:
    """The processor metrics the soak samples (``wanted``'s values; ``state_memory`` in MiB) from its Prometheus
    endpoint; None when it does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_seconds) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    wanted = {"lineage_state_rows": "state_rows", "lineage_state_memory_bytes": "state_memory",
              "lineage_consumer_lag_records": "lag",
              "lineage_events_consumed_total": "consumed", "lineage_batches_committed_total": "batches"}
    values = dict.fromkeys(wanted.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                values[wanted[sample.name]] += sample.value
    values["state_memory"] = round(values["state_memory"] / MIB, 1)
    return values


def _slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, in value units per hour."""
    if len(points) < 2:
        return None
    ts = [t / 3600 for t, _ in points]
    ys = [y for _, y in points]
    tm, ym = sum(ts) / len(ts), sum(ys) / len(ys)
    den = sum((t - tm) ** 2 for t in ts)
    return sum((t - tm) * (y - ym) for t, y in zip(ts, ys, strict=True)) / den if den else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def reference_window(end: float, settle_seconds: float = 0.0) -> tuple[float, float]:
    """The samples the last quarter is compared with (module doc): a quarter of the run, starting at ``T/4`` or, when
    the series may still be filling then, at ``settle_seconds`` (at most at ``T/2``: the third quarter)."""
    start = min(max(end / 4, settle_seconds), end / 2)
    return start, start + end / 4


def verdicts(samples: list[dict[str, Any]], lag_floor: float = 0.0,
             native_floor: float = 0.0, settle_seconds: float = 0.0,
             heap_cap: float | None = None) -> dict[str, dict[str, Any]]:
    """Slope (units/hour, second half) and the growth verdict of every series (see the module doc); the lag grows
    only when its last quarter's mean is also above ``lag_floor`` records (:data:`LAG_FLOOR_SECONDS` of the rate),
    and ``rss_jvm_beyond_committed`` only when it is above ``native_floor`` MiB (the memory bound of what NMT does not
    see, RocksDB's: a difference that starts near zero passes the 1.2x test on noise). ``settle_seconds``: until
    then the series fill (the dedupe state until its window, RocksDB's memory until its budget): the reference
    quarter starts there (:func:`reference_window`).

    ``heap_cap``: the JVM's ``-Xmx`` in MiB. G1 sizes the committed heap within it as it sees fit (session 34's hour:
    293 -> 418 MiB at 640): a committed heap that never passed the cap is bounded by it, whatever the 1.2x test says,
    and so is ``jvm_committed`` when that heap is its only growth (``jvm_committed_beyond_heap``, the rest of what
    the JVM committed, bounded)."""
    if not samples:
        return {}
    end = samples[-1]["t"]
    ref_from, ref_to = reference_window(end, settle_seconds)
    out: dict[str, dict[str, Any]] = {}
    heap_within_cap = False
    for key in BOUNDED_SERIES + COUNTER_SERIES:
        pts = [(s["t"], float(s[key])) for s in samples if s.get(key) is not None]
        slope = _slope_per_hour([(t, y) for t, y in pts if t >= end / 2])
        ref = _mean([y for t, y in pts if ref_from <= t < ref_to])
        q4 = _mean([y for t, y in pts if t >= 3 * end / 4])
        entry: dict[str, Any] = {"slope_per_hour": None if slope is None else round(slope, 2),
                                 "ref_mean": None if ref is None else round(ref, 2),
                                 "ref_window_s": [round(ref_from), round(ref_to)],
                                 "q4_mean": None if q4 is None else round(q4, 2)}
        if key in COUNTER_SERIES:
            entry["grows_without_bound"] = None
            entry["verdict"] = "counter (rate)"
        elif slope is None or ref is None or q4 is None:
            entry["grows_without_bound"] = None
            entry["verdict"] = "too few samples"
        else:
            floor = {"lag": lag_floor, "rss_jvm_beyond_committed": native_floor}.get(key)
            grows = slope > 0 and q4 > 1.2 * ref and (floor is None or q4 > floor)
            entry["grows_without_bound"] = grows
            entry["verdict"] = "GROWS WITHOUT BOUND" if grows else "bounded"
            if key == "jvm_heap_committed" and grows and heap_cap is not None and max(y for _t, y in pts) <= heap_cap:
                heap_within_cap = True
                entry.update(grows_without_bound=False, verdict=f"bounded by -Xmx ({heap_cap:g} MiB)")
        out[key] = entry
    total = out["jvm_committed"]
    if total["grows_without_bound"] and heap_within_cap and out["jvm_committed_beyond_heap"]["grows_without_bound"] is False:
        total.update(grows_without_bound=False, verdict="bounded: the committed heap's growth, within -Xmx")
    return out


def java_size_mib(size: str) -> float:
    """A JVM / Spark memory size (``640m``, ``1g``, ``1048576k``, plain bytes) in MiB."""
    text = size.strip().lower().removesuffix("b")
    scale = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}.get(text[-1:])
    return float(text[:-1]) * scale if scale is not None else float(text) / MIB


def _stop_processor(proc: subprocess.Popen[bytes], grace_seconds: float = 60.0) -> int | None:
    """SIGTERM the driver (it stops its query and Spark), then SIGTERM, later SIGKILL, its process group.

    The driver goes first: a SIGTERM to the whole group at once also stops the JVM under the
    driver's feet, and the driver then exits 1 with py4j ``Connection refused`` tracebacks.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_seconds)
        except subprocess.TimeoutExpired:
            pass
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)  # leftovers: JVM, Python workers (same session as the driver)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            continue
        break
    if proc.poll() is None:
        proc.wait(10)
    return proc.returncode


def run_soak(duration_seconds: float, rate: float, sample_seconds: float, work_dir: Path,
             trigger_interval_seconds: float = 1.0, seed: int = 0, dedupe_window_seconds: float = 3600.0,
             startup_timeout_seconds: float = 300.0, say: Any = print, nmt: bool = True) -> dict[str, Any]:
    """Run the soak; returns ``{"config", "samples", "verdicts", "published", ...}``."""
    from lineage.embedded.broker import DEMO_BURST_SECONDS, DEMO_LINGER_MS, EmbeddedBroker
    from lineage.embedded.ports import free_port
    from lineage.embedded.postgres import EmbeddedPostgres
    from producers.demo import DemoStats, publish_demo
    from producers.emitter import LineageEmitter
    from producers.settings import EmitterSettings

    broker = EmbeddedBroker(partitions=3, log_path=work_dir / "broker.log").start()
    pg = EmbeddedPostgres(work_dir / "pg").start()
    proc: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    publisher: threading.Thread | None = None
    result: dict[str, Any] = {"config": {"duration_seconds": duration_seconds, "rate": rate,
                                         "sample_seconds": sample_seconds,
                                         "trigger_interval_seconds": trigger_interval_seconds,
                                         "dedupe_window_seconds": dedupe_window_seconds},
                              "rule": GROWTH_RULE}
    try:
        dsn = pg.create_database("soak")
        port = free_port()
        log_path = work_dir / "processor.log"
        cmd = [sys.executable, "-m", "lineage", "process", "--bootstrap-servers", broker.bootstrap,
               "--postgres-dsn", dsn, "--parquet-dir", str(work_dir / "parquet"),
               "--checkpoint-dir", str(work_dir / "checkpoints"), "--metrics-port", str(port),
               "--trigger-interval-seconds", str(trigger_interval_seconds), "--data-dir", str(work_dir),
               "--dedupe-window-seconds", str(int(dedupe_window_seconds))]
        say(f"soak: broker {broker.bootstrap}, PostgreSQL {pg.host}:{pg.port}, processor log {log_path}")
        with open(log_path, "ab") as log_file:
            # the `$self` state's TTL follows the dedupe window, so both kinds of state turn over in the run
            env = {**os.environ, "LINEAGE_RECOMBINE_STATE_TTL_SECONDS": str(int(dedupe_window_seconds))}
            if nmt:
                from stream_processor.session import DRIVER_JAVA_OPTIONS

                options = env.get("LINEAGE_SPARK_DRIVER_JAVA_OPTIONS", DRIVER_JAVA_OPTIONS)
                if "NativeMemoryTracking" not in options:
                    env["LINEAGE_SPARK_DRIVER_JAVA_OPTIONS"] = f"{options} {NMT_OPTION}".strip()
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        deadline = time.monotonic() + startup_timeout_seconds
        while scrape_metrics(port, 2.0) is None:
            if proc.poll() is not None:
                raise RuntimeError(f"the processor exited with {proc.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no metrics on port {port} within {startup_timeout_seconds:.0f}s; see {log_path}")
            time.sleep(1.0)
        say(f"soak: processor pid {proc.pid} serves metrics on :{port}; publishing {rate:g} msg/s "
            f"for {duration_seconds:g}s")

        stats_box: dict[str, Any] = {}

        def publish() -> None:
            settings = EmitterSettings(bootstrap_servers=broker.bootstrap, topic="openlineage.events",
                                       linger_ms=DEMO_LINGER_MS)   # fewer record batches in the embedded broker
            try:
                with LineageEmitter(settings) as emitter:
                    stats: DemoStats = publish_demo(emitter, rate=rate, duration_seconds=duration_seconds,
                                                    seed=seed, stop=stop, progress_every_seconds=5.0,
                                                    burst_seconds=DEMO_BURST_SECONDS)
                stats_box["stats"] = stats
            except Exception as exc:  # noqa: BLE001 - reported in the result, never lost
                stats_box["error"] = f"{type(exc).__name__}: {exc}"

        publisher = threading.Thread(target=publish, name="soak-publisher", daemon=True)
        samples: list[dict[str, Any]] = []
        t0 = time.monotonic()
        publisher.start()
        next_at = t0
        while True:
            now = time.monotonic()
            if now >= next_at:
                metrics = scrape_metrics(port) or {}
                row: dict[str, Any] = {"t": round(now - t0, 1), **classify_rss(proc.pid), **jvm_heap(proc.pid)}
                committed = row["jvm_heap_committed"]
                row["rss_jvm_beyond_heap"] = None if committed is None else round(row["rss_jvm"] - committed, 1)
                row["jvm_committed"] = jvm_committed(proc.pid) if nmt else None
                row["rss_jvm_beyond_committed"] = (None if row["jvm_committed"] is None
                                                   else round(row["rss_jvm"] - row["jvm_committed"], 1))
                row["jvm_committed_beyond_heap"] = (None if row["jvm_committed"] is None or committed is None
                                                    else round(row["jvm_committed"] - committed, 1))
                for key in ("state_rows", "state_memory", "lag", "consumed", "batches"):
                    row[key] = metrics.get(key)
                samples.append(row)
                say("soak: " + " ".join(f"{k}={v}" for k, v in row.items()))
                next_at += sample_seconds
            if proc.poll() is not None:
                result["processor_exit"] = proc.returncode
                say(f"soak: the processor exited early with {proc.returncode}; see {log_path}")
                break
            if not publisher.is_alive() and now - t0 >= duration_seconds:
                break
            time.sleep(max(0.0, min(next_at - time.monotonic(), 1.0)))
        publisher.join(120)
        stats = stats_box.get("stats")
        from stream_processor.session import SparkMemorySettings

        memory = SparkMemorySettings()
        native_floor = float(memory.rocksdb_memory_mb)   # RocksDB's bound: what NMT does not see
        result.update(samples=samples, verdicts=verdicts(samples, lag_floor=rate * LAG_FLOOR_SECONDS,
                                                         native_floor=native_floor,
                                                         settle_seconds=SETTLE_WINDOWS * dedupe_window_seconds,
                                                         heap_cap=java_size_mib(memory.driver_memory)),
                      published={"messages": stats.messages, "events": stats.events,
                                 "seconds": round(stats.seconds, 1), "kinds": stats.kinds} if stats else None,
                      publish_error=stats_box.get("error"))
        return result
    finally:
        stop.set()
        if publisher is not None:
            publisher.join(60)
        if proc is not None:
            code = _stop_processor(proc)
            result["processor_stop_exit"] = code
            say(f"soak: processor stopped (exit {code})")
        broker.stop()
        pg.stop()


def print_report(result: dict[str, Any]) -> None:
    cols = ("t", "rss_jvm", "jvm_old_used", "jvm_heap_committed", "rss_jvm_beyond_heap", "jvm_committed",
            "rss_jvm_beyond_committed", "rss_driver_py", "rss_workers", "rss_other", "workers", "state_rows",
            "state_memory", "lag", "consumed", "batches")
    print("\nsamples (t in s, RSS in MiB)")
    print("  ".join(f"{c:>13}" for c in cols))
    for s in result.get("samples", []):
        print("  ".join(f"{'-' if s.get(c) is None else s[c]:>13}" for c in cols))
    print(f"\nverdicts; rule: {result['rule']}")
    print(f"{'series':>24}  {'slope/hour (2nd half)':>22}  {'ref mean':>12}  {'Q4 mean':>12}  verdict")
    for key, v in result.get("verdicts", {}).items():
        slope = "-" if v["slope_per_hour"] is None else f"{v['slope_per_hour']:.2f}"
        q2 = "-" if v["ref_mean"] is None else f"{v['ref_mean']:.2f}"
        q4 = "-" if v["q4_mean"] is None else f"{v['q4_mean']:.2f}"
        print(f"{key:>24}  {slope:>22}  {q2:>12}  {q4:>12}  {v['verdict']}")
    print(f"\npublished: {result.get('published')}; publish error: {result.get('publish_error')}; "
          f"processor early exit: {result.get('processor_exit')}; "
          f"exit code after SIGTERM: {result.get('processor_stop_exit')}")
    if result["config"]["duration_seconds"] < 2 * result["config"].get("dedupe_window_seconds", 3600):
        print("note: a run shorter than twice the processor's dedupe window (--dedupe-window-seconds, default 3600 s) "
              "cannot tell bounded state from growth: dedupe state is only evicted after that window, and the "
              "first quarters include JVM/worker warm-up")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-seconds", type=float, default=3600.0, help="traffic duration (default 3600)")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second (default 200)")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="sampling interval (default 10)")
    parser.add_argument("--trigger-interval-seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dedupe-window-seconds", type=float, default=3600.0,
                        help="the processor's dedupe window and `$self` state TTL: a run several windows long shows "
                             "whether state is bounded")
    parser.add_argument("--no-nmt", action="store_true",
                        help="leave the JVM's Native Memory Tracking off (no jvm_committed samples)")
    parser.add_argument("--json", type=Path, default=None, help="write samples and verdicts here")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep logs and data here (default: temp, removed)")
    args = parser.parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="lineage-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = run_soak(args.duration_seconds, args.rate, args.sample_seconds, work,
                          trigger_interval_seconds=args.trigger_interval_seconds, seed=args.seed,
                          dedupe_window_seconds=args.dedupe_window_seconds, nmt=not args.no_nmt,
                          say=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"wrote {args.json}")
    return 0 if result.get("processor_exit") is None and not result.get("publish_error") else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
