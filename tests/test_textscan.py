"""schemas.textscan: the one-pass loop finds exactly the flags the checks it replaces (``scan_reference``) find.

Compiled (``scripts/build_compiled.py``, as ``make test`` builds it), :func:`scan` is the loop; run as Python, the
loop is still there as a plain function (``_scan_bytes``, Cython's decorators being no-ops), so either way the loop
is compared with the reference, on generated texts dense in what the flags look for and on real events.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import textscan
from schemas.identity import canonical_json_scanned
from schemas.textscan import (
    ALL,
    DELETED,
    EXPONENT,
    NUL,
    SURROGATE_ESCAPE,
    TINY,
    UNENCODABLE,
    WIDE,
    scan,
    scan_reference,
)
from tests.openlineage_fixtures import fixture_documents

#: Pieces the generated texts are made of: what each flag looks for, its near misses, and ordinary text.
_TOKENS = ["0", "1", "9", "0.0000", "0.000", ".", "-", "+", "e", "E", ":", ",", "[", "{", "]", "\"", "\\", "u", "d",
           "0000", "\\u0000", "\\ud800", "\\u00e9", "_deleted", "\"_deleted\"", "_delete", "\x00", "a", "é", " ",
           "1234567890123456789", "123456789012345678", "1e16", "1e+16", "2.5e-7", "-4e81-", "x1e5", ":1e5"]


def _loop(data: str | bytes) -> int:
    """The loop's flags for ``data``: :func:`scan` when compiled, else the loop run as Python."""
    if textscan.COMPILED:
        return scan(data)
    raw, unencodable = textscan.utf8(data)
    return textscan._scan_bytes(raw) | unencodable


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join))
def test_the_loop_finds_what_the_reference_finds_in_text_and_bytes(text: str) -> None:
    assert _loop(text) == scan_reference(text)
    raw = text.encode("utf-8")
    assert _loop(raw) == scan_reference(raw)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS + ["\ud800", "\udfff"]), max_size=30).map("".join),
       st.integers(min_value=0, max_value=ALL))
def test_want_selects_flags_and_lone_surrogates_are_unencodable(text: str, want: int) -> None:
    assert scan(text, want) == scan_reference(text, want) == _loop(text) & want
    if "\ud800" in text or "\udfff" in text:
        assert _loop(text) & UNENCODABLE


def test_each_flag_on_its_own() -> None:
    cases = {
        '{"a":"x\\u0000y"}': NUL, '{"a":"\x00"}': NUL, '{"a":"\\ud83d\\ude00"}': SURROGATE_ESCAPE,
        "\ud800": UNENCODABLE, '{"a":1e16}': EXPONENT, '[2.5e-7]': EXPONENT, "1e5": EXPONENT,
        '{"a":0.00001}': TINY, '{"a":12345678901234567890}': WIDE, "1234567890123456789": WIDE,
        '{"f":{"_deleted":true}}': DELETED,
        # near misses: an exponent-like id inside a string, 18 digits, an escaped "u" that is no NUL
        '{"id":"a1b2-4e81-c"}': 0, "123456789012345678": 0, '{"a":"\\\\u00"}': 0, '{"_deleted_":1}': 0,
        "": 0, "e5": 0, '{"a":1E5}': 0,
    }
    for text, flags in cases.items():
        assert scan_reference(text) == flags, text
        assert _loop(text) == flags, text
        assert scan(text) == flags, text


def _real_texts() -> list[str]:
    texts = []
    for doc in fixture_documents():
        texts.append(json.dumps(doc))
        if isinstance(doc, dict):
            texts.append(canonical_json_scanned(doc, 0)[0])
    return texts


def test_real_producers_events_agree() -> None:
    texts = _real_texts()
    assert len(texts) > 20
    for text in texts:
        assert _loop(text) == scan_reference(text)
        assert _loop(text.encode()) == scan_reference(text.encode())


def test_canonical_json_scanned_gives_the_flags_of_its_text() -> None:
    for event in ({"a": 1.5, "f": {"_deleted": True}, "s": "x\x00"}, {"n": 1e16}, {"n": 0.00001, "s": "\ud800"},
                  {"big": 2**70}, {"plain": [1, 2, "three"]}):
        text, digest, flags = canonical_json_scanned(event)
        assert flags == scan_reference(text)


def test_without_cython_the_module_runs_its_reference() -> None:
    """An installation without Cython (the base package: producers, ``lineage emit``) imports the module through
    schemas/_pure_cython.py and scans with the reference."""
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['cython'] = None\n"
            "from schemas import textscan\n"
            "assert not textscan.COMPILED and textscan.cython.__name__ == 'schemas._pure_cython'\n"
            "print(textscan.scan('[1e16]'), textscan.scan(b'{\"_deleted\":true}'))\n")
    env = {**os.environ, "LINEAGE_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.split() == [str(EXPONENT), str(DELETED)]
