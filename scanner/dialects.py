"""Dialect names and quirks: aliases, which dialects omit semicolons, how temporary tables look."""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect

__all__ = ["canonical_dialect", "splits_on_keywords", "KNOWN_DIALECTS"]

#: Common names people use for sqlglot's dialects.
ALIASES = {
    "ansi": "", "sql": "", "default": "", "generic": "", "": "",
    "sparksql": "spark", "spark_sql": "spark", "pyspark": "spark", "spark3": "spark",
    "sqlserver": "tsql", "mssql": "tsql", "azuresql": "tsql", "synapse": "tsql", "fabric": "fabric",
    "postgresql": "postgres", "pg": "postgres", "psql": "postgres",
    "bq": "bigquery", "googlesql": "bigquery",
    "hiveql": "hive", "impala": "hive",
    "mariadb": "mysql", "plsql": "oracle",
    "sf": "snowflake", "rs": "redshift", "awsathena": "athena", "prestodb": "presto",
}

KNOWN_DIALECTS = sorted(set(Dialect.classes) | {a for a in ALIASES if a})


def canonical_dialect(name: str | None) -> str:
    """sqlglot's dialect name for ``name`` ('' is sqlglot's default, ANSI-like dialect).

    Raises ``ValueError`` for a name neither sqlglot nor our alias list knows.
    """
    key = (name or "").strip().lower()
    key = ALIASES.get(key, key)
    if key and key not in Dialect.classes:
        raise ValueError(f"unknown SQL dialect {name!r}; use one of: {', '.join(KNOWN_DIALECTS)}")
    return key


def splits_on_keywords(dialect: str) -> bool:
    """T-SQL scripts routinely leave out semicolons: statements are split at their first keyword."""
    return dialect in ("tsql", "fabric")


#: Object names the object-array format leaves out by default (seed sql-object-lineage-json-format.md).
DEFAULT_LOGGING_OBJECTS = ("ADMIN.Logs", "dbo.LogMessage", "dbo.spLastRowCount")
