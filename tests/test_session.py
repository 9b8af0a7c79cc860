"""The SparkSession's settings that the processor's performance depends on."""

from __future__ import annotations

import types

import pytest


@pytest.mark.integration
def test_checkpoints_use_the_rename_based_manager_and_rocksdb_changelogs(spark):
    from stream_processor.session import FS_CHECKPOINT_MANAGERS

    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") in FS_CHECKPOINT_MANAGERS
    assert spark.conf.get("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled") == "true"


@pytest.mark.integration
def test_a_stateful_query_resumes_from_its_checkpoint(spark, tmp_path):
    """With those settings a dedupe's state survives a restart: a value seen before the restart is a
    duplicate after it."""
    import json

    source, out = tmp_path / "in", tmp_path / "out"
    source.mkdir()

    def run() -> None:
        df = (spark.readStream.schema("v string, ts timestamp").json(str(source))
              .withWatermark("ts", "1 hour").dropDuplicates(["v", "ts"]))
        q = (df.writeStream.format("json").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination(120)

    (source / "1.json").write_text("\n".join(json.dumps({"v": v, "ts": "2026-01-01T00:00:00Z"}) for v in "ab"))
    run()
    (source / "2.json").write_text("\n".join(json.dumps({"v": v, "ts": "2026-01-01T00:00:00Z"}) for v in "bc"))
    run()
    rows = sorted(r["v"] for r in spark.read.schema("v string, ts timestamp").json(str(out)).collect())
    assert rows == ["a", "b", "c"]


@pytest.mark.integration
def test_python_workers_import_the_installed_pyspark(spark):
    """Workers forked from stream_processor.spark_daemon have no pyspark / py4j zip nor a jar on sys.path, and
    no zip importer (Spark 4.3 puts spark-core's jar there: each task re-read its directory)."""
    import pyarrow as pa

    def zips(batches):
        import sys

        for _ in batches:
            found = [p for p in sys.path if (p.endswith(".zip") and ("pyspark" in p or "py4j" in p))
                     or p.endswith(".jar")]
            found += [p for p, importer in sys.path_importer_cache.items()
                      if type(importer).__name__ == "zipimporter"]
            yield pa.RecordBatch.from_arrays([pa.array([len(found)], pa.int32())], ["zips"])

    assert spark.conf.get("spark.python.daemon.module") == "stream_processor.spark_daemon"
    rows = spark.range(2, numPartitions=2).mapInArrow(zips, "zips int").collect()
    assert [r["zips"] for r in rows] == [0, 0]


@pytest.mark.unit
def test_zips_stay_when_pyspark_is_not_installed_beside_them(monkeypatch, tmp_path):
    import sys

    from stream_processor.spark_daemon import use_installed_pyspark

    zip_path = str(tmp_path / "pyspark.zip")
    monkeypatch.setattr(sys, "path", [zip_path, str(tmp_path / "empty")])
    assert use_installed_pyspark() == []
    assert sys.path[0] == zip_path
    (tmp_path / "site" / "pyspark").mkdir(parents=True)
    (tmp_path / "site" / "pyspark" / "__init__.py").write_text("")
    (tmp_path / "site" / "py4j").mkdir()
    (tmp_path / "site" / "py4j" / "__init__.py").write_text("")
    jar = str(tmp_path / "spark-core_2.13-4.3.0.jar")
    monkeypatch.setattr(sys, "path", [zip_path, jar, str(tmp_path / "site")])
    inside_jar = jar + "/org"     # a namespace package an earlier import found in the jar (stdlib copy's org.python)
    monkeypatch.setitem(sys.path_importer_cache, inside_jar, object())
    monkeypatch.setitem(sys.modules, "org", types.SimpleNamespace(__path__=[inside_jar]))
    assert use_installed_pyspark() == [zip_path, jar]
    assert sys.path == [str(tmp_path / "site")]
    assert inside_jar not in sys.path_importer_cache and "org" not in sys.modules


@pytest.mark.unit
def test_the_driver_limits_its_own_malloc_arenas():
    """MALLOC_ARENA_MAX in the environment only reaches the processes started after it (the JVM, its workers);
    the driver sets the limit on itself through glibc's mallopt."""
    import platform

    from stream_processor.session import limit_malloc_arenas

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        assert limit_malloc_arenas(2) is False
    else:
        assert limit_malloc_arenas(2) is True
