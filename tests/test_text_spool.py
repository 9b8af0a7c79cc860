"""The staging tasks' event texts, spooled for the driver's export (stream_processor/text_spool.py).

The spool itself is pure file work (no server). The export with a spool is compared with the export without one
on a real PostgreSQL: every payload equal, whichever texts the spool has (all, some, none, a stale batch's). The
stream test runs ``lineage process`` in local mode (its staging tasks in Spark's Python workers) and checks that the
texts came from the spool and that the Parquet files hold exactly what PostgreSQL holds.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest

from stream_processor.text_spool import SPOOL_PREFIX, TextSpool, write_texts


def _pairs(*texts: str) -> tuple[list[str], list[str]]:
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts], list(texts)


def test_texts_of_a_batch_are_every_part_file_and_a_rewritten_part_replaces_its_file(tmp_path) -> None:
    spool = TextSpool(tmp_path)
    try:
        assert spool.root.parent == tmp_path and spool.root.name.startswith(f"{SPOOL_PREFIX}{os.getpid()}-")
        write_texts(spool.root, 7, 0, *_pairs("a", "b"))
        write_texts(spool.root, 7, 1, *_pairs("stale attempt"))
        write_texts(spool.root, 7, 1, *_pairs('{"x":"東京\\n"}'))   # the task's retry: the same name, replaced
        write_texts(spool.root, 8, 0, *_pairs("other batch"))
        assert write_texts(spool.root, 7, 2, [], []) is None          # a task with no events writes no file
        texts = spool.texts(7)
        assert sorted(texts.column("payload").to_pylist()) == sorted(["a", "b", '{"x":"東京\\n"}'])
        assert texts.column("event_hash").to_pylist() == _pairs("a", "b", '{"x":"東京\\n"}')[0]
        assert not list((spool.root / "batch=7").glob(".*"))          # no temporary file left behind
        spool.discard(7)
        assert spool.texts(7) is None and spool.texts(8).num_rows == 1
    finally:
        spool.close()
    assert not spool.root.exists()
    assert write_texts(spool.root, 9, 0, *_pairs("late")) is None    # a task after the writer closed: no file


def test_an_unreadable_file_is_left_out(tmp_path) -> None:
    spool = TextSpool(tmp_path)
    try:
        write_texts(spool.root, 1, 0, *_pairs("kept"))
        (spool.root / "batch=1" / "part=1.arrow").write_bytes(b"not arrow")
        assert spool.texts(1).column("payload").to_pylist() == ["kept"]
    finally:
        spool.close()


def test_a_write_that_fails_leaves_no_file_and_says_so(tmp_path, caplog) -> None:
    spool = TextSpool(tmp_path)
    try:
        (spool.root / "batch=3").mkdir()
        (spool.root / "batch=3" / f".part=0.{os.getpid()}.tmp").mkdir()   # the file cannot be opened: an OSError
        with caplog.at_level("WARNING", logger="stream_processor.text_spool"):
            assert write_texts(spool.root, 3, 0, *_pairs("lost")) is None
        assert "batch 3 part 0" in caplog.text and "from PostgreSQL" in caplog.text
        assert spool.texts(3) is None   # the export reads this part's texts from PostgreSQL
    finally:
        spool.close()


def test_a_new_spool_removes_the_directories_of_processes_that_are_gone(tmp_path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = tmp_path / f"{SPOOL_PREFIX}{int(gone.stdout)}-abc"
    (dead / "batch=1").mkdir(parents=True)
    alive = tmp_path / f"{SPOOL_PREFIX}{os.getppid()}-def"
    alive.mkdir()
    unrelated = tmp_path / "lineage-other-1-x"
    unrelated.mkdir()
    spool = TextSpool(tmp_path)
    try:
        assert not dead.exists() and alive.exists() and unrelated.exists()
    finally:
        spool.close()


# -- the export with a spool, on PostgreSQL ------------------------------------------------------------------


def _events(n: int) -> list:
    from schemas.identity import canonical_json, event_hash
    from schemas.validate import validate_event
    from sink.model import StoredEvent

    out = []
    for i in range(n):
        doc = validate_event({
            "eventType": "COMPLETE", "eventTime": f"2024-05-01T10:{i:02d}:00Z", "producer": "https://example.com/p",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": str(uuid.uuid4())}, "job": {"namespace": "etl", "name": f"job {i} ñ 東京"},
            "inputs": [{"namespace": "pg://db", "name": f"in,{i}\n\"q\""}],
            "outputs": [{"namespace": "pg://db", "name": f"out\t{i}"}]})
        out.append(StoredEvent(event=doc, event_hash=event_hash(doc), source=f"t[0]@{i}", text=canonical_json(doc)))
    return out


@pytest.mark.integration
def test_the_export_with_spooled_texts_equals_the_export_without(pg_dsn: str, tmp_path) -> None:
    from sink.parquet import changed_rows
    from sink.postgres import GraphStore

    first, second = _events(6), _events(5)
    with GraphStore(pg_dsn) as store:
        store.migrate()
        store.write_batch(1, first)
        store.write_batch(2, second + first[:2])   # two events an earlier batch stored: not new in batch 2
    expected = changed_rows(pg_dsn, 2)
    assert expected["lineage_events"].num_rows == 5

    def texts(events) -> pa.Table:
        return pa.table({"event_hash": [e.event_hash for e in events], "payload": [e.text for e in events]})

    cases = {
        "all": (texts(second + first), 5, 0),
        "some, twice over, with other batches' texts": (pa.concat_tables([texts(second[:3] + first),
                                                                           texts(second[1:2])]), 3, 2),
        "none of them": (texts(first), 0, 5),
        "empty": (texts([]), 0, 5),
    }
    for name, (given, from_spool, from_pg) in cases.items():
        stats: dict[str, int] = {}
        got = changed_rows(pg_dsn, 2, texts=given, stats=stats)
        assert stats == {"texts_given": from_spool, "texts_read": from_pg}, name
        assert got.keys() == expected.keys()
        for table in expected:
            assert got[table].schema == expected[table].schema, (name, table)
            assert _rows(got[table]) == _rows(expected[table]), (name, table)
        for h, payload in zip(got["lineage_events"].column("event_hash").to_pylist(),
                              got["lineage_events"].column("payload").to_pylist(), strict=True):
            assert hashlib.sha256(payload.encode()).hexdigest() == h
    stats = {}
    assert changed_rows(pg_dsn, 3, texts=texts(second), stats=stats)["lineage_events"].num_rows == 0
    assert stats == {"texts_given": 0, "texts_read": 0}


def _rows(table: pa.Table) -> list[str]:
    return sorted(map(repr, table.to_pylist()))


# -- the stream, in local mode --------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_stream_exports_the_staging_tasks_texts_and_parquet_holds_what_postgres_holds(
        spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path, monkeypatch) -> None:
    import psycopg

    from schemas.codec import encode_single_object
    from sink.parquet import ParquetGraphStore
    from stream_processor.testing import StreamHarness, produce, run_event, test_settings

    monkeypatch.delenv("LINEAGE_TEXT_SPOOL", raising=False)
    events = [run_event(job=f"spool job {i} 東京", inputs=[f"in {i}"], outputs=[f"out,\n{i}"]) for i in range(40)]
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"),
                             parquet_dir=str(tmp_path / "pq"))
    with StreamHarness(spark, settings) as h:
        produce(kafka_bootstrap, topic_names["events"], [(encode_single_object(e), None, None) for e in events])
        h.drain()
        produce(kafka_bootstrap, topic_names["events"], [(encode_single_object(e), None, None) for e in events[:5]])
        h.drain()                                     # duplicates: nothing new to export
        spool = h.writer._spool
        assert spool is not None and spool.root.is_dir()
        assert not list(spool.root.iterdir())          # every exported batch's files removed
        given = sum(r.counts.get(("export_texts", "spool", ""), 0) for r in h.reports)
        read = sum(r.counts.get(("export_texts", "postgres", ""), 0) for r in h.reports)
        assert (given, read) == (40, 0)
    with psycopg.connect(pg_dsn) as conn:
        stored = dict(conn.execute("SELECT event_hash, payload FROM lineage_events").fetchall())
    files = ParquetGraphStore(tmp_path / "pq").read_table("lineage_events")
    assert len(stored) == 40
    assert dict(zip(files.column("event_hash").to_pylist(), files.column("payload").to_pylist(), strict=True)) == stored


@pytest.mark.integration
def test_without_the_spool_the_stream_reads_the_texts_from_postgres(
        spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path, monkeypatch) -> None:
    from schemas.codec import encode_single_object
    from sink.parquet import ParquetGraphStore
    from stream_processor.testing import StreamHarness, produce, run_event, test_settings

    monkeypatch.setenv("LINEAGE_TEXT_SPOOL", "false")
    events = [run_event(job=f"no spool {i}") for i in range(10)]
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"),
                             parquet_dir=str(tmp_path / "pq"))
    with StreamHarness(spark, settings) as h:
        produce(kafka_bootstrap, topic_names["events"], [(encode_single_object(e), None, None) for e in events])
        h.drain()
        assert h.writer._spool is None and h.writer.config.text_spool is None
        assert not any(k[0] == "export_texts" for r in h.reports for k in r.counts)
    assert ParquetGraphStore(tmp_path / "pq").read_table("lineage_events").num_rows == 10
