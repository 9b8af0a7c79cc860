"""Our own JSON read API under ``/api/graph`` (contract: docs/HTTP_GRAPH_API.md).

Handlers hold no SQL: search and node detail come from :mod:`sink.catalog`, the bounded lineage around a
node from :mod:`sink.neighbourhood` (at a dataset version: the version walk of :mod:`sink.versions`), routes,
impact and ancestors from :class:`sink.queries.LineageQueries`.
Errors: 404 ``{"detail": ...}`` for an unknown node, 400 for bad parameters (and for an ambiguous name).
Every list is paginated (``limit``, ``offset``, ``next_offset``) and every traversal bounded (depth,
budget, route count).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import get_conn, require_read_key

__all__ = ["router"]

router = APIRouter(prefix="/api/graph", tags=["graph"], dependencies=[Depends(require_read_key)])

T = TypeVar("T")
Conn = Annotated[Any, Depends(get_conn)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class SearchResult(_Open):
    id: str
    type: Literal["dataset", "job", "column"]
    namespace: str
    name: str
    qualified_name: str
    column: str | None
    score: float
    label: str
    alias: str | None = None


class SearchResponse(BaseModel):
    results: list[SearchResult]
    next_offset: int | None


class SchemaField(_Open):
    name: str | None
    type: str | None
    description: str | None
    nullable: bool | None


class Run(_Open):
    run_id: str
    state: str | None
    started_at: str | None
    ended_at: str | None
    duration_s: float | None


class NodeDetail(_Open):
    id: str
    type: Literal["dataset", "job", "column"]
    namespace: str
    name: str
    qualified_name: str
    label: str
    placeholder: bool
    schema_: list[SchemaField] = Field(alias="schema")
    owners: list[str]
    tags: list[str]
    versions: list[dict[str, Any]]
    runs: list[Run]
    quality: list[dict[str, Any]]
    provenance: list[dict[str, Any]]
    aliases: list[str]
    sql: str | None
    source_code_location: dict[str, Any] | None
    job_type: dict[str, Any] | None
    constraints: dict[str, Any] | None

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class LineageNodeOut(_Open):
    id: str
    type: Literal["dataset", "job", "column"]
    namespace: str
    name: str
    qualified_name: str
    label: str
    dataset_id: str | None
    column: str | None
    depth: int
    expandable: bool
    hidden_neighbours: int
    placeholder: bool
    last_run_state: str | None
    anomaly: bool
    version: str | None = Field(description="a dataset version node: the version (None for a run's own version)")
    version_id: str | None = Field(description="a dataset version node: its version id (the id is "
                                               "<dataset id>@<version id>, dataset_id the dataset)")


class LineageEdgeOut(_Open):
    id: str
    source: str
    target: str
    type: str
    transformation: str | None
    job: str | None


class LineageResponse(BaseModel):
    root: str
    truncated: bool
    nodes: list[LineageNodeOut]
    edges: list[LineageEdgeOut]


class RoutesResponse(BaseModel):
    routes: list[list[str]]
    swapped: bool
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]


class ImpactResponse(BaseModel):
    root: dict[str, Any]
    datasets: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    owners: list[dict[str, Any]]


class AncestorOut(BaseModel):
    version_id: str | None
    version: str | None
    event_time: str | None
    run_id: str | None
    steps: int


class AncestorsResponse(BaseModel):
    root: dict[str, Any]
    root_version: str | None
    within: dict[str, Any]
    ancestors: list[AncestorOut]


class RunsResponse(BaseModel):
    runs: list[Run]
    next_offset: int | None


class EventOut(_Open):
    event_time: str | None
    event_type: str | None
    job: str | None
    run_id: str | None
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]


class EventsResponse(BaseModel):
    events: list[EventOut]
    next_offset: int | None


class ErdResponse(BaseModel):
    tables: list[dict[str, Any]]
    relations: list[dict[str, Any]]
    next_offset: int | None


def _answer(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call the library; its errors become 404 (unknown node) or 400 (a question that cannot be asked)."""
    from sink.queries import NodeNotFoundError, QueryError

    try:
        return fn(*args, **kwargs)
    except NodeNotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    except QueryError as exc:
        if exc.code in ("query.connect", "query.no_graph"):
            raise HTTPException(503, str(exc)) from exc
        raise HTTPException(400, str(exc)) from exc


def _json(doc: Any) -> Response:
    """The hot routes' answer, serialised by orjson without a second validation pass (their response models
    are still in the OpenAPI document, and tests check the documents against them)."""
    import orjson

    return Response(orjson.dumps(doc), media_type="application/json")


def _parse_time(value: str | None) -> datetime | None:
    from sink.queries import QueryError, parse_as_of

    try:
        return parse_as_of(value, "as_of")
    except QueryError as exc:
        raise HTTPException(400, str(exc)) from exc


#: Bounds are checked by the library (400 with its message), not by FastAPI (whose 422 the contract does not
#: use); only a value of the wrong type (``depth=abc``) is FastAPI's 422.
Limit = int
Offset = int
Version = Annotated[str | None, Query(description="walk from this version of the dataset `node` (a version string or "
                                                  "a version id, as `lineage upstream --version`); a node named at "
                                                  "a version (`ns/<object_id>:<v>`, `ns/name@v`) needs none")]


@router.get("/search", response_model=None, responses={200: {"model": SearchResponse}},
            summary="find datasets, jobs and columns by name")
