"""Jobs -> the object array of seed sql-object-lineage-json-format.md (version 2.1).

Nodes are Tables, Views and Stored Procedures. A procedure's ``inputs`` are the tables and views it
reads (FROM, JOIN, EXISTS subqueries, CTEs unwrapped), its ``outputs`` those it writes (INSERT,
UPDATE, SELECT INTO, MERGE, TRUNCATE); a view's ``inputs`` what it reads; a table's ``inputs`` the
procedures that write it; ``outputs`` of tables and views are always empty. Temporary tables never
appear; logging objects (default: the seed's list) are left out. Node ids ``node_N`` are assigned in
order: procedures and views first, by schema and name, then every other object by schema and name.
Loose statements outside procedures and views count as writers of nothing (their tables appear).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scanner.dialects import DEFAULT_LOGGING_OBJECTS
from scanner.model import TableName, TableSchema, Unit

__all__ = ["object_array", "data_model_type", "validate_object_array"]


def data_model_type(name: str, object_type: str) -> str:
    if object_type == "Table":
        if name.startswith("Dim"):
            return "Dimension"
        if name.startswith("Fact"):
            return "Fact"
    return "Other"


def _split(t: TableName, default_schema: str) -> tuple[str, str]:
    return (t.db or default_schema, t.name)


def object_array(units: Iterable[Unit], tables: Iterable[TableSchema] = (), *, default_schema: str = "dbo",
                 logging_objects: Sequence[str] = DEFAULT_LOGGING_OBJECTS) -> list[dict]:
    excluded = {tuple(x.lower().split(".")[-2:]) for x in logging_objects}

    def key(t: TableName) -> tuple[str, str]:
        return _split(t, default_schema)

    def skip(k: tuple[str, str]) -> bool:
        return (k[0].lower(), k[1].lower()) in excluded or k[1].startswith(("#", "@"))

    objects: dict[tuple[str, str], dict] = {}       # lower key -> node draft
    spelled: dict[tuple[str, str], tuple[str, str]] = {}

    def node(k: tuple[str, str], object_type: str) -> dict | None:
        if skip(k):
            return None
        low = (k[0].lower(), k[1].lower())
        if low not in objects:
            objects[low] = {"type": object_type, "inputs": set(), "outputs": set()}
            spelled[low] = k
        elif object_type in ("View", "Stored Procedure") and objects[low]["type"] == "Table":
            objects[low]["type"] = object_type
        return objects[low]

    for declared in tables:
        node(key(declared.table), "View" if declared.kind == "VIEW" else "Table")
    for unit in units:
        if unit.job_type in ("PROCEDURE", "FUNCTION", "TRIGGER") and unit.object_name is not None:
            owner = (key(unit.object_name), "Stored Procedure")
        elif unit.job_type == "VIEW" and unit.object_name is not None:
            owner = (key(unit.object_name), "View")
        else:
            owner = None
        me = node(owner[0], owner[1]) if owner else None
        for t in unit.inputs:
            n = node(key(t), "Table")
            if me is not None and n is not None:
                me["inputs"].add((key(t)[0].lower(), key(t)[1].lower()))
        if owner is None or owner[1] == "View":
            for t in unit.outputs:
                node(key(t), "Table")
            continue
        for t in unit.outputs:
            n = node(key(t), "Table")
            if me is not None and n is not None:
                me["outputs"].add((key(t)[0].lower(), key(t)[1].lower()))
    # tables' inputs: the procedures that write them
    for low, obj in objects.items():
        if obj["type"] == "Stored Procedure":
            for out in obj["outputs"]:
                if objects[out]["type"] == "Table":
                    objects[out]["inputs"].add(low)
    rank = {"Stored Procedure": 0, "View": 1, "Table": 2}
    order = sorted(objects, key=lambda k: (rank[objects[k]["type"]], k[0], k[1]))
    ids = {k: f"node_{i}" for i, k in enumerate(order)}

    def refs(keys: set) -> list[str]:
        return sorted((ids[k] for k in keys if k in ids), key=lambda s: int(s.split("_")[1]))

    out = []
    for k in order:
        obj = objects[k]
        schema, name = spelled[k]
        out.append({
            "id": ids[k], "name": name, "schema": schema, "object_type": obj["type"], "description": "",
            "data_model_type": data_model_type(name, obj["type"]), "inputs": refs(obj["inputs"]),
            "outputs": refs(obj["outputs"]) if obj["type"] == "Stored Procedure" else [],
        })
    return out


def validate_object_array(data: list[dict]) -> bool:
    """The seed's validation script, as a function."""
    required = {"id", "name", "schema", "object_type", "inputs", "outputs"}
    ids = {n["id"] for n in data}
    for n in data:
        if not required.issubset(n) or n["object_type"] not in {"Table", "View", "Stored Procedure"}:
            return False
        if not isinstance(n["inputs"], list) or not isinstance(n["outputs"], list):
            return False
        if n.get("data_model_type", "Other") not in {"Dimension", "Fact", "Other"}:
            return False
        if any(r not in ids for r in n["inputs"] + n["outputs"]):
            return False
        if n["object_type"] in ("Table", "View") and n["outputs"]:
            return False
    return len(ids) == len(data)
