"""The SparkSession the processor runs in: local mode by default, tuned for a small machine."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["build_spark_session", "DRIVER_JAVA_OPTIONS"]

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


def build_spark_session(app_name: str = "lineage-processor", master: str | None = None,
                        local_dir: str | None = None, shuffle_partitions: int = 4,
                        extra_conf: dict[str, str] | None = None) -> Any:
    """Build (or get) the SparkSession. ``PYSPARK_PYTHON`` is pinned to this interpreter so
    Python workers connect back; the RocksDB state store is used for stateful operators."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - install hint
        from schemas.errors import ConfigurationError

        raise ConfigurationError("the processor needs Spark: pip install 'lineage-stream[processor]'") from exc
    # py4j's DEBUG log echoes every JVM call with its arguments, option values such as SASL
    # passwords included (and INFO is a line per callback): WARNING, whatever the root level.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master or os.environ.get("LINEAGE_SPARK_MASTER", "local[2]"))
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        # a changelog per batch, snapshots in the background: no full RocksDB checkpoint copied every batch
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        # imports from the installed pyspark, not from pyspark.zip (stream_processor/spark_daemon.py)
        .config("spark.python.daemon.module", "stream_processor.spark_daemon")
        .config("spark.driver.memory", os.environ.get("LINEAGE_SPARK_DRIVER_MEMORY", "2g"))
        # Only when this call starts the JVM (local mode): see DRIVER_JAVA_OPTIONS.
        .config("spark.driver.extraJavaOptions",
                os.environ.get("LINEAGE_SPARK_DRIVER_JAVA_OPTIONS", DRIVER_JAVA_OPTIONS))
    )
    if local_dir:
        builder = builder.config("spark.local.dir", local_dir)
    event_log = os.environ.get("LINEAGE_SPARK_EVENT_LOG")
    if event_log:   # Spark's event log, for benchmarks/spark_timeline.py (where a micro-batch's time goes)
        os.makedirs(event_log, exist_ok=True)
        builder = (builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.compress", "false")
                   .config("spark.eventLog.dir", "file://" + os.path.abspath(event_log)))
    for key, value in (extra_conf or {}).items():
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
