"""Enriched records carry the graph's quality (wia §4) and provenance (wia §3); graph publication recovers.

The stream tests run the real query (StreamHarness) against the real broker and PostgreSQL; the
look-up and graph-publication tests use the store and the writer directly, without Spark.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from schemas.codec import encode_single_object
from schemas.identity import event_hash
from sink.annotations_lookup import event_keys, lookup_partition
from sink.model import StoredEvent
from sink.postgres import GraphStore
from stream_processor.consumer import EnrichedRecord, GraphChange, read_records
from stream_processor.testing import PRODUCER, StreamHarness, produce, run_event, test_settings

pytestmark = pytest.mark.integration

FACET = {"_producer": "https://example.com/tests", "_schemaURL": "https://example.com/facet.json"}
KEY = b"run:test/etl_daily"


def daily(version: str, when: str, rows: int, nulls: int, assertions: list[bool], create: bool = False
          ) -> dict[str, Any]:
    """A COMPLETE run of ``etl_daily`` reading ``orders`` and writing version ``version`` of ``orders_daily``."""
    event = run_event(job="etl_daily", when=when, inputs=["orders"], outputs=["orders_daily"])
    out = event["outputs"][0]
    out["facets"] = {
        "schema": {**FACET, "fields": [{"name": "day", "type": "date"}, {"name": "total", "type": "bigint"}]},
        "version": {**FACET, "datasetVersion": version}}
    if create:
        out["facets"]["lifecycleStateChange"] = {**FACET, "lifecycleStateChange": "CREATE"}
    out["outputFacets"] = {
        "outputStatistics": {**FACET, "rowCount": rows},
        "dataQualityMetrics": {**FACET, "columnMetrics": {"total": {"nullCount": nulls}}},
        "dataQualityAssertions": {**FACET, "assertions": [
            {"assertion": "not_null", "column": "total", "success": ok} for ok in assertions]}}
    return event


def by_dataset(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["dataset"]: r for r in records}


@pytest.mark.slow
def test_enriched_records_carry_quality_and_provenance(spark, kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    first = daily("1", "2024-05-01T10:00:00.000000Z", rows=1000, nulls=0, assertions=[True, True], create=True)
    second = daily("2", "2024-05-02T10:00:00.000000Z", rows=100, nulls=50, assertions=[True, False])
    topic = topic_names["events"]
    settings = test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"))
    with StreamHarness(spark, settings) as h:
        produce(kafka_bootstrap, topic, [(encode_single_object(first), None, KEY)] * 2)  # a producer retry
        h.drain()
        produce(kafka_bootstrap, topic, [(encode_single_object(second), None, KEY),
                                         (encode_single_object(first), None, KEY)])  # and a late re-send
        h.drain()
        assert h.total("enriched") == 2 and h.total("enriched_unannotated") == 0
    with psycopg.connect(pg_dsn) as conn:   # deleted by the enrich step once its records were delivered
        assert conn.execute("SELECT count(*) FROM stg_event_keys").fetchone()[0] == 0

    with psycopg.connect(pg_dsn) as conn:
        batches = dict(conn.execute("SELECT payload::jsonb->'outputs'->0->'facets'->'version'->>'datasetVersion', "
                                    "first_batch_id FROM lineage_events").fetchall())
    assert len(batches) == 2 and batches["1"] != batches["2"]  # the two versions came in different batches

    records = [r for r in read_records(kafka_bootstrap, topic_names["enriched"], idle_timeout_seconds=8)
               if isinstance(r, EnrichedRecord)]
    assert len(records) == 2, [r.event_hash for r in records]  # the duplicates got no record of their own
    old, new = sorted(records, key=lambda r: r.event_time or "")
    assert {old.key, new.key} == {KEY}
    assert [r.event["outputs"][0]["facets"]["version"]["datasetVersion"] for r in (old, new)] == ["1", "2"]

    (q1,) = old.quality
    assert (q1["dataset"], q1["version"]) == ("test/orders_daily", "1")
    assert q1["metrics"]["completeness"] == 1.0 and q1["metrics"]["accuracy"] == 1.0
    assert q1["anomalies"] == []

    (q2,) = new.quality
    assert (q2["dataset"], q2["version"]) == ("test/orders_daily", "2")
    assert q2["node_id"] == q1["node_id"] and q2["quality_id"] != q1["quality_id"]
    assert q2["measured_at"] == "2024-05-02T10:00:00.000000Z"
    assert q2["metrics"]["completeness"] == pytest.approx(0.5)        # 1 - 50 / (100 * 1)
    assert q2["metrics"]["accuracy"] == pytest.approx(0.5)            # 1 of 2 assertions passed
    assert q2["metrics"]["consistency"] == 1.0                        # same schema as version 1
    drop = [a for a in q2["anomalies"] if a["type"] == "missing"]
    assert [(a["severity"], a["count"]) for a in drop] == [("critical", 900)]   # 1000 -> 100 rows
    assert [v["passed"] for v in q2["validations"]] == [True, False]

    prov = by_dataset(new.provenance)
    assert set(prov) == {"test/orders", "test/orders_daily"}
    read, written = prov["test/orders"], prov["test/orders_daily"]
    assert (read["event_type"], read["operation"]["type"]) == ("accessed", "read")
    assert (written["event_type"], written["operation"]["type"]) == ("modified", "transform")
    for p in (read, written):
        assert p["agent"]["name"] == "etl_daily" and p["agent"]["namespace"] == "test"
        assert p["agent"]["producer"] == PRODUCER
        assert p["operation"]["parameters"]["run_id"] == second["run"]["runId"]
        assert p["event_time"] == "2024-05-02T10:00:00.000000Z"
    assert by_dataset(old.provenance)["test/orders_daily"]["event_type"] == "created"  # lifecycleStateChange


def test_lookup_finds_only_events_new_in_the_batch(pg_dsn):
    """The enrich pass's look-up: an event stored by an earlier batch is not new again; a re-run finds the same."""
    first = daily("1", "2024-05-01T10:00:00.000000Z", rows=1000, nulls=0, assertions=[True])
    second = daily("2", "2024-05-02T10:00:00.000000Z", rows=10, nulls=0, assertions=[True])
    one, two = (StoredEvent(event=e, event_hash=event_hash(e), source="test") for e in (first, second))
    with GraphStore(pg_dsn) as store:
        store.migrate()
        store.write_batch(1, [one])
        store.write_batch(2, [one, two])
        store.write_batch(2, [one, two])   # a re-run of a committed batch: a no-op
    keys = [event_keys(one), event_keys(two)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        found = lookup_partition(conn, 2, keys)
        again = lookup_partition(conn, 2, keys)
        earlier = lookup_partition(conn, 1, keys[:1])
    assert found.new_hashes == again.new_hashes == {two.event_hash}
    assert earlier.new_hashes == {one.event_hash}
    assert set(found.quality) == {keys[0].outputs[0].quality_id, keys[1].outputs[0].quality_id}
    assert set(found.provenance) == {p for k in keys for p in k.provenance_ids} and len(found.provenance) == 4
    assert found == again


def test_documents_from_the_exported_rows_equal_the_looked_up_ones(pg_dsn):
    """The enrich step takes the batch's provenance and quality documents from the rows the Parquet export read
    (found_in_rows) and looks up only the rest: each document equals the statement's, and a key the export lacks
    (a row an earlier batch changed last) is still found."""
    from sink.annotations_lookup import FoundAnnotations, found_in_rows, lookup
    from sink.parquet import changed_rows

    first = daily("1", "2024-05-01T10:00:00.000000Z", rows=1000, nulls=0, assertions=[True], create=True)
    second = daily("2", "2024-05-02T10:00:00.123456Z", rows=10, nulls=5, assertions=[True, False])
    one, two = (StoredEvent(event=e, event_hash=event_hash(e), source="test") for e in (first, second))
    with GraphStore(pg_dsn) as store:
        store.migrate()
        store.write_batch(1, [one])
        store.write_batch(2, [two])
    keys = [event_keys(one), event_keys(two)]
    prov = [p for k in keys for p in k.provenance_ids]
    quality = [o.quality_id for k in keys for o in k.outputs]
    changed = changed_rows(pg_dsn, 2, ("lineage_provenance", "lineage_quality"))
    known = found_in_rows(changed["lineage_provenance"], changed["lineage_quality"])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        looked_up = lookup(conn, 2, (), prov, quality)
        both = lookup(conn, 2, (), prov, quality, found_in_rows(changed["lineage_provenance"],
                                                                changed["lineage_quality"]))
        assert lookup(conn, 2, (), [], [], FoundAnnotations()) == FoundAnnotations()   # nothing to look up
    assert known.provenance and known.quality
    assert all(looked_up.provenance[k] == doc for k, doc in known.provenance.items())
    assert all(looked_up.quality[k] == doc for k, doc in known.quality.items())
    assert set(known.provenance) < set(prov)          # the first batch's rows are not in the second's export
    assert both.provenance == looked_up.provenance and both.quality == looked_up.quality


def _graph_batches(bootstrap: str, topic: str) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for c in read_records(bootstrap, topic, idle_timeout_seconds=5):
        if isinstance(c, GraphChange) and c.table == "lineage_nodes" and c.payload["node_kind"] == "job":
            out.setdefault(c.batch_id, set()).add(c.payload["name"])
    return out


def _mark(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT last_batch_id FROM lineage_publications WHERE stream = 'graph'").fetchone()[0]


def test_committed_but_unpublished_batches_are_published_first(kafka_bootstrap, topic_names, pg_dsn, tmp_path):
    from stream_processor.writer import GraphBatchWriter

    def job_batch(batch_id: int) -> None:
        event = run_event(str(uuid.uuid4()), job=f"job{batch_id}", inputs=[f"in{batch_id}"],
                          outputs=[f"out{batch_id}"])
        with GraphStore(pg_dsn) as store:
            store.write_batch(batch_id, [StoredEvent(event=event, event_hash=event_hash(event), source="t")])

    writer = GraphBatchWriter(test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck")))
    writer.store  # noqa: B018 - migrates: an empty database starts with the mark at -1
    assert _mark(pg_dsn) == -1
    for b in (0, 1, 2):
        job_batch(b)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # batch 0 was published, then the process died
        conn.execute("UPDATE lineage_publications SET last_batch_id = 0")

    writer._publish_graph_async(None)   # what the first batch of a restarted writer does
    writer.flush_graph()
    assert _mark(pg_dsn) == 2
    assert _graph_batches(kafka_bootstrap, topic_names["graph"]) == {1: {"job1"}, 2: {"job2"}}

    job_batch(3)
    assert writer.publish_pending_graph(4) == [3, 4]      # batch 4 itself is published even if it changed nothing
    assert _mark(pg_dsn) == 4
    assert writer.publish_pending_graph() == []
    assert _graph_batches(kafka_bootstrap, topic_names["graph"]) == {1: {"job1"}, 2: {"job2"}, 3: {"job3"}}

    # each record is keyed and identified by its row's id (a compacted topic keeps one record per row), and the
    # event log is not on the graph topic (the enriched topic carries the events)
    from sink.parquet import TABLES
    from stream_processor.writer import GRAPH_TOPIC_TABLES

    changes = [c for c in read_records(kafka_bootstrap, topic_names["graph"], idle_timeout_seconds=5)
               if isinstance(c, GraphChange)]
    assert {"lineage_nodes", "lineage_edges", "lineage_runs"} <= {c.table for c in changes} <= set(GRAPH_TOPIC_TABLES)
    assert all(c.id and c.id == c.payload[TABLES[c.table].id_column] for c in changes)
    assert len({(c.table, c.id, c.batch_id) for c in changes}) == len(changes)


def test_migration_takes_existing_batches_as_published(pg_dsn):
    with GraphStore(pg_dsn) as store:
        store.migrate(up_to=3)
        # batches committed by the code of that time (today's merge needs the later migrations' columns):
        # their transaction records, which is what migration 004 reads
        store.conn.execute("INSERT INTO lineage_transactions (batch_id) VALUES (5), (-7)")  # -7: a `lineage load`
        store.migrate()
    assert _mark(pg_dsn) == 5


@pytest.mark.unit
def test_exported_documents_are_parsed_once_per_distinct_text():
    from sink.annotations_lookup import _parsed

    agent = '{"id": "a", "owners": [], "name": "job \\u00e9"}'
    docs = _parsed([agent, None, '{"x": 1}', agent, '{}', None])
    assert docs == [{"id": "a", "owners": [], "name": "job é"}, None, {"x": 1}, docs[0], {}, None]
    assert docs[3] is docs[0]          # one parse, one object for equal texts (read-only documents)
    assert _parsed([]) == [] and _parsed([None]) == [None]


@pytest.mark.parametrize("annotations", [False, True])
def test_graph_topic_carries_annotations_only_when_asked(kafka_bootstrap, topic_names, pg_dsn, tmp_path, annotations):
    """The graph topic carries nodes, edges, column edges and runs; provenance and quality rows (one per event and
    dataset, one per version: nothing a compacted topic folds) only with ``graph_topic_annotations``. The enriched
    record carries its event's either way."""
    from stream_processor.writer import GraphBatchWriter, graph_topic_tables

    first = daily("1", "2024-05-01T10:00:00.000000Z", rows=1000, nulls=0, assertions=[True], create=True)
    second = daily("2", "2024-05-02T10:00:00.123456Z", rows=10, nulls=5, assertions=[True, False])
    writer = GraphBatchWriter(test_settings(kafka_bootstrap, topic_names, pg_dsn, str(tmp_path / "ck"),
                                            graph_topic_annotations=annotations))
    writer.store  # noqa: B018 - migrates
    with GraphStore(pg_dsn) as store:
        for b, e in enumerate((first, second)):
            store.write_batch(b, [StoredEvent(event=e, event_hash=event_hash(e), source="t")])
        assert store.conn.execute("SELECT count(*) FROM lineage_quality").fetchone()[0] == 2
    assert writer.publish_pending_graph() == [0, 1]
    tables = {c.table for c in read_records(kafka_bootstrap, topic_names["graph"], idle_timeout_seconds=5)
              if isinstance(c, GraphChange)}
    wanted = {"lineage_nodes", "lineage_edges", "lineage_runs"} | (
        {"lineage_provenance", "lineage_quality"} if annotations else set())
    assert wanted <= tables <= set(graph_topic_tables(writer.settings))
    assert ("lineage_provenance" in tables) is annotations and ("lineage_quality" in tables) is annotations


@pytest.mark.parametrize("annotations", [False, True])
def test_the_graph_publication_keeps_only_the_tables_it_publishes(annotations):
    """What outlives a batch's finishing for its graph publication (which overlaps the next batch): the graph topic's
    tables of the batch's changed rows, not the events' texts nor, unless published, the annotation documents."""
    from types import SimpleNamespace

    from sink.parquet import TABLES
    from stream_processor.writer import graph_tables_of, graph_topic_tables

    settings = SimpleNamespace(graph_topic_annotations=annotations)
    changed = {name: object() for name in TABLES}
    kept = graph_tables_of(changed, settings)
    assert set(kept) == set(graph_topic_tables(settings)) and "lineage_events" not in kept
    assert ("lineage_provenance" in kept) is annotations
    assert all(kept[name] is changed[name] for name in kept)
    assert graph_tables_of(None, settings) is None
    assert graph_tables_of({"lineage_nodes": changed["lineage_nodes"]}, settings) == {
        "lineage_nodes": changed["lineage_nodes"]}
