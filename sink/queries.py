"""Graph questions over the PostgreSQL lineage graph: upstream, downstream, impact, routes, ancestors.

Every traversal is one recursive CTE (the same SQL is written out in docs/QUERIES.md for psql).

The graph walked
    Job edges of ``lineage_edges``: ``kind = 'reads'`` (dataset -> job) and ``kind = 'writes'``
    (job -> dataset), so a walk alternates datasets and jobs, as the paper's ``LineageRoute``
    does. Dataset-to-dataset edges (``kind = 'dataset'``, the WIA §1.2 edges) are exported,
    not walked: they are the product of a job's reads and writes and would double every step.

Depth
    ``depth`` counts dataset-level hops: from a dataset, depth 1 is the jobs that wrote it
    and their inputs; from a job, depth 1 is its inputs (outputs downstream). A walk takes at
    most ``steps = 2 * depth - (1 if the start is a job else 0)`` edges, and a node reached
    after ``s`` steps has ``level = (s + 1 + j) // 2`` (``j`` = 1 for a job start, else 0).

Columns
    A ``#column`` node walks ``lineage_column_lineage`` instead; there ``depth`` counts column
    hops, and a hop made by a terminal job is listed but not walked past.

Cycles
    A job that reads and writes one table is a cycle. The walk's rows are ``(node, step)``
    combined with ``UNION`` (not ``UNION ALL``), so PostgreSQL drops a row equal to any row
    already produced: each node is expanded at most once per step, the work is bounded by
    ``steps x edges reached`` and no path is ever enumerated. Route enumeration, which must
    list paths, carries the path array and refuses a node already on it
    (``NOT next = ANY(path)``).

Terminal transforms (paper §3.4.4, §5.1.1)
    A job is terminal when its ``tracing`` JSON has ``terminal: true``, or ``reversible: false``
    together with ``privacy_preserving: true`` (also accepted: ``privacyPreserving``). With
    ``stop_at_terminal=True`` a walk reaches a terminal job (it is listed, ``terminal=True``)
    but does not continue through it. The start node is always expanded.

As of
    Without ``as_of`` the walk uses today's graph: edges with ``valid_to IS NULL``. With
    ``as_of = T`` it uses the edges valid at T: ``first_seen <= T AND (valid_to IS NULL OR
    valid_to > T)``, so an edge that became history still shows as of before.

Aliases
    A dataset whose ``alias_of`` is set (OpenLineage ``symlinks`` facet) is the same node as
    its canonical dataset: a start node resolves to the canonical id, edges stored against
    either id are followed, and nodes reached through an alias id are reported canonically.

Node syntax (:meth:`LineageQueries.resolve`)
    ``namespace/name`` or ``namespace:name`` (or the dataset's ``qualified_name``) for a
    dataset; ``job:namespace/name`` (or ``job:namespace:name``) for a job; ``<dataset>#column``
    for a column; a UUID (dataset, job) as well;
    ``<dataset id>@<version id>`` (a walk's :attr:`LineageNode.key`) for a dataset version.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from schemas.errors import LineageError

__all__ = [
    "LineageQueries",
    "LineageNode",
    "TraversalHit",
    "TraversalEdge",
    "TraversalResult",
    "ImpactResult",
    "RouteResult",
    "AncestorVersion",
    "AncestorsResult",
    "NodeNotFoundError",
    "AmbiguousNodeError",
    "QueryError",
    "TERMINAL_SQL",
    "is_terminal",
    "parse_as_of",
]

def parse_as_of(value: str | None, name: str = "as_of") -> datetime | None:
    """An ISO-8601 time with a zone (``Z`` or an offset), or None; raises :class:`QueryError` naming the
    parameter ``name`` for a bad or naive time (the CLI's ``--as-of``, the HTTP API's ``as_of``)."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise QueryError(f"{name} {value!r} is not an ISO-8601 time (e.g. 2026-01-31T00:00:00Z)") from exc
    if parsed.tzinfo is None:
        raise QueryError(f"{name} {value!r} needs a time zone (append Z for UTC)")
    return parsed


#: SQL predicate over a jobs row ``j``: the job is a terminal point of traversal.
TERMINAL_SQL = (
    "(coalesce(j.tracing->>'terminal', 'false') = 'true' OR "
    "(coalesce(j.tracing->>'reversible', '') = 'false' AND "
    "coalesce(j.tracing->>'privacy_preserving', j.tracing->>'privacyPreserving', '') = 'true'))"
)

MAX_DEPTH = 50

_UUID_NAME = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class QueryError(LineageError, ValueError):
    """A graph question that cannot be answered as asked (bad node syntax, bad depth)."""

    code = "query"


class NodeNotFoundError(QueryError, LookupError):
    """The node named is in no table of the graph."""

    code = "query.unknown_node"


class AmbiguousNodeError(QueryError):
    """The name matches several nodes; the message lists them (qualify it further)."""

    code = "query.ambiguous_node"


def is_terminal(tracing: dict[str, Any] | None) -> bool:
    """Python twin of :data:`TERMINAL_SQL`: ``terminal`` or (not ``reversible`` and ``privacy_preserving``)."""
    t = tracing or {}
    privacy = t.get("privacy_preserving", t.get("privacyPreserving"))
    return t.get("terminal") is True or (t.get("reversible") is False and privacy is True)


