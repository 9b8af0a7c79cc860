"""Find nodes by name and say everything the graph knows about one: ``search`` and ``show``.

Search (:func:`search`)
    The query, lower-cased, is matched against the names, namespaces (through ``qualified_name``,
    which is ``namespace/name``) and, for datasets, the column names of their schema. Each match falls
    in one tier; ``coverage = len(query) / len(matched text)`` (1 only for an exact match):

    * exact: the name, the qualified name or the column name equals the query: score 4.0;
    * prefix: the name, the qualified name (so a namespace) or the column name starts with it:
      ``2 + coverage``, in (2, 3);
    * substring: it occurs inside the qualified name or a column name (3+ characters):
      ``1 + coverage / 2``, plus 0.5 when it starts a word (after one of ``./:_-#@`` or a space:
      ``orders`` in ``raw.orders_55``), in (1, 2).

    So exact > prefix > substring, within a tier the closer (shorter) name first, ties by name. Exact and
    prefix candidates are btree range scans (``text_pattern_ops`` on ``lower(name)`` and
    ``lower(qualified_name)``; ``lineage_search_columns`` for columns) that stop at ``offset + limit + 1``
    per node type. The substring tier (pg_trgm GIN indexes) is read only when those do not fill the page,
    since no substring score can outrank them; it reads :data:`SUBSTRING_CANDIDATES` candidates (or the
    page, if larger) in index order and ranks them, so with many matches the page holds the best of those
    candidates, not of all matches. Aliases (a symlinks name) are found by their own name and reported as
    their canonical node (``alias`` says which name matched). Pagination: ``offset`` / ``limit`` over the
    ranked list, ``next_offset`` None on the last page; ``offset + limit`` is capped at :data:`MAX_WINDOW`.

Show (:func:`show`)
    One node (any name :meth:`sink.queries.LineageQueries.resolve` accepts) as a JSON-ready dict: type,
    schema, owners, tags, versions, latest runs (state, duration), quality, provenance, aliases; for a
    job its SQL, source code location and job type (from the job's versions and its latest event's
    facets); for a dataset the ``tableConstraints`` facet of the latest event that declares one.
    Lists are the latest :data:`SHOW_LIMIT` entries, newest first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sink.queries import LineageNode, LineageQueries, QueryError

__all__ = ["SearchHit", "SearchPage", "search", "show", "node_facets", "latest_constraints",
           "MIN_SUBSTRING", "MAX_WINDOW", "SHOW_LIMIT", "NODE_TYPES"]

MIN_SUBSTRING = 3
MAX_WINDOW = 1000
SHOW_LIMIT = 20
#: Jobs (writers first) whose latest events are searched for a dataset's tableConstraints facet.
CONSTRAINT_JOBS = 50
#: Substring tiers read this many candidates (unordered) before ranking them.
SUBSTRING_CANDIDATES = 200
NODE_TYPES = ("dataset", "job", "column")


@dataclass(frozen=True)
class SearchHit:
    """One search result: a dataset, a job, or a column of a dataset (``column`` set)."""

    id: str
    type: str
    namespace: str
    name: str
    qualified_name: str
    column: str | None
    score: float
    alias: str | None = None        # the alias name that matched, when the hit is reported canonically

    @property
    def label(self) -> str:
        """The name the CLI and API accept for this node."""
        if self.type == "job":
            return f"job:{self.namespace}/{self.name}"
        base = f"{self.namespace}/{self.name}"
        return f"{base}#{self.column}" if self.column is not None else base

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


@dataclass
class SearchPage:
    query: str
    results: list[SearchHit] = field(default_factory=list)
    next_offset: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "results": [h.to_dict() for h in self.results],
                "next_offset": self.next_offset}


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _named_sql(table: str, id_col: str, extra: str, substring: bool) -> str:
    """Candidates of one node table: exact and prefix tiers (btree probes, each bounded by ``%(n)s``), or
    with ``substring`` the substring tier (trigram index, bounded by ``%(n_sub)s``)."""
    cols = f"t.{id_col}, t.namespace, t.name, t.qualified_name{extra}"
    if substring:
        return f"SELECT {cols} FROM {table} t WHERE lower(t.qualified_name) LIKE %(infix)s LIMIT %(n_sub)s"
    return f"""
