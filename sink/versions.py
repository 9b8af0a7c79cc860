"""Walks at a dataset version: which input versions an object version came from, which versions it fed.

A dataset named at a version (an Evo ``<namespace>/<object_id>:<version>``, a ``datasetVersion`` facet's
``name@version``, or ``version=`` / ``--version``; :meth:`sink.queries.LineageQueries.resolve`) is walked
through the runs' slots, ``lineage_run_io`` (each slot: run, dataset, direction, the version it read or
wrote), instead of the job edges, which know datasets but not versions:

    upstream    a version -> the runs whose OUTPUT slot holds that version -> their INPUT slots -> ...
    downstream  a version -> the runs whose INPUT slot holds that version -> their OUTPUT slots -> ...

A slot with no version (a dataset read without a version, e.g. a plain table) continues the walk at the
dataset level: every run writing (upstream) or reading (downstream) that dataset. Runs are reported as
their jobs; a terminal job (:data:`sink.queries.TERMINAL_SQL`) is listed but not walked through when
``stop_at_terminal``; ``as_of`` keeps the slots with ``event_time <= as_of``. Depth and levels count as
in the dataset walk (depth 1: the runs that wrote the version and their inputs). Each level is one
index-backed query per direction (``lineage_run_io`` by dataset, by run).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = ["version_walk"]

#: Slots of the frontier's datasets in direction ``%(dir)s`` (``output`` upstream, ``input`` downstream).
DATASET_SLOTS_SQL = """
SELECT o.dataset_id::text, o.version_id::text, o.run_id::text, r.job_id::text
  FROM lineage_run_io o JOIN lineage_runs r ON r.run_id = o.run_id
 WHERE o.dataset_id = ANY(%(ids)s::uuid[]) AND o.direction = %(dir)s
   AND (%(as_of)s::timestamptz IS NULL OR o.event_time <= %(as_of)s::timestamptz)"""

#: The other slots of the frontier's runs (``input`` upstream, ``output`` downstream).
RUN_SLOTS_SQL = """
SELECT o.run_id::text, o.dataset_id::text, o.version_id::text
  FROM lineage_run_io o
 WHERE o.run_id = ANY(%(runs)s::uuid[]) AND o.direction = %(dir)s
   AND (%(as_of)s::timestamptz IS NULL OR o.event_time <= %(as_of)s::timestamptz)"""

_TERMINAL_JOBS_SQL = "SELECT j.job_id::text FROM lineage_jobs j WHERE j.job_id = ANY(%(ids)s::uuid[]) AND {terminal}"


def version_walk(q: Any, direction: str, root: Any, depth: int, as_of: datetime | None,
                 stop_at_terminal: bool) -> Any:
    """The :class:`~sink.queries.TraversalResult` of a walk from ``root`` (a dataset at a version)."""
    from .queries import TERMINAL_SQL, TraversalEdge, TraversalResult

    alias_of = {str(a): str(c) for a, c in q._all(
        "SELECT dataset_id, alias_of FROM lineage_datasets WHERE alias_of IS NOT NULL")}
    aliases: dict[str, list[str]] = {}
    for alias, canonical in alias_of.items():
        aliases.setdefault(canonical, []).append(alias)
    slot_dir, next_dir = ("output", "input") if direction == "upstream" else ("input", "output")
    frontier: set[tuple[str, str | None]] = {(root.node_id, root.version_id)}
    datasets: dict[tuple[str, str | None], int] = {(root.node_id, root.version_id): 0}
    jobs: dict[str, int] = {}
    terminal: set[str] = set()
    edges: set[tuple[str, str, str]] = set()
    seen_runs: set[str] = set()
    for level in range(1, depth + 1):
        ids = sorted({i for d, _ in frontier for i in [d, *aliases.get(d, [])]})
        runs: dict[str, str] = {}
        for ds_id, version_id, run_id, job_id in q._all(DATASET_SLOTS_SQL, {"ids": ids, "dir": slot_dir,
                                                                            "as_of": as_of}):
            node = (alias_of.get(ds_id, ds_id), version_id)
            matched = [f for f in frontier if f[0] == node[0] and (f[1] is None or f[1] == version_id)]
            if not matched or job_id is None:
                continue
            runs[run_id] = job_id
            jobs.setdefault(job_id, 2 * level - 1)
            for f in matched:
                edges.add(_flow(direction, _key(*f), job_id, slot_dir))
        if stop_at_terminal and runs:
            found = {r[0] for r in q._all(_TERMINAL_JOBS_SQL.format(terminal=TERMINAL_SQL),
                                          {"ids": sorted(set(runs.values()))})}
            terminal |= found
        open_runs = sorted(r for r, j in runs.items() if j not in terminal and r not in seen_runs)
        seen_runs |= set(open_runs)
        frontier = set()
        for run_id, ds_id, version_id in q._all(RUN_SLOTS_SQL, {"runs": open_runs, "dir": next_dir,
                                                                "as_of": as_of}) if open_runs else []:
            node = (alias_of.get(ds_id, ds_id), version_id)
            edges.add(_flow(direction, runs[run_id], _key(*node), next_dir))
            if node not in datasets:
                datasets[node] = 2 * level
                frontier.add(node)
        if not frontier:
            break
    return TraversalResult(root, direction, depth, as_of,
                           _hits(q, root, datasets, jobs, terminal),
                           sorted((TraversalEdge(s, t, k, k) for s, t, k in edges),
                                  key=lambda e: (e.source_id, e.target_id, e.kind)))


def _key(dataset_id: str, version_id: str | None) -> str:
    return dataset_id if version_id is None else f"{dataset_id}@{version_id}"


def _flow(direction: str, here: str, there: str, slot: str) -> tuple[str, str, str]:
    """The edge between ``here`` and ``there`` in data-flow order: an input slot is ``reads`` (dataset ->
    job), an output slot ``writes`` (job -> dataset)."""
    if slot == "input":
        return (here, there, "reads") if direction == "downstream" else (there, here, "reads")
    return (there, here, "writes") if direction == "upstream" else (here, there, "writes")


def _hits(q: Any, root: Any, datasets: dict[tuple[str, str | None], int], jobs: dict[str, int],
          terminal: set[str]) -> list[Any]:
    from dataclasses import replace

    from .queries import LineageNode, TraversalHit

    reached = {k: v for k, v in datasets.items() if (k[0], k[1]) != (root.node_id, root.version_id)}
    nodes = q._datasets_by_id(sorted({d for d, _ in reached}))
    version_ids = sorted({v for _, v in reached if v is not None})
    names = dict(q._all("SELECT version_id::text, version FROM lineage_dataset_versions "
                        "WHERE version_id = ANY(%s::uuid[])", (version_ids,))) if version_ids else {}
    job_nodes = q._jobs_by_id(sorted(jobs))
    hits = []
    for (ds_id, version_id), steps in reached.items():
        node = nodes.get(ds_id) or LineageNode(ds_id, "dataset", "", ds_id, is_placeholder=True)
        if version_id is not None and not str(names.get(version_id, "")).startswith("run:"):
            node = replace(node, version=names.get(version_id), version_id=version_id)
        elif version_id is not None:    # a run's synthetic version ("run:<id>"): the dataset as that run wrote it
            node = replace(node, version_id=version_id)
        hits.append(TraversalHit(node, (steps + 1) // 2, steps))
    for job_id, steps in jobs.items():
        node = job_nodes.get(job_id) or LineageNode(job_id, "job", "", job_id, is_placeholder=True)
        hits.append(TraversalHit(node, (steps + 1) // 2, steps, job_id in terminal))
    hits.sort(key=lambda h: (h.steps, h.node.label))
    return hits
