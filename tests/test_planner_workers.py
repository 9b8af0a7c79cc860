"""The driver's data-source planning workers are stopped once a query runs, and come back for the next query.

Spark starts a Python worker pool (a ``pyspark.daemon`` and a worker) per planning step of a Python data source:
looking sources up, creating one, planning its read. A running stream never uses them again; they held ~370 MB of
the bench's process tree (docs/PERFORMANCE.md, session 29). ``release_planner_workers`` stops them; the writer
calls it at a query's first micro-batch.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.rss_by_process import tree_pids
from schemas.codec import encode_single_object
from stream_processor.session import PLANNER_WORKER_MODULES, python_worker_factories, release_planner_workers
from stream_processor.testing import StreamHarness, produce, run_event, test_settings
from tests.conftest import assert_eventually

pytestmark = [pytest.mark.integration]


def _planner_processes() -> list[int]:
    """Pids of this test process's descendants (its driver JVM's children) running a data-source planning worker."""
    found = []
    for pid in tree_pids(os.getpid()):
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(w in PLANNER_WORKER_MODULES for w in words):
            found.append(pid)
    return found


def _tiny_source(spark):
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Reader(DataSourceReader):
        def read(self, partition):
            yield (1,)
            yield (2,)

    class Tiny(DataSource):
        @classmethod
        def name(cls):
            return "lineage_test_tiny"

        def schema(self):
            return "x int"

        def reader(self, schema):
            return Reader()

    spark.dataSource.register(Tiny)
    return lambda: spark.read.format("lineage_test_tiny").load().count()


def test_release_stops_the_idle_planners_and_the_next_query_gets_new_ones(spark) -> None:
    count = _tiny_source(spark)
    assert count() == 2
    assert _planner_processes(), "planning a Python data source read started no planner worker"
    assert release_planner_workers(spark) >= 1
    assert_eventually(lambda: not _planner_processes(), timeout=10)
    assert count() == 2                     # planned again, by fresh pools
    assert _planner_processes()
    assert release_planner_workers(spark) >= 1
    assert_eventually(lambda: not _planner_processes(), timeout=10)


def _stop_idle_planners_as_the_monitor_does(spark) -> list:
    """What a factory's idle monitor does to a worker idle for a minute: off the idle queue, its channel closed, yet
    still in the factory's worker map until the JVM collects it. Returns the stopped workers: holding them here keeps
    them in that map (as a collection that has not run yet would), so the test does not depend on the JVM's GC."""
    jvm = spark.sparkContext._jvm
    factories = python_worker_factories(jvm)
    stopped = []
    for key in list(factories.keySet()):
        if key.workerModule() in PLANNER_WORKER_MODULES:
            factory = factories.get(key)
            stopped += list(jvm.scala.jdk.javaapi.CollectionConverters.asJava(factory.idleWorkers()))
            getattr(factory, "org$apache$spark$api$python$PythonWorkerFactory$$cleanupIdleWorkers")()
    return stopped


def test_a_pool_whose_idle_worker_the_monitor_stopped_is_still_released(spark) -> None:
    count = _tiny_source(spark)
    assert count() == 2
    stopped = _stop_idle_planners_as_the_monitor_does(spark)
    assert stopped, "no idle planner worker to stop"
    assert not any(w.channel().isOpen() for w in stopped)
    assert count() == 2                     # planned by new workers of the same pools
    assert release_planner_workers(spark) >= 1
    assert_eventually(lambda: not _planner_processes(), timeout=10)


def test_a_running_stream_holds_no_planner_workers(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path) -> None:
    topic = topic_names["events"]
    produce(kafka_bootstrap, topic, [(encode_single_object(run_event(job=f"j{i}")), None, None) for i in range(3)])
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"))
    with StreamHarness(spark, settings) as h:
        h.drain()
        assert h.total("staged") > 0
        assert_eventually(lambda: not _planner_processes(), timeout=10)
        produce(kafka_bootstrap, topic, [(encode_single_object(run_event(job="later")), None, None)])
        h.drain()                           # the stream goes on without them
    # a second query in the same session is planned again (fresh pools) and runs
    with StreamHarness(spark, test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck2"))) as h2:
        h2.drain()
        assert h2.total("consumed") >= 4
