"""What the hot path checks in every event's JSON text, found in one pass over its bytes.

Three checks read each event's whole text (~4 kB of demo traffic), once or twice per event:

- :func:`schemas.fastjson.loads`: a run of 19 digits (an integer orjson would read as a float) -> :data:`WIDE`;
- :func:`schemas.identity.canonical_json_hashed`: a float orjson writes differently from the json module, i.e. a
  number token with an exponent (:data:`EXPONENT`) or the text ``0.0000`` (:data:`TINY`);
- :func:`sink.derive.check_storable`: text PostgreSQL cannot hold, i.e. a NUL character or the escape ``\\u0000``
  (:data:`NUL`), the text ``\\ud`` (:data:`SURROGATE_ESCAPE`: the escape of a surrogate, a lone one perhaps) or, in a
  ``str``, a lone surrogate (:data:`UNENCODABLE`); and whether the text names ``"_deleted"`` (:data:`DELETED`: the
  derivation then looks for deleted facets).

Done with builtins and regular expressions, they cost ~13 µs per demo event in the decoder and ~7 µs more in the
staging pass (2026-11-29: ``_same_numbers`` 7.1, ``check_storable`` 3.9, ``_wide`` 2.0 µs per 3.8 kB text): more
than orjson's parse of the same text. :func:`scan` finds them all in one loop over the bytes when this module is
compiled (``scripts/build_compiled.py``; ~1 µs); run as Python it computes only the flags asked for, the way those
checks always did (:func:`scan_reference`, which tests/test_textscan.py compares with the loop).

Each flag is defined on the text exactly as the check it replaces read it, conservative where that was: a match
inside a JSON string counts too (it only sends the caller to its slow, exact path).
"""

from __future__ import annotations

import re

try:
    import cython
except ImportError:  # pragma: no cover - an installation without Cython runs the reference implementation
    from schemas import _pure_cython as cython

__all__ = ["NUL", "SURROGATE_ESCAPE", "UNENCODABLE", "EXPONENT", "TINY", "WIDE", "DELETED", "ALL", "COMPILED",
           "scan", "scan_reference", "utf8"]

#: A NUL character (the byte 0) or the escape ``\u0000``.
NUL = 1
#: The text ``\ud`` (lower case, as orjson and the json module write escapes): a surrogate's escape.
SURROGATE_ESCAPE = 2
#: A ``str`` holding a lone surrogate (it has no UTF-8 encoding). Never set for ``bytes``.
UNENCODABLE = 4
#: A number token with an exponent: ``e`` after a digit and before a sign or digit, whose run of ``[0-9.-]``
#: starts the text or follows ``:``, ``,`` or ``[``.
EXPONENT = 8
#: The text ``0.0000``.
TINY = 16
#: A run of 19 or more digits.
WIDE = 32
#: The text ``"_deleted"`` (with its quotes).
DELETED = 64
ALL = NUL | SURROGATE_ESCAPE | UNENCODABLE | EXPONENT | TINY | WIDE | DELETED

#: True when this module runs as its compiled extension (then :func:`scan` is the one-pass loop).
COMPILED = cython.compiled

_EXPONENT_RE = re.compile(rb"e(?<=[0-9]e)[-+0-9]")
_NUMBER_BYTES = frozenset(b"0123456789.-")
_TOKEN_START = frozenset(b":,[")
_WIDE_TABLE = bytes.maketrans(b"0123456789", b"0000000000")
_WIDE_MARK = b"0" * 19
#: ``(flag, substrings)`` of the flags a substring test finds, for ``str`` and for ``bytes``.
_NEEDLES_TEXT = ((NUL, ("\\u0000", "\x00")), (SURROGATE_ESCAPE, ("\\ud",)), (DELETED, ('"_deleted"',)))
_NEEDLES_BYTES = tuple((flag, tuple(n.encode("utf-8") for n in needles)) for flag, needles in _NEEDLES_TEXT)


def scan(data: str | bytes, want: int = ALL) -> int:
    """The flags of ``want`` that ``data`` (a JSON text, ``str`` or UTF-8 ``bytes``) has.

    Compiled, every flag is found in one pass and those of ``want`` returned; as Python, only those of ``want``
    are computed (:func:`scan_reference`)."""
    if not COMPILED:
        return scan_reference(data, want)
    raw, unencodable = utf8(data)
    return (_scan_bytes(raw, (want & WIDE) != 0) | unencodable) & want


