"""Exports of the PostgreSQL lineage graph, today's or as of a past time.

Formats (``lineage export --format ...``):

``wia-json``
    The WIA-DATA-008 §1.3 graph document: ``graph_id``, ``version`` "1.0.0", ``generated_at``,
    ``nodes`` (§1.1: datasets; aliases folded into their canonical node and listed in
    ``metadata.custom.aliases``), ``edges`` (§1.2: the dataset-to-dataset edges with
    ``transformation`` and ``metadata``), ``metadata`` (producer, environment), plus top-level
    arrays ``column_lineage`` (§2), ``provenance`` (§3) and ``quality`` (§4) with the seed's field
    names, and ``versions`` (the dataset / object versions, each with its ``node_id`` and its ``name`` as
    the producer wrote it, e.g. ``<namespace>/<object_id>:<version>``). Every node id and table name the
    document writes is a node's (column-lineage tables by their dataset ids: aliases fold into the
    canonical node's qualified name, :class:`TableNames`). Checked by :func:`sink.validation.validate_wia_graph` (§7); violations are returned,
    never raised. Jobs are not WIA nodes: they appear as ``edges[].metadata.job_name``.
``jsonl``
    The raw (normalised) events, one JSON document per line, in event-time order.
``parquet``
    The tables of :mod:`sink.parquet` into a directory (one base file per table).
``graphml``
    Datasets and jobs as nodes, every edge (``reads``, ``writes``, ``dataset``) as a keyed edge of a
    directed multigraph, attributes as GraphML data; ``networkx.read_graphml(path,
    force_multigraph=True)`` reads back the graph :func:`to_networkx` built.
``object-array``
    seeds/sql-object-lineage-json-format.md: jobs -> ``"Stored Procedure"`` (inputs: datasets read,
    outputs: datasets written), datasets -> ``"Table"`` or ``"View"`` (``node_type = 'view'``;
    inputs: jobs writing it, outputs always ``[]``); ids ``node_0..`` in order jobs then datasets,
    each by qualified name; references sorted by number. ``schema`` / ``name``: a dataset name
    ``a.b.c`` of a table or view gives schema ``a.b`` and name ``c``; other names (files, a name
    without a dot) keep the namespace as schema; a job's schema is its namespace. ``data_model_type``: ``Dim*`` -> Dimension,
    ``Fact*`` -> Fact, else Other.

``gzip=True`` compresses the JSON / JSONL / GraphML output (not Parquet, which compresses itself).
"""

from __future__ import annotations

import gzip as gzip_module
import io
import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from schemas.errors import ConfigurationError

from .graph import GraphSnapshot, connect, load_snapshot, utc_iso
from .validation import Violation, object_array_violations, validate_wia_graph

__all__ = [
    "FORMATS",
    "ExportResult",
    "export",
    "wia_document",
    "object_array_document",
    "to_networkx",
    "iter_events",
]

FORMATS = ("wia-json", "jsonl", "parquet", "graphml", "object-array")
WIA_VERSION = "1.0.0"
PRODUCER = "https://github.com/lineage-stream/lineage-stream/sink/export"


@dataclass
class ExportResult:
    """What an export wrote: the format, where, how many top-level items, and the violations found."""

    format: str
    output: str
    count: int
    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


# -- documents (pure) -------------------------------------------------------------------------

def wia_document(snap: GraphSnapshot, environment: str = "prod",
                 generated_at: datetime | None = None) -> dict[str, Any]:
    """The WIA-DATA-008 graph document of a snapshot (see the module docs)."""
    generated = generated_at or datetime.now(UTC)
    aliases: dict[str, list[str]] = {}
    for a in snap.aliases:
        aliases.setdefault(str(a["alias_of"]), []).append(a["qualified_name"])
    jobs = {j["job_id"]: j for j in snap.jobs}
    nodes = [_wia_node(d, sorted(aliases.get(d["dataset_id"], []))) for d in snap.datasets]
    names = TableNames(snap)
    edges = [_wia_edge(e, snap, jobs) for e in snap.dataset_edges()]
    return {
        "graph_id": str(uuid.uuid4()),
        "version": WIA_VERSION,
        "generated_at": utc_iso(generated),
        "nodes": nodes,
        "edges": edges,
        "metadata": {
            "producer": PRODUCER,
            "environment": environment,
            "custom": {"as_of": utc_iso(snap.as_of), "jobs": len(snap.jobs), "aliases": len(snap.aliases)},
        },
        "column_lineage": [_wia_column(c, names) for c in snap.column_lineage],
        "provenance": [_wia_provenance(p, snap) for p in snap.provenance],
        "quality": [_wia_quality(q, snap) for q in snap.quality],
        "versions": _wia_versions(snap, names),
    }


