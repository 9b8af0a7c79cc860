"""stream_processor.worker_heap: a Python worker's imports are frozen once, and the store's batch scope keeps them so."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

_SCRIPT = r"""
import gc
from sink.heap import frozen_heap
from stream_processor.worker_heap import freeze_imports

assert gc.get_freeze_count() == 0
freeze_imports()                       # not in a Spark task: the caller's heap is left alone
assert gc.get_freeze_count() == 0
freeze_imports(spark_task_only=False)
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen          # the interpreter's and the imported modules' objects
garbage = [[] for _ in range(10)]
freeze_imports(spark_task_only=False)  # once per process: nothing new is frozen
assert gc.get_freeze_count() == frozen
with frozen_heap():                    # the store's scope pauses the collector rather than unfreezing ours
    assert not gc.isenabled()
assert gc.isenabled() and gc.get_freeze_count() == frozen
print("ok")
"""


def test_imports_are_frozen_once_and_the_store_scope_leaves_them_frozen():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_nothing_is_frozen_with_the_collector_disabled():
    script = ("import gc\ngc.disable()\nfrom stream_processor.worker_heap import freeze_imports\n"
              "freeze_imports(spark_task_only=False)\nassert gc.get_freeze_count() == 0 and not gc.isenabled()\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr



@pytest.mark.integration
def test_a_spark_task_freezes_its_workers_imports(spark):
    import pyarrow as pa

    def frozen(batches):
        import gc

        from stream_processor.worker_heap import freeze_imports

        for _ in batches:
            freeze_imports()
            yield pa.RecordBatch.from_arrays([pa.array([gc.get_freeze_count()], pa.int64())], ["frozen"])

    rows = spark.range(2, numPartitions=2).mapInArrow(frozen, "frozen long").collect()
    assert all(r["frozen"] > 1000 for r in rows)   # the worker's modules, not just a handful of objects