@dataclass(frozen=True)
class LineageNode:
    """A dataset, job or column of the graph."""

    node_id: str
    kind: str                      # dataset | job | column
    namespace: str
    name: str
    node_type: str = ""            # WIA node type for datasets, job type for jobs
    column: str | None = None
    is_placeholder: bool = False
    owners: tuple[str, ...] = ()
    version: str | None = None     # a dataset version (lineage_dataset_versions.version) ...
    version_id: str | None = None  # ... and its id: the node at that version

    @property
    def label(self) -> str:
        base = f"{self.namespace}/{self.name}"
        if self.kind == "job":
            return f"job:{base}"
        if self.version is not None:
            base = versioned_name(base, self.name, self.version)
        if self.column is not None:
            return f"{base}#{self.column}"
        return base

    @property
    def key(self) -> str:
        """The node's identity in a walk: ``node_id``, or ``node_id@version_id`` for a dataset version."""
        return self.node_id if self.version_id is None else f"{self.node_id}@{self.version_id}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["owners"] = list(self.owners)
        out["label"] = self.label
        return out


def versioned_name(base: str, name: str, version: str) -> str:
    """``base`` (``namespace/name``) at ``version`` as producers write it: ``<object_id>:<version>`` for an
    Evo object (a UUID name, seeds/evo-geoscience-object-lineage.md), else ``name@version``."""
    return f"{base}:{version}" if _UUID_NAME.match(name) else f"{base}@{version}"


@dataclass(frozen=True)
class TraversalHit:
    """One node reached by a walk: ``level`` dataset-level hops, ``steps`` edges from the start."""

    node: LineageNode
    level: int
    steps: int
    terminal: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node.to_dict(), "level": self.level, "steps": self.steps, "terminal": self.terminal}


@dataclass(frozen=True)
class TraversalEdge:
    """An edge the walk used, in data-flow direction (source feeds target)."""

    source_id: str
    target_id: str
    kind: str
    edge_type: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TraversalResult:
    """The answer to upstream / downstream: the nodes reached and the edges between them."""

    root: LineageNode
    direction: str
    depth: int
    as_of: datetime | None
    hits: list[TraversalHit] = field(default_factory=list)
    edges: list[TraversalEdge] = field(default_factory=list)

    @property
    def datasets(self) -> list[TraversalHit]:
        return [h for h in self.hits if h.node.kind == "dataset"]

    @property
    def jobs(self) -> list[TraversalHit]:
        return [h for h in self.hits if h.node.kind == "job"]

    @property
    def columns(self) -> list[TraversalHit]:
        return [h for h in self.hits if h.node.kind == "column"]

    def labels(self) -> set[str]:
        return {h.node.label for h in self.hits}

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root.to_dict(), "direction": self.direction, "depth": self.depth,
            "as_of": self.as_of.isoformat() if self.as_of else None,
            "nodes": [h.to_dict() for h in self.hits], "edges": [e.to_dict() for e in self.edges],
        }


@dataclass
class ImpactResult:
    """What a change to ``root`` affects: downstream datasets, jobs, and who owns them."""

    root: LineageNode
    depth: int
    datasets: list[TraversalHit] = field(default_factory=list)
    jobs: list[TraversalHit] = field(default_factory=list)
    owners: dict[str, list[str]] = field(default_factory=dict)   # owner -> labels of affected nodes

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root.to_dict(), "depth": self.depth,
            "datasets": [h.to_dict() for h in self.datasets], "jobs": [h.to_dict() for h in self.jobs],
            "owners": self.owners,
        }


@dataclass
class RouteResult:
    """The paper's ``LineageRoute``: every route from ``source`` to ``target`` (data-flow order)."""

    source: LineageNode
    target: LineageNode
    max_length: int
    routes: list[list[LineageNode]] = field(default_factory=list)
    swapped: bool = False          # True when the routes run from the second node to the first

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.to_dict(), "target": self.target.to_dict(), "max_length": self.max_length,
            "swapped": self.swapped, "routes": [[n.to_dict() for n in r] for r in self.routes],
        }


@dataclass(frozen=True)
class AncestorVersion:
    """A revision of the requested dataset found among a dataset version's ancestors."""

    dataset: LineageNode
    version_id: str | None
    version: str | None
    event_time: datetime | None
    run_id: str | None
    steps: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset.to_dict(), "version_id": self.version_id, "version": self.version,
            "event_time": self.event_time.isoformat() if self.event_time else None,
            "run_id": self.run_id, "steps": self.steps,
        }


@dataclass
class AncestorsResult:
    """The paper's ``Ancestors(DS_out:R_y, DS_in)``: revisions of ``within`` that ``root`` derives from."""

    root: LineageNode
    root_version: str | None
    within: LineageNode
    ancestors: list[AncestorVersion] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root.to_dict(), "root_version": self.root_version, "within": self.within.to_dict(),
                "ancestors": [a.to_dict() for a in self.ancestors]}


def _edge_filter(alias: str, as_of: datetime | None) -> str:
    """Which edges exist: today's (``valid_to IS NULL``) or those valid at ``%(as_of)s``."""
    if as_of is None:
        return f"{alias}.valid_to IS NULL"
    return f"{alias}.first_seen <= %(as_of)s AND ({alias}.valid_to IS NULL OR {alias}.valid_to > %(as_of)s)"


