"""The Python worker daemon Spark forks its Python workers from (``spark.python.daemon.module``).

Spark starts ``python -m pyspark.daemon`` with ``pyspark.zip`` and py4j's source zip first on the
``PYTHONPATH``. Modules imported from a zip are compiled from source every time (there is no ``.pyc``
cache for zip imports), and every new worker's first task calls ``importlib.invalidate_caches()``, which
makes each zip importer read its archive's directory again. py-spy over ``lineage bench --events 30000``
put 25 s of the Python workers' CPU in imports, 7.6 s of it in those directory reads.

When ``pyspark`` and ``py4j`` are also installed as packages (``pip install pyspark``: the normal case
here), this module drops the two zips from ``sys.path`` and from the importer cache before anything is
imported, so the daemon and its workers import the installed packages with their bytecode caches. Without
installed packages (a Spark distribution used only through its zips) the path is left alone. Then it runs
PySpark's own daemon unchanged.
"""

from __future__ import annotations

import os
import sys


def _installed_elsewhere(package: str, zips: list[str]) -> bool:
    return any(os.path.isfile(os.path.join(p, package, "__init__.py"))
               for p in sys.path if p and p not in zips and os.path.isdir(p))


def use_installed_pyspark() -> list[str]:
    """Drop PySpark's and py4j's zips from ``sys.path`` when both are installed as packages; returns them."""
    zips = [p for p in sys.path if p.endswith(".zip") and os.path.basename(p).startswith(("pyspark", "py4j"))]
    if not zips or not (_installed_elsewhere("pyspark", zips) and _installed_elsewhere("py4j", zips)):
        return []
    sys.path[:] = [p for p in sys.path if p not in zips]
    for p in zips:
        sys.path_importer_cache.pop(p, None)
    return zips


if __name__ == "__main__":
    use_installed_pyspark()
    from pyspark import daemon

    daemon.manager()
