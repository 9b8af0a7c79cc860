"""Lineage from code: SQL and Python files -> OpenLineage JobEvents (a producer).

Pure functions from text to typed results (:func:`analyze_sql`), I/O only at the edges
(:func:`scan` walks files; :mod:`scanner.emit` writes or publishes events).
"""

from __future__ import annotations

import logging

from scanner.catalog import Catalog
from scanner.model import (
    ColumnLineage,
    ScanIssue,
    ScanResult,
    SourceColumn,
    StatementLineage,
    TableName,
    TableSchema,
    Unit,
)
from scanner.sql import SqlContext, analyze_sql

# sqlglot logs "contains unsupported syntax" for every statement it keeps as a Command; the scanner
# reports what it could not read itself.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

__all__ = [
    "analyze_sql", "scan", "Catalog", "SqlContext", "ScanResult", "StatementLineage", "ColumnLineage",
    "SourceColumn", "TableName", "TableSchema", "ScanIssue", "Unit",
]


def scan(paths, **kwargs) -> ScanResult:  # noqa: ANN001 - re-exported, documented in scanner.codebase
    """Scan files and directories; see :func:`scanner.codebase.scan`."""
    from scanner.codebase import scan as _scan
    return _scan(paths, **kwargs)