def _wia_node(d: dict[str, Any], aliases: list[str]) -> dict[str, Any]:
    return {
        "node_id": d["dataset_id"],
        "node_type": d["node_type"],
        "namespace": d["namespace"],
        "name": d["name"],
        "qualified_name": d["qualified_name"],
        "created_at": utc_iso(d["first_seen"]),
        "updated_at": utc_iso(d["last_seen"]),
        "metadata": {
            "description": d.get("description") or "",
            "owner": d.get("owner") or "",
            "tags": list(d.get("tags") or []),
            "custom": {"is_placeholder": d["is_placeholder"], "aliases": aliases},
        },
        "schema": {"fields": [
            {"name": f.get("name"), "type": f.get("type") or "", "nullable": bool(f.get("nullable", True)),
             "description": f.get("description") or ""}
            for f in (d.get("fields") or []) if isinstance(f, dict)]},
    }


def _wia_edge(e: dict[str, Any], snap: GraphSnapshot, jobs: dict[str, Any]) -> dict[str, Any]:
    job = jobs.get(e.get("job_id") or "")
    transformation = {k: v for k, v in (e.get("transformation") or {}).items()
                      if k in ("type", "logic", "version", "git_commit") and v is not None}
    meta = dict(e.get("metadata") or {})
    metadata = {k: meta[k] for k in ("job_name", "execution_time", "duration_ms", "records_processed")
                if meta.get(k) is not None}
    if "job_name" not in metadata and job is not None:
        metadata["job_name"] = f"{job['namespace']}/{job['name']}"
    if isinstance(metadata.get("execution_time"), str):
        try:
            metadata["execution_time"] = utc_iso(datetime.fromisoformat(metadata["execution_time"]
                                                                         .replace("Z", "+00:00")))
        except ValueError:
            pass
    metadata["custom"] = {k: v for k, v in meta.items() if k not in metadata and k != "custom"}
    metadata["custom"].update({"job_id": e.get("job_id"), "last_seen": utc_iso(e["last_seen"]),
                               "valid_to": utc_iso(e.get("valid_to"))})
    return {
        "edge_id": e["edge_id"],
        "source_node_id": snap.canonical(e["source_node_id"]),
        "target_node_id": snap.canonical(e["target_node_id"]),
        "edge_type": e["edge_type"],
        "transformation": transformation,
        "metadata": metadata,
        "created_at": utc_iso(e["first_seen"]),
    }


class TableNames:
    """The qualified name an export writes for a dataset: that of its canonical node (an alias folds into the
    node it is an alias of), so every table name in the document is some node's ``qualified_name``.

    By id (:meth:`of_id`, the column lineage's ``source_dataset_id`` / ``target_dataset_id``) and by name
    (:meth:`of_name`, the ``dependencies[].source_table`` strings an event wrote: a dataset's or an
    alias's qualified name); a name no dataset of the snapshot carries is kept as written.
    """

    def __init__(self, snap: GraphSnapshot) -> None:
        self._snap = snap
        self._by_id = {str(d["dataset_id"]): d["qualified_name"] for d in snap.datasets}
        self._by_name = {d["qualified_name"]: d["qualified_name"] for d in snap.datasets}
        for a in snap.aliases:
            canonical = self._by_id.get(snap.canonical(a["dataset_id"]))
            if canonical is not None:
                self._by_name[a["qualified_name"]] = canonical

    def of_id(self, node_id: Any, written: str) -> str:
        return self._by_id.get(self._snap.canonical(node_id), self.of_name(written))

    def of_name(self, written: str) -> str:
        return self._by_name.get(written, written)


def _wia_column(c: dict[str, Any], names: TableNames) -> dict[str, Any]:
    dependencies = [{**d, "source_table": names.of_name(d["source_table"])}
                    if isinstance(d, dict) and isinstance(d.get("source_table"), str) else d
                    for d in c.get("dependencies") or []]
    return {
        "column_lineage_id": c["column_lineage_id"],
        "source_table": names.of_id(c["source_dataset_id"], c["source_table"]),
        "source_column": c["source_column"],
        "target_table": names.of_id(c["target_dataset_id"], c["target_table"]),
        "target_column": c["target_column"],
        "transformation_type": c["transformation_type"],
        "transformation_logic": c.get("transformation_logic") or "",
        "dependencies": dependencies,
        "created_at": utc_iso(c["first_seen"]),
    }


