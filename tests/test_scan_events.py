"""OpenLineage output: JobEvents with the standard job facets and column lineage, DatasetEvents for DDL
with schema (types, nullability) and tableConstraints, stable names, byte-identical re-scans, retraction."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scanner import scan
from scanner.events import canonical_json
from schemas.validate import validate_event

pytestmark = pytest.mark.unit

MIXED = Path(__file__).parent / "fixtures/scan/mixed"


def _by_name(events: list[dict]) -> dict[str, dict]:
    return {(e["job"]["name"] if "job" in e else e["dataset"]["name"]): e for e in events}


@pytest.fixture()
def codebase(tmp_path: Path) -> Path:
    root = tmp_path / "code"
    shutil.copytree(MIXED, root)
    return root


def test_every_event_passes_the_pipeline_validation(codebase: Path) -> None:
    result = scan([codebase], jobs=1, event_time="2024-05-01T00:00:00Z")
    assert result.failed == 0
    assert len(result.events) == 6
    for event in result.events:
        validate_event(event)


def test_job_event_facets_and_column_lineage(codebase: Path) -> None:
    events = _by_name(scan([codebase], jobs=1, event_time="2024-05-01T00:00:00Z",
                           namespace="postgres://db:5432").events)
    job = events["etl/daily.sql::statement_1"]
    facets = job["job"]["facets"]
    assert job["job"]["namespace"] == "code-scan"
    assert facets["jobType"]["integration"] == "SQL" and facets["jobType"]["jobType"] == "QUERY"
    assert facets["sql"]["query"].startswith("INSERT INTO mart.daily_revenue")
    assert facets["sourceCodeLocation"]["path"] == "etl/daily.sql"
    assert (facets["sourceCodeLines"]["startLine"], facets["sourceCodeLines"]["endLine"]) == (2, 7)
    assert [(d["namespace"], d["name"]) for d in job["inputs"]] == [
        ("postgres://db:5432", "shop.customers"), ("postgres://db:5432", "shop.orders")]
    [out] = job["outputs"]
    fields = out["facets"]["columnLineage"]["fields"]
    revenue = fields["revenue"]["inputFields"]
    assert revenue == [{"namespace": "postgres://db:5432", "name": "shop.orders", "field": "amount",
                        "transformations": [{"type": "DIRECT", "subtype": "AGGREGATION",
                                             "description": "SUM(o.amount)"}]}]
    dataset_level = {(d["name"], d["field"], d["transformations"][0]["subtype"])
                     for d in out["facets"]["columnLineage"]["dataset"]}
    assert ("shop.orders", "amount", "FILTER") in dataset_level
    assert ("shop.customers", "id", "JOIN") in dataset_level
    view = events["etl/daily.sql::mart.big_customers"]
    assert view["job"]["facets"]["jobType"]["jobType"] == "VIEW"
    assert set(view["outputs"][0]["facets"]["columnLineage"]["fields"]) == {"id", "name", "country", "total"}
    py = events["etl/job.py::build"]
    assert py["job"]["facets"]["jobType"]["integration"] == "PYTHON"


def test_ddl_dataset_events_carry_types_nullability_and_constraints(codebase: Path) -> None:
    events = _by_name(scan([codebase], jobs=1, event_time="2024-05-01T00:00:00Z").events)
    orders = events["shop.orders"]["dataset"]["facets"]
    assert orders["schema"]["fields"][1] == {"name": "customer_id", "type": "INT", "nullable": False}
    assert orders["schema"]["fields"][2] == {"name": "amount", "type": "DECIMAL(10, 2)", "nullable": True}
    tc = orders["tableConstraints"]
    assert tc["primaryKey"] == ["id"]
    assert tc["foreignKeys"] == [{"name": "fk_customer_id", "columns": ["customer_id"], "references": {
        "namespace": "sql://default", "name": "shop.customers", "columns": ["id"]}}]
    assert tc["_producer"].startswith("https://") and tc["_schemaURL"].startswith("https://")


def test_unchanged_rescan_is_byte_identical_changed_statement_new_version_vanished_retracted(
        codebase: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    first = [canonical_json(e) for e in scan([codebase], jobs=1, state_path=state).events]
    second = [canonical_json(e) for e in scan([codebase], jobs=2, state_path=state).events]
    assert first == second
    daily = codebase / "etl/daily.sql"
    daily.write_text(daily.read_text().replace("WHERE o.amount > 0", "WHERE o.amount > 10"))
    third = _by_name(scan([codebase], jobs=1, state_path=state).events)
    before = _by_name([json.loads(e) for e in first])
    changed = "etl/daily.sql::statement_1"
    assert third[changed]["job"]["facets"]["sql"] != before[changed]["job"]["facets"]["sql"]
    assert third[changed]["eventTime"] >= before[changed]["eventTime"]
    unchanged = "etl/job.py::build"
    assert canonical_json(third[unchanged]) == canonical_json(before[unchanged])
    (codebase / "etl/job.py").unlink()
    fourth = scan([codebase], jobs=1, state_path=state)
    assert sorted(fourth.retracted) == ["etl/job.py::build", "etl/job.py::report"]
    gone = _by_name(fourth.events)["etl/job.py::build"]
    assert gone["inputs"] == [] and gone["outputs"] == []
    assert gone["job"]["facets"]["sql"]["_deleted"] is True
    assert gone["job"]["facets"]["scanRetraction"]["retracted"] is True
    validate_event(gone)
    assert scan([codebase], jobs=1, state_path=state).retracted == []


def test_namespace_map_moves_prefixes(codebase: Path) -> None:
    events = scan([codebase], jobs=1, event_time="2024-05-01T00:00:00Z",
                  namespace_map=[("mart", "snowflake://acct")]).events
    names = {(d["namespace"], d["name"]) for e in events if "job" in e for d in e["outputs"]}
    assert ("snowflake://acct", "mart.daily_revenue") in names