def _canon(expr: str, aliases: bool) -> str:
    """The canonical id of node id ``expr``: its ``alias_of`` when it is an alias, else itself.

    The alias map comes from ``%(alias_of)s`` (jsonb ``{alias id: canonical id}``, read once per
    question by :meth:`LineageQueries._alias_maps`): a lookup in it costs no buffer access, where
    a probe of ``lineage_datasets`` per edge doubled the pages a walk touches. In psql, use
    ``coalesce((SELECT alias_of FROM lineage_datasets WHERE dataset_id = <id> AND alias_of IS NOT NULL), <id>)``.
    """
    if not aliases:
        return expr
    return f"coalesce((%(alias_of)s::jsonb ->> ({expr})::text)::uuid, {expr})"


def _ids(expr: str, aliases: bool) -> str:
    """The ids edges of node ``expr`` may be stored under: itself and its aliases.

    The aliases come from ``%(alias_groups)s`` (jsonb ``{canonical id: [alias ids]}``, read once per
    question by :meth:`LineageQueries._alias_maps`); in psql, use
    ``SELECT d.dataset_id FROM lineage_datasets d WHERE d.alias_of = <node>`` instead.
    """
    if not aliases:
        return f"(SELECT {expr} AS id)"
    return (f"(SELECT {expr} AS id UNION ALL SELECT x::uuid FROM "
            f"jsonb_array_elements_text(%(alias_groups)s::jsonb -> ({expr})::text) x)")


def _probe(column: str, flt: str) -> str:
    """The job edges at one node: ``OFFSET 0`` keeps the subquery from being flattened, so each
    frontier node is one index probe of ``lineage_edges`` whatever the planner guesses about the
    size of the frontier (with a flattened join it sometimes chose a scan of the whole table per
    step, on small graphs)."""
    return (f"SELECT e.source_node_id, e.target_node_id, e.kind, e.edge_type FROM lineage_edges e "
            f"WHERE e.{column} = ids.id AND e.kind IN ('reads', 'writes') AND {flt} OFFSET 0")


def walk_sql(direction: str, as_of: datetime | None, stop_at_terminal: bool, aliases: bool = True) -> str:
    """The upstream / downstream walk. Parameters: ``root``, ``root_is_job``, ``steps``, ``as_of``, ``alias_groups``,
    ``alias_of``.

    Rows ``(node_id, is_job, step, stop)``; UNION dedupes them, so the walk terminates on cycles.
    Returns one row: ``nodes`` (jsonb ``[[id, is_job, step, stop, namespace, name, type, placeholder,
    owners]]``) and ``edges`` (jsonb ``[[source, target, kind, edge_type]]``).
    """
    if direction == "upstream":
        here, there, job_kind = "target_node_id", "source_node_id", "writes"
    else:
        here, there, job_kind = "source_node_id", "target_node_id", "reads"
    stop = (f"coalesce((SELECT {TERMINAL_SQL} FROM lineage_jobs j WHERE j.job_id = e.{there}), false)"
            if stop_at_terminal else "false")
    flt = _edge_filter("e", as_of)
    return f"""
WITH RECURSIVE walk(node_id, is_job, step, stop) AS (
    SELECT %(root)s::uuid, %(root_is_job)s::boolean, 0, false
  UNION
    SELECT CASE WHEN e.kind = '{job_kind}' THEN e.{there} ELSE {_canon('e.' + there, aliases)} END,
           e.kind = '{job_kind}', w.step + 1,
           CASE WHEN e.kind = '{job_kind}' THEN {stop} ELSE false END
    FROM walk w
    CROSS JOIN LATERAL {_ids('w.node_id', aliases)} ids
    CROSS JOIN LATERAL ({_probe(here, flt)}) e
    WHERE w.step < %(steps)s AND NOT w.stop
),
reached AS MATERIALIZED (
    SELECT node_id, bool_or(is_job) AS is_job, min(step) AS step, bool_or(stop) AS stop
    FROM walk GROUP BY node_id
),
used AS (
    SELECT DISTINCT {_canon('e.source_node_id', aliases)} AS s, {_canon('e.target_node_id', aliases)} AS t,
           e.kind, e.edge_type
    FROM reached r
    CROSS JOIN LATERAL {_ids('r.node_id', aliases)} ids
    CROSS JOIN LATERAL ({_probe(here, flt)}) e
    WHERE NOT r.stop AND r.step < %(steps)s     -- the last level's edges lead out of the result
)
SELECT
  (SELECT coalesce(jsonb_agg(jsonb_build_array(r.node_id, r.is_job, r.step, r.stop,
          coalesce(d.namespace, j.namespace), coalesce(d.name, j.name), coalesce(d.node_type, j.job_type),
          coalesce(d.is_placeholder, j.is_placeholder),
          CASE WHEN r.is_job THEN j.owners ELSE to_jsonb(d.owner) END)), '[]')
     FROM reached r
     LEFT JOIN lineage_datasets d ON NOT r.is_job AND d.dataset_id = r.node_id
     LEFT JOIN lineage_jobs j ON r.is_job AND j.job_id = r.node_id),
  (SELECT coalesce(jsonb_agg(jsonb_build_array(u.s, u.t, u.kind, u.edge_type)), '[]')
     FROM used u JOIN reached rs ON rs.node_id = u.s JOIN reached rt ON rt.node_id = u.t
     WHERE abs(rs.step - rt.step) = 1)
"""