def search(conn: Conn, q: str,
           type: str | None = None, limit: Limit = 20,
           offset: Offset = 0) -> Response:
    from sink.catalog import search as run

    if len(q) > 500:
        raise HTTPException(400, "q is longer than 500 characters")
    page = _answer(run, conn, q, types=[type] if type else None, limit=limit, offset=offset)
    return _json({"results": [h.to_dict() for h in page.results], "next_offset": page.next_offset})


@router.get("/node", response_model=NodeDetail, response_model_by_alias=True,
            summary="everything the graph knows about one node")
def node(conn: Conn, node: str) -> dict[str, Any]:
    from sink.catalog import show

    return _answer(show, conn, node)


@router.get("/lineage", response_model=None, responses={200: {"model": LineageResponse}},
            summary="the bounded lineage around a node")
def lineage(conn: Conn, node: str,
            direction: str = "both", depth: int = 3, level: str = "dataset", as_of: str | None = None,
            budget: int = 500, version: Version = None) -> Response:
    from sink.neighbourhood import neighbourhood

    if not 1 <= depth <= 10:
        raise HTTPException(400, f"depth must be between 1 and 10, not {depth}")
    found = _answer(neighbourhood, conn, node, direction=direction, depth=depth, level=level,
                    as_of=_parse_time(as_of), budget=budget, version=version)
    return _json({"root": found.root, "truncated": found.truncated, "nodes": found.nodes, "edges": found.edges})


def _node_out(n: Any) -> dict[str, Any]:
    return {"id": n.key, "type": n.kind, "namespace": n.namespace, "name": n.name, "label": n.label,
            "column": n.column, "placeholder": n.is_placeholder, "owners": list(n.owners),
            "version": n.version, "version_id": n.version_id}


@router.get("/routes", response_model=RoutesResponse, summary="all routes between two nodes (LineageRoute)")
def routes(conn: Conn, from_: Annotated[str, Query(alias="from")],
           to: str, max_length: int = 10,
           as_of: str | None = None, limit: int = 100) -> dict[str, Any]:
    from sink.queries import LineageQueries

    if not 1 <= max_length <= 20 or not 1 <= limit <= 500:
        raise HTTPException(400, "max_length must be between 1 and 20 and limit between 1 and 500")
    result = _answer(LineageQueries(conn).routes, from_, to, max_length=max_length, as_of=_parse_time(as_of),
                     limit=limit)
    nodes = {n.node_id: _node_out(n) for route in result.routes for n in route}
    edges = {(a.node_id, b.node_id): {"id": f"{a.node_id}->{b.node_id}", "source": a.node_id, "target": b.node_id,
                                      "type": "reads" if b.kind == "job" else "writes"}
             for route in result.routes for a, b in zip(route, route[1:], strict=False)}
    return {"routes": [[n.node_id for n in r] for r in result.routes], "swapped": result.swapped,
            "nodes": list(nodes.values()), "edges": list(edges.values())}


@router.get("/impact", response_model=ImpactResponse, summary="what a change to a node affects, and who owns it")
def impact(conn: Conn, node: str, depth: int = 10,
           as_of: str | None = None, version: Version = None) -> dict[str, Any]:
    from sink.queries import LineageQueries

    if not 1 <= depth <= 20:
        raise HTTPException(400, f"depth must be between 1 and 20, not {depth}")
    result = _answer(LineageQueries(conn).impact, node, depth=depth, as_of=_parse_time(as_of), version=version)
    return {"root": _node_out(result.root),
            "datasets": [{**_node_out(h.node), "depth": h.level} for h in result.datasets],
            "jobs": [{**_node_out(h.node), "depth": h.level} for h in result.jobs],
            "owners": [{"owner": o, "nodes": labels} for o, labels in result.owners.items()]}


@router.get("/ancestors", response_model=AncestorsResponse,
            summary="the revisions of `within` a revision of `node` derives from (Ancestors)")
def ancestors(conn: Conn, node: str, within: str, version: Annotated[str | None, Query(
        description="the revision of `node` (a version string or id; default: its latest, or the version "
                    "its name carries)")] = None) -> dict[str, Any]:
    from sink.queries import LineageQueries

    result = _answer(LineageQueries(conn).ancestors, node, within, version=version)
    return {"root": _node_out(result.root), "root_version": result.root_version, "within": _node_out(result.within),
            "ancestors": [{"version_id": a.version_id, "version": a.version, "run_id": a.run_id, "steps": a.steps,
                           "event_time": a.event_time.isoformat() if a.event_time else None}
                          for a in result.ancestors]}


@router.get("/runs", response_model=RunsResponse, summary="runs of a job, newest first")
def runs(conn: Conn, job: str, limit: Limit = 20, offset: Offset = 0) -> dict[str, Any]:
    from sink.catalog import job_runs

    found, next_offset = _answer(job_runs, conn, job, limit=limit, offset=offset)
    return {"runs": found, "next_offset": next_offset}


@router.get("/events", response_model=EventsResponse, summary="the raw events most recently committed")
def events(conn: Conn, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
    from sink.catalog import recent_events

    found, next_offset = _answer(recent_events, conn, limit=limit, offset=offset)
    return {"events": found, "next_offset": next_offset}


@router.get("/erd", response_model=ErdResponse, summary="tables, columns and foreign keys (ERD view)")
def erd(conn: Conn, namespace: str | None = None, schema: str | None = None, source_file: str | None = None,
        limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
    from sink.catalog import erd as run

    return _answer(run, conn, namespace=namespace, schema=schema, source_file=source_file, limit=limit, offset=offset)
