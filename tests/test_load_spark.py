"""`lineage load` in batch mode: the stream's pipeline on files, both engines, the same graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from stream_processor.batch import FILE_TOPIC_PREFIX, plan_batches, read_sources, run_local, run_spark
from stream_processor.kafka_source import _arrow_schema
from stream_processor.settings import ProcessorSettings
from stream_processor.testing import run_event

ROOT = Path(__file__).resolve().parents[1]
NS = "evogeoscienceobject://hub1/inst/ws"


def _settings(dsn: str) -> ProcessorSettings:
    return ProcessorSettings(postgres_dsn=dsn, publish_enriched=False, publish_graph=False, shuffle_partitions=2,
                             bootstrap_servers="127.0.0.1:1", postgres_retry_max_seconds=10)


def _evo(run_id: str, name: str, when: str) -> dict:
    part = run_event(run_id, "COMPLETE", when, job="evo.publish", inputs=["source"], outputs=["$self"], namespace=NS)
    return {"events": [part], "self_link": "/events/0/outputs/0", "subject": {"namespace": NS, "name": name}}


def _write_files(root: Path) -> dict[str, object]:
    """Good lines, bad lines, duplicates and one `$self` document split across two files."""
    rid, evo_rid = str(uuid.uuid4()), str(uuid.uuid4())
    start = run_event(rid, "START", "2024-05-01T10:00:00+02:00", job="etl", inputs=["a"], outputs=["b"])
    complete = run_event(rid, "COMPLETE", "2024-05-01T10:05:00+02:00", job="etl", inputs=["a"], outputs=["b"])
    naive = run_event(str(uuid.uuid4()), "START", "2024-05-01T10:00:00", job="etl")  # no UTC offset
    later = run_event(str(uuid.uuid4()), "COMPLETE", "2024-05-02T00:00:00Z", job="report", inputs=["b"],
                      outputs=["c"])
    lines = [json.dumps(start), "garbage, not JSON", json.dumps(complete), "", json.dumps(naive),
             json.dumps(later)[:40], json.dumps(start)]
    (root / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "more.json").write_text(json.dumps([later, complete], indent=2), encoding="utf-8")
    evo = root / "evo"
    evo.mkdir()
    (evo / "obj1.json").write_text(json.dumps(_evo(evo_rid, "obj1:1", "2024-05-03T00:00:00Z"), indent=2),
                                   encoding="utf-8")
    (evo / "obj2.json").write_text(json.dumps(_evo(evo_rid, "obj2:1", "2024-05-03T00:00:01Z")), encoding="utf-8")
    return {"run_id": rid, "evo_run_id": evo_rid, "paths": [str(root / "events.jsonl"), str(root / "more.json"),
                                                            str(evo)]}


def _rows(dsn: str, sql: str) -> list:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


def _graph(dsn: str) -> dict[str, list[str]]:
    """Every row of the three graph tables (``received_at`` is wall time, so left out), sorted."""
    out = {}
    for table in ("lineage_events", "lineage_runs", "lineage_edges"):
        rows = _rows(dsn, f"SELECT (to_jsonb(t) - 'received_at')::text FROM {table} t")
        out[table] = sorted(r[0] for r in rows)
    return out


@pytest.mark.unit
def test_sources_have_the_kafka_columns_and_line_numbers(tmp_path):
    files = _write_files(tmp_path)
    source = read_sources(files["paths"])
    assert source.table.schema == _arrow_schema()
    rows = source.table.to_pylist()
    jsonl = [r for r in rows if r["topic"] == FILE_TOPIC_PREFIX + str(tmp_path / "events.jsonl")]
    assert [r["offset"] for r in jsonl] == [1, 2, 3, 5, 6, 7]  # the blank line 4 is no message
    array = [r for r in rows if r["topic"] == FILE_TOPIC_PREFIX + str(tmp_path / "more.json")]
    starts = [n for n, line in enumerate((tmp_path / "more.json").read_text().splitlines(), 1) if line == "  {"]
    assert [r["offset"] for r in array] == starts and starts[0] == 2  # the line each element starts on
    assert json.loads(array[1]["value"])["eventType"] == "COMPLETE"
    evo = [r for r in rows if "/evo/" in r["topic"]]
    assert [json.loads(r["headers"][0]["value"])["name"] for r in evo] == ["obj1:1", "obj2:1"]
    assert all(r["partition"] == 0 and r["key"] is None for r in rows)
    assert source.files == [str(tmp_path / "events.jsonl"), str(tmp_path / "more.json"),
                            str(tmp_path / "evo" / "obj1.json"), str(tmp_path / "evo" / "obj2.json")]


@pytest.mark.unit
def test_batches_follow_load_order_and_ids_are_content_derived(tmp_path):
    source = read_sources(_write_files(tmp_path)["paths"])
    a, b = FILE_TOPIC_PREFIX + source.files[0], FILE_TOPIC_PREFIX + source.files[1]
    rows = [{"event_hash": "h3", "source_topic": b, "source_offset": 1},
            {"event_hash": "h2", "source_topic": a, "source_offset": 9},
            {"event_hash": "h1", "source_topic": a, "source_offset": 9}]
    plan = plan_batches(rows, source, 2)
    assert [hashes for _, hashes in plan] == [["h1", "h2"], ["h3"]]
    assert all(batch_id < 0 for batch_id, _ in plan)
    assert plan == plan_batches(list(reversed(rows)), source, 2)


@pytest.mark.integration
@pytest.mark.slow
def test_spark_pipeline_loads_good_lines_reports_bad_ones_and_recombines(spark, pg_dsn, tmp_path):
    files = _write_files(tmp_path)
    source = read_sources(files["paths"])
    seen: list[str] = []
    outcome = run_spark(spark, source, _settings(pg_dsn), batch_size=2,
                        on_rejected=lambda rejections: seen.extend(str(r) for r in rejections))
    jsonl = tmp_path / "events.jsonl"
    assert [str(r).split(": ", 1)[0] for r in outcome.rejected] == [f"{jsonl}:2", f"{jsonl}:5", f"{jsonl}:6"]
    assert [r.code for r in outcome.rejected] == ["decode.bad_magic", "validation.event_time", "decode.json"]
    assert "UTC offset" in outcome.rejected[1].message
    assert seen == [str(r) for r in outcome.rejected]  # reported before the writer ran
    # 3 good lines + 2 array elements + 2 `$self` parts; start, complete, later seen twice
    assert (outcome.events, outcome.events_new, outcome.duplicates) == (7, 4, 2)
    assert (outcome.self_parts, outcome.recombined, outcome.batches) == (2, 1, 2)

    assert _rows(pg_dsn, "SELECT count(*) FROM lineage_events")[0][0] == 4
    assert _rows(pg_dsn, f"SELECT state FROM lineage_runs WHERE run_id = '{files['run_id']}'") == [("COMPLETE",)]
    recombined = _rows(pg_dsn, f"SELECT revision, payload, source FROM lineage_events "
                               f"WHERE run_id = '{files['evo_run_id']}'")
    assert len(recombined) == 1
    revision, payload, where = recombined[0]
    payload = json.loads(payload) if isinstance(payload, str) else payload  # text since migration 005
    assert revision == 1 and sorted(o["name"] for o in payload["outputs"]) == ["obj1:1", "obj2:1"]
    assert where == f"{FILE_TOPIC_PREFIX}{tmp_path / 'evo' / 'obj2.json'}[0]@1"
    sources = sorted(r[0] for r in _rows(pg_dsn, "SELECT source FROM lineage_events"))
    assert f"{FILE_TOPIC_PREFIX}{jsonl}[0]@1" in sources  # the first of the duplicates is the one kept
    edges = _rows(pg_dsn, "SELECT count(*) FROM lineage_edges e JOIN lineage_datasets d "
                          "ON d.dataset_id = e.target_node_id WHERE d.name IN ('obj1:1', 'obj2:1')")
    assert edges[0][0] >= 2

    again = run_spark(spark, read_sources(files["paths"]), _settings(pg_dsn), batch_size=2)
    assert (again.events_new, again.duplicates, len(again.rejected)) == (0, 6, 3)
    assert _rows(pg_dsn, "SELECT count(*) FROM lineage_events")[0][0] == 4

    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    empty = run_spark(spark, read_sources([str(tmp_path / "empty.jsonl")]), _settings(pg_dsn), batch_size=2)
    assert (empty.lines, empty.events, empty.batches, empty.rejected) == (0, 0, 0, [])


@pytest.mark.integration
@pytest.mark.slow
def test_both_engines_give_the_same_graph(spark, pg_server, tmp_path):
    files = _write_files(tmp_path)
    dsn_local = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    dsn_spark = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    local = run_local(read_sources(files["paths"]), dsn_local, batch_size=3)
    on_spark = run_spark(spark, read_sources(files["paths"]), _settings(dsn_spark), batch_size=3)
    assert [str(r) for r in local.rejected] == [str(r) for r in on_spark.rejected]
    for name in ("lines", "events", "events_new", "duplicates", "batches", "self_parts", "recombined"):
        assert getattr(local, name) == getattr(on_spark, name), name
    graph = _graph(dsn_local)
    assert len(graph["lineage_events"]) == 4 and graph["lineage_edges"]
    assert graph == _graph(dsn_spark)
    # the same batch ids: the other engine's load of the same files is a no-op
    assert run_spark(spark, read_sources(files["paths"]), _settings(dsn_local), batch_size=3).events_new == 0


@pytest.mark.integration
@pytest.mark.slow
def test_cli_end_to_end_in_a_subprocess(pg_dsn, tmp_path):
    files = _write_files(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LINEAGE_ENGINE": "spark"}
    env.pop("LINEAGE_BOOTSTRAP_SERVERS", None)
    proc = subprocess.run([sys.executable, "-m", "lineage", "load", *files["paths"], "--postgres-dsn", pg_dsn,
                           "--data-dir", str(tmp_path / "none")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr
    jsonl = tmp_path / "events.jsonl"
    errors = [line for line in proc.stderr.splitlines() if line.startswith(str(jsonl))]
    assert [e.split(": ", 1)[0] for e in errors] == [f"{jsonl}:2", f"{jsonl}:5", f"{jsonl}:6"]
    assert "4 new" in proc.stdout and "3 rejected" in proc.stdout and "[spark]" in proc.stdout
    assert "2 $self part(s) recombined into 1 event(s)" in proc.stdout
    assert _rows(pg_dsn, "SELECT count(*) FROM lineage_events")[0][0] == 4