def column_walk_sql(direction: str, as_of: datetime | None, stop_at_terminal: bool, aliases: bool = True) -> str:
    """The column-level walk over ``lineage_column_lineage``. Parameters: ``root``, ``col``, ``steps``, ``as_of``."""
    if direction == "upstream":
        here_ds, here_col, there_ds, there_col = "target_dataset_id", "target_column", "source_dataset_id", "source_column"
    else:
        here_ds, here_col, there_ds, there_col = "source_dataset_id", "source_column", "target_dataset_id", "target_column"
    stop = (f"coalesce((SELECT {TERMINAL_SQL} FROM lineage_jobs j WHERE j.job_id = c.job_id), false)"
            if stop_at_terminal else "false")
    flt = "true" if as_of is None else "c.first_seen <= %(as_of)s"
    return f"""
WITH RECURSIVE walk(dataset_id, col, step, stop) AS (
    SELECT %(root)s::uuid, %(col)s::text, 0, false
  UNION
    SELECT {_canon('c.' + there_ds, aliases)}, c.{there_col}, w.step + 1, {stop}
    FROM walk w
    CROSS JOIN LATERAL {_ids('w.dataset_id', aliases)} ids
    CROSS JOIN LATERAL (SELECT c.* FROM lineage_column_lineage c
                        WHERE c.{here_ds} = ids.id AND c.{here_col} = w.col AND {flt} OFFSET 0) c
    WHERE w.step < %(steps)s AND NOT w.stop
)
SELECT dataset_id, col, min(step), bool_or(stop) FROM walk WHERE step > 0 GROUP BY dataset_id, col
"""


def route_sql(as_of: datetime | None, aliases: bool = True) -> str:
    """All simple routes from ``%(a)s`` to ``%(b)s`` of at most ``%(max_steps)s`` edges (first ``%(limit)s``).

    ``back`` is an upstream BFS from b (each node's distance to b); paths from a grow only
    through nodes whose distance to b fits the remaining budget, so no dead branch is explored,
    and carry their path so that no node repeats (``NOT next = ANY(path)``).
    """
    flt = _edge_filter("e", as_of)
    return f"""
WITH RECURSIVE back_walk(node_id, d) AS (
    SELECT %(b)s::uuid, 0
  UNION
    SELECT {_canon('e.source_node_id', aliases)}, w.d + 1
    FROM back_walk w
    CROSS JOIN LATERAL {_ids('w.node_id', aliases)} ids
    CROSS JOIN LATERAL ({_probe('target_node_id', flt)}) e
    WHERE w.d < %(max_steps)s
),
back AS MATERIALIZED (SELECT node_id, min(d) AS d FROM back_walk GROUP BY node_id),
paths(node_id, path) AS (
    SELECT %(a)s::uuid, ARRAY[%(a)s::uuid]
  UNION ALL
    SELECT b.node_id, p.path || b.node_id
    FROM paths p
    CROSS JOIN LATERAL {_ids('p.node_id', aliases)} ids
    CROSS JOIN LATERAL ({_probe('source_node_id', flt)}) e
    JOIN back b ON b.node_id = {_canon('e.target_node_id', aliases)}
    WHERE p.node_id <> %(b)s::uuid
      AND cardinality(p.path) + b.d <= %(max_steps)s
      AND NOT b.node_id = ANY(p.path)
)
SELECT DISTINCT path FROM (SELECT path FROM paths WHERE node_id = %(b)s::uuid LIMIT %(limit)s) r
"""


#: Paper's Ancestors over revisions: version -> the run that wrote it -> that run's input versions.
ANCESTORS_SQL = """
WITH RECURSIVE chain(dataset_id, version_id, at, run_id, step) AS (
    SELECT %(root)s::uuid, %(version_id)s::uuid, %(at)s::timestamptz, NULL::uuid, 0
  UNION
    SELECT i.dataset_id,
           coalesce(i.version_id, iv.version_id),
           coalesce(iv.event_time, i.event_time),
           w.run_id, c.step + 1
    FROM chain c
    CROSS JOIN LATERAL (
        SELECT o.run_id, o.event_time FROM lineage_run_io o
        CROSS JOIN LATERAL (SELECT coalesce(c.version_id IS NOT NULL AND (o.version_id = c.version_id OR o.run_id =
                              (SELECT v.run_id FROM lineage_dataset_versions v WHERE v.version_id = c.version_id)),
                              false) AS exact) m
        WHERE o.dataset_id = c.dataset_id AND o.direction = 'output'
          AND (m.exact OR o.event_time <= coalesce(c.at, 'infinity'))
        ORDER BY m.exact DESC, o.event_time DESC LIMIT 1) w
    JOIN lineage_run_io i ON i.run_id = w.run_id AND i.direction = 'input'
    LEFT JOIN LATERAL (
        SELECT v.version_id, v.event_time FROM lineage_dataset_versions v
        WHERE i.version_id IS NULL AND v.dataset_id = i.dataset_id AND v.event_time <= i.event_time
        ORDER BY v.event_time DESC LIMIT 1) iv ON true
    WHERE c.step < %(steps)s
)
SELECT c.dataset_id, c.version_id, v.version, coalesce(v.event_time, c.at), c.run_id, min(c.step)
FROM chain c LEFT JOIN lineage_dataset_versions v ON v.version_id = c.version_id
WHERE c.step > 0 AND c.dataset_id = ANY(%(within)s::uuid[])
GROUP BY 1, 2, 3, 4, 5 ORDER BY 4 DESC NULLS LAST
"""