def _wia_versions(snap: GraphSnapshot, names: TableNames) -> list[dict[str, Any]]:
    """The dataset versions (the paper's revisions; Evo object versions): each references its node, and
    ``name`` is the version's name as producers write it (``<qualified_name>:<version>`` for an Evo object,
    ``<qualified_name>@<version>`` otherwise; the form ``lineage upstream`` takes)."""
    from .queries import versioned_name

    datasets = {str(d["dataset_id"]): d for d in snap.datasets}
    out = []
    for v in snap.versions:
        node = datasets.get(snap.canonical(v["dataset_id"]))
        if node is None:
            continue
        qualified = names.of_id(node["dataset_id"], node["qualified_name"])
        out.append({"version_id": v["version_id"], "node_id": node["dataset_id"], "version": v["version"],
                    "qualified_name": qualified, "name": versioned_name(qualified, node["name"], v["version"]),
                    "created_at": utc_iso(v["event_time"]), "run_id": v.get("run_id")})
    return out


def _wia_provenance(p: dict[str, Any], snap: GraphSnapshot) -> dict[str, Any]:
    return {
        "provenance_id": p["provenance_id"],
        "node_id": snap.canonical(p["node_id"]),
        "event_type": p["event_type"],
        "event_time": utc_iso(p["event_time"]),
        "agent": p["agent"],
        "operation": p["operation"],
        "context": p["context"],
    }


def _wia_quality(q: dict[str, Any], snap: GraphSnapshot) -> dict[str, Any]:
    return {
        "quality_id": q["quality_id"],
        "node_id": snap.canonical(q["node_id"]),
        "measured_at": utc_iso(q["measured_at"]),
        "metrics": q["metrics"],
        "validations": list(q.get("validations") or []),
        "anomalies": list(q.get("anomalies") or []),
    }


def object_array_document(snap: GraphSnapshot) -> list[dict[str, Any]]:
    """The object-array document of a snapshot (see the module docs for the mapping)."""
    jobs = sorted(snap.jobs, key=lambda j: (j["qualified_name"], j["job_id"]))
    datasets = sorted(snap.datasets, key=lambda d: (d["qualified_name"], d["dataset_id"]))
    ids: dict[str, str] = {}
    for row in jobs:
        ids[row["job_id"]] = f"node_{len(ids)}"
    for row in datasets:
        ids[row["dataset_id"]] = f"node_{len(ids)}"
    reads: dict[str, set[str]] = {}
    writes: dict[str, set[str]] = {}
    writers: dict[str, set[str]] = {}
    for e in snap.job_edges():
        src, tgt = snap.canonical(e["source_node_id"]), snap.canonical(e["target_node_id"])
        if src not in ids or tgt not in ids:
            continue
        if e["kind"] == "reads":
            reads.setdefault(tgt, set()).add(ids[src])
        else:
            writes.setdefault(src, set()).add(ids[tgt])
            writers.setdefault(tgt, set()).add(ids[src])
    out = []
    for j in jobs:
        out.append({"id": ids[j["job_id"]], "name": j["name"], "schema": j["namespace"],
                    "object_type": "Stored Procedure", "description": j.get("description") or "",
                    "data_model_type": "Other", "inputs": _sorted_ids(reads.get(j["job_id"], set())),
                    "outputs": _sorted_ids(writes.get(j["job_id"], set()))})
    for d in datasets:
        schema, _, name = d["name"].rpartition(".")
        if d["node_type"] not in ("table", "view") or not schema or not name:
            schema, name = d["namespace"], d["name"]
        kind = "View" if d["node_type"] == "view" else "Table"
        model = "Dimension" if name.startswith("Dim") else "Fact" if name.startswith("Fact") else "Other"
        out.append({"id": ids[d["dataset_id"]], "name": name, "schema": schema, "object_type": kind,
                    "description": d.get("description") or "", "data_model_type": model,
                    "inputs": _sorted_ids(writers.get(d["dataset_id"], set())), "outputs": []})
    return out


def _sorted_ids(refs: set[str]) -> list[str]:
    return sorted(refs, key=lambda r: int(r[5:]))


def to_networkx(snap: GraphSnapshot) -> Any:
    """A ``networkx.MultiDiGraph``: datasets and jobs as nodes, every edge keyed by its edge_id."""
    import networkx as nx

    g = nx.MultiDiGraph(id="lineage")
    for d in snap.datasets:
        g.add_node(d["dataset_id"], **_clean({
            "kind": "dataset", "type": d["node_type"], "namespace": d["namespace"], "name": d["name"],
            "qualified_name": d["qualified_name"], "owner": d.get("owner"), "description": d.get("description"),
            "is_placeholder": d["is_placeholder"], "created_at": utc_iso(d["first_seen"]),
            "updated_at": utc_iso(d["last_seen"])}))
    for j in snap.jobs:
        g.add_node(j["job_id"], **_clean({
            "kind": "job", "type": j.get("job_type") or "job", "namespace": j["namespace"], "name": j["name"],
            "qualified_name": j["qualified_name"], "owners": json.dumps(j.get("owners") or []),
            "tracing": json.dumps(j.get("tracing") or {}, sort_keys=True), "is_placeholder": j["is_placeholder"],
            "created_at": utc_iso(j["first_seen"]), "updated_at": utc_iso(j["last_seen"])}))
    for e in snap.edges:
        src, tgt = snap.canonical(e["source_node_id"]), snap.canonical(e["target_node_id"])
        for node in (src, tgt):
            if node not in g:
                g.add_node(node, kind="unknown", is_placeholder=True)
        g.add_edge(src, tgt, key=e["edge_id"], **_clean({
            "kind": e["kind"], "type": e["edge_type"], "job_id": e.get("job_id"),
            "transformation": json.dumps(e.get("transformation") or {}, sort_keys=True),
            "created_at": utc_iso(e["first_seen"]), "last_seen": utc_iso(e["last_seen"]),
            "valid_to": utc_iso(e.get("valid_to"))}))
    return g


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


