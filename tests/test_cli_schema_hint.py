"""A CLI read against a database an older version set up says what to do, instead of a psycopg traceback."""

from __future__ import annotations

import psycopg
import pytest

pytestmark = pytest.mark.integration


def test_search_against_a_database_before_migration_7_says_how_to_migrate(pg_server, capsys) -> None:
    from lineage.cli import main
    from sink.migrate import apply_migrations

    dsn = pg_server.create_database("t_schema_hint")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert apply_migrations(conn, up_to=6)    # lineage_search_columns comes with migration 007
    code = main(["search", "orders", "--postgres-dsn", dsn])
    err = capsys.readouterr().err
    assert code == 1
    assert "lineage_search_columns" in err and "lineage process" in err and "Traceback" not in err


def test_other_errors_get_no_hint() -> None:
    from lineage.cli import schema_hint

    assert schema_hint(ValueError("relation x does not exist")) is None
    assert "older than this version" in schema_hint(psycopg.errors.UndefinedTable('relation "t" does not exist'))
