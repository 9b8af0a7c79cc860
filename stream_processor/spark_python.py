"""The interpreter Spark starts its Python processes with in local mode: this one, without PySpark's source zips.

Spark puts ``pyspark.zip``, py4j's source zip and (Spark 4.3) the ``spark-core`` jar first on the ``PYTHONPATH`` of
every Python process it starts. Python compiles a module imported from a zip from source every time (a zip import
has no ``.pyc`` cache), so each such process compiles the PySpark modules it needs. The stream's worker daemon drops
the zips itself (stream_processor/spark_daemon.py), but the driver's data-source planners do not go through it:
Spark starts them as ``python -m pyspark.daemon pyspark.sql.worker.<step>`` (looking the sources up, creating one,
planning its read) and ``python -m pyspark.sql.streaming.python_streaming_source_runner``, again for every query
(stream_processor/session.py releases them once a query runs). py-spy over ``lineage bench --events 40000``
(2026-12-07, session 48) put about half of each planner's CPU in ``zipimport``'s ``_compile_source``; importing
one step's module took 0.54-0.77 s of CPU from the zips against 0.21-0.28 s from the installed package.

:func:`spark_python` writes, once, a small POSIX shell launcher that drops those zips and jars from ``PYTHONPATH``
and runs this interpreter, so every Python process a local Spark starts imports the installed ``pyspark`` and
``py4j`` with their bytecode caches. It is cached under ``$XDG_CACHE_HOME/lineage/spark-python/`` (``~/.cache``),
keyed by its text (which names the interpreter). Only when both packages are installed as directories (the
driver's own imports say so), on a POSIX system, and in local mode: a cluster's executors would need the file at
the same path. ``LINEAGE_SPARK_PYTHON_LAUNCHER=false`` turns it off; without it, or when the file cannot be written,
Spark runs this interpreter as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import sys
import tempfile
from pathlib import Path

from .localfs import cache_dir, turned_off

__all__ = ["ENABLE_VARIABLE", "launcher_text", "spark_python", "packages_installed", "is_launcher"]

log = logging.getLogger(__name__)

ENABLE_VARIABLE = "LINEAGE_SPARK_PYTHON_LAUNCHER"
_NAME = "python"
_MARKER = "# Written by lineage's stream_processor/spark_python.py"

#: The launcher. ``set -f``: an entry is never expanded as a pattern; an empty entry inside the path (the working
#: directory) is kept, a leading one is not.
_TEMPLATE = """#!/bin/sh
{marker}: runs {executable} for Spark without PySpark's source
# zips (and jars) on PYTHONPATH, so the installed pyspark and py4j are imported with their bytecode caches.
set -f
keep=
IFS=:
for entry in ${{PYTHONPATH-}}; do
  case $entry in
    */pyspark.zip|*/py4j-*.zip|*.jar) ;;
    *) keep=${{keep:+$keep:}}$entry ;;
  esac
done
unset IFS
if [ -n "$keep" ]; then PYTHONPATH=$keep; export PYTHONPATH; else unset PYTHONPATH; fi
exec {quoted} "$@"
"""


def launcher_text(executable: str) -> str:
    """The launcher's text for ``executable``."""
    return _TEMPLATE.format(marker=_MARKER, executable=executable.replace("\n", " "), quoted=shlex.quote(executable))


def is_launcher(path: str | None) -> bool:
    """Whether ``path`` is a launcher this module wrote (for any interpreter): a ``PYSPARK_PYTHON`` a parent process
    of ours left in the environment, which a cluster session must not hand its executors."""
    if not path:
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(len(_MARKER) + 16)
    except OSError:
        return False
    return _MARKER.encode() in head


def packages_installed() -> bool:
    """Whether this process imports ``pyspark`` and ``py4j`` from directories (installed packages), not from zips."""
    try:
        import py4j
        import pyspark
    except ImportError:
        return False
    files = [getattr(m, "__file__", None) for m in (pyspark, py4j)]
    return all(f and Path(f).parent.is_dir() for f in files)


def spark_python(master: str | None, executable: str = sys.executable, cache_root: Path | None = None) -> str:
    """The interpreter to give Spark (``PYSPARK_PYTHON``) for ``master``: the launcher in local mode (module doc),
    written now if missing; ``executable`` itself for a cluster, when turned off, off POSIX, without installed
    packages, or when the launcher cannot be written (logged)."""
    if not (master or "").startswith("local") or os.name != "posix" or turned_off(ENABLE_VARIABLE) or not executable:
        return executable
    if not os.path.isfile("/bin/sh") or not packages_installed():
        return executable
    text = launcher_text(executable)
    target = (cache_root or cache_dir("spark-python")) / hashlib.sha256(text.encode()).hexdigest()[:16] / _NAME
    if target.is_file() and os.access(target, os.X_OK):
        return str(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".launcher-")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)   # atomic: a concurrent writer's file is the same text
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.warning("could not write the Spark Python launcher %s (%s): Spark's Python processes import PySpark "
                    "from its zips", target, exc)
        return executable
    return str(target)
