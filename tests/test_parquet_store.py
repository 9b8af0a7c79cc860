"""The Parquet projection: one current row per id, idempotent replays, bounded compaction, DuckDB agrees;
the streaming, size-tiered compaction (pure pyarrow, no server) equals the in-memory merge."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sink import parquet
from sink.parquet import TABLES, ParquetGraphStore, changed_rows
from tests.graph_rows import T0, GraphRows

integration = pytest.mark.integration     # the tests that need PostgreSQL

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


@integration
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


@integration
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


@integration
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
    # at most max_batch_files batch files, plus fewer than fanout (4) base segments per tier: these segments of
    # 5-10 rows all fall in tier 1 (4 <= rows < 16), so at most 3 of them
    assert max_files <= 4 + 3
    assert len(compacting.files("lineage_nodes")) < 40
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


@integration
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


@integration
def test_changed_rows_only_the_batch(two_batches, pg_dsn: str) -> None:
    _, ids = two_batches
    rows = changed_rows(pg_dsn, 2)
    assert rows["lineage_nodes"].column("node_id").to_pylist() == [ids["a"]]
    assert rows["lineage_edges"].column("kind").to_pylist() == ["reads"]
    assert rows["lineage_events"].num_rows == 0 and rows["lineage_events"].schema.names[-2:] == ["_batch_id",
                                                                                             "_commit_seq"]
    assert changed_rows(pg_dsn, 99)["lineage_nodes"].num_rows == 0


@integration
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


# -- streaming, size-tiered compaction (pure pyarrow) -------------------------------------------------------

Q = "lineage_quality"        # a table whose rows the tests build by hand: quality_id, node_id, metrics
ID_POOL = [f"q{i:03d}" for i in range(60)] + ["", "a", "ab", "Z", "z", "é1", "\U0001F600x", "東京"]


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Chunks of 2 rows, row groups and sorted runs of a few rows: every boundary falls somewhere."""
    monkeypatch.setattr(parquet, "_READ_ROWS", 2)
    monkeypatch.setattr(parquet, "_MERGE_BYTES", 2_000)
    monkeypatch.setattr(parquet, "_GROUP_BYTES", 400)
    monkeypatch.setattr(parquet, "_RUN_BYTES", 300)


def _q_rows(ids: list[str], seqs: list[int], tag: str, pre_008: bool = False) -> pa.Table:
    cols = {"quality_id": pa.array(ids, pa.string()),
            "node_id": pa.array([f"n-{i}" for i in ids], pa.string()),
            "metrics": pa.array([f"{tag}-{i}-{s}-{k}" for k, (i, s) in enumerate(zip(ids, seqs, strict=True))],
                                pa.string()),
            "_batch_id": pa.array(seqs, pa.int64())}
    if not pre_008:
        cols["_commit_seq"] = pa.array(seqs, pa.int64())
    return pa.table(cols)


def _random_files(directory: Path, rng: random.Random) -> list[Path]:
    """Batch and base files of one table: duplicates across files, ties of seq between a batch and a base file,
    duplicate ids inside base files, pre-008 files without ``_commit_seq``, unsorted unmarked (legacy) files,
    empty files, columns missing."""
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    seqs = rng.sample(range(1, 60), 8)
    kinds = [(s, "batch") for s in seqs[:5]] + [(s, "base") for s in seqs[5:]] + [(seqs[0], "base")]  # a tie
    for seq, kind in kinds:
        n = rng.choice([0, 1, 4, 15, 30, 50])
        if kind == "batch":
            ids = rng.sample(ID_POOL, min(n, len(ID_POOL)))
            row_seqs = [seq] * len(ids)
        else:
            ids = rng.choices(ID_POOL, k=n)
            row_seqs = [rng.randint(1, seq) for _ in ids]
        legacy = rng.random() < 0.35
        rows = _q_rows(ids, row_seqs, f"{kind}{seq}", pre_008=legacy and rng.random() < 0.6)
        path = directory / f"{kind}={seq:020d}.parquet"
        if legacy:   # COPY order, no mark, arbitrary row groups
            pq.write_table(rows, path, row_group_size=rng.choice([3, 7, 1000]))
        else:
            ParquetGraphStore._atomic_write(path, rows, "quality_id")
        files.append(path)
    return files


