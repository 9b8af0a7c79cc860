"""The scanner's typed results: what a statement reads, writes and how each output column is made.

Everything here is a plain frozen dataclass so results compare by value, pickle across worker
processes and serialise deterministically.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "TableName", "SourceColumn", "ColumnLineage", "ColumnDef", "ForeignKey", "TableSchema",
    "StatementLineage", "ScanIssue", "Unit", "FileResult", "ScanResult",
    "IDENTITY", "TRANSFORMATION", "AGGREGATION",
]

#: OpenLineage 1-2 DIRECT subtypes, weakest first (a chain of steps takes the strongest).
IDENTITY, TRANSFORMATION, AGGREGATION = "IDENTITY", "TRANSFORMATION", "AGGREGATION"
_RANK = {IDENTITY: 0, TRANSFORMATION: 1, AGGREGATION: 2}


def stronger(a: str, b: str) -> str:
    """The subtype of two chained DIRECT steps: AGGREGATION > TRANSFORMATION > IDENTITY."""
    return a if _RANK.get(a, 1) >= _RANK.get(b, 1) else b


@dataclass(frozen=True, order=True)
class TableName:
    """A table as the code names it: ``parts`` is (catalog, schema/db, table) with missing parts empty."""

    catalog: str
    db: str
    name: str

    @property
    def qualified(self) -> str:
        """The dataset name: the non-empty parts joined with dots (``db.schema.table``)."""
        return ".".join(p for p in (self.catalog, self.db, self.name) if p)

    def key(self) -> tuple[str, str, str]:
        """A case-insensitive identity (unquoted identifiers are case-insensitive in every dialect we read)."""
        return (self.catalog.lower(), self.db.lower(), self.name.lower())

    def __str__(self) -> str:
        return self.qualified


@dataclass(frozen=True, order=True)
class SourceColumn:
    """One input column of an output column: ``type`` DIRECT or INDIRECT and its OpenLineage subtype."""

    table: TableName
    column: str
    type: str = "DIRECT"
    subtype: str = IDENTITY
    masking: bool = False


@dataclass(frozen=True)
class ColumnLineage:
    """An output column, the expression that makes it (as written) and its input columns."""

    column: str
    expression: str
    sources: tuple[SourceColumn, ...]


@dataclass(frozen=True)
class ColumnDef:
    name: str
    type: str | None = None
    nullable: bool = True
    description: str | None = None


@dataclass(frozen=True)
class ForeignKey:
    name: str
    columns: tuple[str, ...]
    references: TableName
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class TableSchema:
    """What DDL says about a table (CREATE TABLE, ALTER TABLE ADD COLUMN / ADD CONSTRAINT)."""

    table: TableName
    columns: tuple[ColumnDef, ...] = ()
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[ForeignKey, ...] = ()
    kind: str = "TABLE"

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass(frozen=True)
class StatementLineage:
    """The lineage of one SQL statement.

    ``kind`` is the statement (``INSERT``, ``CREATE_TABLE_AS``, ``CREATE_VIEW``, ``MERGE``, ``UPDATE``,
    ``DELETE``, ``SELECT``, ``SELECT_INTO``, ``TRUNCATE``, ``COPY``, ``CREATE_TABLE``, ``ALTER_TABLE``...).
    ``inputs``/``outputs`` never contain temporary tables or CTEs: they are followed to what they read.
    ``dataset_indirect`` are the columns that affect every output row (JOIN / FILTER / GROUP_BY / SORT).
    """

    kind: str
    sql: str
    inputs: tuple[TableName, ...] = ()
    outputs: tuple[TableName, ...] = ()
    columns: tuple[ColumnLineage, ...] = ()
    dataset_indirect: tuple[SourceColumn, ...] = ()
    line: int = 1
    end_line: int = 1
    warnings: tuple[str, ...] = ()

    def column_pairs(self) -> set[tuple[str, str, str]]:
        """``(source table.column, output table, output column)`` facts, for scoring and tests."""
        out = self.outputs[0].qualified if self.outputs else ""
        return {(f"{s.table.qualified}.{s.column}", out, c.column) for c in self.columns for s in c.sources}


@dataclass(frozen=True)
class ScanIssue:
    """A statement or file the scanner could not read, reported as ``path:line: reason``."""

    path: str
    line: int
    reason: str
    kind: str = "error"

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class Unit:
    """A job: one data-moving statement, or a procedure / view / Python function made of several.

    ``name`` is stable across scans (file path + object or statement ordinal), ``job_type`` is
    QUERY / VIEW / PROCEDURE / FUNCTION, ``integration`` SQL or PYTHON.
    """

    name: str
    path: str
    job_type: str
    integration: str
    dialect: str
    sql: str
    line: int
    end_line: int
    statements: tuple[StatementLineage, ...]
    object_name: TableName | None = None
    unresolved: tuple[str, ...] = ()

    @property
    def inputs(self) -> tuple[TableName, ...]:
        seen: dict[tuple[str, str, str], TableName] = {}
        for st in self.statements:
            for t in st.inputs:
                seen.setdefault(t.key(), t)
        return tuple(seen.values())

    @property
    def outputs(self) -> tuple[TableName, ...]:
        seen: dict[tuple[str, str, str], TableName] = {}
        for st in self.statements:
            for t in st.outputs:
                seen.setdefault(t.key(), t)
        return tuple(seen.values())


@dataclass
class FileResult:
    path: str
    units: list[Unit] = field(default_factory=list)
    tables: list[TableSchema] = field(default_factory=list)
    issues: list[ScanIssue] = field(default_factory=list)
    statements: int = 0


@dataclass
class ScanResult:
    """What a scan found: jobs, DDL-declared tables, problems, and counts."""

    units: list[Unit] = field(default_factory=list)
    tables: list[TableSchema] = field(default_factory=list)
    issues: list[ScanIssue] = field(default_factory=list)
    files: int = 0
    statements: int = 0
    retracted: list[str] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(1 for i in self.issues if i.kind == "error")
