"""The Spark memory bounds (stream_processor/session.py SparkMemorySettings) and the master URL."""

from __future__ import annotations

import argparse

import pytest

from stream_processor.session import SparkMemorySettings, spark_master


@pytest.mark.unit
def test_memory_bounds_default_to_a_laptop_share_and_read_the_environment(monkeypatch):
    conf = SparkMemorySettings().spark_conf()
    assert conf["spark.driver.memory"] == "640m"
    assert conf["spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"] == "true"
    assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "64"
    assert conf["spark.python.factory.idleWorkerMaxPoolSize"] == "2"
    assert conf["spark.executorEnv.MALLOC_ARENA_MAX"] == "2"
    assert conf["spark.executorEnv.LINEAGE_SPARK_PYTHON_WORKER_NICE"] == "5"
    monkeypatch.setenv("LINEAGE_SPARK_DRIVER_MEMORY", "3g")
    monkeypatch.setenv("LINEAGE_SPARK_ROCKSDB_MEMORY_MB", "256")
    monkeypatch.setenv("LINEAGE_SPARK_MALLOC_ARENA_MAX", "0")
    monkeypatch.setenv("LINEAGE_SPARK_MASTER", "local[1]")   # another component's variable: ignored here
    conf = SparkMemorySettings().spark_conf()
    assert conf["spark.driver.memory"] == "3g"
    assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "256"
    assert "spark.executorEnv.MALLOC_ARENA_MAX" not in conf
    monkeypatch.setenv("LINEAGE_SPARK_PYTHON_WORKER_NICE", "0")
    assert SparkMemorySettings().spark_conf()["spark.executorEnv.LINEAGE_SPARK_PYTHON_WORKER_NICE"] == "0"
    monkeypatch.setenv("LINEAGE_SPARK_PYTHON_WORKER_NICE", "20")
    with pytest.raises(ValueError, match="python_worker_nice"):
        SparkMemorySettings()
    monkeypatch.delenv("LINEAGE_SPARK_PYTHON_WORKER_NICE")
    monkeypatch.setenv("LINEAGE_SPARK_ROCKSDB_MEMORY_MB", "0")
    with pytest.raises(ValueError, match="rocksdb_memory_mb"):
        SparkMemorySettings()


@pytest.mark.unit
def test_master_flag_env_and_spark_submit(monkeypatch):
    monkeypatch.delenv("LINEAGE_SPARK_MASTER", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert spark_master() == "local[2]"
    assert spark_master("spark://h:7077") == "spark://h:7077"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4711")   # under spark-submit: its --master applies
    assert spark_master() is None
    assert spark_master("local[1]") == "local[1]"
    monkeypatch.setenv("LINEAGE_SPARK_MASTER", "spark://env:7077")
    assert spark_master() == "spark://env:7077"


@pytest.mark.unit
def test_process_takes_a_master_flag(tmp_path):
    from lineage.commands.process import build_settings, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["process", "--bootstrap-servers", "b:9092", "--postgres-dsn", "postgresql://x/y",
                              "--data-dir", str(tmp_path), "--master", "spark://m:7077"])
    assert build_settings(args).spark_master == "spark://m:7077"


@pytest.mark.integration
def test_the_session_runs_with_the_bounds(spark):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage") == "true"
    assert conf.get("spark.python.factory.idleWorkerMaxPoolSize") == "2"
    assert spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() <= 1024 * 1024 * 1024


@pytest.mark.integration
def test_python_workers_run_below_the_driver_s_priority(spark):
    """The worker daemon (stream_processor/spark_daemon.py) lowers its niceness by the setting's default, 5,
    before it forks: every task's worker runs at the driver's niceness + 5 (at most 19)."""
    import os

    import pyarrow as pa

    def niceness(batches):
        import os

        for _ in batches:
            yield pa.RecordBatch.from_arrays([pa.array([os.nice(0)], pa.int32())], ["nice"])

    rows = spark.range(2, numPartitions=2).mapInArrow(niceness, "nice int").collect()
    assert [r["nice"] for r in rows] == [min(19, os.nice(0) + 5)] * 2


@pytest.mark.unit
def test_a_python_worker_start_timeout_is_recognised():
    from stream_processor.runner import _worker_start_timeout

    assert _worker_start_timeout(RuntimeError("org.apache.spark.SparkException: Python worker failed to connect back."))
    assert not _worker_start_timeout(RuntimeError("Python worker exited unexpectedly (crashed)"))