def _full(table: pa.Table) -> pa.Table:
    return parquet._conform(table.replace_schema_metadata(None), TABLES[Q].schema)


def _assert_sorted_and_marked(path: Path, id_column: str = "quality_id") -> None:
    meta = pq.read_metadata(path)
    assert meta.metadata[b"lineage.sorted_by"] == id_column.encode()
    ids = pq.read_table(path, columns=[id_column]).column(0).to_pylist()
    assert ids == sorted(ids, key=lambda i: i.encode())


@pytest.mark.parametrize("seed", range(12))
def test_streaming_merge_equals_in_memory_merge(tmp_path, tiny_chunks, seed: int) -> None:
    rng = random.Random(seed)
    store = ParquetGraphStore(tmp_path)
    files = _random_files(tmp_path / Q, rng)
    expected = _full(store._merge(Q, files))
    out = tmp_path / "out.parquet"
    written = store._merge_files_streaming(Q, files, out)
    actual = pq.read_table(out).replace_schema_metadata(None)
    assert written == actual.num_rows == expected.num_rows
    assert actual.equals(expected)
    _assert_sorted_and_marked(out)
    assert pq.read_metadata(out).num_row_groups >= min(2, actual.num_rows)      # bounded row groups
    assert not list(tmp_path.rglob("*.tmp"))                                     # runs and temporaries gone


def test_equal_ids_across_row_group_boundaries(tmp_path, tiny_chunks, monkeypatch) -> None:
    """One id spread over several row groups and chunks of two files: one row comes out, the latest."""
    monkeypatch.setattr(parquet, "_GROUP_BYTES", 150)      # ~3 rows per row group
    store = ParquetGraphStore(tmp_path)
    d = tmp_path / Q
    d.mkdir()
    a = d / f"base={9:020d}.parquet"
    b = d / f"batch={7:020d}.parquet"
    ParquetGraphStore._atomic_write(a, _q_rows(["a"] + ["m"] * 9 + ["z"], [1, 1, 2, 3, 9, 4, 5, 6, 7, 8, 1], "A"),
                                    "quality_id")
    ParquetGraphStore._atomic_write(b, _q_rows(["m", "n"], [7, 7], "B"), "quality_id")
    meta = pq.read_metadata(a)
    assert meta.num_row_groups > 2 and 2 <= meta.row_group(0).num_rows <= 9      # boundaries among the m's
    store._merge_files_streaming(Q, [a, b], tmp_path / "out.parquet")
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [(r["quality_id"], r["_commit_seq"], r["metrics"][0]) for r in out] == [
        ("a", 1, "A"), ("m", 9, "A"), ("n", 7, "B"), ("z", 1, "A")]


def test_batch_row_beats_base_row_on_equal_seq(tmp_path) -> None:
    store = ParquetGraphStore(tmp_path)
    d = tmp_path / Q
    d.mkdir()
    base = d / f"base={5:020d}.parquet"
    batch = d / f"batch={5:020d}.parquet"
    ParquetGraphStore._atomic_write(base, _q_rows(["x", "y"], [5, 5], "base"), "quality_id")
    ParquetGraphStore._atomic_write(batch, _q_rows(["x"], [5], "batch"), "quality_id")
    for files in ([base, batch], [batch, base]):
        store._merge_files_streaming(Q, files, tmp_path / "out.parquet")
        rows = {r["quality_id"]: r["metrics"] for r in pq.read_table(tmp_path / "out.parquet").to_pylist()}
        assert rows == {"x": "batch-x-5-0", "y": "base-y-5-1"}


