"""The SparkSession the processor runs in: local mode by default, tuned for a small machine."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .spark_daemon import WORKER_NICE_VARIABLE
from .spark_python import is_launcher, spark_python

__all__ = ["build_spark_session", "DRIVER_JAVA_OPTIONS", "SparkMemorySettings", "spark_master", "limit_malloc_arenas",
           "release_planner_workers", "python_worker_factories", "PLANNER_WORKER_MODULES", "WORKER_NICE_VARIABLE"]

log = logging.getLogger(__name__)

#: JVM options of the local-mode driver (``LINEAGE_SPARK_DRIVER_JAVA_OPTIONS`` replaces them).
#: ``-XX:TieredStopAtLevel=1``: the client (C1) JIT compiler only. Every micro-batch plans its query
#: again and generates new classes, so the server (C2) compiler never finishes: measured with
#: ``lineage bench --events 50000`` on the 2-core machine, C2's compiler threads took 5.8 of the JVM's
#: 11.2 CPU-s in a 30 s window of steady load (both cores are shared with the Python workers, which do
#: the real work). With C1 only the JVM took 5.9 CPU-s in the same window and the sustained rate rose
#: from 792 to 847 events/s. The JVM here moves rows between Python and the state stores; peak
#: JIT quality buys little.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

#: Spark's rename-based checkpoint file manager (its package moved in Spark 4.1), used for local paths.
#: The default FileContext-based one has Hadoop resolve symlinks with a ``readlink`` subprocess on every
#: rename, and RocksDB's full snapshot per batch deletes directories with ``rm -rf`` subprocesses. In a
#: ``lineage bench --events 30000`` run the JVM started 5,550 processes (Java Flight Recorder,
#: ``jdk.ProcessStart``): 3,792 ``readlink``, 1,050 ``chmod``, 696 ``rm``. A rate-source query with one
#: dedupe operator started 48 per micro-batch; with this manager and RocksDB changelog checkpointing, 8.7
#: (the ``chmod`` of each new checkpoint file remains: Hadoop shells out without its native library).
#: On a local file system a rename is atomic, which is what the manager needs.
FS_CHECKPOINT_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)


class SparkMemorySettings(BaseSettings):
    """The memory the processor's Spark may hold, part by part; the defaults fit a 4 GB laptop share.

    Measured with ``lineage bench --events 20000`` on the shared 2-core machine (docs/PERFORMANCE.md, issue
    18): the bench's process tree peaked at 3.15-4.15 GB RSS in two runs of the old defaults. Of that, the JVM
    took 0.9-1.5 GB: its heap grows towards ``-Xmx`` (it was 2g, and the one-hour soak saw the JVM at
    2.2 GiB), plus RocksDB's native memory. Spark's Python processes took 1.3-1.6 GB, 13-14 of them:
    workers kept idle in the pool, and the daemons. The broker took 0.45 GB. Each field bounds one part (but
    ``python_worker_nice``, the workers' CPU priority, which sits here for its ``LINEAGE_SPARK_`` prefix):
    """

    model_config = SettingsConfigDict(env_prefix="LINEAGE_SPARK_", extra="forbid")

    #: ``LINEAGE_SPARK_DRIVER_MEMORY``: the driver JVM's heap (``spark.driver.memory``, ``-Xmx``; local mode
    #: runs every task in it). It holds Spark's plans, the dedupe's shuffle and the rows in flight of a batch of at
    #: most ``max_offsets_per_trigger`` events (~1.4 kB each, packed): a few tens of MB at the default cap. 640 MB
    #: since session 31 (1 GB before): an hour's soak used at most ~180 MB of old generation and committed at most
    #: ~410 MB, and with 1 GB G1 sometimes grew the heap to ~870 MB in a bench (docs/PERFORMANCE.md, sessions 29-31).
    driver_memory: str = "640m"
    #: ``LINEAGE_SPARK_EXECUTOR_MEMORY``: each executor JVM's heap on a cluster (``spark.executor.memory``).
    executor_memory: str = "1g"
    #: ``LINEAGE_SPARK_ROCKSDB_MEMORY_MB``: one bound, in MB, for the block cache and write buffers of ALL the
    #: RocksDB state stores of a JVM (``spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage``). Unbounded,
    #: each store instance (two operators x ``shuffle_partitions``) has its own cache and memtables. RocksDB fills
    #: it over a long run, outside the JVM's heap and its Native Memory Tracking: in soaks at 100 events/s the
    #: JVM's memory beyond what NMT tracks grew ~0.2 MB per micro-batch, to ~250 MB after 40 minutes at 256, and
    #: stayed at ~30-40 MB at 16 (docs/PERFORMANCE.md, session 32). 64 since session 32 (256 before): the
    #: dedupe's lookups are served from the OS page cache beyond it, at no cost the bench could see.
    rocksdb_memory_mb: int = Field(default=64, gt=0)
    #: ``LINEAGE_SPARK_PYTHON_IDLE_WORKERS``: Python workers kept idle for reuse per JVM
    #: (``spark.python.factory.idleWorkerMaxPoolSize``); each holds ~100 MB (pandas, pyarrow, our modules).
    #: Busy workers are not limited by it: a local JVM runs at most its cores' tasks at once.
    python_idle_workers: int = Field(default=2, ge=1)
    #: ``LINEAGE_SPARK_MALLOC_ARENA_MAX``: glibc malloc arenas of the JVM and the Python workers
    #: (``MALLOC_ARENA_MAX``; 0: glibc's default of 8 per core). Many threads allocating natively (RocksDB,
    #: Netty, Arrow) otherwise each keep memory in an arena of their own.
    malloc_arena_max: int = Field(default=2, ge=0)
    #: ``LINEAGE_SPARK_PYTHON_WORKER_NICE``: the Python workers' CPU priority below the processes that started them
    #: (``os.nice`` in the worker daemon, stream_processor/spark_daemon.py; 0 leaves it alone). On a machine the
    #: workers share with the driver and PostgreSQL, the graph's commits wait for the driver's finishing thread and
    #: the merge's backend, while a worker's staging of the next batch can wait; at 5 the finishing wins the CPU
    #: when both want it. ``lineage bench`` on the 2-core machine, 5 pairs alternated (docs/PERFORMANCE.md, session
    #: 38): sustained 2,018 (1,754-2,295) events/s at 5 against 1,795 (1,587-2,154) at 0, ahead in every pair.
    python_worker_nice: int = Field(default=5, ge=0, le=19)

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for these bounds."""
        conf = {
            "spark.driver.memory": self.driver_memory,
            "spark.executor.memory": self.executor_memory,
            "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
            "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": str(self.rocksdb_memory_mb),
            "spark.python.factory.idleWorkerMaxPoolSize": str(self.python_idle_workers),
        }
        if self.malloc_arena_max:
            conf["spark.executorEnv.MALLOC_ARENA_MAX"] = str(self.malloc_arena_max)
        conf[f"spark.executorEnv.{WORKER_NICE_VARIABLE}"] = str(self.python_worker_nice)
        return conf


def limit_malloc_arenas(arenas: int) -> bool:
    """glibc's ``mallopt(M_ARENA_MAX, arenas)`` for the running process (the driver); False where that is not glibc.

    ``MALLOC_ARENA_MAX`` is read when a process starts, so setting it here bounds the JVM and the Python workers
    only. The driver's threads (the finisher, the `$self` step, the graph publication, py4j, librdkafka) each got an
    arena of their own (glibc: up to 8 per core), and memory freed into them stayed: a driver draining 120,000 demo
    events grew 751 -> 833 MB RSS from its 8th to its 24th batch of 5,000 while the Python heap it traced grew
    65 -> 74 MB and Arrow's pool held a steady 35 MB; with two arenas 703 -> 731 MB (2026-11-26; the hour's soak at
    200 msg/s had the driver rising ~30 MB per 5 minutes)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-8, int(arenas)))   # M_ARENA_MAX (malloc.h)
    except (OSError, AttributeError):   # not Linux / not glibc (musl, macOS)
        return False


def spark_master(master: str | None = None) -> str | None:
    """The master URL to set: ``master``, else ``LINEAGE_SPARK_MASTER``, else ``local[2]``; but None (keep
    spark-submit's ``--master``) when spark-submit started the JVM (it sets ``PYSPARK_GATEWAY_PORT``)."""
    master = master or os.environ.get("LINEAGE_SPARK_MASTER")
    if master or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return master
    return "local[2]"


def build_spark_session(app_name: str = "lineage-processor", master: str | None = None,
                        local_dir: str | None = None, shuffle_partitions: int = 4,
                        extra_conf: dict[str, str] | None = None, memory: SparkMemorySettings | None = None) -> Any:
    """Build (or get) the SparkSession. ``PYSPARK_PYTHON`` is pinned to this interpreter (in local mode through
    :func:`stream_processor.spark_python.spark_python`'s launcher) so Python workers connect back; the RocksDB
    state store is used for stateful operators; ``memory`` (default: :class:`SparkMemorySettings` from the
    environment) bounds what it holds."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - install hint
        from schemas.errors import ConfigurationError

        raise ConfigurationError("the processor needs Spark: pip install 'lineage-stream[processor]'") from exc
    # py4j's DEBUG log echoes every JVM call with its arguments, option values such as SASL
    # passwords included (and INFO is a line per callback): WARNING, whatever the root level.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    master = spark_master(master)
    # this interpreter; in local mode through a launcher without PySpark's source zips on PYTHONPATH, so Spark's
    # Python processes (the data-source planners of every query above all) import the installed pyspark with its
    # bytecode caches (stream_processor/spark_python.py). Another interpreter a user chose is kept.
    python = spark_python(master)
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        # a launcher in the environment (an earlier local session's, a parent's) is replaced too: a cluster's
        # executors get the interpreter itself
        if os.environ.get(name) in (None, "", sys.executable) or is_launcher(os.environ.get(name)):
            os.environ[name] = python
    memory = memory or SparkMemorySettings()
    if memory.malloc_arena_max:   # the local JVM inherits this process's environment, its Python workers the JVM's
        os.environ.setdefault("MALLOC_ARENA_MAX", str(memory.malloc_arena_max))
        limit_malloc_arenas(memory.malloc_arena_max)   # and this process: the variable only acts at a start
    # read by the worker daemon a local JVM starts (it inherits this environment); executors get spark.executorEnv
    os.environ[WORKER_NICE_VARIABLE] = str(memory.python_worker_nice)
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        # a changelog per batch, snapshots in the background: no full RocksDB checkpoint copied every batch
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        # the dedupe's shuffle moves packed rows whose bulk (the event text) is LZ4 already (decode.pack_row):
        # compressing them again cost the JVM ~0.01 ms per event for little (lineage bench --events 40000,
        # 2+2 interleaved runs, 2026-11-26: JVM 0.096 -> 0.087 ms/event in the drain)
        .config("spark.shuffle.compress", "false")
        # imports from the installed pyspark, not from pyspark.zip (stream_processor/spark_daemon.py)
        .config("spark.python.daemon.module", "stream_processor.spark_daemon")
        # Only when this call starts the JVM (local mode): see DRIVER_JAVA_OPTIONS.
        .config("spark.driver.extraJavaOptions",
                os.environ.get("LINEAGE_SPARK_DRIVER_JAVA_OPTIONS", DRIVER_JAVA_OPTIONS))
    )
    if master:
        builder = builder.master(master)
    for key, value in memory.spark_conf().items():
        builder = builder.config(key, value)
    if local_dir:
        builder = builder.config("spark.local.dir", local_dir)
    event_log = os.environ.get("LINEAGE_SPARK_EVENT_LOG")
    if event_log:   # Spark's event log, for benchmarks/spark_timeline.py (where a micro-batch's time goes)
        os.makedirs(event_log, exist_ok=True)
        builder = (builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.compress", "false")
                   .config("spark.eventLog.dir", "file://" + os.path.abspath(event_log)))
    extra = dict(extra_conf or {})
    if "spark.hadoop.fs.file.impl" not in extra:
        # local mode: checkpoint files get their permissions without a chmod subprocess each (stream_processor/localfs.py)
        from .localfs import local_fs_conf

        extra.update(local_fs_conf(master, extra.get("spark.driver.extraClassPath")))
    for key, value in extra.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if not session.conf.get("spark.sql.streaming.checkpointFileManagerClass", None):
        manager = _fs_checkpoint_manager(session)
        if manager:
            session.conf.set("spark.sql.streaming.checkpointFileManagerClass", manager)
    return session


def _fs_checkpoint_manager(session: Any) -> str | None:
    """The first of :data:`FS_CHECKPOINT_MANAGERS` this Spark has (None: keep Spark's default)."""
    jvm = session.sparkContext._jvm
    for name in FS_CHECKPOINT_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name)
            return name
        except Exception:  # noqa: BLE001 - py4j raises its own error types
            continue
    return None


#: The Python workers Spark's driver starts to plan a Python data source (``lineage_kafka``): looking sources up
#: at the session's start, creating the source and planning its read at a query's start. Each has a factory of its
#: own: a ``pyspark.daemon`` process and the worker it forked, kept idle in the factory's pool for the next query.
PLANNER_WORKER_MODULES = frozenset({
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
})


def release_planner_workers(spark: Any) -> int:
    """Stop the driver's idle data-source planning workers (:data:`PLANNER_WORKER_MODULES`) and forget their
    factories; returns how many factories were stopped. Call it once a query is running (its first micro-batch).

    A running streaming query never uses them again (its micro-batches are planned by the source's own
    ``python_streaming_source_runner``), yet they stayed for the session's life: in ``lineage bench`` six processes,
    ~370 MB of RSS, 13 % of the bench's process tree (docs/PERFORMANCE.md, session 29). A factory is dropped from
    ``SparkEnv``'s map as well as stopped, so the next query's planning (a restart, the bench's second query) gets
    a fresh one, as the session's first query did; a factory with a worker in use (a query being planned right
    now) is left alone. Spark keeps that map private, so it is reached by reflection; where that fails (another
    Spark version) nothing is stopped and the reason is logged at DEBUG: this only gives memory back.
    """
    try:
        jvm = spark.sparkContext._jvm
        as_java = python_worker_factories(jvm)
        stopped = 0
        for key in list(as_java.keySet()):   # a copy: the map changes below
            if key.workerModule() not in PLANNER_WORKER_MODULES:
                continue
            factory = as_java.get(key)
            if _busy_workers(jvm, factory):
                continue   # a worker of it is busy: a query is being planned
            as_java.remove(key)
            factory.stop()
            stopped += 1
    except Exception as exc:  # noqa: BLE001 - py4j raises its own error types; memory only, never fatal
        log.debug("planner workers not released: %s", exc)
        return 0
    if stopped:
        log.info("stopped %d idle data-source planning worker pool(s)", stopped)
    return stopped


def python_worker_factories(jvm: Any) -> Any:
    """``SparkEnv``'s Python worker factories by key, as a ``java.util.Map`` view of Spark's private Scala map (changes
    to it change Spark's)."""
    # fields only: py4j calling a method of SparkEnv looks up all its methods, and one of them names a protobuf
    # class that is not on the driver's classpath (NoClassDefFoundError, and py4j loses the connection)
    env = _field(jvm, "org.apache.spark.SparkEnv$", "env", _field(jvm, "org.apache.spark.SparkEnv$", "MODULE$"))
    factories = _field(jvm, "org.apache.spark.SparkEnv", "pythonWorkers", env)   # a Scala mutable HashMap
    return jvm.scala.jdk.javaapi.CollectionConverters.asJava(factories)


def _busy_workers(jvm: Any, factory: Any) -> int:
    """How many of ``factory``'s workers are handed out now: open, and not in its idle queue.

    The factory's worker map is not that count: its idle monitor stops a worker idle for a minute (closes its
    channel) and takes it off the idle queue, but leaves it in the map until the JVM collects it. Comparing the
    map's size with the idle queue's took such a stopped worker for a busy one, and its pool was never released
    (two failures of tests/test_planner_workers.py in CI, 2026-11-29, where every planning pool had one).
    """
    workers = _field(jvm, "org.apache.spark.api.python.PythonWorkerFactory", "daemonWorkers", factory)
    idle = jvm.scala.jdk.javaapi.CollectionConverters.asJava(factory.idleWorkers())
    return sum(1 for worker in list(jvm.scala.jdk.javaapi.CollectionConverters.asJava(workers).keySet())
               if worker.channel().isOpen() and not idle.contains(worker))


def _field(jvm: Any, class_name: str, name: str, obj: Any = None) -> Any:
    """Field ``name`` of ``obj`` (None: a static field) of class ``class_name``, private or not (py4j, by reflection)."""
    field = jvm.java.lang.Class.forName(class_name).getDeclaredField(name)
    field.setAccessible(True)
    return field.get(obj)
