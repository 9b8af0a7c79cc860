"""The store's fast write path keeps the rows and the graph of the reference implementation.

sink/derive.py: orjson text (with json-module fallback), content-memoised schema / column-lineage /
sensitivity, chunked :class:`BatchDeriver` with the GC paused; sink/postgres.py: derivation pipelined with
the ``stg_events`` COPY, quality annotations on a thread, orjson-backed jsonb loading (:func:`_loads`).
"""

from __future__ import annotations

import gc
import json
import uuid

import psycopg
import pytest

from sink import derive
from sink.derive import BatchDeriver, derive_batch, sensitivity_from_tags
from sink.postgres import _STREAM_EVENTS, GraphStore, _loads
from tests.test_derive import NS, col_lineage_12, ds, run_event, stored

T = "2026-03-01T10:{:02d}:{:02d}Z"


def _events(n: int) -> list:
    """n COMPLETE events of a few jobs that repeat schemas and column lineage (cache hits and misses)."""
    out = []
    for i in range(n):
        src, dst = f"src_{i % 7}", f"dst_{i % 5}"
        fields = ["a", "b", "c"] if i % 2 else ["a", "b"]
        facets = {"columnLineage": col_lineage_12(src, {"x": [("a", "DIRECT", "IDENTITY")]}),
                  "tags": {"tags": [{"key": "PII" if i % 3 == 0 else "team", "value": "x"}]}}
        out.append(stored(run_event("COMPLETE", T.format(i // 60 % 60, i % 60), str(uuid.UUID(int=i + 1)),
                                    job=f"job_{i % 4}", inputs=[ds(src, fields=fields)],
                                    outputs=[ds(dst, fields=["x"], **facets)]), f"t:{i}"))
    return out


def _normalised(rows) -> dict[str, list[tuple]]:
    def norm(value):
        if isinstance(value, str) and value[:1] in "{[":
            return ("json", json.dumps(json.loads(value), sort_keys=True))
        return value
    return {t: [tuple(norm(v) for v in r) for r in data] for t, data in rows.tables.items()}


@pytest.mark.unit
def test_chunked_deriver_equals_one_batch_and_keeps_rejections_out():
    events = _events(40)
    bad = stored(run_event("COMPLETE", T.format(59, 59), str(uuid.uuid4()), outputs=[ds("bad\x00name")]), "t:bad")
    events.insert(17, bad)
    whole = derive_batch(events)
    chunked = BatchDeriver()
    sent: list[tuple] = []
    for start in range(0, len(events), 6):
        chunked.add(events[start:start + 6])
        sent.extend(chunked.events_since(len(sent)))
    rows = chunked.finish()
    assert _normalised(rows) == _normalised(whole)
    assert sent == whole.tables["stg_events"] and len(sent) == 40
    assert [s for s, _ in rows.rejected] == ["t:bad"] and "t:bad" not in {r[8] for r in sent}


@pytest.mark.unit
def test_gc_is_enabled_again_after_derivation_even_on_error():
    assert gc.isenabled()
    deriver = BatchDeriver()
    with pytest.raises(TypeError):
        deriver.add(None)      # not iterable: raised inside the paused block
    assert gc.isenabled()
    deriver.add(_events(3))
    deriver.finish()
    assert gc.isenabled()
    gc.disable()
    try:
        deriver.add(_events(2))
        assert not gc.isenabled()   # a caller's choice is kept
    finally:
        gc.enable()


@pytest.mark.unit
def test_json_text_falls_back_to_the_json_module_for_what_orjson_refuses():
    big = {"n": 2 ** 70, "f": 1e20, "s": "é\u2028", "l": [True, None, 1.5]}
    assert json.loads(derive._dumps(big)) == big
    assert json.loads(derive._dumps({1: "int key"})) == {"1": "int key"}
    assert derive._dumps("lone\ud800") == json.dumps("lone\ud800", ensure_ascii=False)


@pytest.mark.unit
def test_jsonb_loader_keeps_wide_integers_exact():
    assert _loads(b'{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}
    assert _loads(memoryview(b'[1, 2.5, "x", null]')) == [1, 2.5, "x", None]
    assert _loads(b'{"big": 1e400}') == {"big": float("inf")}
    assert _loads(b'{"id": "9223372036854775808"}') == {"id": "9223372036854775808"}


@pytest.mark.unit
def test_memoised_schema_and_lineage_equal_fresh_parses():
    facets = {"schema": {"fields": [{"name": "a", "type": "int"}, {"name": 7, "type": None}]},
              "columnLineage": col_lineage_12("src", {"x": [("a", "DIRECT", "AGGREGATION")]})}
    fields = derive._schema_fields(facets)
    expected = (fields, derive._json_dumps(fields), derive._fields_hash(fields))
    copy = json.loads(json.dumps(facets))     # equal content, other objects: served from the cache
    assert derive._schema_of(facets)[1:] == expected[1:]
    assert derive._schema_of(copy)[0] == expected[0] and derive._schema_of(copy)[2] == expected[2]
    assert derive._column_lineage(copy) == derive._parse_column_lineage(facets["columnLineage"])
    other = {"schema": {"fields": [{"name": "a", "type": "bigint"}]}}
    assert derive._schema_of(other)[2] != expected[2]
    assert sensitivity_from_tags(["team:x", "pii"]) == "confidential"
    assert sensitivity_from_tags(["team:x", "pii"]) == derive._sensitivity(("team:x", "pii"))


@pytest.mark.integration
def test_pipelined_write_equals_derive_then_stage_and_merge(pg_server, pg_dsn):
    """write_batch (derivation pipelined with the COPY, more events than one chunk) and the streaming path
    (stage_partition x2 + merge) give the same graph; the unstorable event is listed and not stored."""
    events = _events(_STREAM_EVENTS + 37)
    events.insert(_STREAM_EVENTS - 1, stored(run_event("COMPLETE", T.format(59, 59), str(uuid.uuid4()),
                                                       outputs=[ds("lone\ud800")]), "t:bad"))
    with GraphStore(pg_dsn) as store:
        store.migrate()
        result = store.write_batch(1, events)
        assert [s for s, _ in store.last_rejections] == ["t:bad"]
        assert result.events_in == result.events_new == len(events) - 1
        assert result.rows_by_table["lineage_quality"] > 0 and result.rows_by_table["rejected_events"] == 1
        assert {"derive", "stage", "quality_query", "lineage_quality"} <= set(store.last_timings)
    dsn2 = pg_server.create_database(f"fast_{uuid.uuid4().hex[:12]}")
    with GraphStore(dsn2) as store:
        store.migrate()
        staged = GraphStore.stage_partition(dsn2, 1, 0, events[0::2]) + \
            GraphStore.stage_partition(dsn2, 1, 1, events[1::2])
        assert staged > len(events)
        store.merge(1)
    tables = ("lineage_datasets", "lineage_dataset_versions", "lineage_runs", "lineage_run_io", "lineage_edges",
              "lineage_column_lineage", "lineage_provenance", "lineage_quality", "lineage_events")
    dumps = []
    for dsn in (pg_dsn, dsn2):
        with psycopg.connect(dsn) as conn:
            dumps.append({t: sorted(map(str, conn.execute(
                f"SELECT to_jsonb(x) - 'last_batch_id' - 'received_at' - 'source' FROM {t} x").fetchall()))
                for t in tables})
    for t in tables:
        assert dumps[0][t] == dumps[1][t], t
    assert len(dumps[0]["lineage_events"]) == len(events) - 1
    assert not any("lone" in row for row in dumps[0]["lineage_datasets"])
    assert any(NS in row for row in dumps[0]["lineage_datasets"])


def _graph_dump(dsn: str) -> dict[str, list[str]]:
    tables = ("lineage_datasets", "lineage_dataset_versions", "lineage_runs", "lineage_run_io", "lineage_edges",
              "lineage_column_lineage", "lineage_provenance", "lineage_quality", "lineage_events")
    with psycopg.connect(dsn) as conn:
        return {t: sorted(map(str, conn.execute(
            f"SELECT to_jsonb(x) - 'received_at' FROM {t} x").fetchall())) for t in tables}


@pytest.mark.integration
def test_write_batches_pipelined_equals_write_batch_one_by_one(pg_server, pg_dsn):
    """write_batches (batch N+1 staged on a second connection while N merges) leaves the same graph, the same
    per-batch results and the same rejections as write_batch called batch by batch; no staged row is left."""
    events = _events(3 * _STREAM_EVENTS)
    events.insert(400, stored(run_event("COMPLETE", T.format(59, 59), str(uuid.uuid4()),
                                        outputs=[ds("lone\ud800")]), "t:bad"))
    batches = [(b + 1, events[b * 230:(b + 1) * 230]) for b in range((len(events) + 229) // 230)]
    batches.append((2, batches[1][1]))       # a batch id already committed: no-op, as in write_batch
    serial = []
    with GraphStore(pg_dsn) as store:
        store.migrate()
        for batch_id, batch in batches:
            result = store.write_batch(batch_id, batch)
            serial.append((result, [s for s, _ in store.last_rejections]))
    dsn2 = pg_server.create_database(f"pipelined_{uuid.uuid4().hex[:12]}")
    with GraphStore(dsn2) as store:
        store.migrate()
        pipelined = [(result, [s for s, _ in rejected]) for result, rejected in store.write_batches(iter(batches))]
        left = store.conn.execute("SELECT (SELECT count(*) FROM stg_events) + (SELECT count(*) FROM stg_runs)"
                                  " + (SELECT count(*) FROM stg_provenance)").fetchone()[0]
    assert left == 0
    assert [r for r, _ in pipelined] == [r for r, _ in serial]
    assert [s for _, s in pipelined] == [s for _, s in serial]
    assert [len(s) for _, s in pipelined].count(1) == 2 and pipelined[-1][0].already_committed  # batch 2 twice
    assert _graph_dump(dsn2) == _graph_dump(pg_dsn)


@pytest.mark.integration
def test_write_batches_raises_a_staging_error_and_keeps_what_committed(pg_dsn):
    """An error while producing or staging batch 2 reaches the caller after batch 1 committed; the staging
    thread ends (no thread is left behind)."""
    import threading

    def batches():
        yield 1, _events(20)
        raise RuntimeError("source broke")

    with GraphStore(pg_dsn) as store:
        store.migrate()
        seen = []
        with pytest.raises(RuntimeError, match="source broke"):
            for result, _ in store.write_batches(batches()):
                seen.append(result.batch_id)
        assert seen == [1]
        assert store.conn.execute("SELECT count(*) FROM lineage_transactions WHERE batch_id = 1").fetchone()[0] == 1
    assert not [t for t in threading.enumerate() if t.name == "lineage-store-stage"]


@pytest.mark.integration
def test_write_batches_stops_its_thread_when_the_caller_stops_early(pg_dsn):
    import threading

    batches = ((b, _events(30)) for b in range(1, 50))
    with GraphStore(pg_dsn) as store:
        store.migrate()
        writes = store.write_batches(batches)
        first, _ = next(writes)
        writes.close()
        assert first.batch_id == 1 and first.events_new == 30
        assert store.conn.execute("SELECT count(*) FROM lineage_transactions").fetchone()[0] == 1
    assert not [t for t in threading.enumerate() if t.name == "lineage-store-stage"]
