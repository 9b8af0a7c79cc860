"""`$self` recombination: the pure merge, and parts straddling micro-batches plus a late part (revision 2)."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from schemas.codec import encode_single_object
from stream_processor.consumer import EnrichedRecord, read_records
from stream_processor.recombine import merge_parts
from stream_processor.testing import StreamHarness, produce, run_event, test_settings, utc

NS = "evogeoscienceobject://hub1/inst/ws"


@pytest.mark.unit
def test_merge_parts_unions_outputs_in_part_order():
    a = run_event("11111111-1111-1111-1111-111111111111", when="2026-01-01T00:00:01Z", inputs=["x"], outputs=["o1"])
    b = run_event("11111111-1111-1111-1111-111111111111", when="2026-01-01T00:00:00Z", inputs=["x", "y"],
                  outputs=["o2", "o1"])
    parts = [{"event_json": json.dumps(a), "event_hash": "a", "event_time": "2026-01-01T00:00:01+00:00"},
             {"event_json": json.dumps(b), "event_hash": "b", "event_time": "2026-01-01T00:00:00+00:00"}]
    merged = merge_parts(parts)
    assert [o["name"] for o in merged["outputs"]] == ["o2", "o1"]
    assert [i["name"] for i in merged["inputs"]] == ["x", "y"]
    assert merged["eventTime"] == b["eventTime"]  # the first part by event time gives the other fields
    assert merge_parts(list(reversed(parts))) == merged  # arrival order does not matter


def _part(run_id: str, name: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    event = run_event(run_id, "COMPLETE", utc(-0.001), job="evo.publish", inputs=["source"], outputs=["$self"],
                      namespace=NS)
    subject = json.dumps({"namespace": NS, "name": name}).encode()
    return encode_single_object(event), [("lineage.subject", subject)]


@pytest.mark.integration
@pytest.mark.slow
def test_parts_straddling_batches_then_a_late_part(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    run_id = str(uuid.uuid4())
    other = run_event(job="plain")  # a plain event bypasses the recombiner (revision 0)
    # parse once (issue 18, item 1), which LINEAGE_DERIVE_AT_DECODE turns on (off by default: settings.py says why)
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"), recombine_quiet_seconds=15.0,
                             derive_at_decode=True)
    bad_link = json.dumps({"events": [run_event(run_id, outputs=["not_self"])], "self_link": "/events/0/outputs/0"})

    def revisions() -> list[tuple[int, list[str]]]:
        with psycopg.connect(pg_dsn) as conn:
            rows = conn.execute("SELECT revision, payload FROM lineage_events WHERE run_id = %s ORDER BY revision",
                                (run_id,)).fetchall()
        return [(r, sorted(o["name"] for o in json.loads(p)["outputs"])) for r, p in rows]

    with StreamHarness(spark, settings) as h:
        produce(kafka_bootstrap, topic_names["events"], [_part(run_id, "obj1:1"), encode_single_object(other)])
        h.drain()
        produce(kafka_bootstrap, topic_names["events"], [_part(run_id, "obj2:1"),
                                                         (bad_link.encode(), [("lineage.subject", b'{"namespace": "'
                                                                               + NS.encode() + b'", "name": "z"}')])])
        h.drain()
        assert revisions() == []  # parts wait for the quiet period
        got = h.wait_for(revisions, message="recombined record")
        assert got == [(1, ["obj1:1", "obj2:1"])]
        # a late part after emission: re-emitted as revision 2 with the union of all three
        produce(kafka_bootstrap, topic_names["events"], [_part(run_id, "obj3:1")])
        h.wait_for(lambda: len(revisions()) == 2, message="revision 2")
        assert revisions() == [(1, ["obj1:1", "obj2:1"]), (2, ["obj1:1", "obj2:1", "obj3:1"])]
        # the graph commits before the batch's enrich pass publishes: leave only once that batch has ended
        # (stopping the query in between is a re-run on restart, not a lost record, but this test stops for good)
        h.wait_for(lambda: h.total("enriched") >= 3, message="enriched records of all three")
        assert h.total("rejected") == 1  # the self_link that points at no $self output
        # parse once (issue 18): each event's message parsed by decode, never again by the staging pass; a part's
        # text is read back from the store once per emission of its group (2 parts, then all 3)
        parses = {}
        for report in h.reports:
            for (metric, stage, _), n in report.counts.items():
                if metric == "parses":
                    parses[stage] = parses.get(stage, 0) + n
        assert parses == {"decode": 4, "recombine": 2 + 3}

    enriched = [r for r in read_records(kafka_bootstrap, topic_names["enriched"], max_records=3,
                                        idle_timeout_seconds=15)]
    assert all(isinstance(r, EnrichedRecord) for r in enriched)
    assert sorted((r.run_id == run_id, r.revision) for r in enriched) == [(False, 0), (True, 1), (True, 2)]


# -- recombination in the store (migration 012): the finisher's step with an explicit clock, no Spark --------


def _decoded_part(run_id: str, name: str, offset: int) -> dict:
    """A decoded `$self` part row, as the staging pass sees it."""
    from datetime import UTC, datetime

    from schemas.identity import canonical_json, event_hash

    event = run_event(run_id, "COMPLETE", "2026-01-01T00:00:00Z", job="evo.publish", inputs=["source"],
                      outputs=[name], namespace=NS)
    return {"status": "ok", "has_self": True, "run_id": run_id, "event_type": "COMPLETE",
            "event_hash": event_hash(event), "event_json": canonical_json(event),
            "event_time": datetime(2026, 1, 1, tzinfo=UTC), "kafka_timestamp": datetime(2026, 1, 1, 0, 0, offset, tzinfo=UTC),
            "source_topic": "events", "source_partition": 0, "source_offset": offset, "encoding": "avro",
            "key": b"k%d" % offset}


def _store_rows(dsn: str, sql: str, *args: object) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, args).fetchall()


@pytest.mark.integration
def test_store_recombination_waits_for_quiet_reopens_on_a_late_part_and_expires(pg_dsn):
    from datetime import UTC, datetime, timedelta

    from sink.postgres import GraphStore
    from stream_processor.recombine import RECOMBINED_PART, is_self_part, part_doc, recombine_in_store

    run_id = str(uuid.uuid4())
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    a, b, c = (_decoded_part(run_id, n, i) for i, n in enumerate(["obj1:1", "obj2:1", "obj3:1"], start=1))
    assert is_self_part(a) and not is_self_part({**a, "revision": 1}) and not is_self_part({**a, "has_self": False})

    def step(batch_id: int, parts: list[dict], at: datetime, quiet: float = 10.0, ttl: float = 60.0):
        GraphStore.stage_partition(pg_dsn, batch_id, 0, [], None, [part_doc(p) for p in parts])
        with GraphStore(pg_dsn) as store:
            store.migrate()
            done = recombine_in_store(store.conn, batch_id, quiet, ttl, now=at)
            store.merge(batch_id)
        return done

    def emitted() -> list[tuple[int, list[str]]]:
        return [(r, sorted(o["name"] for o in json.loads(p)["outputs"])) for r, p in _store_rows(
            pg_dsn, "SELECT revision, payload FROM lineage_events WHERE run_id = %s ORDER BY revision", run_id)]

    with GraphStore(pg_dsn) as store:
        store.migrate()
    first = step(1, [a, b, a], t0)               # a part twice in one batch counts once
    assert (first.parts, first.new_parts, first.emitted) == (2, 2, 0) and emitted() == []
    assert (first.pending, first.held) == (1, 1)
    assert step(2, [b], t0 + timedelta(seconds=5)).new_parts == 0   # a part seen before re-opens nothing
    assert step(3, [], t0 + timedelta(seconds=9)).emitted == 0      # quiet for 9 s of 10
    due = step(4, [], t0 + timedelta(seconds=10))
    assert due.emitted == 1 and due.staged_rows > 0 and (due.pending, due.held) == (0, 1)
    assert emitted() == [(1, ["obj1:1", "obj2:1"])]
    handed = _store_rows(pg_dsn, "SELECT record FROM stg_event_keys WHERE batch_id = 4 AND part = %s", RECOMBINED_PART)
    assert [json.loads(r)["revision"] for (r,) in handed] == [1]   # the enriched record's hand-over
    # a late part re-opens the group: revision 2 with the union, after another quiet period
    assert step(5, [c], t0 + timedelta(seconds=20)).emitted == 0
    assert step(6, [], t0 + timedelta(seconds=30)).emitted == 1
    assert emitted() == [(1, ["obj1:1", "obj2:1"]), (2, ["obj1:1", "obj2:1", "obj3:1"])]
    assert _store_rows(pg_dsn, "SELECT revision, emitted_parts, emitted_batch, pending FROM lineage_self_groups") == [
        (2, 3, 6, False)]
    # kept for the TTL after its emission, then dropped with its parts
    assert step(7, [], t0 + timedelta(seconds=89)).expired == 0
    expired = step(8, [], t0 + timedelta(seconds=90))
    assert expired.expired == 3 and (expired.pending, expired.held) == (0, 0)
    assert _store_rows(pg_dsn, "SELECT count(*) FROM lineage_self_groups") == [(0,)]
    assert _store_rows(pg_dsn, "SELECT count(*) FROM stg_self_parts") == [(0,)]


@pytest.mark.integration
def test_store_recombination_emits_once_when_a_batch_is_finished_twice(pg_dsn):
    """A crash after the `$self` step committed and before the merge: finishing the batch again (recovery)
    emits nothing more, and the merge still takes the emission staged the first time."""
    from datetime import UTC, datetime, timedelta

    from sink.postgres import GraphStore
    from stream_processor.recombine import part_doc, recombine_in_store

    run_id = str(uuid.uuid4())
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    with GraphStore(pg_dsn) as store:
        store.migrate()
        GraphStore.stage_partition(pg_dsn, 1, 0, [], None, [part_doc(_decoded_part(run_id, "obj1:1", 1))])
        assert recombine_in_store(store.conn, 1, 1.0, 60.0, now=t0).new_parts == 1
        store.merge(1)
        assert recombine_in_store(store.conn, 2, 1.0, 60.0, now=t0 + timedelta(seconds=2)).emitted == 1
        # ... crash; the finisher runs batch 2 again, later: the group is not emitted a second time
        assert recombine_in_store(store.conn, 2, 1.0, 60.0, now=t0 + timedelta(seconds=3)).emitted == 0
        store.merge(2)
        # a batch already merged carries no emission either (its staged rows would be cleared unmerged)
        GraphStore.stage_partition(pg_dsn, 3, 0, [], None, [part_doc(_decoded_part(run_id, "obj2:1", 2))])
        recombine_in_store(store.conn, 3, 1.0, 60.0, now=t0 + timedelta(seconds=4))
        store.merge(3)
        assert recombine_in_store(store.conn, 3, 1.0, 60.0, now=t0 + timedelta(seconds=9)).emitted == 0
    assert _store_rows(pg_dsn, "SELECT revision FROM lineage_events WHERE run_id = %s", run_id) == [(1,)]
    assert _store_rows(pg_dsn, "SELECT pending FROM lineage_self_groups") == [(True,)]  # obj2 waits for a batch


@pytest.mark.unit
def test_job_events_with_self_outputs_are_not_grouped_together():
    """A job event has no run to group its `$self` part by: two jobs' events must not merge into one (a group
    keyed only by ``self`` would union their outputs under the first job)."""
    from stream_processor.batch import _recombine_local
    from stream_processor.recombine import is_self_part, self_group_key

    rows = [{**_decoded_part(str(uuid.uuid4()), f"obj{i}:1", i), "run_id": None, "event_type": None, "kind": "job",
             "job_name": f"job{i}"} for i in (1, 2)]
    assert not any(is_self_part(r) for r in rows) and {self_group_key(r) for r in rows} == {None}
    out = _recombine_local(rows)
    assert sorted((r["job_name"], r["revision"]) for r in out) == [("job1", 0), ("job2", 0)]
    run_part = _decoded_part(str(uuid.uuid4()), "obj3:1", 3)
    assert is_self_part(run_part) and self_group_key(run_part) == f"self\x1f{run_part['run_id']}\x1fCOMPLETE"
