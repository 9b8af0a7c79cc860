"""The worker daemon's stand-in for ``gc`` (stream_processor/spark_daemon.py): pure, no Spark."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from stream_processor.spark_daemon import WORKER_NICE_VARIABLE, YoungCollections, lower_priority


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


@pytest.mark.parametrize(("value", "step"), [("5", 5), ("0", 0), ("", 0), ("x", 0), ("-3", 0), ("25", 0)])
def test_the_daemon_lowers_its_priority_by_the_variable_only(value: str, step: int) -> None:
    """A niceness only goes up, and for good: measured in a child interpreter, not in this one."""
    code = ("import os; from stream_processor.spark_daemon import lower_priority; "
            "before = os.nice(0); after = lower_priority(); print(after - before, os.nice(0) == after)")
    env = {**os.environ, WORKER_NICE_VARIABLE: value}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    before = os.nice(0)
    assert out.split() == [str(min(19, before + step) - before), "True"]


def test_without_the_variable_the_priority_stays() -> None:
    assert lower_priority({}) == os.nice(0)
