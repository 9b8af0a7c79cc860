"""Every SQL block of docs/QUERIES.md runs on a real graph and answers what the Python API answers.

The blocks are written for ``psql`` (``\\set`` variables, ``:'name'`` / ``:name`` references); the test
substitutes the same values as literals. Also: the owners query after ``"_deleted": true`` ownership facets,
which store the cleared values ``''`` (owner) and JSON ``null`` (owners) (sink/derive.py, Facets).
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from sink.queries import LineageQueries
from tests.graph_rows import NS, T0, GraphRows, sample_warehouse

DOC = Path(__file__).resolve().parents[1] / "docs" / "QUERIES.md"


def sql_blocks() -> list[str]:
    """The ```sql blocks of the document, ``\\set`` lines dropped, in order."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    out = []
    for block in blocks:
        body = "\n".join(line for line in block.splitlines() if not line.startswith("\\set")).strip()
        if body:
            out.append(body)
    return out


def bind(sql: str, values: dict[str, str]) -> str:
    """psql's ``:'name'`` (a quoted literal) and ``:name`` (as it is) replaced by ``values``."""
    def quoted(m: re.Match[str]) -> str:
        return "'" + values[m.group(1)].replace("'", "''") + "'"

    sql = re.sub(r":'([a-z_]+)'", quoted, sql)
    return re.sub(r"(?<![:\w]):([a-z_]+)\b", lambda m: values[m.group(1)], sql)


@pytest.fixture
def warehouse(pg_dsn: str):
    g = GraphRows(pg_dsn)
    ids = sample_warehouse(g)
    # revisions for the ancestors query: J1 wrote stg.orders c1, which J2 read to write mart.revenue d1
    t1, t2 = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    r1 = g.run(ids["J1"], t1, inputs=[(ids["A"], None)], outputs=[(ids["C"], None)])
    c1 = g.version(ids["C"], "c1", t1, run=r1)
    g.run(ids["J2"], t2, inputs=[(ids["C"], c1)], outputs=[(ids["D"], None)])
    g.version(ids["D"], "d1", t2)
    yield g, ids
    g.close()


def _values(ids: dict[str, str]) -> dict[str, str]:
    return {"node": f"{NS}/mart.revenue", "depth": "5", "root": ids["D"], "col": "total", "a": ids["A"],
            "b": ids["D"], "max_length": "10", "within": ids["C"]}


@pytest.mark.integration
def test_every_documented_query_runs_and_answers(warehouse):
    g, ids = warehouse
    blocks = sql_blocks()
    assert len(blocks) >= 6, "docs/QUERIES.md lost its SQL"
    values = _values(ids)
    answers = []
    for sql in blocks:
        answers.append(g.conn.execute(bind(sql, values)).fetchall())
    # the id look-up finds mart.revenue; every walk from it finds something
    assert [str(r[0]) for r in answers[0]] == [ids["D"]]
    assert all(answers[i] for i in range(1, len(answers))), [i for i, a in enumerate(answers) if not a]
    ancestors = next(a for sql, a in zip(blocks, answers, strict=True) if "chain(" in sql)
    assert [r[0] for r in ancestors] == ["c1"]


def _impact_sql() -> str:
    return next(b for b in sql_blocks() if "jsonb_array_elements" in b and "owner" in b)


@pytest.mark.integration
def test_documented_owners_query_matches_impact_and_survives_deleted_ownership(warehouse, pg_dsn):
    g, ids = warehouse
    values = {**_values(ids), "root": ids["A"]}
    q = LineageQueries(pg_dsn)
    try:
        expected = set(q.impact(ids["A"], depth=10).owners)
        owners = {r[0] for r in g.conn.execute(bind(_impact_sql(), values)).fetchall()}
        assert owners == expected and {"team-stg", "bob"} <= owners
        # what "_deleted": true ownership facets leave behind (sink/derive.py CLEARED_TEXT / CLEARED_JSON)
        g.conn.execute("UPDATE lineage_datasets SET owner = '' WHERE dataset_id = %s", (ids["C"],))
        g.conn.execute("UPDATE lineage_jobs SET owners = 'null'::jsonb WHERE job_id = %s", (ids["J2"],))
        owners = {r[0] for r in g.conn.execute(bind(_impact_sql(), values)).fetchall()}
        assert owners == set(q.impact(ids["A"], depth=10).owners)
        assert "team-stg" not in owners and "bob" not in owners and "" not in owners
    finally:
        q.close()
