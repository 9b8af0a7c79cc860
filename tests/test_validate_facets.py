"""Issue 15 item 4: malformed OpenLineage messages never land as if valid.

Core violations (strict JSON, UTF-8 without a BOM, ``spec/OpenLineage.json``: required fields, formats, the
``BaseFacet`` fields of every facet) end in the DLQ with a code and the field's JSON path. Standard facets
that break their own schema (``spec/facets/*.json``) are dropped from the stored event, which still lands, and
each adds a ``validation.facet`` DLQ record with the original bytes and the JSON path of the violation.

The corpus (:data:`CORE_CASES`, :data:`FACET_CASES`) is built from the spec's own fixtures: the base event is
``tests/fixtures/openlineage/events/example_full_event.json`` (the Python client's full event) with the spec's
facet examples (``spec_tests/<Facet>/1.json``) placed at their level, and each case breaks one rule of the
schema it names. ``tests/fixtures/openlineage/invalid/`` holds the raw byte-level cases (NaN, BOM) as files.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schemas.facets import standard_facets
from schemas.identity import canonical_json
from schemas.validate import validate_event, validate_openlineage_event
from stream_processor.decode import decode_record

FIXTURES = Path(__file__).parent / "fixtures" / "openlineage"
SPEC_FACETS = FIXTURES / "spec_tests"
RUN_ID = "ea041791-68bc-4ae1-bd89-4c8106a157e4"
P = "https://github.com/OpenLineage/OpenLineage/tree/1.0.0/client/python"
FACET_URL = "https://openlineage.io/spec/facets/1-0-0/X.json#/$defs/X"


def spec_facet(folder: str) -> dict[str, Any]:
    """The spec's own example of a facet (``spec/tests/<folder>/1.json``): ``{name: facet}``."""
    return json.loads((SPEC_FACETS / folder / "1.json").read_text(encoding="utf-8"))


def base_event() -> dict[str, Any]:
    """A valid RunEvent carrying the spec's examples of the facets the cases break, each at its level."""
    run_facets = {**spec_facet("ParentRunFacet"), **spec_facet("NominalTimeRunFacet"),
                  **spec_facet("ErrorMessageRunFacet"), **spec_facet("ProcessingEngineRunFacet"),
                  **spec_facet("TagsRunFacet"),
                  "myCustom": {"_producer": P, "_schemaURL": FACET_URL, "anything": [1, "x", None]}}
    job_facets = {**spec_facet("SQLJobFacet"), **spec_facet("SourceCodeLocationJobFacet"),
                  **spec_facet("OwnershipJobFacet"), **spec_facet("DocumentationJobFacet"),
                  **spec_facet("JobTypeJobFacet")}
    input_facets = {**spec_facet("DataQualityMetricsInputDatasetFacet"),
                    **spec_facet("DataQualityAssertionsDatasetFacet")}
    input_facets["inputStatistics"] = {"_producer": P, "_schemaURL": FACET_URL, "rowCount": 10, "size": 100}
    out_facets = {**spec_facet("OwnershipDatasetFacet"), **spec_facet("ColumnLineageDatasetFacet"),
                  **spec_facet("SymlinksDatasetFacet"), **spec_facet("LifecycleStateChangeDatasetFacet"),
                  **spec_facet("DatasetVersionDatasetFacet"), **spec_facet("DatasourceDatasetFacet")}
    return {
        "eventType": "COMPLETE", "eventTime": "2024-05-01T12:00:00.000Z", "producer": P,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": RUN_ID, "facets": run_facets},
        "job": {"namespace": "ns", "name": "job", "facets": job_facets},
        "inputs": [{"namespace": "db", "name": "in", "facets": spec_facet("SchemaDatasetFacet"),
                    "inputFacets": input_facets}],
        "outputs": [{"namespace": "db", "name": "out", "facets": out_facets,
                     "outputFacets": spec_facet("OutputStatisticsOutputDatasetFacet")}],
    }


def dataset_event() -> dict[str, Any]:
    return {"eventTime": "2024-05-01T12:00:00Z", "producer": P,
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/DatasetEvent",
            "dataset": {"namespace": "db", "name": "t", "facets": spec_facet("SchemaDatasetFacet")}}