class LineageQueries:
    """Answers graph questions from a PostgreSQL DSN (or an open psycopg connection)."""

    def __init__(self, dsn_or_conn: Any) -> None:
        self._dsn = dsn_or_conn if isinstance(dsn_or_conn, str) else None
        self._conn = None if isinstance(dsn_or_conn, str) else dsn_or_conn

    # -- connection -----------------------------------------------------------------------
    @property
    def conn(self) -> Any:
        if self._conn is None:
            import psycopg

            try:
                self._conn = psycopg.connect(str(self._dsn), autocommit=True)
            except psycopg.OperationalError as exc:
                raise QueryError(f"cannot connect to PostgreSQL: {exc}".strip(), code="query.connect") from exc
        return self._conn

    def close(self) -> None:
        if self._conn is not None and self._dsn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> LineageQueries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _all(self, sql: str, params: dict[str, Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            return self.conn.execute(sql, params).fetchall()
        except psycopg.errors.UndefinedTable as exc:
            raise QueryError("the lineage graph tables do not exist in this database (run the store's migrations)",
                             code="query.no_graph") from exc

    def _alias_maps(self) -> dict[str, Any]:
        """Query parameters ``alias_groups`` (``{canonical: [aliases]}``) and ``alias_of``
        (``{alias: canonical}``) as jsonb, both None when the graph has no alias.

        Read per question through the partial index on alias rows (cheap: aliases are few).
        """
        from psycopg.types.json import Jsonb

        rows = self._all("SELECT dataset_id::text, alias_of::text FROM lineage_datasets "
                         "WHERE alias_of IS NOT NULL ORDER BY dataset_id")
        if not rows:
            return {"alias_groups": None, "alias_of": None}
        groups: dict[str, list[str]] = {}
        for alias, canonical in rows:
            groups.setdefault(canonical, []).append(alias)
        return {"alias_groups": Jsonb(groups), "alias_of": Jsonb(dict(rows))}

    # -- node resolution ------------------------------------------------------------------
    def resolve(self, node: str, version: str | None = None) -> LineageNode:
        """The node named by ``node`` (syntax in the module docstring); aliases resolve to canonical.

        A dataset named at a version (``<object_id>:<version>``, ``name@version``) or given ``version``
        resolves to that version of it (``LineageNode.version_id`` set)."""
        found = self._resolve_unversioned(node)
        named = found.version
        if version is not None and named is not None and version != named:
            raise QueryError(f"{node!r} names version {named!r}, not {version!r}")
        wanted = version if version is not None else named
        if wanted is None:
            return found
        if found.kind == "job":
            raise QueryError(f"{node!r} is a job: versions are dataset versions")
        return self._at_version(found, wanted)

    def _at_version(self, node: LineageNode, version: str) -> LineageNode:
        """``node`` at ``version`` (a version string or a version id); NodeNotFoundError if it has no such version."""
        row = self._all("SELECT v.version_id::text, v.version FROM lineage_dataset_versions v "
                        "WHERE v.dataset_id = ANY(%s::uuid[]) AND (v.version = %s OR v.version_id::text = %s) "
                        "ORDER BY v.event_time DESC LIMIT 1", (self._alias_ids(node.node_id), version, version))
        if not row:
            raise NodeNotFoundError(f"dataset {node.namespace}/{node.name} has no version {version!r}")
        return replace(node, version=row[0][1], version_id=row[0][0])

    def _alias_ids(self, node_id: str) -> list[str]:
        """``node_id`` and the ids of its aliases."""
        return [node_id] + [str(r[0]) for r in self._all(
            "SELECT dataset_id FROM lineage_datasets WHERE alias_of = %s AND alias_of IS NOT NULL", (node_id,))]

    def _resolve_unversioned(self, node: str) -> LineageNode:
        """:meth:`resolve` before the version: a node whose ``version`` is the one its name carried, if any."""
        text = node.strip()
        if not text:
            raise QueryError("empty node name")
        if "\x00" in text:     # PostgreSQL text cannot hold NUL: no stored name can match
            raise NodeNotFoundError(f"no node named {node!r}")
        if text.startswith("job:"):
            return self._resolve_job(text[4:], node)
        column = None
        if "#" in text:
            text, column = text.rsplit("#", 1)
            if not column:
                raise QueryError(f"{node!r}: empty column after '#'")
        try:
            as_uuid = str(uuid.UUID(text))
        except ValueError:
            as_uuid = None
        if as_uuid is None and "@" in text:     # a walk's key, <dataset id>@<version id> (LineageNode.key)
            keyed = self._dataset_at_key(text)
            if keyed is not None:
                return _with_column(keyed, column)
        if as_uuid is not None:
            found = self._datasets_by_id([as_uuid])
            if found:
                ds = self._canonical(found[as_uuid])
                return _with_column(ds, column)
            if column is None:
                jobs = self._jobs_by_id([as_uuid])
                if jobs:
                    return jobs[as_uuid]
            raise NodeNotFoundError(f"no dataset or job has id {as_uuid}")
        ds = self._resolve_dataset(text, node)
        return _with_column(ds, column)

    def _dataset_at_key(self, text: str) -> LineageNode | None:
        """``<dataset id>@<version>`` (a :attr:`LineageNode.key`, or a dataset id and a version string): the
        dataset carrying the version named, or None when the part before ``@`` is no dataset id."""
        head, _, version = text.rpartition("@")
        try:
            head = str(uuid.UUID(head))
        except ValueError:
            return None
        found = self._datasets_by_id([head]) if version else {}
        return replace(self._canonical(found[head]), version=version) if found else None

    def _resolve_dataset(self, text: str, original: str) -> LineageNode:
        ns, nm = _splits(text)
        # (namespace, name) readings use the unique index; qualified_name (no index) only as a fallback
        rows = self._all(_DATASET_COLUMNS + " WHERE (d.namespace, d.name) IN "
                         "(SELECT * FROM unnest(%(ns)s::text[], %(nm)s::text[]))", {"ns": ns, "nm": nm})
        if not rows:
            rows = self._all(_DATASET_COLUMNS + " WHERE d.qualified_name = %(q)s", {"q": text})
        if not rows:
            versioned = self._resolve_versioned_name(text)
            if versioned is not None:
                return versioned
            raise NodeNotFoundError(f"no dataset named {original!r} (use namespace/name, namespace:name, "
                                    "job:namespace/name or a UUID)")
        nodes = [self._canonical(_dataset_node(r)) for r in rows]
        exact = [n for n, r in zip(nodes, rows, strict=True) if r[-1] == text]
        if len({n.node_id for n in nodes}) > 1 and len({n.node_id for n in exact}) != 1:
            names = ", ".join(sorted(n.label for n in nodes))
            raise AmbiguousNodeError(f"{original!r} names several datasets: {names}")
        return exact[0] if exact else nodes[0]

    def _resolve_versioned_name(self, text: str) -> LineageNode | None:
        """A dataset named with its version, as producers write it: an Evo ``<ns>/<object_id>:<version>``
        (the graph's node is ``<object_id>``, sink/derive.py ``resolve_dataset_name``) or ``<dataset>@<version>``;
        the node returned carries the version string (not yet checked against the stored versions)."""
        from .derive import resolve_dataset_name

        readings: list[tuple[str, str, str]] = []
        for ns, nm in zip(*_splits(text), strict=True):
            base, version = resolve_dataset_name(ns, nm)
            if version is not None:
                readings.append((ns, base, version))
        if "@" in text:
            base_text, version = text.rsplit("@", 1)
            if version:
                readings += [(ns, nm, version) for ns, nm in zip(*_splits(base_text), strict=True)]
        if not readings:
            return None
        rows = self._all(_DATASET_COLUMNS + " WHERE (d.namespace, d.name) IN "
                         "(SELECT * FROM unnest(%(ns)s::text[], %(nm)s::text[]))",
                         {"ns": [r[0] for r in readings], "nm": [r[1] for r in readings]})
        versions = {(ns, nm): v for ns, nm, v in readings}
        found = {(self._canonical(_dataset_node(r)), versions[(r[1], r[2])]) for r in rows}
        if len(found) > 1:
            names = ", ".join(sorted(f"{n.label} version {v}" for n, v in found))
            raise AmbiguousNodeError(f"{text!r} names several dataset versions: {names}")
        if not found:
            return None
        node, version = found.pop()
        return replace(node, version=version)

    def _resolve_job(self, text: str, original: str) -> LineageNode:
        try:
            as_uuid = str(uuid.UUID(text))
            jobs = self._jobs_by_id([as_uuid])
            if jobs:
                return jobs[as_uuid]
        except ValueError:
            pass
        ns, nm = _splits(text)
        rows = self._all(_JOB_COLUMNS + " WHERE (j.namespace, j.name) IN "
                         "(SELECT * FROM unnest(%(ns)s::text[], %(nm)s::text[]))", {"ns": ns, "nm": nm})
        if not rows:
            rows = self._all(_JOB_COLUMNS + " WHERE j.qualified_name = %(q)s", {"q": text})
        if not rows:
            raise NodeNotFoundError(f"no job named {original!r}")
        if len(rows) > 1:
            exact = [r for r in rows if r[-1] == text]
            if len(exact) != 1:
                raise AmbiguousNodeError(f"{original!r} names several jobs: "
                                         + ", ".join(sorted(f"job:{r[1]}/{r[2]}" for r in rows)))
            rows = exact
        return _job_node(rows[0])

    def _canonical(self, node: LineageNode) -> LineageNode:
        row = self._all("SELECT alias_of FROM lineage_datasets WHERE dataset_id = %s", (node.node_id,))
        if row and row[0][0] is not None:
            target = self._datasets_by_id([str(row[0][0])])
            if target:
                return next(iter(target.values()))
        return node

    def _datasets_by_id(self, ids: list[str]) -> dict[str, LineageNode]:
        if not ids:
            return {}
        rows = self._all(_DATASET_COLUMNS + " WHERE d.dataset_id = ANY(%s::uuid[])", (ids,))
        return {str(r[0]): _dataset_node(r) for r in rows}

    def _jobs_by_id(self, ids: list[str]) -> dict[str, LineageNode]:
        if not ids:
            return {}
        rows = self._all(_JOB_COLUMNS + " WHERE j.job_id = ANY(%s::uuid[])", (ids,))
        return {str(r[0]): _job_node(r) for r in rows}

    # -- traversals -----------------------------------------------------------------------
    def upstream(self, node: str, depth: int = 5, as_of: datetime | None = None,
                 stop_at_terminal: bool = True, version: str | None = None) -> TraversalResult:
        """Everything ``node`` is derived from, to ``depth`` dataset-level hops (at ``version``: the module doc)."""
        return self._traverse("upstream", node, depth, as_of, stop_at_terminal, version)

    def downstream(self, node: str, depth: int = 5, as_of: datetime | None = None,
                   stop_at_terminal: bool = True, version: str | None = None) -> TraversalResult:
        """Everything derived from ``node``, to ``depth`` dataset-level hops (at ``version``: the module doc)."""
        return self._traverse("downstream", node, depth, as_of, stop_at_terminal, version)

    def _traverse(self, direction: str, node: str, depth: int, as_of: datetime | None,
                  stop_at_terminal: bool, version: str | None = None) -> TraversalResult:
        _check_depth(depth)
        _check_as_of(as_of)
        root = self.resolve(node, version)
        if root.kind == "column":
            return self._column_traverse(direction, root, depth, as_of, stop_at_terminal)
        if root.version_id is not None:
            from .versions import version_walk

            return version_walk(self, direction, root, depth, as_of, stop_at_terminal)
        is_job = root.kind == "job"
        steps = 2 * depth - (1 if is_job else 0)
        maps = self._alias_maps()
        sql = walk_sql(direction, as_of, stop_at_terminal, aliases=maps["alias_of"] is not None)
        nodes_json, edges_json = self._all(
            sql, {"root": root.node_id, "root_is_job": is_job, "steps": steps, "as_of": as_of, **maps})[0]
        hits = []
        for node_id, job, step, stop, ns, name, ntype, placeholder, owners in nodes_json:
            if node_id == root.node_id:
                continue
            if name is None:    # an edge to a node row not written (yet): report it as a placeholder
                found = LineageNode(node_id, "job" if job else "dataset", "", node_id, is_placeholder=True)
            elif job:
                found = _job_node((node_id, ns, name, ntype, placeholder, owners))
            else:
                found = _dataset_node((node_id, ns, name, ntype, placeholder, owners))
            hits.append(TraversalHit(found, (step + 1 + (1 if is_job else 0)) // 2, step, bool(stop)))
        hits.sort(key=lambda h: (h.steps, h.node.label))
        edges = sorted((TraversalEdge(str(e[0]), str(e[1]), e[2], e[3]) for e in edges_json),
                       key=lambda e: (e.source_id, e.target_id, e.kind))
        return TraversalResult(root, direction, depth, as_of, hits, edges)

    def _column_traverse(self, direction: str, root: LineageNode, depth: int, as_of: datetime | None,
                         stop_at_terminal: bool) -> TraversalResult:
        maps = self._alias_maps()
        rows = self._all(column_walk_sql(direction, as_of, stop_at_terminal, aliases=maps["alias_of"] is not None),
                         {"root": root.node_id, "col": root.column, "steps": depth, "as_of": as_of, **maps})
        datasets = self._datasets_by_id(sorted({str(r[0]) for r in rows}))
        hits = []
        for ds_id, col, step, stop in rows:
            ds = datasets.get(str(ds_id)) or LineageNode(str(ds_id), "dataset", "", str(ds_id), is_placeholder=True)
            hits.append(TraversalHit(_with_column(ds, col), int(step), int(step), bool(stop)))
        hits.sort(key=lambda h: (h.steps, h.node.label))
        return TraversalResult(root, direction, depth, as_of, hits, [])

    def impact(self, node: str, depth: int = 10, as_of: datetime | None = None,
               version: str | None = None) -> ImpactResult:
        """Downstream datasets and jobs a change to ``node`` affects, and their owners.

        Owners: ``lineage_datasets.owner`` and each entry of ``lineage_jobs.owners`` (strings, or
        objects with ``name``), mapped to the labels of the affected nodes they own.
        """
        result = self.downstream(node, depth=depth, as_of=as_of, stop_at_terminal=False, version=version)
        impact = ImpactResult(result.root, depth, result.datasets, result.jobs)
        owners: dict[str, set[str]] = {}
        for hit in result.hits:
            for owner in hit.node.owners:
                owners.setdefault(owner, set()).add(hit.node.label)
        impact.owners = {k: sorted(v) for k, v in sorted(owners.items())}
        return impact

    def routes(self, a: str, b: str, max_length: int = 10, as_of: datetime | None = None,
               limit: int = 100) -> RouteResult:
        """The paper's ``LineageRoute``: all simple routes between ``a`` and ``b``, datasets and jobs alternating.

        ``max_length`` is the most edges a route may have (dataset -> job -> dataset is 2).
        Routes run in data-flow direction from ``a`` to ``b``; when there is none and ``b``
        feeds ``a`` instead, the routes from ``b`` to ``a`` are returned with ``swapped=True``.
        At most ``limit`` routes, shortest first.
        """
        if not 1 <= max_length <= 2 * MAX_DEPTH:
            raise QueryError(f"max length must be between 1 and {2 * MAX_DEPTH}, not {max_length}")
        _check_as_of(as_of)
        src, dst = self.resolve(a), self.resolve(b)
        if "column" in (src.kind, dst.kind):
            raise QueryError("routes connect datasets and jobs; drop the #column")
        result = RouteResult(src, dst, max_length)
        paths = self._paths(src, dst, max_length, as_of, limit)
        if not paths and src.node_id != dst.node_id:
            paths = self._paths(dst, src, max_length, as_of, limit)
            result.swapped = bool(paths)
        ids = sorted({n for p in paths for n in p})
        known = {**self._datasets_by_id(ids), **self._jobs_by_id(ids)}
        routes = [[known.get(n) or LineageNode(n, "dataset", "", n, is_placeholder=True) for n in p] for p in paths]
        result.routes = sorted(routes, key=lambda r: (len(r), [n.label for n in r]))
        return result

    def _paths(self, a: LineageNode, b: LineageNode, max_length: int, as_of: datetime | None,
               limit: int) -> list[list[str]]:
        if a.node_id == b.node_id:
            return []
        maps = self._alias_maps()
        rows = self._all(route_sql(as_of, aliases=maps["alias_of"] is not None),
                         {"a": a.node_id, "b": b.node_id, "max_steps": max_length, "limit": limit, "as_of": as_of,
                          **maps})
        return [[str(x) for x in r[0]] for r in rows]

    def ancestors(self, node: str, within_dataset: str, version: str | None = None,
                  max_steps: int = 50) -> AncestorsResult:
        """The paper's ``Ancestors(DS_out:R_y, DS_in)``: the revisions of ``within_dataset`` that
        the given revision of ``node`` was derived from (through the runs' inputs and outputs).

        The revision is ``version`` (a version string or version id) or, without it, the dataset's
        latest. Each step: the run that wrote the revision (the output slot with that version, or
        else the latest run writing the dataset at or before the revision's time), then that run's
        inputs (the input slot's version, or else the input dataset's latest version at the run's
        time). Revisions are ``lineage_dataset_versions`` rows; inputs with no version known are
        reported with ``version = None`` and the run's time.
        """
        root = self.resolve(node)
        if root.version is not None:        # named at a version (<object_id>:<version>, name@version)
            version = version if version is not None else root.version_id
            root = replace(root, version=None, version_id=None)
        within = self.resolve(within_dataset)
        if within.version is not None:
            within = replace(within, version=None, version_id=None)
        if root.kind != "dataset" or within.kind != "dataset":
            raise QueryError("ancestors takes two datasets (a dataset revision and the dataset to search in)")
        params: dict[str, Any] = {"root": root.node_id, "version_id": None, "at": None, "steps": max_steps}
        ids = [root.node_id] + [str(r[0]) for r in self._all(
            "SELECT dataset_id FROM lineage_datasets WHERE alias_of = %s AND alias_of IS NOT NULL", (root.node_id,))]
        if version is not None:
            row = self._all("SELECT version_id, version, event_time FROM lineage_dataset_versions "
                            "WHERE dataset_id = ANY(%s::uuid[]) AND (version = %s OR version_id::text = %s) "
                            "ORDER BY event_time DESC LIMIT 1", (ids, version, version))
            if not row:
                raise NodeNotFoundError(f"dataset {root.label} has no version {version!r}")
        else:
            row = self._all("SELECT version_id, version, event_time FROM lineage_dataset_versions "
                            "WHERE dataset_id = ANY(%s::uuid[]) ORDER BY event_time DESC LIMIT 1", (ids,))
        root_version = None
        if row:
            params["version_id"], root_version, params["at"] = str(row[0][0]), row[0][1], row[0][2]
        within_ids = [within.node_id] + [str(r[0]) for r in self._all(
            "SELECT dataset_id FROM lineage_datasets WHERE alias_of = %s AND alias_of IS NOT NULL",
            (within.node_id,))]
        params["within"] = within_ids
        rows = self._all(ANCESTORS_SQL, params)
        result = AncestorsResult(root, root_version, within)
        seen: set[tuple[Any, ...]] = set()
        for _ds_id, version_id, ver, at, run_id, step in rows:
            key = (version_id, ver, run_id if version_id is None else None)
            if key in seen:
                continue
            seen.add(key)
            result.ancestors.append(AncestorVersion(within, str(version_id) if version_id else None, ver, at,
                                                    str(run_id) if run_id else None, int(step)))
        return result


_DATASET_COLUMNS = ("SELECT d.dataset_id, d.namespace, d.name, d.node_type, d.is_placeholder, d.owner, "
                    "d.qualified_name FROM lineage_datasets d")
_JOB_COLUMNS = ("SELECT j.job_id, j.namespace, j.name, j.job_type, j.is_placeholder, j.owners, "
                "j.qualified_name FROM lineage_jobs j")


def _dataset_node(r: tuple[Any, ...]) -> LineageNode:
    return LineageNode(str(r[0]), "dataset", r[1], r[2], r[3] or "table", None, bool(r[4]),
                       (r[5],) if r[5] else ())


def _job_node(r: tuple[Any, ...]) -> LineageNode:
    owners = []
    for o in r[5] or []:
        if isinstance(o, dict):
            o = o.get("name") or o.get("id") or ""
        if o:
            owners.append(str(o))
    return LineageNode(str(r[0]), "job", r[1], r[2], r[3] or "", None, bool(r[4]), tuple(owners))


def _with_column(node: LineageNode, column: str | None) -> LineageNode:
    if column is None:
        return node
    return replace(node, kind="column", column=column)


def _splits(text: str) -> tuple[list[str], list[str]]:
    """Every (namespace, name) reading of ``text``: split at each ``/`` and at each ``:``."""
    ns, nm = [], []
    for i, ch in enumerate(text):
        if ch in "/:" and 0 < i < len(text) - 1:
            ns.append(text[:i])
            nm.append(text[i + 1:])
    return ns, nm


def _check_depth(depth: int) -> None:
    if not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise QueryError(f"depth must be an integer between 1 and {MAX_DEPTH}, not {depth!r}")


def _check_as_of(as_of: datetime | None) -> None:
    if as_of is not None and as_of.tzinfo is None:
        raise QueryError("as-of time needs a timezone (e.g. 2026-01-31T00:00:00Z)")
