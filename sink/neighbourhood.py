"""The lineage around one node, bounded: what a lineage view draws (``GET /api/graph/lineage``).

A breadth-first walk from the root, one indexed query per step for the whole frontier, that stops at
``depth`` or when ``budget`` nodes are taken, whichever comes first; the nodes whose neighbours were not
all taken are marked ``expandable`` with ``hidden_neighbours`` (how many more there are). The caller
expands one by walking again from it with ``depth=1``.

Dataset level
    The walk follows job edges (``reads``: dataset -> job, ``writes``: job -> dataset), as
    :mod:`sink.queries` does, so jobs are nodes; ``depth`` counts dataset-level hops (2 edges from a
    dataset, ``2*depth - 1`` from a job). The dataset -> dataset edges (``kind = 'dataset'``, WIA edge
    types) of the jobs taken are added between taken datasets, carrying ``job`` so a view can fold the
    jobs away. ``direction=both`` walks upstream from upstream nodes and downstream from downstream ones.
Column level
    Nodes are columns (id ``<dataset id>#<column>``) plus their datasets (parents, not counted in the
    budget); edges are ``lineage_column_lineage`` rows, column -> column, with the transformation.
    The root is a column (``ds#col``) or a dataset (then all its columns that have lineage).
As of
    Without ``as_of``: today's edges (``valid_to IS NULL``); with it, edges valid then (as in
    :mod:`sink.queries`); column edges seen by then.
Order and determinism
    Within a step, new nodes are taken in id order until the budget is spent, so the same graph and
    question always give the same answer.
Dataset versions
    A root named at a version (``<object_id>:<version>``, ``name@version``, ``<dataset id>@<version id>`` or
    ``version=``) is walked through the runs' input and output versions (:mod:`sink.versions`, the walk of
    ``lineage upstream --version``, through terminal jobs as the dataset walk goes): version nodes have the
    walk's id ``<dataset id>@<version id>``, ``dataset_id`` the dataset, ``version`` / ``version_id`` set
    (None on other nodes), ``last_run_state`` the state of the run that wrote that version and ``anomaly``
    that version's quality record. Budget, depth, ``hidden_neighbours`` and the folded dataset edges as in
    the dataset walk. Column level does not walk versions.
Edge ids
    Stable strings, not table keys: ``reads:<dataset>><job>``, ``writes:<job>><dataset>`` and
    ``<job>:<source>><target>`` for a dataset edge (one per job that made it). Job edges have no
    ``transformation``; dataset edges' ``transformation`` is None too (the job's SQL is in the node detail).
Cost
    Every walk step and the dataset edges are index-only scans of the covering edge indexes (migration 003):
    the walk never reads the edge table's heap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sink.queries import MAX_DEPTH, LineageNode, LineageQueries, QueryError, TraversalHit
from sink.versions import version_walk

__all__ = ["NeighbourNode", "NeighbourEdge", "Neighbourhood", "neighbourhood", "MAX_BUDGET", "DIRECTIONS", "LEVELS"]

MAX_BUDGET = 5000
DIRECTIONS = ("upstream", "downstream", "both")
LEVELS = ("dataset", "column")
COLUMN_EDGE_TYPES = {"aggregated": "aggregated_from", "joined": "joined_with", "filtered": "filtered_from",
                     "direct": "projected_from", "computed": "derived_from"}


@dataclass
class NeighbourNode:
    id: str
    type: str
    namespace: str
    name: str
    qualified_name: str
    dataset_id: str | None = None
    column: str | None = None
    depth: int = 0
    expandable: bool = False
    hidden_neighbours: int = 0
    placeholder: bool = False
    last_run_state: str | None = None
    anomaly: bool = False
    label: str = ""
    version: str | None = None
    version_id: str | None = None


@dataclass
class NeighbourEdge:
    id: str
    source: str
    target: str
    type: str
    transformation: str | None = None
    job: str | None = None


@dataclass
class Neighbourhood:
    root: str
    truncated: bool = False
    nodes: list[NeighbourNode] = field(default_factory=list)
    edges: list[NeighbourEdge] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "truncated": self.truncated, "nodes": [dict(vars(n)) for n in self.nodes],
                "edges": [dict(vars(e)) for e in self.edges]}


def _filter(as_of: datetime | None) -> str:
    if as_of is None:
        return "e.valid_to IS NULL"
    return "e.first_seen <= %(as_of)s AND (e.valid_to IS NULL OR e.valid_to > %(as_of)s)"


class _AliasMap:
    def __init__(self, conn: Any) -> None:
        rows = conn.execute("SELECT dataset_id::text, alias_of::text FROM lineage_datasets "
                            "WHERE alias_of IS NOT NULL").fetchall()
        self.canonical = dict(rows)
        self.groups: dict[str, list[str]] = {}
        for alias, canon in rows:
            self.groups.setdefault(canon, []).append(alias)

    def canon(self, node_id: str) -> str:
        return self.canonical.get(node_id, node_id)

    def expand(self, ids: list[str]) -> list[str]:
        return ids + [a for i in ids for a in self.groups.get(i, ())]


def _check(direction: str, depth: int, level: str, budget: int, as_of: datetime | None) -> None:
    if direction not in DIRECTIONS:
        raise QueryError(f"direction must be one of {', '.join(DIRECTIONS)}, not {direction!r}")
    if level not in LEVELS:
        raise QueryError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    if not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise QueryError(f"depth must be an integer between 1 and {MAX_DEPTH}, not {depth!r}")
    if not 1 <= budget <= MAX_BUDGET:
        raise QueryError(f"budget must be between 1 and {MAX_BUDGET}, not {budget}")
    if as_of is not None and as_of.tzinfo is None:
        raise QueryError("as-of time needs a timezone (e.g. 2026-01-31T00:00:00Z)")


def neighbourhood(conn: Any, node: str, *, direction: str = "both", depth: int = 3, level: str = "dataset",
                  as_of: datetime | None = None, budget: int = 500, version: str | None = None) -> Neighbourhood:
    """The bounded lineage around ``node`` (at ``version``, or the version its name carries: module doc).
    Raises NodeNotFoundError / QueryError."""
    _check(direction, depth, level, budget, as_of)
    queries = LineageQueries(conn)
    root = queries.resolve(node, version)
    if level == "column" or root.kind == "column":
        if root.kind == "job":
            raise QueryError("column-level lineage starts at a dataset or a column, not a job")
        if root.version_id is not None:
            raise QueryError("column-level lineage does not walk dataset versions: drop the version or use "
                             "level=dataset")
        return _ColumnWalk(conn, root, direction, depth, as_of, budget).run()
    if root.version_id is not None:
        return _VersionWalk(queries, root, direction, depth, as_of, budget).run()
    return _DatasetWalk(conn, root, direction, depth, as_of, budget).run()


class _DatasetWalk:
    def __init__(self, conn: Any, root: LineageNode, direction: str, depth: int, as_of: datetime | None,
                 budget: int) -> None:
        self.conn, self.root, self.as_of, self.budget = conn, root, as_of, budget
        self.directions = ("upstream", "downstream") if direction == "both" else (direction,)
        self.steps = 2 * depth - (1 if root.kind == "job" else 0)
        self.aliases = _AliasMap(conn)
        self.taken: dict[str, tuple[bool, int]] = {root.node_id: (root.kind == "job", 0)}   # id -> (is_job, step)
        self.edges: dict[str, NeighbourEdge] = {}
        self.hidden: dict[str, set[str]] = {}
        self.truncated = False

    def _adjacent(self, ids: list[str], direction: str) -> list[tuple[Any, ...]]:
        """Job edges at the frontier ``ids``: ``(source, target, kind)``, an index-only scan of the covering
        indexes of migration 003 (no heap access)."""
        here = "target_node_id" if direction == "upstream" else "source_node_id"
        return self.conn.execute(
            f"SELECT e.source_node_id::text, e.target_node_id::text, e.kind FROM lineage_edges e "
            f"WHERE e.{here} = ANY(%(ids)s::uuid[]) AND e.kind IN ('reads', 'writes') AND {_filter(self.as_of)}",
            {"ids": self.aliases.expand(ids), "as_of": self.as_of}).fetchall()

    def run(self) -> Neighbourhood:
        upstream = True
        for direction in self.directions:
            upstream = direction == "upstream"
            frontier = [self.root.node_id]
            for step in range(1, self.steps + 2):
                if not frontier:
                    break
                new: dict[str, bool] = {}
                links = []
                for src, tgt, kind in self._adjacent(frontier, direction):
                    src_c, tgt_c = self.aliases.canon(src), self.aliases.canon(tgt)
                    here_c, there_c = (tgt_c, src_c) if upstream else (src_c, tgt_c)
                    links.append((src_c, tgt_c, kind, here_c, there_c))
                    if there_c not in self.taken:
                        new[there_c] = kind == ("writes" if upstream else "reads")
                beyond_depth = step > self.steps
                for there_c in sorted(new):
                    if beyond_depth or len(self.taken) >= self.budget:
                        self.truncated |= not beyond_depth
                        continue
                    self.taken[there_c] = (new[there_c], step)
                for src_c, tgt_c, kind, here_c, there_c in links:
                    if there_c in self.taken:
                        job = src_c if kind == "writes" else tgt_c
                        self.edges[f"{kind}:{src_c}>{tgt_c}"] = NeighbourEdge(
                            f"{kind}:{src_c}>{tgt_c}", src_c, tgt_c, kind, None, job)
                    else:
                        self.hidden.setdefault(here_c, set()).add(there_c)
                frontier = [n for n in new if n in self.taken] if not beyond_depth else []
        self._dataset_edges()
        return Neighbourhood(self.root.node_id, self.truncated, self._nodes(), sorted(
            self.edges.values(), key=lambda e: (e.source, e.target, e.type)))

    def _dataset_edges(self) -> None:
        """The WIA dataset -> dataset edges between taken datasets, each carrying the taken job that made it:
        a job J with ``s -reads-> J -writes-> t`` in the answer. Read by an index-only scan of the source
        covering index (``edge_type`` per (s, t); when several jobs made one pair, each gets an edge with
        the pair's first type in (type) order)."""
        datasets = [n for n, (is_job, _) in self.taken.items() if not is_job]
        readers: dict[str, set[str]] = {}
        writers: dict[str, set[str]] = {}
        for e in self.edges.values():
            if e.type == "reads":
                readers.setdefault(e.source, set()).add(e.target)
            elif e.type == "writes":
                writers.setdefault(e.target, set()).add(e.source)
        if not datasets or not readers:
            return
        types: dict[tuple[str, str], str] = {}
        for src, tgt, etype in self.conn.execute(
                "SELECT e.source_node_id::text, e.target_node_id::text, e.edge_type FROM lineage_edges e "
                f"WHERE e.source_node_id = ANY(%(ids)s::uuid[]) AND e.kind = 'dataset' AND {_filter(self.as_of)} "
                "AND e.target_node_id = ANY(%(targets)s::uuid[]) ORDER BY 3",
                {"ids": self.aliases.expand([d for d in datasets if d in readers]),
                 "targets": self.aliases.expand([d for d in datasets if d in writers]), "as_of": self.as_of}).fetchall():
            s, t = self.aliases.canon(src), self.aliases.canon(tgt)
            if t in self.taken:
                types.setdefault((s, t), etype)
        for (s, t), etype in types.items():
            for job in sorted(readers.get(s, set()) & writers.get(t, set())):
                eid = f"{job}:{s}>{t}"
                self.edges[eid] = NeighbourEdge(eid, s, t, etype, None, job)

    def _nodes(self) -> list[NeighbourNode]:
        ids = list(self.taken)
        ds_ids = [i for i in ids if not self.taken[i][0]]
        job_ids = [i for i in ids if self.taken[i][0]]
        out: dict[str, NeighbourNode] = {}
        for did, ns, name, qname, placeholder, state, anomalies in self.conn.execute("""
            SELECT d.dataset_id::text, d.namespace, d.name, d.qualified_name, d.is_placeholder, lr.state, lq.anomalies
            FROM lineage_datasets d
            LEFT JOIN LATERAL (SELECT r.state FROM lineage_dataset_versions v JOIN lineage_runs r ON r.run_id = v.run_id
                               WHERE v.dataset_id = d.dataset_id
                               ORDER BY v.event_time DESC LIMIT 1) lr ON true
            LEFT JOIN LATERAL (SELECT q.anomalies FROM lineage_quality q WHERE q.node_id = d.dataset_id
                               ORDER BY q.measured_at DESC LIMIT 1) lq ON true
            WHERE d.dataset_id = ANY(%s::uuid[])""", (ds_ids,)).fetchall():
            out[did] = NeighbourNode(did, "dataset", ns, name, qname, placeholder=bool(placeholder),
                                     last_run_state=state, anomaly=bool(anomalies), label=f"{ns}/{name}")
        for jid, ns, name, qname, placeholder, state in self.conn.execute("""
            SELECT j.job_id::text, j.namespace, j.name, j.qualified_name, j.is_placeholder, lr.state
            FROM lineage_jobs j
            LEFT JOIN LATERAL (SELECT r.state FROM lineage_runs r WHERE r.job_id = j.job_id
                               ORDER BY r.state_time DESC NULLS LAST LIMIT 1) lr ON true
            WHERE j.job_id = ANY(%s::uuid[])""", (job_ids,)).fetchall():
            out[jid] = NeighbourNode(jid, "job", ns, name, qname, placeholder=bool(placeholder), last_run_state=state,
                                     label=f"job:{ns}/{name}")
        nodes = []
        for node_id, (is_job, step) in self.taken.items():
            n = out.get(node_id) or NeighbourNode(node_id, "job" if is_job else "dataset", "", node_id, node_id,
                                                 placeholder=True, label=node_id)
            n.depth = (step + 1 + (1 if self.root.kind == "job" else 0)) // 2
            hidden = self.hidden.get(node_id, set()) - set(self.taken)
            n.hidden_neighbours, n.expandable = len(hidden), bool(hidden)
            nodes.append(n)
        nodes.sort(key=lambda n: (n.depth, n.label))
        return nodes


class _ColumnWalk:
    def __init__(self, conn: Any, root: LineageNode, direction: str, depth: int, as_of: datetime | None,
                 budget: int) -> None:
        self.conn, self.root, self.depth, self.as_of, self.budget = conn, root, depth, as_of, budget
        self.directions = ("upstream", "downstream") if direction == "both" else (direction,)
        self.aliases = _AliasMap(conn)
        self.taken: dict[tuple[str, str], int] = {}
        self.edges: dict[str, NeighbourEdge] = {}
        self.hidden: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self.truncated = False

    def _start(self) -> list[tuple[str, str]]:
        if self.root.column is not None:
            return [(self.root.node_id, self.root.column)]
        ids = self.aliases.expand([self.root.node_id])
        rows = self.conn.execute(
            "SELECT DISTINCT target_column FROM lineage_column_lineage WHERE target_dataset_id = ANY(%(ids)s::uuid[]) "
            "UNION SELECT DISTINCT source_column FROM lineage_column_lineage "
            "WHERE source_dataset_id = ANY(%(ids)s::uuid[]) ORDER BY 1", {"ids": ids}).fetchall()
        return [(self.root.node_id, r[0]) for r in rows]

    def _adjacent(self, cols: list[tuple[str, str]], direction: str) -> list[tuple[Any, ...]]:
        here_ds, here_col = ("target_dataset_id", "target_column") if direction == "upstream" else \
            ("source_dataset_id", "source_column")
        ds = [d for d, _ in cols]
        names = [c for _, c in cols]
        for d, c in cols:
            for alias in self.aliases.groups.get(d, ()):
                ds.append(alias)
                names.append(c)
        flt = "true" if self.as_of is None else "c.first_seen <= %(as_of)s"
        return self.conn.execute(
            "SELECT c.column_lineage_id::text, c.source_dataset_id::text, c.source_column, c.target_dataset_id::text, "
            "c.target_column, c.transformation_type, c.transformation_logic, c.job_id::text "
            f"FROM lineage_column_lineage c WHERE (c.{here_ds}, c.{here_col}) IN "
            f"(SELECT * FROM unnest(%(ds)s::uuid[], %(cols)s::text[])) AND {flt}",
            {"ds": ds, "cols": names, "as_of": self.as_of}).fetchall()

    def run(self) -> Neighbourhood:
        start = self._start()
        for col in start:
            self.taken[col] = 0
        for direction in self.directions:
            frontier = list(start)
            for step in range(1, self.depth + 2):
                if not frontier:
                    break
                new: set[tuple[str, str]] = set()
                links = []
                for cid, sds, scol, tds, tcol, ttype, logic, job in self._adjacent(frontier, direction):
                    s, t = (self.aliases.canon(sds), scol), (self.aliases.canon(tds), tcol)
                    here, there = (t, s) if direction == "upstream" else (s, t)
                    links.append((cid, s, t, here, there, ttype, logic, job))
                    if there not in self.taken:
                        new.add(there)
                for col in sorted(new):
                    if step > self.depth or len(self.taken) >= self.budget:
                        self.truncated |= step <= self.depth
                        continue
                    self.taken[col] = step
                for cid, s, t, here, there, ttype, logic, job in links:
                    if there in self.taken:
                        self.edges[cid] = NeighbourEdge(cid, f"{s[0]}#{s[1]}", f"{t[0]}#{t[1]}",
                                                        COLUMN_EDGE_TYPES.get(ttype, "derived_from"),
                                                        logic or ttype, job)
                    else:
                        self.hidden.setdefault(here, set()).add(there)
                frontier = [c for c in new if c in self.taken]
        return Neighbourhood(f"{self.root.node_id}#{self.root.column}" if self.root.column else self.root.node_id,
                             self.truncated, self._nodes(), sorted(self.edges.values(),
                                                                   key=lambda e: (e.source, e.target)))

    def _nodes(self) -> list[NeighbourNode]:
        ds_ids = sorted({d for d, _ in self.taken} | {self.root.node_id})
        rows = {r[0]: r for r in self.conn.execute(
            "SELECT d.dataset_id::text, d.namespace, d.name, d.qualified_name, d.is_placeholder, "
            "(SELECT q.anomalies FROM lineage_quality q WHERE q.node_id = d.dataset_id ORDER BY q.measured_at DESC "
            "LIMIT 1) FROM lineage_datasets d WHERE d.dataset_id = ANY(%s::uuid[])", (ds_ids,)).fetchall()}
        nodes = []
        depth_of: dict[str, int] = {}
        for (did, col), step in self.taken.items():
            ns, name, qname, placeholder, anomalies = rows.get(did, (did, "", did, did, True, None))[1:]
            hidden = self.hidden.get((did, col), set()) - set(self.taken)
            nodes.append(NeighbourNode(f"{did}#{col}", "column", ns, name, f"{qname}#{col}", did, col, step,
                                       bool(hidden), len(hidden), bool(placeholder), None, bool(anomalies),
                                       f"{ns}/{name}#{col}"))
            depth_of[did] = min(step, depth_of.get(did, step))
        for did in ds_ids:
            if did in depth_of or did == self.root.node_id:
                ns, name, qname, placeholder, anomalies = rows.get(did, (did, "", did, did, True, None))[1:]
                nodes.append(NeighbourNode(did, "dataset", ns, name, qname, None, None, depth_of.get(did, 0),
                                           False, 0, bool(placeholder), None, bool(anomalies), f"{ns}/{name}"))
        nodes.sort(key=lambda n: (n.depth, n.label))
        return nodes


class _VersionWalk:
    """The neighbourhood of a dataset version: :meth:`LineageQueries.upstream` / ``downstream`` at the version,
    one level past ``depth`` so that the frontier's hidden neighbours are known, cut to the budget."""

    def __init__(self, queries: LineageQueries, root: LineageNode, direction: str, depth: int,
                 as_of: datetime | None, budget: int) -> None:
        self.q, self.conn, self.root, self.depth, self.as_of, self.budget = queries, queries.conn, root, depth, as_of, budget
        self.directions = ("upstream", "downstream") if direction == "both" else (direction,)

    def run(self) -> Neighbourhood:
        hits: dict[str, TraversalHit] = {}
        away: list[tuple[str, str]] = []       # (nearer the root, farther) for every edge the walks used
        flows: set[tuple[str, str, str]] = set()
        for direction in self.directions:
            walk = version_walk(self.q, direction, self.root, min(self.depth + 1, MAX_DEPTH), self.as_of, False)
            for hit in walk.hits:
                if hit.node.key not in hits or hit.steps < hits[hit.node.key].steps:
                    hits[hit.node.key] = hit
            for e in walk.edges:
                flows.add((e.source_id, e.target_id, e.kind))
                away.append((e.target_id, e.source_id) if direction == "upstream" else (e.source_id, e.target_id))
        taken: dict[str, TraversalHit] = {self.root.key: TraversalHit(self.root, 0, 0)}
        truncated = False
        for hit in sorted(hits.values(), key=lambda h: (h.steps, h.node.label)):
            if hit.level > self.depth or hit.node.key in taken:
                continue
            if len(taken) >= self.budget:
                truncated = True
                continue
            taken[hit.node.key] = hit
        hidden: dict[str, set[str]] = {}
        for here, there in away:
            if here in taken and there not in taken:
                hidden.setdefault(here, set()).add(there)
        edges = {f"{k}:{s}>{t}": NeighbourEdge(f"{k}:{s}>{t}", s, t, k, None, s if k == "writes" else t)
                 for s, t, k in flows if s in taken and t in taken}
        edges.update(self._dataset_edges(taken, list(edges.values())))
        return Neighbourhood(self.root.key, truncated, self._nodes(taken, hidden),
                             sorted(edges.values(), key=lambda e: (e.source, e.target, e.type)))

    def _dataset_edges(self, taken: dict[str, TraversalHit], job_edges: list[NeighbourEdge]
                       ) -> dict[str, NeighbourEdge]:
        """``<job>:<source>><target>`` for each taken ``source -reads-> job -writes-> target``, typed by the
        dataset edge the job made between the two datasets (``derived_from`` when it has none)."""
        readers: dict[str, set[str]] = {}
        writers: dict[str, set[str]] = {}
        for e in job_edges:
            (readers if e.type == "reads" else writers).setdefault(e.job or "", set()).add(
                e.source if e.type == "reads" else e.target)
        pairs = [(j, s, t) for j in readers for s in sorted(readers[j]) for t in sorted(writers.get(j, ()))]
        if not pairs:
            return {}
        ds = {k: h.node.node_id for k, h in taken.items()}
        types = {(str(j), str(s), str(t)): et for j, s, t, et in self.conn.execute(
            "SELECT e.job_id, e.source_node_id, e.target_node_id, min(e.edge_type) FROM lineage_edges e "
            "WHERE e.kind = 'dataset' AND (e.job_id, e.source_node_id, e.target_node_id) IN "
            "(SELECT * FROM unnest(%(j)s::uuid[], %(s)s::uuid[], %(t)s::uuid[])) GROUP BY 1, 2, 3",
            {"j": [j for j, _, _ in pairs], "s": [ds[s] for _, s, _ in pairs],
             "t": [ds[t] for _, _, t in pairs]}).fetchall()}
        return {f"{j}:{s}>{t}": NeighbourEdge(f"{j}:{s}>{t}", s, t,
                                              types.get((j, ds[s], ds[t]), "derived_from"), None, j)
                for j, s, t in pairs}

    def _nodes(self, taken: dict[str, TraversalHit], hidden: dict[str, set[str]]) -> list[NeighbourNode]:
        ds_ids = sorted({h.node.node_id for h in taken.values() if h.node.kind == "dataset"})
        version_ids = sorted({h.node.version_id for h in taken.values() if h.node.version_id})
        job_ids = sorted({h.node.node_id for h in taken.values() if h.node.kind == "job"})
        datasets = {r[0]: r[1:] for r in self.conn.execute(
            "SELECT d.dataset_id::text, d.qualified_name, d.is_placeholder FROM lineage_datasets d "
            "WHERE d.dataset_id = ANY(%s::uuid[])", (ds_ids,)).fetchall()}
        versions = {r[0]: r[1:] for r in self.conn.execute("""
            SELECT v.version_id::text, r.state, q.anomalies FROM lineage_dataset_versions v
            LEFT JOIN lineage_runs r ON r.run_id = v.run_id
            LEFT JOIN LATERAL (SELECT q.anomalies FROM lineage_quality q WHERE q.version_id = v.version_id
                               ORDER BY q.measured_at DESC LIMIT 1) q ON true
            WHERE v.version_id = ANY(%s::uuid[])""", (version_ids,)).fetchall()}
        jobs = {r[0]: r[1:] for r in self.conn.execute("""
            SELECT j.job_id::text, j.qualified_name, lr.state FROM lineage_jobs j
            LEFT JOIN LATERAL (SELECT r.state FROM lineage_runs r WHERE r.job_id = j.job_id
                               ORDER BY r.state_time DESC NULLS LAST LIMIT 1) lr ON true
            WHERE j.job_id = ANY(%s::uuid[])""", (job_ids,)).fetchall()}
        nodes = []
        for key, hit in taken.items():
            n = hit.node
            if n.kind == "job":
                qname, state = jobs.get(n.node_id, (n.node_id, None))
                anomaly, placeholder = False, n.is_placeholder
            else:
                qname, placeholder = datasets.get(n.node_id, (n.node_id, True))
                state, anomalies = versions.get(n.version_id or "", (None, None))
                anomaly = bool(anomalies)
            left = hidden.get(key, set())
            nodes.append(NeighbourNode(key, n.kind, n.namespace, n.name, qname,
                                       n.node_id if n.version_id else None, None, hit.level, bool(left), len(left),
                                       bool(placeholder), state, anomaly, n.label, n.version, n.version_id))
        nodes.sort(key=lambda n: (n.depth, n.label))
        return nodes