def job_event() -> dict[str, Any]:
    return {"eventTime": "2024-05-01T12:00:00Z", "producer": P,
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/JobEvent",
            "job": {"namespace": "code", "name": "etl.sql", "facets": spec_facet("SQLJobFacet")},
            "inputs": [{"namespace": "db", "name": "a"}],
            "outputs": [{"namespace": "db", "name": "b", "facets": spec_facet("ColumnLineageDatasetFacet")}]}


def at(doc: dict[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def setting(path: str, value: Any, base: Callable[[], dict[str, Any]] = base_event) -> Callable[[], dict[str, Any]]:
    """A case: ``base()`` with the value at ``path`` (slash-separated) replaced, or deleted for ``DELETE``."""
    def build() -> dict[str, Any]:
        doc = base()
        parent, _, key = path.rpartition("/")
        node: Any = at(doc, parent) if parent else doc
        if value is DELETE:
            del node[int(key) if isinstance(node, list) else key]
        else:
            node[int(key) if isinstance(node, list) else key] = copy.deepcopy(value)
        return doc
    return build


DELETE = object()
CL = "outputs/0/facets/columnLineage/fields/NAME"   # the spec example's first column lineage field

#: (case id, event builder, code, field): the whole message is rejected (core).
CORE_CASES: list[tuple[str, Callable[[], dict[str, Any]], str, str]] = [
    ("run_no_schemaURL", setting("schemaURL", DELETE), "validation.missing", "schemaURL"),
    ("run_schemaURL_null", setting("schemaURL", None), "validation.missing", "schemaURL"),
    ("run_schemaURL_not_uri", setting("schemaURL", "OpenLineage.json"), "validation.type", "schemaURL"),
    ("run_no_producer", setting("producer", DELETE), "validation.missing", "producer"),
    ("run_producer_not_uri", setting("producer", "my producer"), "validation.type", "producer"),
    ("run_facet_no_producer", setting("run/facets/nominalTime/_producer", DELETE), "validation.missing",
     "run.facets.nominalTime._producer"),
    ("run_facet_no_schemaURL", setting("run/facets/parent/_schemaURL", DELETE), "validation.missing",
     "run.facets.parent._schemaURL"),
    ("custom_facet_no_producer", setting("run/facets/myCustom/_producer", DELETE), "validation.missing",
     "run.facets.myCustom._producer"),
    ("custom_facet_producer_not_uri", setting("run/facets/myCustom/_producer", "my producer"), "validation.type",
     "run.facets.myCustom._producer"),
    ("custom_facet_producer_not_uri_again", setting("job/facets/sql/_producer", "my producer"), "validation.type",
     "job.facets.sql._producer"),   # the second time the string comes from the cache of checked URIs
    ("custom_facet_schemaURL_number", setting("run/facets/myCustom/_schemaURL", 3), "validation.type",
     "run.facets.myCustom._schemaURL"),
    ("job_facet_no_producer", setting("job/facets/sql/_producer", DELETE), "validation.missing",
     "job.facets.sql._producer"),
    ("job_facet_deleted_not_bool", setting("job/facets/sql/_deleted", "yes"), "validation.type",
     "job.facets.sql._deleted"),
    ("dataset_facet_no_schemaURL", setting("inputs/0/facets/schema/_schemaURL", DELETE), "validation.missing",
     "inputs[0].facets.schema._schemaURL"),
    ("input_facet_no_producer", setting("inputs/0/inputFacets/dataQualityMetrics/_producer", DELETE),
     "validation.missing", "inputs[0].inputFacets.dataQualityMetrics._producer"),
    ("output_facet_no_schemaURL", setting("outputs/0/outputFacets/outputStatistics/_schemaURL", DELETE),
     "validation.missing", "outputs[0].outputFacets.outputStatistics._schemaURL"),
    ("facet_not_an_object", setting("run/facets/myCustom", "text"), "validation.type", "run.facets.myCustom"),
    ("run_id_not_uuid", setting("run/runId", "run-1"), "validation.run_id", "run.runId"),
    ("run_without_run_id", setting("run/runId", DELETE), "validation.missing", "run.runId"),
    ("event_time_naive", setting("eventTime", "2024-05-01T12:00:00"), "validation.event_time", "eventTime"),
    ("event_type_unknown", setting("eventType", "DONE"), "validation.event_type", "eventType"),
    ("inputs_not_a_list", setting("inputs", {"namespace": "db", "name": "in"}), "validation.type", "inputs"),
    ("output_without_name", setting("outputs/0/name", DELETE), "validation.missing", "outputs[0].name"),
    ("dataset_event_no_schemaURL", setting("schemaURL", DELETE, dataset_event), "validation.missing", "schemaURL"),
    ("dataset_event_no_name", setting("dataset/name", DELETE, dataset_event), "validation.missing", "dataset.name"),
    ("dataset_event_facet_no_producer", setting("dataset/facets/schema/_producer", DELETE, dataset_event),
     "validation.missing", "dataset.facets.schema._producer"),
    ("job_event_no_schemaURL", setting("schemaURL", DELETE, job_event), "validation.missing", "schemaURL"),
    ("job_event_no_job_name", setting("job/name", DELETE, job_event), "validation.missing", "job.name"),
    ("job_event_output_facet_no_schemaURL", setting("outputs/0/facets/columnLineage/_schemaURL", DELETE, job_event),
     "validation.missing", "outputs[0].facets.columnLineage._schemaURL"),
]

#: (case id, event builder, dropped facet path, field): the facet is dropped, the event lands.
FACET_CASES: list[tuple[str, Callable[[], dict[str, Any]], str, str]] = [
    ("ownership_owner_without_name", setting("outputs/0/facets/ownership/owners/0/name", DELETE),
     "outputs[0].facets.ownership", "outputs[0].facets.ownership.owners[0].name"),
    ("ownership_owner_name_null", setting("outputs/0/facets/ownership/owners/0/name", None),
     "outputs[0].facets.ownership", "outputs[0].facets.ownership.owners[0].name"),
    ("job_ownership_owner_without_name", setting("job/facets/ownership/owners/0/name", DELETE),
     "job.facets.ownership", "job.facets.ownership.owners[0].name"),
    ("assertion_without_success", setting("inputs/0/inputFacets/dataQualityAssertions/assertions/0/success", DELETE),
     "inputs[0].inputFacets.dataQualityAssertions",
     "inputs[0].inputFacets.dataQualityAssertions.assertions[0].success"),
    ("assertion_success_string", setting("inputs/0/inputFacets/dataQualityAssertions/assertions/1/success", "true"),
     "inputs[0].inputFacets.dataQualityAssertions",
     "inputs[0].inputFacets.dataQualityAssertions.assertions[1].success"),
    ("output_row_count_string", setting("outputs/0/outputFacets/outputStatistics/rowCount", "10"),
     "outputs[0].outputFacets.outputStatistics", "outputs[0].outputFacets.outputStatistics.rowCount"),
    ("input_statistics_row_count_string", setting("inputs/0/inputFacets/inputStatistics/rowCount", "10"),
     "inputs[0].inputFacets.inputStatistics", "inputs[0].inputFacets.inputStatistics.rowCount"),
    ("metrics_row_count_float", setting("inputs/0/inputFacets/dataQualityMetrics/rowCount", 1.5),
     "inputs[0].inputFacets.dataQualityMetrics", "inputs[0].inputFacets.dataQualityMetrics.rowCount"),
    ("column_lineage_input_fields_string", setting(f"{CL}/inputFields", "db.in.a"),
     "outputs[0].facets.columnLineage", "outputs[0].facets.columnLineage.fields.NAME.inputFields"),
    ("column_lineage_input_field_without_field", setting(f"{CL}/inputFields/0/field", DELETE),
     "outputs[0].facets.columnLineage", "outputs[0].facets.columnLineage.fields.NAME.inputFields[0].field"),
    ("column_lineage_input_field_without_namespace", setting(f"{CL}/inputFields/0/namespace", DELETE),
     "outputs[0].facets.columnLineage", "outputs[0].facets.columnLineage.fields.NAME.inputFields[0].namespace"),
    ("parent_run_without_run_id", setting("run/facets/parent/run/runId", DELETE),
     "run.facets.parent", "run.facets.parent.run.runId"),
    ("parent_without_job", setting("run/facets/parent/job", DELETE), "run.facets.parent", "run.facets.parent.job"),
    ("parent_job_without_name", setting("run/facets/parent/job/name", DELETE),
     "run.facets.parent", "run.facets.parent.job.name"),
    ("nominal_time_missing_start", setting("run/facets/nominalTime/nominalStartTime", DELETE),
     "run.facets.nominalTime", "run.facets.nominalTime.nominalStartTime"),
    ("error_message_without_message", setting("run/facets/errorMessage/message", DELETE),
     "run.facets.errorMessage", "run.facets.errorMessage.message"),
    ("processing_engine_without_version", setting("run/facets/processing_engine/version", DELETE),
     "run.facets.processing_engine", "run.facets.processing_engine.version"),
    ("run_tag_without_key", setting("run/facets/tags/tags/0/key", DELETE),
     "run.facets.tags", "run.facets.tags.tags[0].key"),
    ("sql_without_query", setting("job/facets/sql/query", DELETE), "job.facets.sql", "job.facets.sql.query"),
    ("job_type_without_processing_type", setting("job/facets/jobType/processingType", DELETE),
     "job.facets.jobType", "job.facets.jobType.processingType"),
    ("schema_fields_not_a_list", setting("inputs/0/facets/schema/fields", {"a": "int"}),
     "inputs[0].facets.schema", "inputs[0].facets.schema.fields"),
    ("schema_field_without_name", setting("inputs/0/facets/schema/fields/0/name", DELETE),
     "inputs[0].facets.schema", "inputs[0].facets.schema.fields[0].name"),
    ("symlink_without_type", setting("outputs/0/facets/symlinks/identifiers/0/type", DELETE),
     "outputs[0].facets.symlinks", "outputs[0].facets.symlinks.identifiers[0].type"),
    ("lifecycle_state_not_in_enum", setting("outputs/0/facets/lifecycleStateChange/lifecycleStateChange", "MOVE"),
     "outputs[0].facets.lifecycleStateChange", "outputs[0].facets.lifecycleStateChange.lifecycleStateChange"),
    ("dataset_version_number", setting("outputs/0/facets/version/datasetVersion", 17),
     "outputs[0].facets.version", "outputs[0].facets.version.datasetVersion"),
    ("dataset_event_schema_field_type_number", setting("dataset/facets/schema/fields/0/type", 5, dataset_event),
     "dataset.facets.schema", "dataset.facets.schema.fields[0].type"),
    ("job_event_column_lineage_without_field", setting(f"{CL}/inputFields/0/field", DELETE, job_event),
     "outputs[0].facets.columnLineage", "outputs[0].facets.columnLineage.fields.NAME.inputFields[0].field"),
]

#: Standard-facet values that break only a `format` (an annotation in JSON Schema 2020-12, the spec's draft):
#: real producers send them (Spark's `dataSource.uri: "file"`, dbt's templated parent runId), and they land.
FORMAT_ONLY_CASES = [
    ("parent_run_id_not_uuid", setting("run/facets/parent/run/runId", "{{ any(result) }}")),
    ("nominal_time_not_a_date_time", setting("run/facets/nominalTime/nominalStartTime", "yesterday")),
    ("source_code_location_url_not_uri", setting("job/facets/sourceCodeLocation/url", "not a url")),
    ("data_source_uri_not_uri", setting("outputs/0/facets/dataSource/uri", "file")),
]

#: Raw messages that are not strict JSON in UTF-8 without a BOM: (file in invalid/, code).
RAW_CASES = [("nan_literal.json", "decode.json"), ("infinity_literal.json", "decode.json"),
             ("negative_infinity_literal.json", "decode.json"), ("utf8_bom.json", "decode.bom")]

pytestmark = pytest.mark.unit


def raw_case(name: str) -> bytes:
    return (FIXTURES / "invalid" / name).read_bytes()


def decoded(value: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = decode_record(value, [])
    return [r for r in rows if r["status"] == "ok"], [r for r in rows if r["status"] != "ok"]


def test_corpus_has_at_least_40_invalid_messages_and_every_class_of_the_issue() -> None:
    assert len(CORE_CASES) + len(FACET_CASES) + len(RAW_CASES) >= 40
    ids = {c[0] for c in CORE_CASES + FACET_CASES} | {c[0] for c in RAW_CASES}
    assert {"nan_literal.json", "utf8_bom.json", "run_no_schemaURL", "run_facet_no_producer",
            "job_facet_no_producer", "dataset_facet_no_schemaURL", "ownership_owner_without_name",
            "assertion_without_success", "assertion_success_string", "output_row_count_string",
            "column_lineage_input_fields_string", "column_lineage_input_field_without_field",
            "parent_run_without_run_id"} <= ids


def test_base_events_are_valid_and_land_unchanged() -> None:
    for build in (base_event, dataset_event, job_event):
        doc = build()
        [ok], rejected = decoded(json.dumps(doc).encode())
        assert rejected == []
        assert ok["event_json"] == canonical_json(validate_event(doc))   # nothing dropped, nothing added
        assert json.loads(ok["event_json"]) == validate_openlineage_event(doc).event


@pytest.mark.parametrize("name, code", RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_not_strict_json_goes_to_the_dlq(name: str, code: str) -> None:
    value = raw_case(name)
    ok, [row] = decoded(value)
    assert ok == [] and row["error_code"] == code
    assert ("byte-order mark" if code == "decode.bom" else "not a JSON value") in row["error_message"]
    # the same text without the fault is a valid event: the fault alone is the reason
    fixed = value.removeprefix(b"\xef\xbb\xbf").replace(b"-Infinity", b"0").replace(b"Infinity", b"0").replace(
        b"NaN", b"0")
    [good], none = decoded(fixed)
    assert none == [] and good["status"] == "ok"


@pytest.mark.parametrize("case, build, code, field", CORE_CASES, ids=[c[0] for c in CORE_CASES])
def test_core_violation_rejects_the_message_naming_the_field(case: str, build: Callable[[], dict[str, Any]],
                                                             code: str, field: str) -> None:
    ok, [row] = decoded(json.dumps(build()).encode())
    assert ok == []
    assert (row["error_code"], row["error_field"]) == (code, field)
    assert field in row["error_message"]


@pytest.mark.parametrize("case, build, facet_path, field", FACET_CASES, ids=[c[0] for c in FACET_CASES])
def test_broken_standard_facet_is_dropped_and_reported(case: str, build: Callable[[], dict[str, Any]],
                                                       facet_path: str, field: str) -> None:
    doc = build()
    [ok], [row] = decoded(json.dumps(doc).encode())
    assert (row["error_code"], row["error_field"], row["error_class"]) == ("validation.facet", field,
                                                                           "FacetValidationError")
    assert field in row["error_message"]
    stored = json.loads(ok["event_json"])
    container, _, name = facet_path.rpartition(".")
    assert name not in _container(stored, container)          # the facet is dropped ...
    expected = validate_event(doc)                              # ... and nothing else changes
    del _container(expected, container)[name]
    assert stored == json.loads(canonical_json(expected))


def _container(event: dict[str, Any], path: str) -> dict[str, Any]:
    node: Any = event
    for part in path.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


def test_two_broken_facets_give_two_records_and_the_event_once() -> None:
    doc = setting("outputs/0/outputFacets/outputStatistics/rowCount", "10")()
    doc["run"]["facets"]["parent"]["run"] = {}
    ok, rejected = decoded(json.dumps(doc).encode())
    assert len(ok) == 1
    assert [r["error_field"] for r in rejected] == ["run.facets.parent.run.runId",
                                                    "outputs[0].outputFacets.outputStatistics.rowCount"]
    assert len({r["_index"] for r in rejected}) == 2              # distinct DLQ row identities


def test_explicit_nulls_for_optional_fields_are_absent_not_violations() -> None:
    doc = base_event()
    doc["outputs"][0]["facets"]["ownership"]["owners"][0]["type"] = None
    doc["run"]["facets"]["errorMessage"]["stackTrace"] = None
    doc["run"]["facets"]["nominalTime"]["nominalEndTime"] = None
    doc["job"]["facets"]["sql"]["_deleted"] = None
    doc["run"]["facets"]["tags"] = None
    doc["inputs"][0]["inputFacets"]["dataQualityMetrics"]["columnMetrics"]["amount"]["sum"] = None
    doc["outputs"][0]["outputFacets"] = None
    [ok], rejected = decoded(json.dumps(doc).encode())
    assert rejected == []
    assert ok["event_json"] == canonical_json(validate_event(doc))   # kept as sent, nulls included


def test_deletion_marker_needs_only_the_base_facet() -> None:
    doc = base_event()
    doc["job"]["facets"]["sql"] = {"_producer": P, "_schemaURL": FACET_URL, "_deleted": True}
    [ok], rejected = decoded(json.dumps(doc).encode())
    assert rejected == [] and json.loads(ok["event_json"])["job"]["facets"]["sql"]["_deleted"] is True


@pytest.mark.parametrize("folder", sorted(p.name for p in SPEC_FACETS.iterdir() if p.is_dir()))
def test_every_spec_facet_example_is_valid_at_its_level(folder: str) -> None:
    # the spec's own examples must pass the shipped schemas: a wrong level or schema would drop good facets
    levels = {name: level for (level, name) in standard_facets()}
    for path in sorted((SPEC_FACETS / folder).glob("*.json")):
        facets = json.loads(path.read_text(encoding="utf-8"))
        doc = base_event()
        for name, facet in facets.items():
            level = "input" if folder.endswith("InputDatasetFacet") or folder.startswith("DataQualityAssertions") \
                else "output" if folder.endswith("OutputDatasetFacet") else levels[name] if folder.endswith(
                    ("RunFacet", "JobFacet")) and name in levels else "dataset"
            if folder.endswith("RunFacet"):
                doc["run"]["facets"] = {name: facet}
            elif folder.endswith("JobFacet"):
                doc["job"]["facets"] = {name: facet}
            elif level == "input":
                doc["inputs"][0]["inputFacets"] = {name: facet}
            elif level == "output":
                doc["outputs"][0]["outputFacets"] = {name: facet}
            else:
                doc["outputs"][0]["facets"] = {name: facet}
        assert validate_openlineage_event(doc).facet_violations == (), path


@pytest.mark.parametrize("name", ["proxy/event_invalid_dataset_facet.json", "proxy/event_invalid_run_facet.json"])
def test_openlineage_proxy_negative_fixtures_drop_the_facet(name: str) -> None:
    value = (FIXTURES / "integrations" / name).read_bytes()
    [ok], [row] = decoded(value)
    assert row["error_code"] == "validation.facet"
    assert row["error_field"] == {"proxy/event_invalid_dataset_facet.json": "outputs[0].facets.ownership.owners[0].name",
                                  "proxy/event_invalid_run_facet.json": "run.facets.parent.run.runId"}[name]
    assert ok["job_name"] and ok["run_id"]


def test_drop_invalid_facets_keeps_the_document_as_sent_and_does_not_mutate_it() -> None:
    # the HTTP ingest's entry point: validate_event first, then publish the document without broken facets
    from schemas.validate import drop_invalid_facets

    doc = setting("outputs/0/facets/ownership/owners/0/name", DELETE)()
    doc["eventTime"] = "2024-05-01T14:00:00+02:00"                       # not normalised by this call
    before = copy.deepcopy(doc)
    validate_event(doc)
    cleaned, [violation] = drop_invalid_facets(doc)
    assert doc == before                                                  # the caller's document is untouched
    assert (violation.facet, violation.facet_path) == ("ownership", "outputs[0].facets.ownership")
    expected = copy.deepcopy(before)
    del expected["outputs"][0]["facets"]["ownership"]
    assert cleaned == expected


@pytest.mark.parametrize("case, build", FORMAT_ONLY_CASES, ids=[c[0] for c in FORMAT_ONLY_CASES])
def test_a_facet_breaking_only_a_format_annotation_lands_unchanged(case: str, build: Callable[[], dict[str, Any]]) -> None:
    doc = build()
    [ok], rejected = decoded(json.dumps(doc).encode())
    assert rejected == []
    assert ok["event_json"] == canonical_json(validate_event(doc))
