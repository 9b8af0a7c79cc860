"""``--format object-array``: the seed sql-object-lineage-json-format.md, on a small warehouse shaped like
the seed's complete example (a procedure reading a view and a table through a temp table, writing one
table; dimension and fact tables; logging objects left out)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scanner.model import StatementLineage, TableName, Unit
from scanner.object_array import object_array, validate_object_array

WAREHOUSE = Path(__file__).parent / "fixtures/scan/warehouse"

#: The seed's complete example, by name instead of id (ids are node_N in our order).
EXPECTED = {
    ("CONSUMPTION_ClinOpsFinance", "spLoadCadenceBudgetData"): ("Stored Procedure", "Other", {
        ("DBO", "vFull_Departmental_Map"), ("CONSUMPTION_PRIMA", "MonthlyAverageCurrencyExchangeRate")},
        {("CONSUMPTION_ClinOpsFinance", "CadenceBudgetData")}),
    ("CONSUMPTION_PRIMA", "MonthlyAverageCurrencyExchangeRate"): ("Table", "Other", set(), set()),
    ("DBO", "vFull_Departmental_Map"): ("View", "Other", {("DBO", "Full_Departmental_Map"),
                                                          ("CONSUMPTION_PRIMA", "HrDepartments")}, set()),
    ("CONSUMPTION_ClinOpsFinance", "CadenceBudgetData"): (
        "Table", "Other", {("CONSUMPTION_ClinOpsFinance", "spLoadCadenceBudgetData")}, set()),
    ("DBO", "Full_Departmental_Map"): ("Table", "Other", set(), set()),
    ("CONSUMPTION_PRIMA", "HrDepartments"): ("Table", "Other", set(), set()),
    ("CONSUMPTION_FINANCE", "DimCustomers"): ("Table", "Dimension", set(), set()),
    ("CONSUMPTION_FINANCE", "FactGLCognos"): ("Table", "Fact", set(), set()),
}


def _by_name(nodes: list[dict]) -> dict:
    names = {n["id"]: (n["schema"], n["name"]) for n in nodes}
    return {(n["schema"], n["name"]): (n["object_type"], n["data_model_type"], {names[i] for i in n["inputs"]},
                                       {names[i] for i in n["outputs"]}) for n in nodes}


@pytest.mark.integration
def test_cli_writes_the_seed_format_for_the_warehouse(tmp_path: Path) -> None:
    out = tmp_path / "lineage.json"
    proc = subprocess.run([sys.executable, "-m", "lineage", "scan", str(WAREHOUSE), "--format", "object-array",
                           "--output", str(out), "--jobs", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(out.read_text())
    assert validate_object_array(nodes)
    assert _by_name(nodes) == EXPECTED
    assert [n["id"] for n in nodes] == [f"node_{i}" for i in range(len(nodes))]
    for n in nodes:
        assert list(n) == ["id", "name", "schema", "object_type", "description", "data_model_type", "inputs",
                           "outputs"]
        assert n["inputs"] == sorted(n["inputs"], key=lambda s: int(s[5:]))
        assert n["description"] == ""


def _proc(name: str, reads: list[str], writes: list[str]) -> Unit:
    def t(x: str) -> TableName:
        schema, table = x.split(".")
        return TableName("", schema, table)
    st = StatementLineage("INSERT", "", tuple(t(r) for r in reads), tuple(t(w) for w in writes))
    return Unit(f"p.sql::{name}", "p.sql", "PROCEDURE", "SQL", "tsql", "", 1, 1, (st,), t(name))


@pytest.mark.unit
def test_circular_dependency_is_kept_and_logging_objects_are_configurable() -> None:
    units = [_proc("CONSUMPTION_ClinOpsFinance.spAgg", ["CONSUMPTION_ClinOpsFinance.FTE_Monthly", "dbo.Src"],
                   ["CONSUMPTION_ClinOpsFinance.FTE_Monthly", "dbo.LogMessage"])]
    nodes = _by_name(object_array(units))
    assert nodes[("CONSUMPTION_ClinOpsFinance", "spAgg")][2] == nodes[("CONSUMPTION_ClinOpsFinance", "spAgg")][3] | {
        ("dbo", "Src")}
    assert nodes[("CONSUMPTION_ClinOpsFinance", "FTE_Monthly")][2] == {("CONSUMPTION_ClinOpsFinance", "spAgg")}
    assert ("dbo", "LogMessage") not in nodes
    kept = _by_name(object_array(units, logging_objects=[]))
    assert ("dbo", "LogMessage") in kept
