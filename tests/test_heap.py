"""sink/heap.py: the collector kept off the caller's heap during a batch, and always given back as found."""

from __future__ import annotations

import gc
import threading

import pytest

from sink.heap import frozen_heap

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("nothing_frozen")]


@pytest.fixture
def nothing_frozen():
    """Tests of this process may have frozen its heap for good (stream_processor/worker_heap.py, run in-process
    by `lineage load --engine local`): unfrozen for the test, frozen again after it."""
    import sink.heap

    was_frozen = gc.get_freeze_count() > 0
    if was_frozen:
        gc.unfreeze()
    sink.heap._foreign_pid = None       # what frozen_heap remembered of the process's own freeze is undone
    yield
    sink.heap._foreign_pid = None       # a test may have frozen and unfrozen by hand
    if was_frozen:
        gc.freeze()


def test_objects_before_the_block_are_frozen_and_given_back() -> None:
    assert gc.get_freeze_count() == 0
    before = [{"event": i} for i in range(100)]
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen >= len(before)
        assert gc.isenabled()
        made = [[i] for i in range(1000)]       # young: seen by the block's collections, not frozen
        assert gc.get_freeze_count() <= frozen and len(made) == 1000   # (frozen objects freed meanwhile leave)
        with frozen_heap():          # nested: no second freeze, no early unfreeze
            assert gc.get_freeze_count() >= len(before)
        assert gc.get_freeze_count() >= len(before)
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def test_cycles_made_in_the_block_are_collected_in_it() -> None:
    class Node:
        pass

    with frozen_heap():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert gc.collect() >= 2


def test_a_disabled_collector_is_left_alone() -> None:
    gc.disable()
    try:
        with frozen_heap():
            assert not gc.isenabled()
            assert gc.get_freeze_count() == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_objects_the_caller_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with frozen_heap():
            assert not gc.isenabled()        # paused instead
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen // 2     # not unfrozen (objects freed meanwhile leave it)
    finally:
        gc.unfreeze()


def test_threads_share_one_scope_and_the_last_one_out_unfreezes() -> None:
    inside = threading.Barrier(2)
    leave = threading.Event()
    counts: list[int] = []

    def writer() -> None:
        with frozen_heap():
            inside.wait()
            leave.wait()

    thread = threading.Thread(target=writer)
    thread.start()
    with frozen_heap():
        inside.wait()
        counts.append(gc.get_freeze_count())
    counts.append(gc.get_freeze_count())     # the other thread is still inside
    leave.set()
    thread.join()
    assert counts[0] > 0 and counts[1] > 0
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def test_the_collector_is_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def test_the_last_exit_collects_the_oldest_generation_now_and_then(monkeypatch) -> None:
    """Cycles older than a block are frozen by it and go back to the oldest generation without counting as new
    there, so with blocks back to back nothing collected them (py4j's per-batch objects, module doc)."""
    import time
    import weakref

    import sink.heap

    class Node:
        pass

    def cycle() -> weakref.ref:
        node = Node()
        node.me = node
        return weakref.ref(node)

    monkeypatch.setattr(sink.heap, "FULL_COLLECTION_SECONDS", 3600.0)
    monkeypatch.setattr(sink.heap, "_last_full", time.monotonic())
    kept = cycle()
    with frozen_heap():
        pass
    assert kept() is not None          # not yet due (and only a full collection would have freed it)
    monkeypatch.setattr(sink.heap, "FULL_COLLECTION_SECONDS", 0.0)
    freed = cycle()
    with frozen_heap():
        with frozen_heap():
            pass
        assert freed() is not None     # an inner exit does not collect: the outer block still holds frozen objects
    assert kept() is None and freed() is None


def test_a_finalizer_run_by_the_last_exits_collection_may_enter_a_block(monkeypatch) -> None:
    """The last exit's collection runs outside the module's lock: a finalizer it runs may use a block itself."""
    import sink.heap

    entered: list[int] = []

    class Entering:
        def __del__(self) -> None:
            with frozen_heap():
                entered.append(1)

    cyclic = Entering()
    cyclic.me = cyclic
    del cyclic                        # garbage only the collector frees
    monkeypatch.setattr(sink.heap, "FULL_COLLECTION_SECONDS", 0.0)
    done = threading.Event()

    def block() -> None:
        with frozen_heap():
            pass
        done.set()

    thread = threading.Thread(target=block, daemon=True)
    thread.start()
    assert done.wait(10), "deadlocked"
    assert entered == [1]
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


def _rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_freed_memory_inside_the_arena_goes_back_to_the_system() -> None:
    """glibc gives back only the top of an arena by itself: chunks freed below a live one stay resident until
    ``malloc_trim`` (the driver's RSS growth, module doc). 40 MB of 2 kB buffers (glibc's, not Python's small-object
    allocator), every 50th kept: most pages are wholly free, yet resident, until released."""
    from sink.heap import release_freed_memory

    if not release_freed_memory():
        pytest.skip("not glibc: no malloc_trim")
    buffers = [bytearray(2048) for _ in range(20_000)]
    for buffer in buffers:
        buffer[0] = buffer[-1] = 1      # touched: resident (fresh calloc'd pages are not, until written)
    kept = buffers[::50]
    del buffers
    before = _rss_bytes()
    assert release_freed_memory()
    after = _rss_bytes()
    assert before - after > 20 * 2**20, (before, after)
    assert len(kept) == 400


def test_the_last_exits_collection_gives_freed_memory_back(monkeypatch) -> None:
    """The periodic full collection is followed by :func:`sink.heap.release_freed_memory`, and only it."""
    import sink.heap

    calls: list[int] = []
    monkeypatch.setattr(sink.heap, "release_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(sink.heap, "FULL_COLLECTION_SECONDS", 3600.0)
    monkeypatch.setattr(sink.heap, "_last_full", __import__("time").monotonic())
    with frozen_heap():
        pass
    assert calls == []
    monkeypatch.setattr(sink.heap, "FULL_COLLECTION_SECONDS", 0.0)
    with frozen_heap():
        with frozen_heap():
            pass
        assert calls == []
    assert calls == [1]
