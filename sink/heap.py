"""The cyclic garbage collector kept off the caller's heap while the store works on a batch.

A batch arrives as thousands of freshly decoded event dicts (tens of containers each), and deriving,
staging and merging it allocates many more objects. Every collection those allocations trigger walks its
generation, and the oldest generation holds the events: in a store write of 20,000 demo events the
collector took ~19% of the Python CPU (benchmarks/store_write_bench.py, gc callbacks), a full collection of
the event heap ~1 s of it, landing wherever the allocation count happened to cross its threshold (in the
derivation, or in the quality annotation thread, stalling the merge). The events hold no reference
cycles the store could break, so walking them is wasted work.

:func:`frozen_heap` moves every object that exists when the outermost block starts into the permanent
generation (``gc.freeze``) and back into the oldest generation when it ends (``gc.unfreeze``, which does not
count them as new there, so the next full collection is not brought forward). Collections inside the block
only look at what the block allocated. Blocks nest and may be entered by several threads (two writers in
one process): the outermost entry freezes, the last exit unfreezes. When the collector is disabled it is
left alone; when the process froze objects itself (a forked worker keeping its pages shared) the block
pauses the collector instead, so that objects that are not ours are never unfrozen.

The blocks starve the oldest generation's full collections: what a block froze goes back to the oldest
generation without counting as new there, and in a running processor some thread is inside a block most of
the time (the finisher merges one batch while Spark stages the next), so the full collection that would
reclaim the oldest generation's reference cycles never came. PySpark's per-batch py4j objects are such cycles
(a ``JavaObject`` and the ``JavaMember`` of each method called on it reference each other), and each keeps its
JVM object (a batch's ``Dataset`` with its plans) alive in the JVM: in a 200 msg/s soak the JVM's old
generation grew ~55 MB per 5 minutes (~10 with this; the driver's own share is small); 60 micro-batches left 1,238 live
``JavaObject`` objects, 9 after one ``gc.collect()`` (2026-11-26). So the last exit of a block runs a full
collection itself when the last one it ran is :data:`FULL_COLLECTION_SECONDS` old (45-55 ms for ~170,000
objects, the driver's heap; at most twice a minute: nothing is frozen then).

After that collection the process gives glibc's free pages back to the system (:func:`release_freed_memory`).
glibc returns freed memory only from the top of an arena, so the driver's RSS kept the high-water mark of its
batches' allocations, and with it whatever the arenas' fragmentation added: in a 200 msg/s soak (2026-11-26,
17 minutes in) the driver held 418 MB RSS while glibc's arenas held 119 MB of which 74 MB were free chunks
(``malloc_info``); ``malloc_trim(0)`` took it to 357 MB (the main arena's pages 97 -> 40 MB), and 20 s later it
was back at 404 MB: most of that is the finisher's per-batch working set. With the trim every 30 s the main arena
held 64-68 MB of resident pages through a 25-minute soak (without: 97 MB); the driver's RSS as a whole did not
change measurably (5-minute means 360-420 MB either way): what still grew slowly was sink/ids.py's id caches
filling (docs/PERFORMANCE.md session 17).
"""

from __future__ import annotations

import functools
import gc
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["frozen_heap", "FULL_COLLECTION_SECONDS", "release_freed_memory"]

#: At most this often, the last exit of a ``freeze`` block collects the oldest generation (module doc).
FULL_COLLECTION_SECONDS = 30.0

_lock = threading.Lock()
_depth = 0
_mode: str | None = None   # "freeze", "pause" or None (collector was disabled: nothing to undo)
_last_full = time.monotonic()   # when a block's last exit last collected the oldest generation


_foreign_pid: int | None = None   # the process seen holding frozen objects that are not ours


def _frozen_by_process() -> bool:
    """True when the process froze objects itself (outside any block). ``gc.get_freeze_count()`` walks the
    permanent generation (CPython 3.11): a Spark worker forked from our daemon inherits ~10^5-10^6 frozen
    objects, and asking on every staging call cost 47 of the workers' 1,580 py-spy samples in ``lineage bench
    --events 20000`` (2026-11-26). Those objects are never unfrozen (only a block that froze unfreezes), so
    a positive answer is kept for the process; a negative one (the list is then empty) is cheap to ask again."""
    global _foreign_pid
    pid = os.getpid()
    if _foreign_pid == pid:
        return True
    if gc.get_freeze_count():
        _foreign_pid = pid
        return True
    return False


def _full_collection_due() -> bool:
    """Whether the last full collection this module ran is :data:`FULL_COLLECTION_SECONDS` old (module doc); if so
    it counts as run now. Called under ``_lock``; the collection itself runs after the lock is released (a
    finalizer it calls may enter a block: a generator closed inside one, say)."""
    global _last_full
    now = time.monotonic()
    if now - _last_full >= FULL_COLLECTION_SECONDS:
        _last_full = now
        return True
    return False


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library is not glibc (musl, macOS); looked up once."""
    import ctypes

    try:
        found = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    found.argtypes, found.restype = [ctypes.c_size_t], ctypes.c_int
    return found


def release_freed_memory() -> bool:
    """Give the whole free pages of glibc's arenas back to the system (``malloc_trim(0)``: ``madvise`` of the
    free pages inside each arena, not only its top; a few milliseconds). False where the C library is not glibc."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collections in the block see only the objects allocated in it (module doc)."""
    global _depth, _mode
    with _lock:
        if _depth == 0:
            if not gc.isenabled():
                _mode = None
            elif _frozen_by_process():
                gc.disable()
                _mode = "pause"
            else:
                gc.freeze()
                _mode = "freeze"
        _depth += 1
    try:
        yield
    finally:
        collect = False
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _mode == "freeze":
                    gc.unfreeze()
                    collect = _full_collection_due()
                elif _mode == "pause":
                    gc.enable()
                _mode = None
        if collect:
            gc.collect()
            release_freed_memory()
