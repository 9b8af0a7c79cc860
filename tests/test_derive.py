"""sink/derive.py: events -> staging rows (pure, no servers). Also the event builders other store tests use."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from schemas.errors import EventValidationError
from schemas.identity import dataset_id, event_hash, job_id
from sink.derive import (
    STAGING_COLUMNS,
    check_storable,
    column_transformation_type,
    derive_batch,
    edge_type_for,
    resolve_dataset_name,
    sensitivity_from_tags,
)
from sink.model import StoredEvent

NS = "postgres://warehouse:5432"


FACET_BASE = {"_producer": "https://example.com/producer",
              "_schemaURL": "https://openlineage.io/spec/facets/1-0-0/Facet.json#/$defs/Facet"}


def based(facets: dict[str, Any] | None) -> dict[str, Any]:
    """``facets`` with the BaseFacet fields the core spec requires (``_producer``, ``_schemaURL``) where missing."""
    return {k: {**FACET_BASE, **v} if isinstance(v, dict) else v for k, v in (facets or {}).items()}


def ds(name: str, ns: str = NS, fields: list[str] | None = None, **facets: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"namespace": ns, "name": name, "facets": dict(facets)}
    if fields is not None:
        out["facets"]["schema"] = {"fields": [{"name": f, "type": "int"} for f in fields]}
    out["facets"] = based(out["facets"])
    return out


def run_event(event_type: str, time: str, run_id: str, job: str = "etl.job", inputs: list | None = None,
              outputs: list | None = None, job_facets: dict | None = None, run_facets: dict | None = None,
              job_ns: str = "airflow") -> dict[str, Any]:
    return {
        "eventType": event_type, "eventTime": time, "producer": "https://example.com/producer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": run_id, "facets": based(run_facets)},
        "job": {"namespace": job_ns, "name": job, "facets": based(job_facets)},
        "inputs": inputs or [], "outputs": outputs or [],
    }


def stored(event: dict[str, Any], source: str = "test") -> StoredEvent:
    return StoredEvent(event=event, event_hash=event_hash(event), source=source)


def col_lineage_12(src: str, mapping: dict[str, list[tuple[str, str, str]]], ns: str = NS) -> dict[str, Any]:
    """1-2 shape: {target: [(source field, type, subtype)]}."""
    return {"fields": {t: {"inputFields": [{"namespace": ns, "name": src, "field": f,
                                            "transformations": [{"type": ty, "subtype": sub}]}
                                           for f, ty, sub in cols]} for t, cols in mapping.items()}}


def rows_of(rows, table: str) -> list[dict[str, Any]]:
    return [dict(zip(STAGING_COLUMNS[table], r, strict=True)) for r in rows.tables[table]]


T1 = "2024-05-01T10:00:00.000000Z"
T2 = "2024-05-01T10:05:00.000000Z"


@pytest.mark.unit
@pytest.mark.parametrize("tokens, cols, fields, expected", [
    ([], None, None, "derived_from"),
    (["AGGREGATION"], {"a"}, ["a", "b"], "aggregated_from"),
    (["IDENTITY", "JOIN"], {"a"}, ["a", "b"], "joined_with"),
    (["FILTER", "IDENTITY"], {"a"}, ["a", "b"], "filtered_from"),
    (["IDENTITY"], {"a"}, ["a", "b"], "projected_from"),
    (["IDENTITY"], {"a", "b"}, ["a", "b"], "derived_from"),      # all columns: not a strict subset
    (["IDENTITY"], {"a"}, None, "derived_from"),                  # input schema unknown
    (["TRANSFORMATION"], {"a"}, ["a", "b"], "derived_from"),
    (["GROUP_BY", "JOIN"], {"a"}, ["a"], "aggregated_from"),
])
def test_edge_type_rules(tokens, cols, fields, expected):
    assert edge_type_for(tokens, cols, fields) == expected


@pytest.mark.unit
@pytest.mark.parametrize("tokens, expected", [
    (["IDENTITY"], "direct"), (["AGGREGATION"], "aggregated"), (["JOIN"], "joined"),
    (["TRANSFORMATION"], "computed"), (["IDENTITY", "MASKED"], "computed"), ([], "computed"),
    (["JOIN", "AGGREGATION"], "aggregated"),
])
def test_column_transformation_types(tokens, expected):
    assert column_transformation_type(tokens) == expected


@pytest.mark.unit
def test_run_event_rows_edges_and_column_lineage_12_shape():
    rid = str(uuid.uuid4())
    out = ds("public.daily", fields=["day", "total"],
             columnLineage=col_lineage_12("public.orders", {"day": [("day", "DIRECT", "IDENTITY")],
                                                            "total": [("amount", "DIRECT", "AGGREGATION")]}))
    out["outputFacets"] = {"outputStatistics": {"rowCount": 7}}
    event = run_event("COMPLETE", T2, rid, inputs=[ds("public.orders", fields=["day", "amount", "id"])],
                      outputs=[out], job_facets={"sql": {"query": "SELECT day, sum(amount) FROM orders GROUP BY day"},
                                                 "sourceCodeLocation": {"type": "git", "url": "https://git/x",
                                                                        "version": "c0ffee"}})
    rows = derive_batch([stored(event)])
    assert not rows.rejected
    edges = {(e["kind"], e["edge_type"]) for e in rows_of(rows, "stg_edges")}
    assert edges == {("reads", "reads"), ("writes", "writes"), ("dataset", "aggregated_from")}
    data_edge = next(e for e in rows_of(rows, "stg_edges") if e["kind"] == "dataset")
    assert data_edge["source_node_id"] == dataset_id(NS, "public.orders")
    assert data_edge["target_node_id"] == dataset_id(NS, "public.daily")
    assert json.loads(data_edge["transformation"]) == {
        "type": "sql", "logic": "SELECT day, sum(amount) FROM orders GROUP BY day", "version": "c0ffee",
        "git_commit": "c0ffee"}
    meta = json.loads(data_edge["metadata"])
    assert meta["records_processed"] == 7 and meta["job_name"] == "airflow/etl.job" and meta["execution_time"] == T2
    cl = {(c["source_column"], c["target_column"]): c["transformation_type"] for c in rows_of(rows, "stg_column_lineage")}
    assert cl == {("day", "day"): "direct", ("amount", "total"): "aggregated"}
    versions = rows_of(rows, "stg_dataset_versions")
    assert [(v["version"], v["row_count"]) for v in versions] == [(f"run:{rid}", 7)]
    runs = rows_of(rows, "stg_runs")
    assert runs[0]["state"] == "COMPLETE" and runs[0]["state_rank"] == 3 and runs[0]["ended_at"] == T2
    prov = {(p["node_id"], p["event_type"]) for p in rows_of(rows, "stg_provenance")}
    assert prov == {(dataset_id(NS, "public.orders"), "accessed"), (dataset_id(NS, "public.daily"), "modified")}
    assert rows_of(rows, "stg_job_versions")[0]["git_commit"] == "c0ffee"


@pytest.mark.unit
def test_column_lineage_10_shape_and_projection():
    rid = str(uuid.uuid4())
    facet = {"fields": {"id": {"inputFields": [{"namespace": NS, "name": "src", "field": "id"}],
                               "transformationType": "IDENTITY", "transformationDescription": "copy"}}}
    event = run_event("COMPLETE", T1, rid, inputs=[ds("src", fields=["id", "secret"])],
                      outputs=[ds("dst", fields=["id"], columnLineage=facet)])
    rows = derive_batch([stored(event)])
    edge = next(e for e in rows_of(rows, "stg_edges") if e["kind"] == "dataset")
    assert edge["edge_type"] == "projected_from"
    cl = rows_of(rows, "stg_column_lineage")[0]
    assert cl["transformation_type"] == "direct" and cl["transformation_logic"] == "copy"
    assert json.loads(cl["dependencies"]) == [{"source_table": f"{NS}/src", "source_column": "id", "expression": "copy"}]


@pytest.mark.unit
def test_filter_and_join_from_dataset_level_indirect_transformations():
    rid = str(uuid.uuid4())
    facet = col_lineage_12("a", {"x": [("x", "DIRECT", "IDENTITY")]})
    facet["dataset"] = [{"namespace": NS, "name": "a", "field": "flag",
                         "transformations": [{"type": "INDIRECT", "subtype": "FILTER"}]},
                        {"namespace": NS, "name": "b", "field": "k",
                         "transformations": [{"type": "INDIRECT", "subtype": "JOIN"}]}]
    event = run_event("COMPLETE", T1, rid, inputs=[ds("a"), ds("b")], outputs=[ds("out", columnLineage=facet)])
    rows = derive_batch([stored(event)])
    types = {e["source_node_id"]: e["edge_type"] for e in rows_of(rows, "stg_edges") if e["kind"] == "dataset"}
    assert types == {dataset_id(NS, "a"): "filtered_from", dataset_id(NS, "b"): "joined_with"}


@pytest.mark.unit
def test_symlink_alias_resolves_to_table_identifier():
    rid = str(uuid.uuid4())
    physical = {"namespace": "s3://bucket", "name": "warehouse/orders",
                "facets": {"symlinks": {"identifiers": [{"namespace": "hive://metastore", "name": "db.orders",
                                                         "type": "TABLE"}]},
                           "schema": {"fields": [{"name": "id", "type": "int"}]}}}
    event = run_event("COMPLETE", T1, rid, inputs=[physical], outputs=[ds("report")])
    rows = derive_batch([stored(event)])
    canonical = dataset_id("hive://metastore", "db.orders")
    physical_id = dataset_id("s3://bucket", "warehouse/orders")
    datasets = {d["dataset_id"]: d for d in rows_of(rows, "stg_datasets")}
    assert datasets[physical_id]["alias_of"] == canonical
    assert datasets[canonical]["alias_of"] is None and json.loads(datasets[canonical]["fields"])[0]["name"] == "id"
    sources = {e["source_node_id"] for e in rows_of(rows, "stg_edges") if e["kind"] in ("dataset", "reads")}
    assert sources == {canonical}
    # a later event naming the physical path without the facet, with the alias known from the store:
    later = run_event("COMPLETE", T2, str(uuid.uuid4()), inputs=[{"namespace": "s3://bucket",
                                                                  "name": "warehouse/orders"}],
                      outputs=[ds("report2")])
    rows2 = derive_batch([stored(later)], aliases={physical_id: canonical})
    assert {e["source_node_id"] for e in rows_of(rows2, "stg_edges") if e["kind"] == "dataset"} == {canonical}


@pytest.mark.unit
def test_evo_names_versions_and_placeholders():
    rid = str(uuid.uuid4())
    evo_ns = "evogeoscienceobject://hub1/b3bf/c2be"
    obj = "65e24708-6ce3-4d85-b8a3-abcdb1ced751"
    parent_run = str(uuid.uuid4())
    event = run_event("COMPLETE", T1, rid, inputs=[{"namespace": evo_ns, "name": f"{obj}:1720050462228330567"}],
                      outputs=[ds("out")], run_facets={"parent": {"run": {"runId": parent_run},
                                                                  "job": {"namespace": "airflow", "name": "dag"}}})
    assert resolve_dataset_name(evo_ns, f"{obj}:17") == (obj, "17")
    rows = derive_batch([stored(event)])
    datasets = {d["dataset_id"]: d for d in rows_of(rows, "stg_datasets")}
    node = dataset_id(evo_ns, obj)
    assert datasets[node]["is_placeholder"] is True and datasets[node]["node_type_guess"] == "file"
    assert datasets[dataset_id(NS, "out")]["is_placeholder"] is False
    versions = {(v["dataset_id"], v["version"]) for v in rows_of(rows, "stg_dataset_versions")}
    assert (node, "1720050462228330567") in versions
    runs = {r["run_id"]: r for r in rows_of(rows, "stg_runs")}
    assert runs[parent_run]["is_placeholder"] is True and runs[parent_run]["job_id"] == job_id("airflow", "dag")
    assert runs[rid]["parent_run_id"] == parent_run and runs[rid]["root_run_id"] == parent_run
    jobs = {j["job_id"]: j for j in rows_of(rows, "stg_jobs")}
    assert jobs[job_id("airflow", "dag")]["is_placeholder"] is True


@pytest.mark.unit
def test_provenance_context_lifecycle_and_tracing():
    rid = str(uuid.uuid4())
    out = ds("people", tags={"tags": [{"key": "PII", "value": "true"}]},
             lifecycleStateChange={"lifecycleStateChange": "OVERWRITE"})
    event = run_event("COMPLETE", T1, rid, outputs=[out],
                      job_facets={"tracing": {"deterministic": True, "privacyPreserving": False, "terminal": True},
                                  "wiaContext": {"purpose": "billing", "legalBasis": "contract"}},
                      run_facets={"transformTracing": {"deterministic": False}})
    rows = derive_batch([stored(event)])
    prov = rows_of(rows, "stg_provenance")[0]
    assert prov["event_type"] == "created"
    assert json.loads(prov["operation"])["type"] == "write"
    ctx = json.loads(prov["context"])
    assert ctx == {"purpose": "billing", "legal_basis": "contract", "retention_period": None,
                   "sensitivity_level": "confidential"}
    assert json.loads(prov["tracing"]) == {"deterministic": False, "privacy_preserving": False, "terminal": True}
    assert sensitivity_from_tags(["PHI", "PII"]) == "restricted"
    assert sensitivity_from_tags(["team:core"]) == "internal"


@pytest.mark.unit
def test_dataset_event_and_node_types():
    event = {"eventTime": T1, "producer": "https://x/p", "schemaURL": "x",
             "dataset": {"namespace": "kafka://broker:9092", "name": "orders",
                         "facets": {"datasetType": {"datasetType": "VIEW"},
                                    "lifecycleStateChange": {"lifecycleStateChange": "DROP"}}}}
    rows = derive_batch([stored(event)])
    d = rows_of(rows, "stg_datasets")[0]
    assert (d["node_type"], d["node_type_guess"], d["is_placeholder"]) == ("view", "stream", False)
    assert rows_of(rows, "stg_provenance")[0]["event_type"] == "deleted"
    assert rows_of(rows, "stg_events")[0]["event_kind"] == "dataset"


@pytest.mark.unit
def test_unstorable_event_is_rejected_alone():
    good = run_event("START", T1, str(uuid.uuid4()), outputs=[ds("ok")])
    bad = run_event("START", T1, str(uuid.uuid4()), outputs=[ds("bad\x00name")])
    with pytest.raises(EventValidationError) as info:
        check_storable(bad)
    assert info.value.code == "validation.unstorable" and "outputs" in info.value.field
    rows = derive_batch([stored(good, "a:1"), stored(bad, "a:2")])
    assert [s for s, _ in rows.rejected] == ["a:2"]
    assert len(rows.tables["stg_events"]) == 1
    assert all("bad" not in str(r) for r in rows.tables["stg_datasets"])


@pytest.mark.unit
@pytest.mark.parametrize("parts", [("dataset", "ns", "name"), ("edge", "reads", "a", "b"), ("job", "日本", "x\ty;'\"")])
def test_fast_ids_equal_schemas_identity(parts):
    from schemas import identity
    from sink import ids

    assert ids.node_uuid(*parts) == identity.node_uuid(*parts)
    assert ids.dataset_id("n", "x") == identity.dataset_id("n", "x")
    assert ids.job_id("n", "x") == identity.job_id("n", "x")
    assert ids.job_edge_id("reads", "a", "b") == identity.edge_id("reads", "a", "b")


# -- real producers' quirks (tests/test_real_producers.py runs their events end to end) --------------------


@pytest.mark.unit
def test_facet_values_unfit_for_typed_columns_are_left_out_not_fatal():
    # an Airflow template's nominal time and a dbt template's parent runId left unfilled, a count beyond bigint:
    # staged as they were, they failed the COPY of the whole batch (timestamptz, uuid, bigint columns)
    rid = str(uuid.uuid4())
    event = run_event("COMPLETE", T1, rid, inputs=[ds("a")],
                      outputs=[{**ds("b"), "outputFacets": {"outputStatistics": {"rowCount": 2**63, "size": -(2**63)}}}],
                      run_facets={"nominalTime": {"nominalStartTime": "{{ is_datetime(result) }}",
                                                  "nominalEndTime": "2024-05-01T12:00:00+02:00"},
                                  "parent": {"run": {"runId": "{{ any(result) }}"},
                                             "job": {"namespace": "dbt", "name": "dbt-run"},
                                             "root": {"run": {"runId": "scheduled__2024-05-01"},
                                                      "job": {"namespace": "airflow", "name": "dag"}}}})
    rows = derive_batch([stored(event)])
    runs = {r["run_id"]: r for r in rows_of(rows, "stg_runs")}
    assert list(runs) == [rid]                              # no placeholder run under a non-UUID id
    run = runs[rid]
    assert run["nominal_start"] is None and run["nominal_end"] == "2024-05-01T10:00:00.000000Z"
    assert run["parent_run_id"] is None and run["root_run_id"] is None
    assert run["parent_job_id"] == job_id("dbt", "dbt-run")
    [version] = rows_of(rows, "stg_dataset_versions")
    assert version["row_count"] is None and version["byte_count"] == -(2**63)
    assert version["nominal_end"] == "2024-05-01T10:00:00.000000Z"
    # a UUID in upper case is the same run as in lower case
    upper = str(uuid.uuid4()).upper()
    event = run_event("START", T1, rid, run_facets={"parent": {"run": {"runId": upper},
                                                               "job": {"namespace": "dbt", "name": "dbt-run"}}})
    [run] = [r for r in rows_of(derive_batch([stored(event)]), "stg_runs") if r["run_id"] == rid]
    assert run["parent_run_id"] == upper.lower()


@pytest.mark.unit
def test_node_type_guess_file_namespace_and_table_symlinks():
    rid = str(uuid.uuid4())
    # Spark and Hive name local files namespace "file" (OpenLineage naming); a warehouse table's symlink
    # identifier says TABLE even in a file:/ or hdfs:// namespace; a catalog table over a topic is a stream
    spark_out = {"namespace": "file", "name": "/tmp/cll_test/tbl1", "facets": {"symlinks": {"identifiers": [
        {"namespace": "file:/tmp/cll_test", "name": "default.tbl1", "type": "TABLE"}]}}}
    flink_in = {"namespace": "kafka://kafka:9092", "name": "topic", "facets": {"symlinks": {"identifiers": [
        {"namespace": "kafka://kafka:9092", "name": "catalog.db.kafka_input", "type": "TABLE"}]}}}
    hive_in = {"namespace": "hive://localhost:9083", "name": "test.t1", "facets": {"symlinks": {"identifiers": [
        {"namespace": "file", "name": "/opt/hive/warehouse/test.db/t1", "type": "LOCATION"}]}}}
    event = run_event("COMPLETE", T1, rid, inputs=[flink_in, hive_in], outputs=[spark_out])
    guesses = {(d["namespace"], d["name"]): d["node_type_guess"]
               for d in rows_of(derive_batch([stored(event)]), "stg_datasets")}
    assert guesses == {
        ("file", "/tmp/cll_test/tbl1"): "file", ("file:/tmp/cll_test", "default.tbl1"): "table",
        ("kafka://kafka:9092", "topic"): "stream", ("kafka://kafka:9092", "catalog.db.kafka_input"): "stream",
        ("hive://localhost:9083", "test.t1"): "table", ("file", "/opt/hive/warehouse/test.db/t1"): "file",
    }


@pytest.mark.unit
def test_column_lineage_names_the_canonical_source_table():
    # Spark names inputs by path with a TABLE symlink, and its columnLineage by the same path
    rid = str(uuid.uuid4())
    table = {"symlinks": {"identifiers": [{"namespace": "file:/wh", "name": "default.src", "type": "TABLE"}]}}
    src = {"namespace": "file", "name": "/wh/src", "facets": {**table, "schema": {"fields": [{"name": "a"}]}}}
    lineage = col_lineage_12("/wh/src", {"a": [("a", "DIRECT", "IDENTITY")]}, ns="file")
    out = {"namespace": "file", "name": "/wh/dst", "facets": {"columnLineage": lineage}}
    rows = derive_batch([stored(run_event("COMPLETE", T1, rid, inputs=[src], outputs=[out]))])
    [col] = rows_of(rows, "stg_column_lineage")
    assert col["source_dataset_id"] == dataset_id("file:/wh", "default.src")
    assert col["source_table"] == "file:/wh/default.src"
    assert json.loads(col["dependencies"])[0]["source_table"] == "file:/wh/default.src"
    # the canonical node's row keeps its own names
    names = {d["dataset_id"]: (d["namespace"], d["name"]) for d in rows_of(rows, "stg_datasets")}
    assert names[dataset_id("file:/wh", "default.src")] == ("file:/wh", "default.src")


@pytest.mark.unit
def test_deleted_facets_are_not_read_and_null_deleted_is_not_a_deletion():
    rid = str(uuid.uuid4())
    # dbt writes "_deleted": null on every facet; "_deleted": true means "delete this facet" (spec)
    out = ds("b", fields=["x"], documentation={"description": "gone", "_deleted": True},
             datasetType={"datasetType": "VIEW", "_deleted": True})
    out["facets"]["schema"]["_deleted"] = None
    event = run_event("COMPLETE", T1, rid, outputs=[out],
                      job_facets={"jobType": {"_deleted": True, "jobType": "QUERY"},
                                  "sql": {"_deleted": None, "query": "select 1"}})
    rows = derive_batch([stored(event)])
    [dataset] = rows_of(rows, "stg_datasets")
    assert dataset["description"] == "" and dataset["node_type"] is None    # cleared; the type is not read
    assert json.loads(dataset["fields"])[0]["name"] == "x"
    [job] = rows_of(rows, "stg_jobs")
    assert job["job_type"] == ""
    [version] = rows_of(rows, "stg_job_versions")
    assert version["sql"] == "select 1"


@pytest.mark.unit
@pytest.mark.parametrize("start, end, expected_start, expected_end", [
    # the OpenLineage Python client's tests (nominal_time_without_end.json, serde_example_run_event.json)
    ("2020-01-01", "2020-01-02", "2020-01-01T00:00:00.000000Z", "2020-01-02T00:00:00.000000Z"),
    ("2020-12-17T03:00:00.001", None, "2020-12-17T03:00:00.001000Z", None),
    ("2020-12-17T03:00:00+02:00", "2020-12-17 04:00", "2020-12-17T01:00:00.000000Z", "2020-12-17T04:00:00.000000Z"),
    ("yesterday", "2020-13-01", None, None),
])
def test_nominal_time_without_offset_is_read_as_utc(start, end, expected_start, expected_end):
    rid = str(uuid.uuid4())
    facet = {"nominalStartTime": start, **({"nominalEndTime": end} if end else {})}
    [run] = rows_of(derive_batch([stored(run_event("START", T1, rid, run_facets={"nominalTime": facet}))]),
                    "stg_runs")
    assert (run["nominal_start"], run["nominal_end"]) == (expected_start, expected_end)


@pytest.mark.unit
def test_empty_namespace_and_names_derive_their_nodes():
    rid = str(uuid.uuid4())
    event = run_event("COMPLETE", T1, rid, inputs=[{"namespace": "", "name": "src"}],
                      outputs=[{"namespace": "s3://bucket", "name": ""}])
    event["job"] = {"namespace": "", "name": ""}
    rows = derive_batch([stored(event)])
    assert {(d["namespace"], d["name"]) for d in rows_of(rows, "stg_datasets")} == {("", "src"), ("s3://bucket", "")}
    [job] = rows_of(rows, "stg_jobs")
    assert (job["job_id"], job["qualified_name"]) == (job_id("", ""), "/")
    [edge] = [e for e in rows_of(rows, "stg_edges") if e["kind"] == "dataset"]
    assert (edge["source_node_id"], edge["target_node_id"]) == (dataset_id("", "src"), dataset_id("s3://bucket", ""))


@pytest.mark.unit
def test_deleted_facet_stages_the_cleared_value_and_null_deleted_is_no_deletion():
    rid = str(uuid.uuid4())
    gone = {"_deleted": True}
    out = {"namespace": NS, "name": "t", "facets": {"documentation": gone, "ownership": gone, "tags": gone,
                                                    "schema": gone, "datasetType": {"datasetType": "VIEW"}}}
    kept = {"namespace": NS, "name": "u", "facets": {"documentation": {"description": "d", "_deleted": None}}}
    event = run_event("COMPLETE", T1, rid, outputs=[out, kept],
                      job_facets={"documentation": gone, "ownership": gone, "jobType": gone})
    rows = derive_batch([stored(event)])
    datasets = {d["name"]: d for d in rows_of(rows, "stg_datasets")}
    cleared = {k: datasets["t"][k] for k in ("description", "owner", "tags", "fields", "fields_hash", "node_type")}
    assert cleared == {"description": "", "owner": "", "tags": "null", "fields": "null", "fields_hash": "",
                       "node_type": "view"}
    assert datasets["t"]["facets_time"] == T1 and datasets["u"]["description"] == "d"
    [job] = rows_of(rows, "stg_jobs")
    assert (job["job_type"], job["description"], job["owners"], job["facets_time"]) == ("", "", "null", T1)
    # an event that does not mention the facet says nothing: NULL, the stored value stays
    [plain] = [d for d in rows_of(derive_batch([stored(run_event("COMPLETE", T1, rid, outputs=[ds("t")]))]),
                                  "stg_datasets")]
    assert plain["description"] is None and plain["fields"] is None
