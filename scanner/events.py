"""Jobs and DDL tables -> OpenLineage events (pure: same input, byte-identical output).

Naming (documented in docs/SCAN.md):
- datasets: namespace ``--namespace`` (default ``sql://default``), name ``db.schema.table`` as the code
  qualifies it, with ``--default-database`` / ``--default-schema`` filling missing parts;
  a ``--namespace-map PREFIX=NS`` moves names starting with PREFIX to NS.
- jobs: namespace ``--job-namespace`` (default ``code-scan``), name ``<path>::<object>`` for procedures,
  views and Python functions, ``<path>::statement_<N>`` for loose statements.

Events: one **JobEvent** per job (facets ``jobType``, ``sql``, ``sourceCodeLocation`` and our
``sourceCodeLines``; inputs; outputs with ``schema`` where known and ``columnLineage``), one
**DatasetEvent** per table declared by DDL (``schema`` with types and nullability, our
``tableConstraints``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from scanner.catalog import Catalog
from scanner.model import SourceColumn, TableName, TableSchema, Unit

__all__ = ["Naming", "job_event", "dataset_event", "retraction_event", "canonical_json", "event_digest",
           "PRODUCER", "SCAN_FACETS_BASE"]

PRODUCER = "https://github.com/lineage-stream/lineage-stream/tree/main/scanner"
SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
FACETS = "https://openlineage.io/spec/facets"
SCAN_FACETS_BASE = "https://github.com/lineage-stream/lineage-stream/tree/main/docs/SCAN.md"


@dataclass(frozen=True)
class Naming:
    namespace: str = "sql://default"
    job_namespace: str = "code-scan"
    namespace_map: tuple[tuple[str, str], ...] = ()
    repo_url: str = ""

    def dataset_namespace(self, name: str) -> str:
        low = name.lower()
        for prefix, ns in self.namespace_map:
            if low == prefix.lower() or low.startswith(prefix.lower() + "."):
                return ns
        return self.namespace


def _facet(schema_url: str, **body: Any) -> dict[str, Any]:
    return {"_producer": PRODUCER, "_schemaURL": schema_url, **body}


def canonical_json(event: dict[str, Any]) -> str:
    """Sorted keys, no spaces: the bytes the scanner writes and hashes."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def event_digest(event: dict[str, Any]) -> str:
    """sha256 of the canonical event without ``eventTime`` (a job's content version)."""
    body = {k: v for k, v in event.items() if k != "eventTime"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def _schema_facet(columns: Iterable[tuple[str, str | None, bool | None]]) -> dict[str, Any]:
    fields = []
    for name, typ, nullable in columns:
        f: dict[str, Any] = {"name": name}
        if typ:
            f["type"] = typ
        if nullable is not None:
            f["nullable"] = nullable
        fields.append(f)
    return _facet(f"{FACETS}/1-1-1/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet", fields=fields)


def _transformation(s: SourceColumn, expression: str | None) -> dict[str, Any]:
    t: dict[str, Any] = {"type": s.type, "subtype": s.subtype}
    if expression and s.type == "DIRECT" and s.subtype != "IDENTITY":
        t["description"] = expression
    if s.masking:
        t["masking"] = True
    return t


@dataclass
class _Output:
    name: TableName
    fields: dict[str, dict[tuple, tuple[SourceColumn, str]]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    indirect: dict[tuple, SourceColumn] = field(default_factory=dict)


def _column_lineage(out: _Output, naming: Naming) -> dict[str, Any] | None:
    def input_field(s: SourceColumn, expression: str | None) -> dict[str, Any]:
        name = s.table.qualified
        return {"namespace": naming.dataset_namespace(name), "name": name, "field": s.column,
                "transformations": [_transformation(s, expression)]}

    fields: dict[str, Any] = {}
    for col in out.order:
        entries = out.fields[col]
        if not entries:
            continue
        items = sorted(entries.values(), key=lambda e: (e[0].type, e[0].table.key(), e[0].column.lower(),
                                                          e[0].subtype))
        fields[col] = {"inputFields": [input_field(s, text) for s, text in items]}
        texts = sorted({text for _s, text in items if text})
        if texts and len(texts) == 1:
            fields[col]["transformationDescription"] = texts[0]
    dataset = [input_field(s, None) for s in sorted(out.indirect.values(), key=lambda s: (
        s.table.key(), s.column.lower(), s.subtype))]
    if not fields and not dataset:
        return None
    body: dict[str, Any] = {"fields": fields}
    if dataset:
        body["dataset"] = dataset
    return _facet(f"{FACETS}/1-2-0/ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet", **body)


def _dataset(name: TableName, naming: Naming, facets: dict[str, Any] | None = None) -> dict[str, Any]:
    q = name.qualified
    ds: dict[str, Any] = {"namespace": naming.dataset_namespace(q), "name": q}
    if facets:
        ds["facets"] = facets
    return ds


def _known_schema(name: TableName, catalog: Catalog | None) -> TableSchema | None:
    return catalog.lookup(name) if catalog is not None else None


def job_event(unit: Unit, naming: Naming, event_time: str, catalog: Catalog | None = None) -> dict[str, Any]:
    """The JobEvent of one job."""
    outputs: dict[tuple, _Output] = {}
    for st in unit.statements:
        for target in st.outputs:
            out = outputs.setdefault(target.key(), _Output(target))
            if target != st.outputs[0]:
                continue
            for col in st.columns:
                if col.column not in out.fields:
                    out.fields[col.column] = {}
                    out.order.append(col.column)
                for s in col.sources:
                    key = (s.table.key(), s.column.lower(), s.type, s.subtype)
                    out.fields[col.column].setdefault(key, (s, col.expression))
            for s in st.dataset_indirect:
                out.indirect.setdefault((s.table.key(), s.column.lower(), s.subtype), s)
    input_list = []
    for name in sorted(unit.inputs, key=TableName.key):
        known = _known_schema(name, catalog)
        in_facets = {"schema": _schema_facet((c.name, c.type, None) for c in known.columns)} if known and \
            known.columns else None
        input_list.append(_dataset(name, naming, in_facets))
    output_list = []
    for key in sorted(outputs):
        out = outputs[key]
        facets: dict[str, Any] = {}
        known = _known_schema(out.name, catalog)
        if known is not None and known.columns:
            facets["schema"] = _schema_facet((c.name, c.type, None) for c in known.columns)
        elif out.order:
            facets["schema"] = _schema_facet((c, None, None) for c in out.order)
        cl = _column_lineage(out, naming)
        if cl:
            facets["columnLineage"] = cl
        output_list.append(_dataset(out.name, naming, facets or None))
    location: dict[str, Any] = {"type": "file", "url": f"{naming.repo_url.rstrip('/')}/{unit.path}"
                                if naming.repo_url else f"file:{unit.path}", "path": unit.path}
    job_facets = {
        "jobType": _facet(f"{FACETS}/2-0-3/JobTypeJobFacet.json#/$defs/JobTypeJobFacet",
                          processingType="BATCH", integration=unit.integration, jobType=unit.job_type),
        "sql": _facet(f"{FACETS}/1-1-0/SQLJobFacet.json#/$defs/SQLJobFacet", query=unit.sql,
                      dialect=unit.dialect or "ansi"),
        "sourceCodeLocation": _facet(f"{FACETS}/1-0-1/SourceCodeLocationJobFacet.json#/$defs/"
                                     "SourceCodeLocationJobFacet", **location),
        "sourceCodeLines": _facet(f"{SCAN_FACETS_BASE}#sourcecodelines", path=unit.path,
                                  startLine=unit.line, endLine=unit.end_line),
    }
    if unit.unresolved:
        job_facets["scanUnresolved"] = _facet(f"{SCAN_FACETS_BASE}#scanunresolved", items=list(unit.unresolved))
    return {
        "eventTime": event_time, "producer": PRODUCER, "schemaURL": f"{SPEC}#/$defs/JobEvent",
        "job": {"namespace": naming.job_namespace, "name": unit.name, "facets": job_facets},
        "inputs": input_list, "outputs": output_list,
    }


def table_constraints_facet(table: TableSchema, naming: Naming) -> dict[str, Any] | None:
    if not table.primary_key and not table.foreign_keys:
        return None
    fks = []
    for fk in table.foreign_keys:
        ref = fk.references.qualified
        fks.append({"name": fk.name, "columns": list(fk.columns),
                    "references": {"namespace": naming.dataset_namespace(ref), "name": ref,
                                   "columns": list(fk.ref_columns)}})
    return _facet(f"{SCAN_FACETS_BASE}#tableconstraints", primaryKey=list(table.primary_key), foreignKeys=fks)


def dataset_event(table: TableSchema, naming: Naming, event_time: str, path: str | None = None) -> dict[str, Any]:
    """The DatasetEvent of a table that DDL declares: schema (types, nullability), constraints."""
    facets: dict[str, Any] = {"schema": _schema_facet((c.name, c.type, c.nullable) for c in table.columns)}
    tc = table_constraints_facet(table, naming)
    if tc:
        facets["tableConstraints"] = tc
    if path:
        facets["sourceCodeLocation"] = _facet(f"{SCAN_FACETS_BASE}#datasetsourcecodelocation", type="file",
                                              path=path)
    return {"eventTime": event_time, "producer": PRODUCER, "schemaURL": f"{SPEC}#/$defs/DatasetEvent",
            "dataset": _dataset(table.table, naming, facets)}


def retraction_event(job_name: str, naming: Naming, event_time: str) -> dict[str, Any]:
    """A JobEvent for a job whose statement vanished: no inputs or outputs, its code facets deleted."""
    deleted = {"_producer": PRODUCER, "_schemaURL": f"{SPEC}#/$defs/JobFacet", "_deleted": True}
    return {
        "eventTime": event_time, "producer": PRODUCER, "schemaURL": f"{SPEC}#/$defs/JobEvent",
        "job": {"namespace": naming.job_namespace, "name": job_name, "facets": {
            "sql": dict(deleted), "sourceCodeLocation": dict(deleted), "sourceCodeLines": dict(deleted),
            "scanRetraction": _facet(f"{SCAN_FACETS_BASE}#scanretraction", retracted=True,
                                     reason="the statement is no longer in the scanned code")}},
        "inputs": [], "outputs": [],
    }