def utf8(data: str | bytes) -> tuple[bytes, int]:
    """``(the UTF-8 bytes of data, UNENCODABLE or 0)``: a ``str`` with a lone surrogate is encoded with
    ``surrogatepass`` and flagged; ``bytes`` are taken as they are."""
    if not isinstance(data, str):
        return bytes(data), 0
    try:
        return data.encode("utf-8"), 0
    except UnicodeEncodeError:
        return data.encode("utf-8", "surrogatepass"), UNENCODABLE


#: The bytes the loop stops at (1): where a flag's text starts (NUL, backslash, "_") or is anchored after a digit
#: ("e" of an exponent, "." of 0.0000). Everything else, digits included, is passed over.
_STOPS = bytes(1 if b in (0, 92, 95, 101, 46) else 0 for b in range(256))


@cython.cfunc
@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t, run=cython.Py_ssize_t,
               p=cython.p_uchar, t=cython.p_uchar, c=cython.uchar, b=cython.uchar, flags=cython.int,
               wide=cython.bint)
def _scan_bytes(raw: bytes, wide: bool = True) -> int:
    # flag values written as literals (module globals would be Python objects here): NUL 1, SURROGATE_ESCAPE 2,
    # EXPONENT 8, TINY 16, WIDE 32, DELETED 64
    n = len(raw)
    p = raw
    stops = _STOPS   # held by a local while the loop reads it through ``t``
    t = stops
    flags = 0
    for i in range(n):
        c = p[i]
        if t[c] == 0:
            continue
        if c == 101:  # "e" after a digit, before a sign or digit, in a number token
            if i >= 1 and i + 1 < n and 48 <= p[i - 1] <= 57:
                b = p[i + 1]
                if b == 43 or b == 45 or 48 <= b <= 57:
                    j = i
                    while j > 0 and (48 <= p[j - 1] <= 57 or p[j - 1] == 46 or p[j - 1] == 45):
                        j -= 1
                    if j == 0 or p[j - 1] == 58 or p[j - 1] == 44 or p[j - 1] == 91:
                        flags |= 8
        elif c == 46:  # "0.0000"
            if i >= 1 and i + 4 < n and p[i - 1] == 48 and p[i + 1] == 48 and p[i + 2] == 48 and p[i + 3] == 48 \
                    and p[i + 4] == 48:
                flags |= 16
        elif c == 0:
            flags |= 1
        elif c == 92:  # backslash: \u0000 or \ud
            if i + 2 < n and p[i + 1] == 117:
                if p[i + 2] == 100:
                    flags |= 2
                elif i + 5 < n and p[i + 2] == 48 and p[i + 3] == 48 and p[i + 4] == 48 and p[i + 5] == 48:
                    flags |= 1
        elif i >= 1 and i + 8 < n and p[i - 1] == 34 and p[i + 1] == 100 and p[i + 2] == 101 and p[i + 3] == 108 \
                and p[i + 4] == 101 and p[i + 5] == 116 and p[i + 6] == 101 and p[i + 7] == 100 and p[i + 8] == 34:
            flags |= 64  # '"_deleted"' (c is "_")
    if wide:   # a second pass, only when asked: digits are frequent, and tracking their runs above doubles the loop
        run = 0
        for i in range(n):
            c = p[i]
            if 48 <= c <= 57:
                run += 1
                if run >= 19:
                    flags |= 32
                    break
            else:
                run = 0
    return flags


def scan_reference(data: str | bytes, want: int = ALL) -> int:
    """:func:`scan` with builtins and regular expressions, computing only the flags of ``want``: the checks as they
    were written before the loop, and what tests compare the loop with."""
    flags = 0
    is_text = isinstance(data, str)
    for flag, needles in _NEEDLES_TEXT if is_text else _NEEDLES_BYTES:
        if want & flag and any(needle in data for needle in needles):
            flags |= flag
    if not want & (UNENCODABLE | EXPONENT | TINY | WIDE):
        return flags
    raw, unencodable = utf8(data)
    flags |= unencodable & want
    if want & WIDE and _WIDE_MARK in raw.translate(_WIDE_TABLE):
        flags |= WIDE
    if want & TINY and b"0.0000" in raw:
        flags |= TINY
    if want & EXPONENT:
        for match in _EXPONENT_RE.finditer(raw):
            i = match.start()
            while i > 0 and raw[i - 1] in _NUMBER_BYTES:
                i -= 1
            if i == 0 or raw[i - 1] in _TOKEN_START:
                flags |= EXPONENT
                break
    return flags