def test_written_files_are_sorted_marked_in_bounded_row_groups(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(parquet, "_GROUP_BYTES", 500)      # ~12 of these rows
    store = ParquetGraphStore(tmp_path, max_batch_files=2)
    rng = random.Random(7)
    for seq in range(1, 4):
        ids = rng.sample(ID_POOL, 40)          # unsorted
        store.write_batch(seq, {Q: _q_rows(ids, [seq] * 40, "b")})
        for path in store.files(Q):
            _assert_sorted_and_marked(path)
            meta = pq.read_metadata(path)
            rows = meta.num_rows
            assert meta.num_row_groups > 1 and all(meta.row_group(i).num_rows < rows
                                                   for i in range(meta.num_row_groups))
    assert [p.name.split("=")[0] for p in store.files(Q)] == ["base"]   # 3 batch files > 2: merged


def _random_batch(rng: random.Random, seq: int) -> pa.Table:
    ids = rng.sample([f"id{i:04d}" for i in range(1500)], rng.randint(1, 40))
    return _q_rows(ids, [seq] * len(ids), f"s{seq}")


def test_tiered_compaction_bounds_files_and_keeps_content(tmp_path, monkeypatch) -> None:
    merged_rows = []
    streaming = ParquetGraphStore._merge_files_streaming

    def counting(self, name, files, target):
        merged_rows.append(streaming(self, name, files, target))
        return merged_rows[-1]

    monkeypatch.setattr(ParquetGraphStore, "_merge_files_streaming", counting)
    rng = random.Random(3)
    plain = ParquetGraphStore(tmp_path / "plain", max_batch_files=10**9)
    tiered = ParquetGraphStore(tmp_path / "tiered", max_batch_files=8, fanout=4)
    max_files = written = 0
    for seq in range(1, 301):
        rows = _random_batch(rng, seq)
        written += rows.num_rows
        plain.write_batch(seq, {Q: rows})
        tiered.write_batch(seq, {Q: rows})
        max_files = max(max_files, len(tiered.files(Q)))
    reference = plain.read_table(Q)
    tiers = parquet._tier(reference.num_rows, 4) + 1
    assert max_files <= 8 + 3 * tiers
    assert len(tiered.files(Q)) < 8 + 3 * tiers
    assert len(tiered._files(Q, "base")) > 1           # several segments, not one base rewritten each time
    assert _full(tiered.read_table(Q)).equals(_full(reference))
    assert sum(merged_rows) <= written * tiers         # each row rewritten at most once per tier
    for path in tiered.files(Q):
        _assert_sorted_and_marked(path)
    tiered.compact(Q)
    [only] = tiered.files(Q)
    assert _full(pq.read_table(only)).equals(_full(reference))


def test_replayed_old_batches_merge_into_the_existing_base(tmp_path) -> None:
    """Replays of batches 1..5 after they were compacted into base=5 fold into base=5, not over it."""
    store = ParquetGraphStore(tmp_path, max_batch_files=4)
    ids = {seq: [f"s{seq}-{i}" for i in range(10)] for seq in range(1, 6)}
    for seq in range(1, 6):
        store.write_batch(seq, {Q: _q_rows(ids[seq], [seq] * 10, "first")})
    assert [p.name for p in store.files(Q)] == [f"base={5:020d}.parquet"]
    before = store.read_table(Q)
    for seq in range(1, 6):            # a replay reads only the rows no later batch changed since: a few
        store.write_batch(seq, {Q: _q_rows(ids[seq][:2], [seq] * 2, "first")})
    assert [p.name for p in store.files(Q)] == [f"base={5:020d}.parquet"]
    assert store.read_table(Q).num_rows == 50
    assert store.read_table(Q).equals(before)


def test_crash_between_rename_and_deletes_changes_nothing(tmp_path) -> None:
    store = ParquetGraphStore(tmp_path, max_batch_files=10**9)
    rng = random.Random(11)
    for seq in range(1, 20):
        store.write_batch(seq, {Q: _random_batch(rng, seq)})
    before = _full(store.read_table(Q))
    files = store.files(Q)
    store._merge_files_streaming(Q, files, tmp_path / Q / f"base={19:020d}.parquet")   # no deletes: a crash
    assert len(store.files(Q)) == len(files) + 1
    assert _full(store.read_table(Q)).equals(before)
    store.compact(Q)
    assert len(store.files(Q)) == 1 and _full(store.read_table(Q)).equals(before)
