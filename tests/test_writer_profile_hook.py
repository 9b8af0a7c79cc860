"""The executor-pass profiling hook (``LINEAGE_PROFILE_DIR``, stream_processor/writer.py): pure, no servers."""

from __future__ import annotations

import pstats

from stream_processor.writer import _profiled


def _double(batches):
    for b in batches:
        yield b * 2


def test_without_the_variable_the_pass_is_returned_unchanged(monkeypatch):
    monkeypatch.delenv("LINEAGE_PROFILE_DIR", raising=False)
    assert _profiled("stage", 3)(_double) is _double


def test_with_the_variable_the_pass_yields_the_same_and_dumps_a_profile(monkeypatch, tmp_path):
    monkeypatch.setenv("LINEAGE_PROFILE_DIR", str(tmp_path))
    wrapped = _profiled("enrich", 7)(_double)
    assert wrapped is not _double
    assert list(wrapped(iter([1, 2, 3]))) == [2, 4, 6]
    dumps = list(tmp_path.glob("enrich-7-*.prof"))
    assert len(dumps) == 1
    stats = pstats.Stats(str(dumps[0]))
    assert any(name == "_double" for (_file, _line, name) in stats.stats)
