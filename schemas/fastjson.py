"""JSON on the hot paths: orjson (C) where it gives the identical value, the json module otherwise.

The json module is the reference; orjson is ~10x faster on event-sized documents. Each helper says what
"identical" means for its callers, and falls back to the json module for what orjson would write or read
differently (integers beyond 64 bits, non-string keys, lone surrogates, datetimes).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

__all__ = ["loads", "dumps_compact", "dumps_sorted", "dumps_sorted_utf8", "json_compact", "orjson_key", "OrjsonError", "HAVE_ORJSON"]

try:  # optional fast path; the json module is the reference implementation
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None

HAVE_ORJSON = _orjson is not None

#: Compact JSON text, byte-exact where a hash depends on it (``fields_hash``).
json_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

#: Integers orjson would turn into floats (beyond 64 bits) are parsed by the json module. The test is
#: conservative: any run of 19 digits anywhere in the text (strings included). It maps digits to ``0`` and
#: looks for a fixed byte string - ~9 us for a 4 kB event, where the regular expression it replaces took
#: ~225 us (5x orjson's parse of the same text, 3x the json module's). Exponents need no test: orjson
#: refuses what overflows a double (the json module then decides) and reads the rest to the same float
#: (tests/test_fastjson.py).
_WIDE_TABLE = bytes.maketrans(b"0123456789", b"0000000000")
_WIDE_MARK = b"0" * 19


def _wide(data: str | bytes) -> bool:
    """Whether ``data`` may hold a number orjson would read differently from the json module."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _WIDE_MARK in raw.translate(_WIDE_TABLE)


class _NoOrjsonError(Exception):
    """Never raised: what :data:`OrjsonError` is without orjson."""


if _orjson is not None:
    #: Values the json module would refuse or write differently (datetimes, dataclasses) and subclasses of
    #: str/int/dict/list are passed through by orjson, i.e. refused, so the json module decides them.
    _ORJSON_OPTIONS = _orjson.OPT_PASSTHROUGH_DATETIME | _orjson.OPT_PASSTHROUGH_DATACLASS \
        | _orjson.OPT_PASSTHROUGH_SUBCLASS
    #: bytes of a value, for memo keys (raises :data:`OrjsonError` for what it passes through).
    orjson_key = functools.partial(_orjson.dumps, option=_ORJSON_OPTIONS)
    OrjsonError: type[Exception] = _orjson.JSONEncodeError
    _SORTED_OPTIONS = _orjson.OPT_SORT_KEYS | _orjson.OPT_PASSTHROUGH_DATETIME | _orjson.OPT_PASSTHROUGH_DATACLASS
else:  # pragma: no cover
    orjson_key = None
    OrjsonError = _NoOrjsonError


def loads(data: str | bytes | memoryview, fallback: Callable[[Any], Any] = json.loads) -> Any:
    """``fallback(data)`` (``json.loads``, or a ``json.JSONDecoder(...).decode``), through orjson when that
    gives the identical value: valid JSON text without NaN or infinities, which orjson refuses, so that
    ``fallback`` decides them (and words the error)."""
    if isinstance(data, memoryview):
        data = bytes(data)
    if _orjson is not None:
        if not _wide(data):
            try:
                return _orjson.loads(data)
            except _orjson.JSONDecodeError:
                pass   # the json module decides (and words the error)
    return fallback(data)


def dumps_compact(value: Any) -> str:
    """JSON text of ``value`` for a jsonb column (equal as jsonb to :data:`json_compact`'s text).

    orjson writes the same compact, non-ASCII-escaped text for the str/int/float/bool/None/list/dict
    values of validated events; what it refuses (non-str keys, integers beyond 64 bits, lone
    surrogates) falls back to the json module, so the stored value is never altered.
    """
    if _orjson is not None:
        try:
            return orjson_key(value).decode("utf-8")
        except OrjsonError:
            pass
    return json_compact(value)


def dumps_sorted(value: Any) -> str:
    """Compact JSON text with sorted keys and ``str()`` of what JSON has no type for (datetimes, Decimals,
    bytes): the value ``json.dumps(value, sort_keys=True, default=str)`` writes, ~10x faster.

    Dates, times and UUIDs orjson writes itself, as ``str()`` does; datetimes and dataclasses go to
    ``str`` as with the json module. Text differs only in whitespace and in non-ASCII characters written
    as themselves rather than ``\\u`` escapes; NaN and infinities become ``null`` (the json module writes
    tokens no JSON parser accepts).
    """
    if _orjson is not None:
        try:
            return _orjson.dumps(value, default=str, option=_SORTED_OPTIONS).decode("utf-8")
        except OrjsonError:
            pass
    return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"), ensure_ascii=False)


def dumps_sorted_utf8(value: Any) -> bytes:
    """``dumps_sorted(value).encode("utf-8")``, without orjson's bytes decoded to text and encoded again."""
    if _orjson is not None:
        try:
            return _orjson.dumps(value, default=str, option=_SORTED_OPTIONS)
        except OrjsonError:
            pass
    return dumps_sorted(value).encode("utf-8")
