"""Local-mode checkpoints without a ``chmod`` subprocess per file: ``io.lineage.hadoop.NioLocalFileSystem``.

Hadoop sets the permissions of every file it creates on the local file system; without its native library (the pip
package of PySpark ships none) it does so by running ``chmod`` in a new process. A Structured Streaming micro-batch
creates several files (the offset and commit logs, each state store's changelog; each with its ``.crc``), so every
batch, and every tick of the idle source, waited on ~4 ms per file: measured through the JVM on the 2-core bench
machine (2026-12-04, session 43), a checksummed create of one file took 10.9 ms (a raw create 5.1, its
``setPermission`` alone 3.8) against a py4j round trip of 0.66 ms.

:data:`JAVA_SOURCE` (java/NioLocalFileSystem.java) is Hadoop's own checksummed local file system with only
``setPermission`` replaced: the same mode bits, set through java.nio. It is compiled on first use with the JDK's
``javac`` against this PySpark's jars, into a jar cached under ``$XDG_CACHE_HOME/lineage/java/`` (``~/.cache``)
keyed by the source's hash and the PySpark version, and :func:`local_fs_conf` gives the Spark settings that put it
on the local driver's class path as the ``file:`` file system. Without a JDK compiler, or when the build fails, it
returns nothing and Hadoop's default stays (logged once). Only for local mode: a cluster's executors would need the
jar at the same path, and its checkpoints live on a distributed file system anyway. ``LINEAGE_SPARK_NIO_LOCAL_FS=false``
turns it off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

__all__ = ["CLASS_NAME", "JAVA_SOURCE", "ENABLE_VARIABLE", "local_fs_jar", "local_fs_conf", "cache_dir", "turned_off"]

log = logging.getLogger(__name__)

CLASS_NAME = "io.lineage.hadoop.NioLocalFileSystem"
JAVA_SOURCE = Path(__file__).with_name("java") / "NioLocalFileSystem.java"
ENABLE_VARIABLE = "LINEAGE_SPARK_NIO_LOCAL_FS"
_JAR_NAME = "lineage-localfs.jar"
_failed: set[str] = set()   # build keys that failed in this process: tried (and logged) once


def _javac() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "javac").is_file():
        return str(Path(java_home) / "bin" / "javac")
    return shutil.which("javac")


def cache_dir(kind: str) -> Path:
    """``$XDG_CACHE_HOME/lineage/<kind>`` (default ``~/.cache/lineage/<kind>``): where local mode keeps what it builds
    once (this jar, stream_processor/spark_python.py's launcher)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lineage" / kind


def turned_off(variable: str) -> bool:
    """Whether the default-on switch ``variable`` is set to 0, false, no or off."""
    return os.environ.get(variable, "true").strip().lower() in ("0", "false", "no", "off")


def local_fs_jar(cache_root: Path | None = None) -> str | None:
    """The jar holding :data:`CLASS_NAME`, built now if this source and PySpark have none yet; None when it cannot be
    built (no ``javac``, no PySpark jars, a compile error: logged once per process)."""
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    source = JAVA_SOURCE.read_bytes()
    key = hashlib.sha256(source + pyspark.__version__.encode()).hexdigest()[:16]
    target = (cache_root or cache_dir("java")) / key / _JAR_NAME
    if target.is_file():
        return str(target)
    if key in _failed:
        return None
    javac = _javac()
    if javac is None or not jars.is_dir():
        _failed.add(key)
        log.info("no JDK compiler (javac) or PySpark jars: checkpoint files get their permissions from a chmod "
                 "subprocess each (Hadoop's default)")
        return None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            classes = Path(tmp) / "classes"
            subprocess.run([javac, "--release", "17", "-nowarn", "-cp", str(jars / "*"), "-d", str(classes),
                            str(JAVA_SOURCE)], check=True, capture_output=True, timeout=120)
            built = Path(tmp) / _JAR_NAME
            with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as jar:
                jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
                for path in sorted(classes.rglob("*.class")):
                    jar.write(path, path.relative_to(classes).as_posix())
            os.replace(built, target)   # atomic: a concurrent build's jar is as good as this one
    except (OSError, subprocess.SubprocessError) as exc:
        _failed.add(key)
        detail = getattr(exc, "stderr", b"") or b""
        log.warning("could not build %s (%s%s): Hadoop's default local file system stays", CLASS_NAME, exc,
                    f": {detail.decode(errors='replace')[:500]}" if detail else "")
        return None
    return str(target)


def local_fs_conf(master: str | None, extra_class_path: str | None = None) -> dict[str, str]:
    """Spark settings that make :data:`CLASS_NAME` the local driver's ``file:`` file system (``{}`` for a cluster,
    when turned off, or without the jar). ``extra_class_path``: a ``spark.driver.extraClassPath`` given otherwise,
    kept ahead of the jar."""
    if turned_off(ENABLE_VARIABLE):
        return {}
    if not (master or "").startswith("local"):
        return {}
    jar = local_fs_jar()
    if jar is None:
        return {}
    path = os.pathsep.join(p for p in (extra_class_path, jar) if p)
    return {"spark.driver.extraClassPath": path, "spark.hadoop.fs.file.impl": CLASS_NAME}
