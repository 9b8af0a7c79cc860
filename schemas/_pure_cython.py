"""The few names of Cython's pure-Python mode that :mod:`schemas.textscan` and :mod:`schemas.envelope_reader` use,
for an installation without Cython.

Compiled (``scripts/build_compiled.py``), ``import cython`` is Cython's own and this module is never read; run as
Python with Cython installed, Cython's shadow module gives the same names. Here the decorators change nothing, the
C types are Python's, and ``compiled`` is False (so :mod:`schemas.textscan` runs its reference implementation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

compiled = False
Py_ssize_t = int
int = int  # noqa: A001 - Cython's name for a C int
longlong = ulonglong = int
bint = bool
uchar = int
p_uchar = bytes


def _same(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


cfunc = cclass = _same


def declare(*_args: Any, **_kwargs: Any) -> None:
    return None


def cast(_type: Any, value: Any) -> Any:
    return value


def locals(**_types: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: A001 - Cython's name
    return _same
