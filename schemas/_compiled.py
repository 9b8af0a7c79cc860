"""Compiled twins of the hottest pure-Python modules, used only when they were built from the very source beside them.

The processor's CPU per event is mostly Python spread thinly over many functions (docs/PERFORMANCE.md: every profile
flat). :data:`COMPILED_MODULES` are compiled unchanged by Cython (``scripts/build_compiled.py``, which ``make up`` and
``make test`` run): the same source, run as C calls instead of bytecode (e.g. the staging pass's derive + COPY text
~20 % less CPU). They are built into ``.compiled/<cache tag>/`` at the source tree's root, each extension beside a
``.sha256`` file holding the hash of the ``.py`` it was built from.

:func:`install` (run when this module is imported, which the ``schemas``, ``sink`` and ``stream_processor`` packages
do before anything else) puts a
finder first on ``sys.meta_path`` that loads a listed module from its extension **only when the hash of its ``.py``
today equals the one it was built from**; otherwise (never built, no C compiler, a source edited since) the module is
imported from its ``.py`` as always. So a compiled module can never run code other than its source: edit a ``.py``
and the pure module is used until the next build. ``LINEAGE_PURE_PYTHON=1`` turns the finder off (profiling with
py-spy line by line, a debugger). Nothing else changes: the modules keep their names, and Spark's workers import them
the same way. A cluster's executors without the build (a wheel install) run the pure modules.

Only modules that Spark never has to pickle by value are listed: a function defined inside a compiled module is not
Python bytecode, so cloudpickle can ship it by reference only (writer.py's staging closure, pipeline.py's decode
closure stay pure; the module-level functions they call may be compiled).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["COMPILED_MODULES", "ROOT", "build_dir", "source_path", "extension_path", "stamp_path",
           "source_digest", "status", "install", "CompiledFinder"]

#: The modules compiled, by dotted name: the decoder's and the staging pass's (workers), the merge's client side and
#: the enrich step's (driver). Chosen from py-spy of ``lineage bench`` (2026-11-27): decode + validate + canonical
#: JSON ~28 % of the Python samples, derive + COPY text ~25 %, quality annotations, enriched records and graph changes
#: most of the driver's.
COMPILED_MODULES = (
    "schemas.codec", "schemas.validate", "schemas.identity", "schemas.fastjson", "schemas.textscan",
    "schemas.envelope_reader",
    "sink.derive", "sink.postgres", "sink.annotate", "sink.annotations_lookup", "sink.ids",
    "stream_processor.decode", "stream_processor.avro_records", "stream_processor.publish",
    "stream_processor.enrich",
)

#: The source tree's root: the directory holding ``schemas/``, ``sink/`` and ``stream_processor/``.
ROOT = Path(__file__).resolve().parent.parent
PURE_ENV = "LINEAGE_PURE_PYTHON"


def build_dir(root: Path = ROOT) -> Path:
    """Where this interpreter's extensions live: ``<root>/.compiled/<cache tag>`` (e.g. ``cpython-311``)."""
    return root / ".compiled" / (sys.implementation.cache_tag or "unknown")


def source_path(name: str, root: Path = ROOT) -> Path:
    return root.joinpath(*name.split(".")).with_suffix(".py")


def extension_path(name: str, root: Path = ROOT) -> Path:
    """The extension of ``name`` (``sink/derive.cpython-311-x86_64-linux-gnu.so`` under :func:`build_dir`)."""
    *package, module = name.split(".")
    return build_dir(root).joinpath(*package, module + importlib.machinery.EXTENSION_SUFFIXES[0])


def stamp_path(name: str, root: Path = ROOT) -> Path:
    *package, module = name.split(".")
    return build_dir(root).joinpath(*package, module + ".sha256")


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _usable(name: str, root: Path) -> tuple[str, Path | None]:
    """``(state, extension)``: ``compiled`` with the extension to load, else ``absent`` / ``stale`` / ``no source``."""
    extension, stamp, source = extension_path(name, root), stamp_path(name, root), source_path(name, root)
    if not extension.is_file() or not stamp.is_file():
        return "absent", None
    if not source.is_file():
        return "no source", None
    if stamp.read_text().strip() != source_digest(source):
        return "stale", None
    return "compiled", extension


def status(root: Path = ROOT) -> dict[str, str]:
    """Per listed module: ``compiled`` (loaded, or would be, from its extension), ``absent`` (not built), ``stale``
    (its ``.py`` changed since the build: the pure module is used) or ``disabled`` (``LINEAGE_PURE_PYTHON``)."""
    if _disabled():
        return dict.fromkeys(COMPILED_MODULES, "disabled")
    return {name: _usable(name, root)[0] for name in COMPILED_MODULES}


def _disabled() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the listed modules' extensions when they match their sources (module doc); defers everything else."""

    def __init__(self, modules: tuple[str, ...] = COMPILED_MODULES, root: Path = ROOT) -> None:
        self.modules = frozenset(modules)
        self.root = root

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.modules:
            return None
        _, extension = _usable(fullname, self.root)
        if extension is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(extension))
        return importlib.util.spec_from_file_location(fullname, extension, loader=loader)


def install() -> bool:
    """Put :class:`CompiledFinder` first on ``sys.meta_path`` once per process; False when ``LINEAGE_PURE_PYTHON``."""
    if _disabled():
        return False
    if not any(isinstance(f, CompiledFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, CompiledFinder())
    return True


install()
