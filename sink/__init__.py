"""The lineage graph stores: PostgreSQL (:mod:`sink.postgres`) and Parquet, plus the pure derivation
(:mod:`sink.derive`) and quality annotations (:mod:`sink.annotate`) they share.

Heavy imports are lazy: ``import sink.model`` does not pull in psycopg.
"""

from __future__ import annotations

from typing import Any

import schemas._compiled  # noqa: F401 - installs the compiled modules' finder (schemas/_compiled.py) first

__all__ = ["GraphStore", "StoreSettings", "StoredEvent", "BatchResult"]


def __getattr__(name: str) -> Any:
    if name == "GraphStore":
        from .postgres import GraphStore
        return GraphStore
    if name == "StoreSettings":
        from .settings import StoreSettings
        return StoreSettings
    if name in ("StoredEvent", "BatchResult"):
        from . import model
        return getattr(model, name)
    raise AttributeError(f"module 'sink' has no attribute {name!r}")