# -- writing ----------------------------------------------------------------------------------

@contextmanager
def _open_text(output: str | None, gz: bool) -> Iterator[IO[str]]:
    if output in (None, "-"):
        if gz:
            with gzip_module.GzipFile(fileobj=sys.stdout.buffer, mode="wb") as raw, \
                    io.TextIOWrapper(raw, encoding="utf-8") as text:
                yield text
        else:
            yield sys.stdout
        return
    path = Path(output)  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    opener = (lambda p: gzip_module.open(p, "wt", encoding="utf-8")) if gz else \
        (lambda p: open(p, "w", encoding="utf-8"))
    try:
        with opener(tmp) as fh:
            yield fh
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def iter_events(conn: Any, as_of: datetime | None = None, page: int = 2000) -> Iterator[dict[str, Any]]:
    """The raw events (payloads) in event-time order, through a server-side cursor."""
    sql = "SELECT payload FROM lineage_events" + ("" if as_of is None else " WHERE event_time <= %(t)s") + \
          " ORDER BY event_time, event_hash"
    with conn.transaction(), conn.cursor(name=f"export_{uuid.uuid4().hex[:8]}") as cur:
        cur.itersize = page
        cur.execute(sql, {"t": as_of})
        for (payload,) in cur:
            yield json.loads(payload) if isinstance(payload, str) else payload  # text since migration 005


def export(fmt: str, conn_or_dsn: Any, output: str | None = None, as_of: datetime | None = None,
           gzip: bool = False, environment: str = "prod") -> ExportResult:
    """Write the graph in format ``fmt`` to ``output`` (a file, ``-``/None for stdout, a dir for parquet)."""
    if fmt not in FORMATS:
        raise ConfigurationError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    if as_of is not None and as_of.tzinfo is None:
        raise ConfigurationError("--as-of needs a timezone, e.g. 2026-01-31T00:00:00Z")
    if fmt == "parquet":
        if gzip:
            raise ConfigurationError("--gzip does not apply to parquet (its files are zstd-compressed)")
        if output in (None, "-"):
            raise ConfigurationError("--format parquet writes a directory: pass --output DIR")
        from .parquet import ParquetGraphStore

        counts = ParquetGraphStore(output).write_all(conn_or_dsn, as_of=as_of)  # type: ignore[arg-type]
        return ExportResult(fmt, str(output), sum(counts.values()), counts=counts)
    conn, owned = connect(conn_or_dsn)
    try:
        target = str(output or "-")
        if fmt == "jsonl":
            count = 0
            with _open_text(output, gzip) as fh:
                for payload in iter_events(conn, as_of):
                    fh.write(json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True))
                    fh.write("\n")
                    count += 1
            return ExportResult(fmt, target, count)
        snap = load_snapshot(conn, as_of=as_of)
        if fmt == "wia-json":
            doc = wia_document(snap, environment=environment)
            violations = validate_wia_graph(doc)
            with _open_text(output, gzip) as fh:
                json.dump(doc, fh, ensure_ascii=False, indent=2)
                fh.write("\n")
            counts = {k: len(doc[k]) for k in ("nodes", "edges", "column_lineage", "provenance", "quality")}
            return ExportResult(fmt, target, len(doc["nodes"]), violations, counts)
        if fmt == "object-array":
            data = object_array_document(snap)
            with _open_text(output, gzip) as fh:
                json.dump(data, fh, ensure_ascii=False, indent=2)
                fh.write("\n")
            return ExportResult(fmt, target, len(data), object_array_violations(data))
        import networkx as nx

        graph = to_networkx(snap)
        buf = io.BytesIO()
        nx.write_graphml(graph, buf, encoding="utf-8")
        with _open_text(output, gzip) as fh:
            fh.write(buf.getvalue().decode("utf-8"))
        return ExportResult(fmt, target, graph.number_of_nodes(),
                            counts={"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges()})
    finally:
        if owned:
            conn.close()
