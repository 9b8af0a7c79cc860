"""Marquez-compatible read API (Marquez's ``spec/openapi.yml`` shapes), so ``marquez-python`` and tools
built on Marquez's API work against the lineage graph.

Routes (all ``GET``, under ``/api/v1``): ``/namespaces``, ``/namespaces/{ns}``, ``/namespaces/{ns}/datasets``,
``.../datasets/{name}``, ``.../datasets/{name}/versions``, ``.../versions/{version}``,
``/namespaces/{ns}/jobs``, ``.../jobs/{name}``, ``.../jobs/{name}/runs``, ``/jobs/runs/{id}``,
``/lineage?nodeId=dataset:{ns}:{name}&depth=N``, ``/column-lineage?nodeId=...&depth=N&withDownstream=``,
``/events/lineage`` (and ``/events``, what ``marquez-python``'s ``list_events`` calls). A ``/lineage``
answer holds at most :data:`MAX_GRAPH_NODES` nodes, the nearest to the start node. Names holding
``/`` are sent percent-encoded (:mod:`api.paths`).

Mapping from the graph: a dataset's ``type`` is ``DB_TABLE`` (``STREAM`` for stream nodes), its
``sourceName`` its namespace; versions are ``lineage_dataset_versions`` (id = Marquez's version UUID);
run states map START/RUNNING/OTHER -> RUNNING, COMPLETE -> COMPLETED, FAIL -> FAILED, ABORT -> ABORTED.
``facets`` of datasets, dataset versions, jobs and runs are read back from the stored events (the graph keeps
what it reads out of facets, not the facets): each facet as the newest of the node's latest events gave it
(:func:`sink.marquez_queries.dataset_facets` and its siblings, one query per page).
Writes of Marquez's old API (PUT datasets / jobs, run markers) are not served: use ``POST /api/v1/lineage``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

from api.deps import get_conn, require_read_key
from api.paths import name as _n
from sink import marquez_queries as mq

__all__ = ["router", "parse_node_id"]

router = APIRouter(prefix="/api/v1", tags=["marquez"], dependencies=[Depends(require_read_key)])

Conn = Annotated[Any, Depends(get_conn)]
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0)]

#: At most this many nodes in a /lineage answer (the nearest to the start node are kept).
MAX_GRAPH_NODES = 2000
_RUN_STATES = {"START": "RUNNING", "RUNNING": "RUNNING", "OTHER": "RUNNING", "COMPLETE": "COMPLETED",
               "FAIL": "FAILED", "ABORT": "ABORTED"}


def _json(body: Any) -> Response:
    import orjson

    return Response(orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), media_type="application/json")


def _ts(value: datetime | None) -> str | None:
    return value.astimezone().strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value is not None else None


def _not_found(what: str) -> HTTPException:
    return HTTPException(404, f"{what} not found")


# -- shapes ---------------------------------------------------------------------------------------

def _namespace(r: dict[str, Any]) -> dict[str, Any]:
    return {"name": r["name"], "createdAt": _ts(r["created_at"]), "updatedAt": _ts(r["updated_at"]),
            "ownerName": "anonymous", "description": None, "isHidden": False}


def _fields(fields: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{"name": f.get("name"), "type": f.get("type") or "UNKNOWN", "tags": [], "description": f.get("description")}
            for f in fields or [] if isinstance(f, dict)]


def _tags(tags: Any) -> list[str]:
    return [str(t.get("key", t.get("name", t)) if isinstance(t, dict) else t) for t in tags or []]


def _dataset(r: dict[str, Any], facets: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": {"namespace": r["namespace"], "name": r["name"]},
        "type": "STREAM" if r["node_type"] == "stream" else "DB_TABLE",
        "name": r["name"], "physicalName": r["name"], "namespace": r["namespace"], "sourceName": r["namespace"],
        "createdAt": _ts(r["first_seen"]), "updatedAt": _ts(r["last_seen"]),
        "fields": _fields(r["fields"]), "tags": _tags(r["tags"]), "lastModifiedAt": _ts(r["last_modified_at"]),
        "lastLifecycleState": None, "description": r["description"], "facets": facets,
        "currentVersion": str(r["current_version"]) if r["current_version"] else None, "deleted": False,
    }


def _datasets(conn: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    facets = mq.dataset_facets(conn, [str(r["dataset_id"]) for r in rows])
    return [_dataset(r, facets.get(str(r["dataset_id"]), {})) for r in rows]


def _dataset_version(r: dict[str, Any], run: dict[str, Any] | None, facets: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": {"namespace": r["namespace"], "name": r["name"], "version": str(r["version_id"])},
        "type": "STREAM" if r["node_type"] == "stream" else "DB_TABLE",
        "name": r["name"], "physicalName": r["name"], "namespace": r["namespace"], "sourceName": r["namespace"],
        "createdAt": _ts(r["event_time"]), "version": str(r["version_id"]),
        "fields": _fields(r["fields"] if r["fields"] is not None else r["dataset_fields"]),
        "tags": _tags(r["tags"]), "description": r["description"], "lifecycleState": None,
        "createdByRun": run, "facets": facets,
    }


def _run(r: dict[str, Any], io: list[dict[str, Any]], facets: dict[str, Any]) -> dict[str, Any]:
    run_id = str(r["run_id"])
    mine = [x for x in io if x["run_id"] == run_id]
    return {
        "id": run_id, "createdAt": _ts(r["first_seen"]), "updatedAt": _ts(r["last_seen"]),
        "nominalStartTime": _ts(r["nominal_start"]), "nominalEndTime": _ts(r["nominal_end"]),
        "state": _RUN_STATES.get(r["state"] or "", "NEW"), "startedAt": _ts(r["started_at"]),
        "endedAt": _ts(r["ended_at"]), "durationMs": r["duration_ms"], "args": {},
        "jobVersion": {"namespace": r["job_namespace"], "name": r["job_name"],
                       "version": str(r["job_version_id"]) if r["job_version_id"] else None},
        "inputDatasetVersions": [_io_version(x) for x in mine if x["direction"] == "input"],
        "outputDatasetVersions": [_io_version(x) for x in mine if x["direction"] == "output"],
        "context": {}, "facets": facets,
    }


def _io_version(x: dict[str, Any]) -> dict[str, Any]:
    return {"datasetVersionId": {"namespace": x["namespace"], "name": x["name"], "version": x["version"]},
            "facets": {}}


def _runs(conn: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = [str(r["run_id"]) for r in rows]
    io = mq.run_io(conn, ids) if rows else []
    facets = mq.run_facets(conn, ids)
    return [_run(r, io, facets.get(run_id, {})) for r, run_id in zip(rows, ids, strict=True)]


def _jobs(conn: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = [str(r["job_id"]) for r in rows]
    datasets = mq.job_datasets(conn, ids) if ids else []
    latest = _runs(conn, mq.latest_runs(conn, ids)) if ids else []
    facets = mq.job_facets(conn, ids)
    by_job: dict[str, list[dict[str, Any]]] = {}
    for run in latest:
        by_job.setdefault(f'{run["jobVersion"]["namespace"]}\x00{run["jobVersion"]["name"]}', []).append(run)
    out = []
    for r in rows:
        jid = str(r["job_id"])
        mine = [d for d in datasets if d["job_id"] == jid]
        runs = by_job.get(f'{r["namespace"]}\x00{r["name"]}', [])
        simple = r["name"].rsplit(".", 1)[-1]
        out.append({
            "id": {"namespace": r["namespace"], "name": r["name"]}, "type": "BATCH", "name": r["name"],
            "simpleName": simple, "parentJobName": None, "parentJobUuid": None,
            "createdAt": _ts(r["first_seen"]), "updatedAt": _ts(r["last_seen"]), "namespace": r["namespace"],
            "inputs": [{"namespace": d["namespace"], "name": d["name"]} for d in mine if d["direction"] == "input"],
            "outputs": [{"namespace": d["namespace"], "name": d["name"]} for d in mine if d["direction"] == "output"],
            "location": r["source_url"], "context": {"sql": r["sql"]} if r["sql"] else {},
            "description": r["description"], "latestRun": runs[0] if runs else None, "latestRuns": runs,
            "facets": facets.get(jid, {}),
            "currentVersion": str(r["current_version"]) if r["current_version"] else None,
            "labels": [], "tags": [],
        })
    return out


# -- namespaces, datasets -------------------------------------------------------------------------

@router.get("/namespaces", summary="list namespaces (Marquez NamespaceList)")
def list_namespaces(conn: Conn, limit: Limit = 100, offset: Offset = 0) -> Response:
    rows, total = mq.list_namespaces(conn, limit, offset)
    return _json({"namespaces": [_namespace(r) for r in rows], "totalCount": total})


@router.get("/namespaces/{namespace}", summary="one namespace (Marquez Namespace)")
def get_namespace(namespace: str, conn: Conn) -> Response:
    row = mq.get_namespace(conn, _n(namespace))
    if row is None:
        raise _not_found(f"namespace {_n(namespace)!r}")
    return _json(_namespace(row))


@router.get("/namespaces/{namespace}/datasets", summary="list datasets (Marquez DatasetList)")
def list_datasets(namespace: str, conn: Conn, limit: Limit = 100, offset: Offset = 0) -> Response:
    rows, total = mq.list_datasets(conn, _n(namespace), limit, offset)
    return _json({"datasets": _datasets(conn, rows), "totalCount": total})


@router.get("/namespaces/{namespace}/datasets/{dataset}/versions/{version}",
            summary="one dataset version (Marquez DatasetVersion)")
def get_dataset_version(namespace: str, dataset: str, version: str, conn: Conn) -> Response:
    row = mq.get_dataset_version(conn, _n(namespace), _n(dataset), _n(version))
    if row is None:
        raise _not_found(f"version {_n(version)!r} of dataset {_n(namespace)}/{_n(dataset)}")
    facets = mq.version_facets(conn, [str(row["version_id"])])
    return _json(_dataset_version(row, _created_by(conn, row), facets.get(str(row["version_id"]), {})))


def _created_by(conn: Any, row: dict[str, Any]) -> dict[str, Any] | None:
    run = mq.get_run(conn, str(row["run_id"])) if row["run_id"] else None
    return _runs(conn, [run])[0] if run else None


@router.get("/namespaces/{namespace}/datasets/{dataset}/versions",
            summary="list dataset versions, newest first (Marquez DatasetVersionList)")
def list_dataset_versions(namespace: str, dataset: str, conn: Conn, limit: Limit = 100,
                          offset: Offset = 0) -> Response:
    rows, total = mq.list_dataset_versions(conn, _n(namespace), _n(dataset), limit, offset)
    if not rows and mq.get_dataset(conn, _n(namespace), _n(dataset)) is None:
        raise _not_found(f"dataset {_n(namespace)}/{_n(dataset)}")
    facets = mq.version_facets(conn, [str(r["version_id"]) for r in rows])
    return _json({"versions": [_dataset_version(r, None, facets.get(str(r["version_id"]), {})) for r in rows],
                  "totalCount": total})


@router.get("/namespaces/{namespace}/datasets/{dataset}", summary="one dataset (Marquez Dataset)")
def get_dataset(namespace: str, dataset: str, conn: Conn) -> Response:
    row = mq.get_dataset(conn, _n(namespace), _n(dataset))
    if row is None:
        raise _not_found(f"dataset {_n(namespace)}/{_n(dataset)}")
    return _json(_datasets(conn, [row])[0])


# -- jobs, runs -----------------------------------------------------------------------------------

@router.get("/namespaces/{namespace}/jobs", summary="list jobs (Marquez JobList)")
def list_jobs(namespace: str, conn: Conn, limit: Limit = 100, offset: Offset = 0) -> Response:
    rows, total = mq.list_jobs(conn, _n(namespace), limit, offset)
    return _json({"jobs": _jobs(conn, rows), "totalCount": total})


@router.get("/namespaces/{namespace}/jobs/{job}/runs", summary="list a job's runs, newest first (Marquez RunList)")
def list_runs(namespace: str, job: str, conn: Conn, limit: Limit = 100, offset: Offset = 0) -> Response:
    if mq.get_job(conn, _n(namespace), _n(job)) is None:
        raise _not_found(f"job {_n(namespace)}/{_n(job)}")
    rows, total = mq.list_runs(conn, _n(namespace), _n(job), limit, offset)
    return _json({"runs": _runs(conn, rows), "totalCount": total})


@router.get("/namespaces/{namespace}/jobs/{job}", summary="one job (Marquez Job)")
def get_job(namespace: str, job: str, conn: Conn) -> Response:
    row = mq.get_job(conn, _n(namespace), _n(job))
    if row is None:
        raise _not_found(f"job {_n(namespace)}/{_n(job)}")
    return _json(_jobs(conn, [row])[0])


@router.get("/jobs/runs/{run_id}", summary="one run (Marquez Run)")
def get_run(run_id: uuid.UUID, conn: Conn) -> Response:
    row = mq.get_run(conn, str(run_id))
    if row is None:
        raise _not_found(f"run {run_id}")
    return _json(_runs(conn, [row])[0])


# -- events ---------------------------------------------------------------------------------------

def _events(conn: Any, limit: int, offset: int, sort: str, before: datetime | None, after: datetime | None,
            namespace: str | None) -> Response:
    import orjson

    texts, total = mq.list_events(conn, limit=limit, offset=offset, ascending=sort == "asc", before=before,
                                  after=after, namespace=namespace)
    events = b"[" + b",".join(t.encode("utf-8") for t in texts) + b"]"  # stored canonical JSON, passed through
    return Response(b'{"events":' + events + b',"totalCount":' + orjson.dumps(total) + b"}",
                    media_type="application/json")


@router.get("/events/lineage", summary="stored OpenLineage events (Marquez LineageEventList)")
def list_lineage_events(conn: Conn, limit: Limit = 100, offset: Offset = 0,
                        sortDirection: Literal["asc", "desc"] = "desc",  # noqa: N803 - Marquez's parameter name
                        before: datetime | None = None, after: datetime | None = None) -> Response:
    return _events(conn, limit, offset, sortDirection, before, after, None)


@router.get("/events", summary="stored events (marquez-python list_events)", include_in_schema=False)
def list_events(conn: Conn, limit: Limit = 100, offset: Offset = 0) -> Response:
    return _events(conn, limit, offset, "desc", None, None, None)


@router.get("/events/{namespace}", summary="stored events of one job namespace (marquez-python list_events)",
            include_in_schema=False)
def list_namespace_events(namespace: str, conn: Conn, limit: Limit = 100, offset: Offset = 0) -> Response:
    return _events(conn, limit, offset, "desc", None, None, _n(namespace))


# -- lineage graphs -------------------------------------------------------------------------------

def parse_node_id(node_id: str) -> tuple[str, str, str, str | None]:
    """Marquez node ids -> ``(kind, namespace, name, field)``: ``dataset:{ns}:{name}``, ``job:{ns}:{name}``,
    ``datasetField:{ns}:{name}:{field}`` (a ``#version`` suffix is ignored). Namespaces hold ``:``
    (``postgres://host:5432``), so the split is at the last ``:`` (and, for fields, the one before)."""
    kind, sep, rest = node_id.partition(":")
    if not sep or kind not in ("dataset", "job", "datasetField"):
        raise HTTPException(400, f"nodeId {node_id!r} must be dataset:NS:NAME, job:NS:NAME or datasetField:NS:NAME:FIELD")
    rest = rest.split("#", 1)[0]
    field = None
    if kind == "datasetField":
        rest, _, field = rest.rpartition(":")
    namespace, _, name = rest.rpartition(":")
    if not namespace or not name or (kind == "datasetField" and not field):
        raise HTTPException(400, f"nodeId {node_id!r} has no namespace, name or field")
    return kind, namespace, name, field


def _queries(conn: Any) -> Any:
    from sink.queries import LineageQueries

    return LineageQueries(conn)


def _walk_both(conn: Any, label: str, depth: int) -> tuple[Any, list[Any], list[Any]]:
    from sink.queries import NodeNotFoundError, QueryError

    q = _queries(conn)
    try:
        up = q.upstream(label, depth=depth)
        down = q.downstream(label, depth=depth)
    except NodeNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    except QueryError as exc:
        raise HTTPException(400, str(exc)) from exc
    hits = {up.root.node_id: up.root}
    for hit in sorted([*up.hits, *down.hits], key=lambda h: h.steps):  # nearest first, within the budget
        if len(hits) >= MAX_GRAPH_NODES:
            break
        hits.setdefault(hit.node.node_id, hit.node)
    edges = {(e.source_id, e.target_id): e for e in [*up.edges, *down.edges] if e.kind in ("reads", "writes")}
    return up.root, list(hits.values()), list(edges.values())


@router.get("/lineage", summary="the lineage graph around a node (Marquez LineageGraph)")
def get_lineage(conn: Conn, nodeId: str, depth: Annotated[int, Query(ge=1, le=50)] = 20) -> Response:  # noqa: N803
    from sink.queries import MAX_DEPTH

    kind, namespace, name, _ = parse_node_id(nodeId)
    if kind == "datasetField":
        raise HTTPException(400, "use /api/v1/column-lineage for datasetField nodes")
    label = f"job:{namespace}/{name}" if kind == "job" else f"{namespace}/{name}"
    _root, nodes, edges = _walk_both(conn, label, min(depth, MAX_DEPTH))
    ids = {n.node_id: f"{'job' if n.kind == 'job' else 'dataset'}:{n.namespace}:{n.name}" for n in nodes}
    ins: dict[str, list[dict[str, str]]] = {}
    outs: dict[str, list[dict[str, str]]] = {}
    for e in edges:
        if e.source_id in ids and e.target_id in ids:
            edge = {"origin": ids[e.source_id], "destination": ids[e.target_id]}
            outs.setdefault(e.source_id, []).append(edge)
            ins.setdefault(e.target_id, []).append(edge)
    data: dict[str, Any] = {}
    dataset_rows = mq.get_datasets(conn, [n.node_id for n in nodes if n.kind == "dataset"])
    for r, shaped in zip(dataset_rows, _datasets(conn, dataset_rows), strict=True):
        data[str(r["dataset_id"])] = shaped
    job_rows = mq.get_jobs(conn, [n.node_id for n in nodes if n.kind == "job"])
    for r, shaped in zip(job_rows, _jobs(conn, job_rows), strict=True):
        data[str(r["job_id"])] = shaped
    graph = [{"id": ids[n.node_id], "type": "JOB" if n.kind == "job" else "DATASET",
              "data": data.get(n.node_id, {"namespace": n.namespace, "name": n.name}),
              "inEdges": sorted(ins.get(n.node_id, []), key=lambda e: e["origin"]),
              "outEdges": sorted(outs.get(n.node_id, []), key=lambda e: e["destination"])}
             for n in sorted(nodes, key=lambda n: ids[n.node_id])]
    return _json({"graph": graph})


@router.get("/column-lineage", summary="column lineage around a dataset, field or job (Marquez LineageGraph)")
def get_column_lineage(conn: Conn, nodeId: str, depth: Annotated[int, Query(ge=1, le=100)] = 20,  # noqa: N803
                       withDownstream: bool = False) -> Response:  # noqa: N803
    from sink.ids import dataset_id, job_id

    kind, namespace, name, field = parse_node_id(nodeId)
    if kind == "job":
        rows = mq.job_datasets(conn, [job_id(namespace, name)])
        roots: list[tuple[str, str | None]] = [(dataset_id(r["namespace"], r["name"]), None) for r in rows if r["direction"] == "output"]
    else:
        if mq.get_dataset(conn, namespace, name) is None:
            raise _not_found(f"dataset {namespace}/{name}")
        roots = [(dataset_id(namespace, name), field)]
    edges: dict[tuple[str, ...], dict[str, Any]] = {}
    for ds, col in roots:
        for e in mq.column_lineage_edges(conn, ds, col, depth, withDownstream):
            edges[(e["source_id"], e["source_column"], e["target_id"], e["target_column"])] = e
    return _json({"graph": _column_graph(conn, list(edges.values()))})


def _column_graph(conn: Any, edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    types: dict[tuple[str, str], str] = {}
    for ds, fields in mq.dataset_fields(conn, sorted({e["source_id"] for e in edges} | {e["target_id"] for e in edges})
                                        ).items():
        for f in fields:
            if isinstance(f, dict) and f.get("name"):
                types[(ds, f["name"])] = f.get("type") or ""
    nodes: dict[str, dict[str, Any]] = {}

    def node(ds: str, ns: str, dataset: str, column: str) -> dict[str, Any]:
        key = f"datasetField:{ns}:{dataset}:{column}"
        if key not in nodes:
            nodes[key] = {"id": key, "type": "DATASET_FIELD",
                          "data": {"namespace": ns, "dataset": dataset, "datasetVersion": None, "field": column,
                                   "fieldType": types.get((ds, column), ""), "transformationDescription": None,
                                   "transformationType": None, "inputFields": []},
                          "inEdges": [], "outEdges": []}
        return nodes[key]

    for e in edges:
        src = node(e["source_id"], e["source_namespace"], e["source_name"], e["source_column"])
        dst = node(e["target_id"], e["target_namespace"], e["target_name"], e["target_column"])
        # Marquez's ColumnLineageService: each list's edges start at the node that holds them
        dst["inEdges"].append({"origin": dst["id"], "destination": src["id"]})
        src["outEdges"].append({"origin": src["id"], "destination": dst["id"]})
        transformation = (e["transformation_type"] or "").upper()
        dst["data"]["inputFields"].append({
            "namespace": e["source_namespace"], "dataset": e["source_name"], "datasetVersion": None,
            "field": e["source_column"], "transformationDescription": e["transformation_logic"],
            "transformationType": "DIRECT" if transformation == "DIRECT" else "INDIRECT"})
    for n in nodes.values():
        first = n["data"]["inputFields"][:1]
        if first:
            n["data"]["transformationDescription"] = first[0]["transformationDescription"]
            n["data"]["transformationType"] = first[0]["transformationType"]
    return [nodes[k] for k in sorted(nodes)]
