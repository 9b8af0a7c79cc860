"""The Python worker daemon Spark forks its Python workers from (``spark.python.daemon.module``).

Spark starts ``python -m pyspark.daemon`` with ``pyspark.zip`` and py4j's source zip first on the
``PYTHONPATH``. Modules imported from a zip are compiled from source every time (there is no ``.pyc``
cache for zip imports), and every new worker's first task calls ``importlib.invalidate_caches()``, which
makes each zip importer read its archive's directory again. py-spy over ``lineage bench --events 30000``
put 25 s of the Python workers' CPU in imports, 7.6 s of it in those directory reads.

When ``pyspark`` and ``py4j`` are also installed as packages (``pip install pyspark``: the normal case
here), this module drops the two zips (and the ``spark-core`` jar Spark 4.3 adds) from ``sys.path`` and from the importer cache before anything is
imported, so the daemon and its workers import the installed packages with their bytecode caches. Without
installed packages (a Spark distribution used only through its zips) the path is left alone. Then it runs
PySpark's own daemon unchanged.

It also imports, once, what every worker of ours imports on its first task (:data:`PRELOAD`: PySpark's worker,
pandas, pyarrow, the Kafka and PostgreSQL clients, our decode / recombine / staging modules - the Kafka
source's reader runs decode itself with ``decode=packed`` - and ``jsonschema_rs``, which decode's facet
validation imports on its first event) and freezes them out of the cyclic collector's sight, before the
daemon forks: a worker starts with them in place (shared copy-on-write pages) instead of importing them again. Workers are forked again whenever the idle pool
(``LINEAGE_SPARK_PYTHON_IDLE_WORKERS``) is smaller than the workers a micro-batch needs, and py-spy over
``lineage bench --events 10000`` (2026-11-25) put 36 % of the workers' busy time in those imports. A module
that fails to import is left to the worker (which reports the error where it happens).

Before anything else it lowers its own CPU priority, and so that of every worker it forks, by
``LINEAGE_SPARK_PYTHON_WORKER_NICE`` (:func:`lower_priority`; the setting's doc in stream_processor/session.py
says why and what it measured).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

#: Imported by the daemon before it forks (module doc). Nothing here starts a thread or opens a connection.
PRELOAD = (
    "pyspark.worker", "pyspark.sql.pandas.serializers", "pyspark.sql.worker.plan_data_source_read",
    "numpy", "pandas", "pyarrow", "pyarrow.ipc", "fastavro", "orjson", "confluent_kafka", "psycopg",
    "jsonschema_rs", "schemas.validate", "schemas.codec", "producers",
    "stream_processor.decode", "stream_processor.dedupe", "stream_processor.recombine",
    "stream_processor.kafka_source", "stream_processor.writer", "stream_processor.publish",
    "sink.derive", "sink.postgres", "sink.annotations_lookup",
)


def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules`` (those that import cleanly), then collect and freeze the heap; returns the failures."""
    import gc
    import importlib

    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the worker imports it again and reports the error in its task
            failed.append(name)
    if gc.isenabled():
        gc.collect()
        gc.freeze()
    return failed


#: The variable :func:`lower_priority` reads (:attr:`stream_processor.session.SparkMemorySettings.python_worker_nice`).
WORKER_NICE_VARIABLE = "LINEAGE_SPARK_PYTHON_WORKER_NICE"


def lower_priority(environ: Mapping[str, str] = os.environ) -> int:
    """``os.nice`` by the variable's value (a whole number, 0 to 19; anything else, or 0, changes nothing); returns
    the niceness the process runs at. Forked workers inherit it. A system that refuses keeps the old priority."""
    try:
        step = int(environ.get(WORKER_NICE_VARIABLE, "0"))
    except ValueError:
        step = 0
    if 0 < step <= 19:
        try:
            return os.nice(step)
        except OSError:   # e.g. a sandbox without setpriority: run at the old priority rather than not at all
            pass
    return os.nice(0)


def _installed_elsewhere(package: str, zips: list[str]) -> bool:
    return any(os.path.isfile(os.path.join(p, package, "__init__.py"))
               for p in sys.path if p and p not in zips and os.path.isdir(p))


def use_installed_pyspark() -> list[str]:
    """Drop PySpark's and py4j's zips, and any jar, from ``sys.path`` when both are installed as packages;
    returns them. Spark 4.3 also puts ``spark-core_*.jar`` on the workers' path (PySpark's sources are in it):
    a zip importer over a ~15 MB jar, whose directory ``importlib.invalidate_caches()`` read again on every
    task (``setup_spark_files``): 167 of 1,572 py-spy samples of the workers in ``lineage bench --events
    20000`` (2026-11-25, session 10), i.e. ~4 s of CPU."""
    zips = [p for p in sys.path if (p.endswith(".zip") and os.path.basename(p).startswith(("pyspark", "py4j")))
            or p.endswith(".jar")]
    if not zips or not (_installed_elsewhere("pyspark", zips) and _installed_elsewhere("py4j", zips)):
        return []
    sys.path[:] = [p for p in sys.path if p not in zips]
    # and whatever an import found inside them before this ran (the package's __init__ runs first, and the
    # stdlib's copy module looks for Jython's org.python.core: a namespace package "org" inside the jar)
    inside = tuple(z + os.sep for z in zips)
    for key in [k for k in sys.path_importer_cache if k in zips or k.startswith(inside)]:
        del sys.path_importer_cache[key]
    for name, module in list(sys.modules.items()):
        places = [getattr(module, "__file__", None) or "", *(getattr(module, "__path__", None) or ())]
        if any(str(place).startswith(inside) for place in places):
            del sys.modules[name]
    return zips


class YoungCollections:
    """Stands in for the ``gc`` module inside ``pyspark.daemon``, whose reused worker calls ``gc.collect()``
    after every task: a full collection walks every object the worker made since it was forked (module
    state, caches, the connection pool), and py-spy over ``lineage bench --events 20000`` (2026-11-26) put 71
    of the workers' 655 samples (~1.8 CPU-s) on that one line. Here it collects the two young generations,
    where a task's garbage cycles are; the oldest generation is collected by the interpreter's own
    thresholds, as in any Python process. Everything else is the ``gc`` module's."""

    @staticmethod
    def collect(generation: int = 2) -> int:
        import gc

        return gc.collect(min(generation, 1))

    def __getattr__(self, name: str):  # noqa: ANN204 - whatever the gc module has
        import gc

        return getattr(gc, name)


if __name__ == "__main__":
    lower_priority()
    use_installed_pyspark()
    preload()
    from pyspark import daemon

    daemon.gc = YoungCollections()  # type: ignore[assignment] - see YoungCollections

    daemon.manager()