(SELECT {cols} FROM {table} t WHERE lower(t.name) = %(q)s LIMIT %(n)s)
UNION ALL
(SELECT {cols} FROM {table} t WHERE lower(t.qualified_name) = %(q)s LIMIT %(n)s)
UNION ALL
(SELECT {cols} FROM {table} t WHERE lower(t.name) LIKE %(prefix)s ORDER BY lower(t.name) USING ~<~ LIMIT %(n)s)
UNION ALL
(SELECT {cols} FROM {table} t WHERE lower(t.qualified_name) LIKE %(prefix)s
 ORDER BY lower(t.qualified_name) USING ~<~ LIMIT %(n)s)
"""


def _column_sql(substring: bool) -> str:
    """Column candidates from ``lineage_search_columns`` (migration 007): exact then prefix (btree range
    scans that stop at ``%(n)s``), or with ``substring`` the trigram tier."""
    if substring:
        where = "SELECT * FROM lineage_search_columns c WHERE c.column_lower LIKE %(infix)s LIMIT %(n_sub)s"
    else:
        where = ("(SELECT * FROM lineage_search_columns c WHERE c.column_lower = %(q)s LIMIT %(n)s) UNION ALL "
                 "(SELECT * FROM lineage_search_columns c WHERE c.column_lower LIKE %(prefix)s "
                 "ORDER BY c.column_lower USING ~<~ LIMIT %(n)s)")
    return (f"SELECT d.dataset_id, d.namespace, d.name, d.qualified_name, d.alias_of, c.column_name FROM ({where}) c "
            "JOIN lineage_datasets d ON d.dataset_id = c.dataset_id")


_WORD_BREAKS = "./:_-#@ "


def _best(q: str, candidates: list[str]) -> tuple[int, float]:
    """The tier and score of the best match of ``q`` among lower-cased ``candidates`` (module doc)."""
    best = (0, 0.0)
    for text in candidates:
        cov = len(q) / max(len(text), len(q), 1)
        if text == q:
            tier, score = 3, 4.0
        elif text.startswith(q):
            tier, score = 2, 2 + cov
        elif len(q) >= MIN_SUBSTRING and q in text:
            word = any(text.startswith(q, i + 1) for i, ch in enumerate(text) if ch in _WORD_BREAKS)
            tier, score = 1, 1 + cov / 2 + (0.5 if word else 0.0)
        else:
            continue
        if score > best[1]:
            best = (tier, round(score, 6))
    return best


def search(conn: Any, text: str, *, types: list[str] | tuple[str, ...] | None = None, limit: int = 20,
           offset: int = 0) -> SearchPage:
    """Datasets, jobs and columns whose name, namespace or column name matches ``text``, ranked (module doc)."""
    q = (text or "").strip().lower()
    if not q:
        raise QueryError("search needs some text")
    if "\x00" in q:
        return SearchPage(text)
    kinds = tuple(types) if types else NODE_TYPES
    unknown = [k for k in kinds if k not in NODE_TYPES]
    if unknown:
        raise QueryError(f"unknown node type(s) {unknown}: use {', '.join(NODE_TYPES)}")
    if not 1 <= limit <= 500:
        raise QueryError(f"limit must be between 1 and 500, not {limit}")
    if offset < 0 or offset + limit > MAX_WINDOW:
        raise QueryError(f"offset must be >= 0 and offset + limit <= {MAX_WINDOW}")
    esc = _like_escape(q)
    want = offset + limit + 1
    params = {"q": q, "n": want, "n_sub": max(want, SUBSTRING_CANDIDATES), "prefix": esc + "%",
              "infix": "%" + esc + "%"}
    hits: dict[tuple[str, str | None], SearchHit] = {}
    aliases: dict[str, list[SearchHit]] = {}

    def keep(hit: SearchHit, alias_of: Any = None) -> None:
        if alias_of is not None:
            aliases.setdefault(str(alias_of), []).append(hit)
            return
        key = (hit.id, hit.column)
        if key not in hits or hits[key].score < hit.score:
            hits[key] = hit

    def collect(substring: bool) -> None:
        if "dataset" in kinds:
            for did, ns, name, qname, alias_of in conn.execute(
                    _named_sql("lineage_datasets", "dataset_id", ", t.alias_of", substring), params).fetchall():
                tier, score = _best(q, [name.lower(), qname.lower()])
                if tier:
                    keep(SearchHit(str(did), "dataset", ns, name, qname, None, score), alias_of)
        if "job" in kinds:
            for jid, ns, name, qname in conn.execute(
                    _named_sql("lineage_jobs", "job_id", "", substring), params).fetchall():
                tier, score = _best(q, [name.lower(), qname.lower()])
                if tier:
                    keep(SearchHit(str(jid), "job", ns, name, qname, None, score))
        if "column" in kinds:
            for did, ns, name, qname, alias_of, col in conn.execute(_column_sql(substring), params).fetchall():
                tier, score = _best(q, [col.lower()])
                if tier:
                    keep(SearchHit(str(did), "column", ns, name, qname, col, score), alias_of)

    collect(substring=False)
    # every substring score (< 2) is below every exact or prefix score (> 2): the substring tier is read
    # only when the exact and prefix tiers do not fill the page
    if len(q) >= MIN_SUBSTRING and len(hits) + sum(map(len, aliases.values())) < want:
        collect(substring=True)
    if aliases:
        canon = {str(r[0]): r for r in conn.execute(
            "SELECT dataset_id, namespace, name, qualified_name FROM lineage_datasets WHERE dataset_id = ANY(%s::uuid[])",
            (list(aliases),)).fetchall()}
        for cid, found in aliases.items():
            row = canon.get(cid)
            for hit in found:
                if row is None:      # the canonical row is not written (yet): report the alias itself
                    keep(hit)
                else:
                    keep(SearchHit(cid, hit.type, row[1], row[2], row[3], hit.column, hit.score,
                                   alias=hit.qualified_name))
    ranked = sorted(hits.values(), key=lambda h: (-h.score, h.qualified_name, h.column or "", h.type))
    page = ranked[offset:offset + limit]
    return SearchPage(text, page, offset + limit if len(ranked) > offset + limit else None)


# -- show ---------------------------------------------------------------------------------------------


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _owner_names(owners: Any) -> list[str]:
    out = []
    for o in owners or []:
        if isinstance(o, dict):
            o = o.get("name") or o.get("id") or ""
        if o:
            out.append(str(o))
    return out


def _job_type(text: str | None, facet: dict[str, Any] | None) -> dict[str, Any] | None:
    if isinstance(facet, dict) and facet:
        return {k: facet.get(k) for k in ("processingType", "integration", "jobType") if facet.get(k) is not None}
    if not text:
        return None
    parts = (text.split("/") + ["", "", ""])[:3]
    return {k: v for k, v in zip(("processingType", "integration", "jobType"), parts, strict=True) if v}


def node_facets(conn: Any, job_ns: str, job_name: str, limit: int = 5) -> list[dict[str, Any]]:
    """The latest ``limit`` raw events of one job (newest first), parsed (index ``lineage_events_job``)."""
    rows = conn.execute("SELECT payload FROM lineage_events WHERE job_namespace = %s AND job_name = %s "
                        "ORDER BY event_time DESC LIMIT %s", (job_ns, job_name, limit)).fetchall()
    return [p for p in (_json(r[0]) for r in rows) if isinstance(p, dict)]


def latest_constraints(conn: Any, dataset_ids: list[str], per_job: int = 3) -> dict[str, dict[str, Any]]:
    """``{dataset id: tableConstraints facet}`` for the given datasets, from the latest events of the jobs
    that read or wrote them (the code scanner declares DDL constraints on its job events' datasets): at most
    :data:`CONSTRAINT_JOBS` jobs per dataset, writers first."""
    if not dataset_ids:
        return {}
    rows = conn.execute("""
        SELECT ds.dataset_id, ds.namespace, ds.name, ev.payload
        FROM lineage_datasets ds
        CROSS JOIN LATERAL (SELECT e.job_id FROM lineage_edges e
                            WHERE e.kind IN ('reads', 'writes') AND e.job_id IS NOT NULL
                              AND (e.source_node_id = ds.dataset_id OR e.target_node_id = ds.dataset_id)
                            GROUP BY e.job_id ORDER BY bool_or(e.kind = 'writes') DESC, e.job_id
                            LIMIT %(jobs)s) je
        JOIN lineage_jobs j ON j.job_id = je.job_id
        CROSS JOIN LATERAL (SELECT payload, event_time FROM lineage_events
                            WHERE job_namespace = j.namespace AND job_name = j.name
                            ORDER BY event_time DESC LIMIT %(per_job)s) ev
        WHERE ds.dataset_id = ANY(%(ids)s::uuid[]) AND ev.payload LIKE '%%tableConstraints%%'
        ORDER BY ev.event_time DESC""", {"ids": dataset_ids, "per_job": per_job, "jobs": CONSTRAINT_JOBS}).fetchall()
    out: dict[str, dict[str, Any]] = {}
    for did, ns, name, payload in rows:
        key = str(did)
        if key in out:
            continue
        event = _json(payload)
        for ds in (event.get("inputs") or []) + (event.get("outputs") or []) if isinstance(event, dict) else []:
            if isinstance(ds, dict) and ds.get("namespace") == ns and ds.get("name") == name:
                facet = (ds.get("facets") or {}).get("tableConstraints")
                if isinstance(facet, dict):
                    out[key] = {"primaryKey": list(facet.get("primaryKey") or []),
                                "foreignKeys": list(facet.get("foreignKeys") or [])}
                    break
    return out


def _base(node: LineageNode, qualified_name: str) -> dict[str, Any]:
    return {"id": node.node_id, "type": node.kind, "namespace": node.namespace, "name": node.name,
            "qualified_name": qualified_name, "label": node.label, "column": node.column,
            "placeholder": node.is_placeholder, "node_type": node.node_type or None,
            "schema": [], "owners": list(node.owners), "tags": [], "description": None, "versions": [], "runs": [],
            "quality": [], "provenance": [], "aliases": [], "sql": None, "source_code_location": None,
            "job_type": None, "constraints": None, "first_seen": None, "last_seen": None}


def _run(r: tuple[Any, ...]) -> dict[str, Any]:
    run_id, state, started, ended, duration_ms, error, job_label = r[:7]
    return {"run_id": str(run_id), "state": state, "started_at": _iso(started), "ended_at": _iso(ended),
            "duration_s": None if duration_ms is None else duration_ms / 1000.0, "error_message": error,
            "job": job_label}


_RUN_COLUMNS = ("r.run_id, r.state, r.started_at, r.ended_at, r.duration_ms, r.error_message, "
                "CASE WHEN j.job_id IS NULL THEN NULL ELSE 'job:' || j.namespace || '/' || j.name END")


def show(conn: Any, node: str) -> dict[str, Any]:
    """Everything the graph knows about ``node`` (module doc); raises NodeNotFoundError for an unknown name."""
    resolved = LineageQueries(conn).resolve(node)
    if resolved.kind == "job":
        return _show_job(conn, resolved)
    return _show_dataset(conn, resolved)


def _show_dataset(conn: Any, node: LineageNode) -> dict[str, Any]:
    row = conn.execute("SELECT qualified_name, fields, tags, description, first_seen, last_seen "
                       "FROM lineage_datasets WHERE dataset_id = %s", (node.node_id,)).fetchone()
    out = _base(node, row[0])
    fields = _json(row[1]) if isinstance(_json(row[1]), list) else []
    out["schema"] = [{"name": f.get("name"), "type": f.get("type"), "description": f.get("description"),
                      "nullable": f.get("nullable")} for f in fields if isinstance(f, dict)]
    if node.column is not None:
        out["schema"] = [f for f in out["schema"] if f["name"] == node.column] or \
            [{"name": node.column, "type": None, "description": None, "nullable": None}]
    out["tags"] = [str(t) for t in (_json(row[2]) or [])]
    out["description"], out["first_seen"], out["last_seen"] = row[3], _iso(row[4]), _iso(row[5])
    out["aliases"] = [r[0] for r in conn.execute(
        "SELECT qualified_name FROM lineage_datasets WHERE alias_of = %s ORDER BY qualified_name",
        (node.node_id,)).fetchall()]
    ids = [node.node_id] + [str(r[0]) for r in conn.execute(
        "SELECT dataset_id FROM lineage_datasets WHERE alias_of = %s", (node.node_id,)).fetchall()]
    out["versions"] = [{"version": v, "version_id": str(vid), "created_at": _iso(t), "run_id": str(rid) if rid else None,
                        "row_count": rc} for vid, v, t, rid, rc in conn.execute(
        "SELECT version_id, version, event_time, run_id, row_count FROM lineage_dataset_versions "
        "WHERE dataset_id = ANY(%s::uuid[]) ORDER BY event_time DESC LIMIT %s", (ids, SHOW_LIMIT)).fetchall()]
    # the runs that wrote the latest versions (index lineage_dataset_versions_ds: bounded however many runs
    # touched the dataset); a dataset with no version falls back to the runs' slots
    out["runs"] = [_run(r) for r in conn.execute(
        f"SELECT {_RUN_COLUMNS} FROM (SELECT DISTINCT run_id FROM (SELECT run_id FROM lineage_dataset_versions "
        "WHERE dataset_id = ANY(%s::uuid[]) AND run_id IS NOT NULL ORDER BY event_time DESC LIMIT %s) v) v "
        "JOIN lineage_runs r ON r.run_id = v.run_id LEFT JOIN lineage_jobs j ON j.job_id = r.job_id "
        "ORDER BY coalesce(r.ended_at, r.started_at, r.last_seen) DESC NULLS LAST", (ids, SHOW_LIMIT)).fetchall()]
    if not out["runs"]:
        out["runs"] = [_run(r) for r in conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM (SELECT DISTINCT run_id FROM lineage_run_io "
            "WHERE dataset_id = ANY(%s::uuid[]) AND direction = 'output') io "
            "JOIN lineage_runs r ON r.run_id = io.run_id LEFT JOIN lineage_jobs j ON j.job_id = r.job_id "
            "ORDER BY coalesce(r.ended_at, r.started_at, r.last_seen) DESC NULLS LAST LIMIT %s",
            (ids, SHOW_LIMIT)).fetchall()]
    out["quality"] = [{"version": v, "version_id": str(vid), "measured_at": _iso(t), "scores": _json(m) or {},
                       "validations": _json(val) or [],
                       "failed_validations": [x for x in (_json(val) or []) if isinstance(x, dict)
                                              and x.get("passed") is False],
                       "anomalies": _json(an) or []}
                      for vid, v, t, m, val, an in conn.execute(
        "SELECT q.version_id, v.version, q.measured_at, q.metrics, q.validations, q.anomalies FROM lineage_quality q "
        "LEFT JOIN lineage_dataset_versions v ON v.version_id = q.version_id "
        "WHERE q.node_id = ANY(%s::uuid[]) ORDER BY q.measured_at DESC LIMIT %s", (ids, SHOW_LIMIT)).fetchall()]
    out["provenance"] = _provenance(conn, ids)
    found = latest_constraints(conn, ids)
    out["constraints"] = found.get(node.node_id) or next(iter(found.values()), None)
    return out


def _provenance(conn: Any, ids: list[str], agent: str | None = None) -> list[dict[str, Any]]:
    """Provenance records of the nodes ``ids`` (of the job ``agent`` only, when given), newest first."""
    return [{"id": str(pid), "node_id": str(nid), "event_hash": h, "event_type": et, "timestamp": _iso(t),
             "agent": _json(a), "operation": _json(o), "context": _json(c), "tracing": _json(tr) or {}}
            for pid, nid, h, et, t, a, o, c, tr in conn.execute(
        "SELECT provenance_id, node_id, event_hash, event_type, event_time, agent, operation, context, tracing "
        "FROM lineage_provenance WHERE node_id = ANY(%s::uuid[]) AND (%s::text IS NULL OR agent->>'id' = %s) "
        "ORDER BY event_time DESC LIMIT %s", (ids, agent, agent, SHOW_LIMIT)).fetchall()]


def _show_job(conn: Any, node: LineageNode) -> dict[str, Any]:
    row = conn.execute("SELECT qualified_name, owners, job_type, description, tracing, first_seen, last_seen "
                       "FROM lineage_jobs WHERE job_id = %s", (node.node_id,)).fetchone()
    out = _base(node, row[0])
    out["owners"] = _owner_names(_json(row[1]))
    out["description"], out["tracing"] = row[3], _json(row[4]) or {}
    out["first_seen"], out["last_seen"] = _iso(row[5]), _iso(row[6])
    versions = conn.execute(
        "SELECT job_version_id, source_type, source_url, git_commit, sql, first_seen FROM lineage_job_versions "
        "WHERE job_id = %s ORDER BY first_seen DESC LIMIT %s", (node.node_id, SHOW_LIMIT)).fetchall()
    out["versions"] = [{"version": commit or str(vid), "version_id": str(vid), "created_at": _iso(t),
                        "source_type": st, "source_url": url, "git_commit": commit}
                       for vid, st, url, commit, _sql, t in versions]
    out["runs"] = [_run(r) for r in conn.execute(
        f"SELECT {_RUN_COLUMNS} FROM lineage_runs r LEFT JOIN lineage_jobs j ON j.job_id = r.job_id "
        "WHERE r.job_id = %s ORDER BY coalesce(r.ended_at, r.started_at, r.last_seen) DESC NULLS LAST LIMIT %s",
        (node.node_id, SHOW_LIMIT)).fetchall()]
    facets: dict[str, Any] = {}
    for event in reversed(node_facets(conn, node.namespace, node.name)):   # newest wins
        job = event.get("job") if isinstance(event.get("job"), dict) else {}
        facets.update({k: v for k, v in (job.get("facets") or {}).items() if isinstance(v, dict)})
    sql_facet = facets.get("sql") or {}
    latest = versions[0] if versions else None
    out["sql"] = sql_facet.get("query") or (latest[4] if latest else None)
    scl = facets.get("sourceCodeLocation")
    if isinstance(scl, dict):
        out["source_code_location"] = {k: v for k, v in scl.items() if not k.startswith("_")}
    elif latest and (latest[1] or latest[2]):
        out["source_code_location"] = {"type": latest[1], "url": latest[2], "version": latest[3]}
    out["job_type"] = _job_type(row[2], facets.get("jobType"))
    out["provenance"] = _provenance_by_agent(conn, node)
    return out


def _provenance_by_agent(conn: Any, node: LineageNode) -> list[dict[str, Any]]:
    """Provenance of the datasets this job touched, newest first (records are kept per dataset)."""
    ids = [str(r[0]) for r in conn.execute(
        "SELECT DISTINCT CASE WHEN kind = 'reads' THEN source_node_id ELSE target_node_id END FROM lineage_edges "
        "WHERE job_id = %s AND kind IN ('reads', 'writes')", (node.node_id,)).fetchall()]
    return _provenance(conn, ids, agent=node.node_id)


# -- pages for the HTTP API: runs of a job, recent events, ERD ------------------------------------------


def _page_check(limit: int, offset: int, most: int = 500) -> None:
    if not 1 <= limit <= most:
        raise QueryError(f"limit must be between 1 and {most}, not {limit}")
    if offset < 0:
        raise QueryError(f"offset must be >= 0, not {offset}")


def job_runs(conn: Any, job: str, *, limit: int = 20, offset: int = 0) -> tuple[list[dict[str, Any]], int | None]:
    """Runs of one job, newest first (index ``lineage_runs_job``); ``(runs, next_offset)``."""
    _page_check(limit, offset)
    node = LineageQueries(conn).resolve(job if job.startswith("job:") or _is_uuid(job) else "job:" + job)
    if node.kind != "job":
        raise QueryError(f"{job!r} is not a job (name it job:namespace/name)")
    rows = conn.execute(
        f"SELECT {_RUN_COLUMNS}, r.nominal_start, r.nominal_end, r.parent_run_id FROM lineage_runs r "
        "LEFT JOIN lineage_jobs j ON j.job_id = r.job_id WHERE r.job_id = %s "
        "ORDER BY coalesce(r.ended_at, r.started_at, r.last_seen) DESC NULLS LAST, r.run_id LIMIT %s OFFSET %s",
        (node.node_id, limit + 1, offset)).fetchall()
    runs = [{**_run(r), "nominal_start": _iso(r[7]), "nominal_end": _iso(r[8]),
             "parent_run_id": str(r[9]) if r[9] else None} for r in rows[:limit]]
    return runs, offset + limit if len(rows) > limit else None


def _is_uuid(text: str) -> bool:
    import uuid

    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def recent_events(conn: Any, *, limit: int = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int | None]:
    """The raw events most recently committed (by batch, then event time), newest first."""
    _page_check(limit, offset)
    rows = conn.execute(
        "SELECT event_time, event_type, event_kind, job_namespace, job_name, run_id, producer, first_batch_id, "
        "payload::jsonb -> 'inputs', payload::jsonb -> 'outputs' FROM lineage_events "
        "ORDER BY first_batch_id DESC NULLS LAST, event_time DESC, event_hash LIMIT %s OFFSET %s",
        (limit + 1, offset)).fetchall()

    def names(value: Any) -> list[dict[str, Any]]:
        return [{"namespace": d.get("namespace"), "name": d.get("name")} for d in (value or []) if isinstance(d, dict)]

    events = [{"event_time": _iso(t), "event_type": et, "event_kind": kind,
               "job": f"job:{ns}/{name}" if ns is not None and name is not None else None,
               "run_id": str(rid) if rid else None, "producer": producer, "batch_id": batch,
               "inputs": names(ins), "outputs": names(outs)}
              for t, et, kind, ns, name, rid, producer, batch, ins, outs in rows[:limit]]
    return events, offset + limit if len(rows) > limit else None


_PARTS_SQL = "string_to_array(d.name, '.')"
_SCHEMA_SQL = (f"CASE cardinality({_PARTS_SQL}) WHEN 1 THEN NULL "
               f"ELSE ({_PARTS_SQL})[cardinality({_PARTS_SQL}) - 1] END")


def _split_table(name: str) -> tuple[str | None, str | None, str]:
    parts = name.split(".")
    if len(parts) >= 3:
        return ".".join(parts[:-2]), parts[-2], parts[-1]
    if len(parts) == 2:
        return None, parts[0], parts[1]
    return None, None, name


def _source_files(conn: Any, ids: list[str]) -> dict[str, str]:
    """``{dataset id: sourceCodeLocation path (or url)}`` of the latest event of a job writing it."""
    if not ids:
        return {}
    rows = conn.execute("""
        SELECT e.target_node_id::text, coalesce(p.payload::jsonb #>> '{job,facets,sourceCodeLocation,path}',
                                               p.payload::jsonb #>> '{job,facets,sourceCodeLocation,url}')
        FROM lineage_edges e JOIN lineage_jobs j ON j.job_id = e.job_id
        CROSS JOIN LATERAL (SELECT payload FROM lineage_events WHERE job_namespace = j.namespace
                            AND job_name = j.name ORDER BY event_time DESC LIMIT 1) p
        WHERE e.kind = 'writes' AND e.valid_to IS NULL AND e.target_node_id = ANY(%s::uuid[])""", (ids,)).fetchall()
    return {did: path for did, path in rows if path}


def erd(conn: Any, *, namespace: str | None = None, schema: str | None = None, source_file: str | None = None,
        limit: int = 100, offset: int = 0) -> dict[str, Any]:
    """Tables (datasets with a schema, aliases left out) with their columns, and the foreign-key relations
    declared by ``tableConstraints`` facets; names split as ``database.schema.table`` (the last two dots).

    ``source_file`` keeps the tables written by a job whose latest event's ``sourceCodeLocation`` path (or
    url) is that file. Paginated over tables in (namespace, name) order."""
    _page_check(limit, offset)
    where = ["d.alias_of IS NULL", "jsonb_typeof(d.fields) = 'array'", "jsonb_array_length(d.fields) > 0"]
    params: dict[str, Any] = {"limit": limit + 1, "offset": offset, "ns": namespace, "schema": schema,
                              "file": source_file}
    if namespace:
        where.append("d.namespace = %(ns)s")
    if schema:
        where.append(f"{_SCHEMA_SQL} = %(schema)s")
    if source_file:
        where.append("""EXISTS (SELECT 1 FROM lineage_edges e JOIN lineage_jobs j ON j.job_id = e.job_id
            CROSS JOIN LATERAL (SELECT payload FROM lineage_events WHERE job_namespace = j.namespace
                                AND job_name = j.name ORDER BY event_time DESC LIMIT 1) p
            WHERE e.kind = 'writes' AND e.valid_to IS NULL AND e.target_node_id = d.dataset_id
              AND %(file)s IN (p.payload::jsonb #>> '{job,facets,sourceCodeLocation,path}',
                               p.payload::jsonb #>> '{job,facets,sourceCodeLocation,url}'))""")
    rows = conn.execute(
        "SELECT d.dataset_id::text, d.namespace, d.name, d.qualified_name, d.fields FROM lineage_datasets d "
        f"WHERE {' AND '.join(where)} ORDER BY d.namespace, d.name LIMIT %(limit)s OFFSET %(offset)s",
        params).fetchall()
    page = rows[:limit]
    ids = [r[0] for r in page]
    constraints = latest_constraints(conn, ids)
    files = _source_files(conn, ids)
    tables, relations = [], []
    by_name = {(r[1], r[2]): r[0] for r in page}
    for did, ns, name, qname, fields in page:
        c = constraints.get(did) or {}
        pk = set(c.get("primaryKey") or [])
        db, sch, table = _split_table(name)
        tables.append({"id": did, "namespace": ns, "database": db, "schema": sch, "table": table,
                       "qualified_name": qname, "source_file": files.get(did),
                       "columns": [{"name": f.get("name"), "type": f.get("type"), "nullable": f.get("nullable"),
                                    "primary_key": f.get("name") in pk} for f in (_json(fields) or [])
                                   if isinstance(f, dict)]})
        for fk in c.get("foreignKeys") or []:
            ref = fk.get("references") or {}
            ref_ns, ref_name = ref.get("namespace") or ns, ref.get("name")
            to_id = by_name.get((ref_ns, ref_name))
            if to_id is None and ref_name:
                from schemas.identity import dataset_id

                to_id = str(dataset_id(ref_ns, ref_name))
            relations.append({"name": fk.get("name"), "from_table": did, "from_columns": list(fk.get("columns") or []),
                              "to_table": to_id, "to_columns": list(ref.get("columns") or [])})
    return {"tables": tables, "relations": relations, "next_offset": offset + limit if len(rows) > limit else None}


def new_batches(conn: Any, after: datetime | None) -> tuple[datetime | None, list[int]]:
    """``(newest committed_at, [batch ids committed after ``after``])`` from the transaction log; with
    ``after`` None only the watermark (nothing is new yet). By commit time, not batch id: batch ids of
    ``lineage load`` and of the stream need not grow together (index ``lineage_transactions_committed``)."""
    if after is None:
        row = conn.execute("SELECT max(committed_at) FROM lineage_transactions").fetchone()
        return (row[0] if row else None), []
    rows = conn.execute("SELECT batch_id, committed_at FROM lineage_transactions WHERE committed_at > %s "
                        "ORDER BY committed_at", (after,)).fetchall()
    if not rows:
        return after, []
    return rows[-1][1], [int(r[0]) for r in rows]


def changed_nodes(conn: Any, batches: list[int], most: int = 1000) -> list[str]:
    """Ids of the datasets and jobs last changed by ``batches`` (``last_batch_id`` indexes), at most ``most``.
    The range condition bounds the BRIN indexes' scan (migration 015) to the batches' ranges of pages."""
    if not batches:
        return []
    rows = conn.execute(
        "(SELECT dataset_id::text FROM lineage_datasets WHERE last_batch_id BETWEEN %(lo)s AND %(hi)s"
        " AND last_batch_id = ANY(%(b)s) LIMIT %(n)s) UNION ALL "
        "(SELECT job_id::text FROM lineage_jobs WHERE last_batch_id BETWEEN %(lo)s AND %(hi)s"
        " AND last_batch_id = ANY(%(b)s) LIMIT %(n)s)",
        {"b": batches, "lo": min(batches), "hi": max(batches), "n": most}).fetchall()
    return sorted(r[0] for r in rows)[:most]
