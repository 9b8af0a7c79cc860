"""The Parquet projection: one current row per id, idempotent replays, bounded compaction, DuckDB agrees."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from sink.parquet import TABLES, ParquetGraphStore, changed_rows
from tests.graph_rows import T0, GraphRows

pytestmark = pytest.mark.integration

WEIRD = 'we"ird, name;\nDROP TABLE x; -- 東京 ñ \\ \t'


def _sorted(table: pa.Table, key: str) -> pa.Table:
    return table.sort_by([(key, "ascending")])


@pytest.fixture
def two_batches(pg_dsn: str):
    """Batch 1 writes three datasets, a job, edges, a run; batch 2 changes one dataset and adds an edge."""
    g = GraphRows(pg_dsn)
    a = g.dataset("pg://db", "a", owner="x", batch=1)
    b = g.dataset("pg://db", WEIRD, batch=1)
    c = g.dataset("pg://db", "c", batch=1)
    j = g.job("ns", "job", batch=1)
    g.flow(j, [a], [b], batch=1)
    g.run(j, T0, [(a, None)], [(b, None)], batch=1)
    g.event({"eventType": "START", "job": {"name": "job"}}, "h1", batch=1)
    g.conn.execute("UPDATE lineage_datasets SET owner = 'y', description = '', last_batch_id = 2 WHERE dataset_id = %s",
                   (a,))
    g.flow(j, [c], [], first_seen=T0 + timedelta(days=1), batch=2)
    yield g, {"a": a, "b": b, "c": c, "j": j}
    g.close()


def test_batches_give_one_current_row_per_id(two_batches, pg_dsn: str, tmp_path) -> None:
    g, ids = two_batches
    store = ParquetGraphStore(tmp_path)
    counts1 = store.write_from_postgres(pg_dsn, 1)
    counts2 = store.write_from_postgres(pg_dsn, 2)
    assert counts1["lineage_nodes"] == 3 and counts2["lineage_nodes"] == 1      # a moved to batch 2
    assert counts1["lineage_edges"] == 3 and counts2["lineage_edges"] == 1
    nodes = store.read_table("lineage_nodes")
    assert nodes.num_rows == 4
    assert len(set(nodes.column("node_id").to_pylist())) == 4
    row = {r["node_id"]: r for r in nodes.to_pylist()}
    assert row[ids["a"]]["owners"] == '"y"' and row[ids["a"]]["description"] == ""     # '' is not NULL
    assert row[ids["c"]]["description"] is None
    assert row[ids["b"]]["name"] == WEIRD                                              # CSV-hostile text survives
    assert row[ids["a"]]["first_seen"] == T0 and row[ids["a"]]["_batch_id"] == 2
    assert store.read_table("lineage_runs").num_rows == 1
    assert store.read_table("lineage_events").column("event_hash").to_pylist() == ["h1"]
    # a later change to the same row in batch 3 wins over batch 2's row
    g.conn.execute("UPDATE lineage_datasets SET owner = 'z', last_batch_id = 3 WHERE dataset_id = %s", (ids["a"],))
    store.write_from_postgres(pg_dsn, 3)
    latest = {r["node_id"]: r["owners"] for r in store.read_table("lineage_nodes").to_pylist()}
    assert latest[ids["a"]] == '"z"' and len(latest) == 4


def test_replay_changes_nothing(two_batches, pg_dsn: str, tmp_path) -> None:
    store = ParquetGraphStore(tmp_path)
    store.write_from_postgres(pg_dsn, 1)
    store.write_from_postgres(pg_dsn, 2)
    before = {name: _sorted(store.read_table(name), t.id_column) for name, t in TABLES.items()}
    files_before = {name: [p.name for p in store.files(name)] for name in TABLES}
    store.write_from_postgres(pg_dsn, 1)
    store.write_from_postgres(pg_dsn, 2)
    store.write_from_postgres(pg_dsn, 2)
    for name, t in TABLES.items():
        assert _sorted(store.read_table(name), t.id_column).equals(before[name]), name
        assert [p.name for p in store.files(name)] == files_before[name]
    assert not list(tmp_path.rglob("*.tmp"))


def test_compaction_bounds_files_and_keeps_content(pg_dsn: str, tmp_path) -> None:
    g = GraphRows(pg_dsn)
    ids = [g.dataset("pg://db", f"t{i}", batch=1) for i in range(10)]
    plain = ParquetGraphStore(tmp_path / "plain", max_batch_files=10_000)
    compacting = ParquetGraphStore(tmp_path / "compacting", max_batch_files=4)
    max_files = 0
    for batch in range(1, 41):
        g.conn.execute("UPDATE lineage_datasets SET owner = %s, last_batch_id = %s WHERE dataset_id = %s",
                       (f"owner{batch}", batch, ids[batch % 10]))
        plain.write_from_postgres(pg_dsn, batch)
        compacting.write_from_postgres(pg_dsn, batch)
        max_files = max(max_files, len(compacting.files("lineage_nodes")))
    g.close()
    assert max_files <= 5
    assert len(plain.files("lineage_nodes")) == 40
    a = _sorted(plain.read_table("lineage_nodes"), "node_id")
    b = _sorted(compacting.read_table("lineage_nodes"), "node_id")
    assert a.equals(b) and a.num_rows == 10
    owners = dict(zip(a.column("node_id").to_pylist(), a.column("owners").to_pylist(), strict=True))
    assert owners[ids[0]] == '"owner40"' and owners[ids[9]] == '"owner39"'
    removed = plain.compact()
    assert removed["lineage_nodes"] == 39 and len(plain.files("lineage_nodes")) == 1
    assert _sorted(plain.read_table("lineage_nodes"), "node_id").equals(a)
    # replaying an old batch after compaction does not resurrect old values
    plain.write_from_postgres(pg_dsn, 5)
    assert _sorted(plain.read_table("lineage_nodes"), "node_id").equals(a)


def test_duckdb_reads_the_same_rows(two_batches, pg_dsn: str, tmp_path) -> None:
    import duckdb

    store = ParquetGraphStore(tmp_path)
    for batch in (1, 2, 1):
        store.write_from_postgres(pg_dsn, batch)
    con = duckdb.connect()
    for name, t in TABLES.items():
        ours = store.read_table(name)
        rows = con.execute(
            f"SELECT {t.id_column}, _batch_id FROM (SELECT *, row_number() OVER (PARTITION BY {t.id_column} "
            f"ORDER BY _batch_id DESC) AS rn FROM read_parquet('{tmp_path}/{name}/*.parquet')) WHERE rn = 1 "
            f"ORDER BY {t.id_column}").fetchall() if store.files(name) else []
        assert rows == sorted(zip(ours.column(t.id_column).to_pylist(), ours.column("_batch_id").to_pylist(),
                                  strict=True)), name
    weird = con.execute(f"SELECT name FROM read_parquet('{tmp_path}/lineage_nodes/*.parquet') "
                        "WHERE name LIKE 'we%'").fetchall()
    assert weird == [(WEIRD,)]


def test_changed_rows_only_the_batch(two_batches, pg_dsn: str) -> None:
    _, ids = two_batches
    rows = changed_rows(pg_dsn, 2)
    assert rows["lineage_nodes"].column("node_id").to_pylist() == [ids["a"]]
    assert rows["lineage_edges"].column("kind").to_pylist() == ["reads"]
    assert rows["lineage_events"].num_rows == 0 and rows["lineage_events"].schema.names[-2:] == ["_batch_id",
                                                                                             "_commit_seq"]
    assert changed_rows(pg_dsn, 99)["lineage_nodes"].num_rows == 0


def test_incremental_projection_equals_full_export(pg_dsn: str, tmp_path) -> None:
    """Batches written by GraphStore and projected one by one equal a full export of the database."""
    import uuid

    from schemas.identity import event_hash
    from schemas.validate import validate_event
    from sink.model import StoredEvent
    from sink.postgres import GraphStore

    def event(job: str, minute: int, inputs: list[str], outputs: list[str], state: str = "COMPLETE",
              run_id: str | None = None) -> StoredEvent:
        doc = validate_event({
            "eventType": state, "eventTime": f"2024-05-01T10:{minute:02d}:00Z", "producer": "https://example.com/p",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": run_id or str(uuid.uuid4())}, "job": {"namespace": "etl", "name": job},
            "inputs": [{"namespace": "pg://db", "name": n} for n in inputs],
            "outputs": [{"namespace": "pg://db", "name": n} for n in outputs]})
        return StoredEvent(event=doc, event_hash=event_hash(doc), source="t")

    run = str(uuid.uuid4())
    batches = [
        [event("a", 1, ["raw"], ["stg"], "START", run), event("b", 2, ["stg"], ["mart"])],
        [event("a", 3, ["raw"], ["stg"], "COMPLETE", run), event("c", 4, ["mart"], ["report"])],
        [event("b", 5, ["stg", "raw"], ["mart"])],
    ]
    store = ParquetGraphStore(tmp_path / "incremental", max_batch_files=2)
    with GraphStore(pg_dsn) as graph:
        graph.migrate()
        for batch_id, events in enumerate(batches, start=1):
            graph.write_batch(batch_id, events)
            store.write_from_postgres(pg_dsn, batch_id)
            store.write_from_postgres(pg_dsn, batch_id)          # a replay of the same batch: no-op
        graph.write_batch(2, batches[1])                         # a replayed batch id: already committed
    full = ParquetGraphStore(tmp_path / "full")
    full.write_all(pg_dsn)
    for name, t in TABLES.items():
        ours = _sorted(store.read_table(name), t.id_column).drop_columns(["_batch_id", "_commit_seq"])
        theirs = _sorted(full.read_table(name), t.id_column).drop_columns(["_batch_id", "_commit_seq"])
        assert ours.equals(theirs), name
    runs = store.read_table("lineage_runs").to_pylist()
    assert {r["run_id"]: r["state"] for r in runs}[run] == "COMPLETE"
    assert store.read_table("lineage_events").num_rows == 5
