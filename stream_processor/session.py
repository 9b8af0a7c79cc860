"""The SparkSession the processor runs in: local mode by default, tuned for a small machine."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["build_spark_session"]


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
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.memory", os.environ.get("LINEAGE_SPARK_DRIVER_MEMORY", "2g"))
    )
    if local_dir:
        builder = builder.config("spark.local.dir", local_dir)
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
