"""The worker daemon's stand-in for ``gc`` (stream_processor/spark_daemon.py): pure, no Spark."""

from __future__ import annotations

import gc

from stream_processor.spark_daemon import YoungCollections


def test_task_end_collection_leaves_the_oldest_generation_alone() -> None:
    shim = YoungCollections()
    before = [s["collections"] for s in gc.get_stats()]
    shim.collect()            # what pyspark.daemon calls after every task of a reused worker
    after = [s["collections"] for s in gc.get_stats()]
    assert after[1] == before[1] + 1      # the young generations were collected
    assert after[2] == before[2]          # the oldest was not


def test_task_end_collection_still_frees_young_cycles() -> None:
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert YoungCollections().collect() >= 2


def test_everything_else_is_the_gc_module() -> None:
    shim = YoungCollections()
    assert shim.isenabled is gc.isenabled
    assert shim.get_threshold() == gc.get_threshold()
