"""Dialect names and quirks: aliases, which dialects omit semicolons, how temporary tables look."""

from __future__ import annotations

import functools

from sqlglot.dialects.dialect import Dialect

__all__ = ["canonical_dialect", "splits_on_keywords", "known_dialects"]

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

def known_dialects() -> list[str]:
    """Every name :func:`canonical_dialect` accepts (loads all of sqlglot's dialects: slow, for messages)."""
    return sorted(set(Dialect.classes) | {a for a in ALIASES if a})


@functools.lru_cache(maxsize=64)
def canonical_dialect(name: str | None) -> str:
    """sqlglot's dialect name for ``name`` ('' is sqlglot's default, ANSI-like dialect).

    Raises ``ValueError`` for a name neither sqlglot nor our alias list knows.
    """
    key = (name or "").strip().lower()
    key = ALIASES.get(key, key)
    if key:
        try:
            Dialect.get_or_raise(key)
        except ValueError:
            raise ValueError(f"unknown SQL dialect {name!r}; use one of: {', '.join(known_dialects())}") from None
    return key


def splits_on_keywords(dialect: str) -> bool:
    """T-SQL scripts routinely leave out semicolons: statements are split at their first keyword."""
    return dialect in ("tsql", "fabric")


#: Object names the object-array format leaves out by default (seed sql-object-lineage-json-format.md).
DEFAULT_LOGGING_OBJECTS = ("ADMIN.Logs", "dbo.LogMessage", "dbo.spLastRowCount")
