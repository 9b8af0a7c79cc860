"""The few names of Cython's pure-Python mode that :mod:`schemas.textscan` uses, for an installation without Cython.

Compiled (``scripts/build_compiled.py``), ``import cython`` is Cython's own and this module is never read; run as
Python with Cython installed, Cython's shadow module gives the same names. ``compiled`` is False here, so the
module runs its reference implementation (builtins and regular expressions), never the typed loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

compiled = False
Py_ssize_t = int
int = int  # noqa: A001 - Cython's name for a C int
uchar = int
p_uchar = bytes


def _same(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


cfunc = _same


def locals(**_types: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # noqa: A001 - Cython's name
    return _same
