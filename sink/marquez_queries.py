"""Read queries behind the Marquez-compatible API (``api/marquez.py``): small, parameterised, paginated.

Each function takes an open psycopg connection and returns plain dicts (``dict_row``) or None; the
API module shapes them into Marquez's JSON. Lists return ``(rows, total)``. Graph walks come from
:class:`sink.queries.LineageQueries`; this module only reads rows by key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = [
    "list_namespaces", "get_namespace", "list_datasets", "get_dataset", "get_datasets", "get_jobs", "list_dataset_versions",
    "get_dataset_version", "list_jobs", "get_job", "job_datasets", "list_runs", "get_run", "run_io",
    "latest_runs", "list_events", "column_lineage_edges", "dataset_fields", "dataset_facets", "version_facets",
    "job_facets", "run_facets",
]


def _rows(conn: Any, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()


def _one(conn: Any, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    rows = _rows(conn, sql, params)
    return rows[0] if rows else None


def _count(conn: Any, sql: str, params: dict[str, Any]) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


# -- namespaces -----------------------------------------------------------------------------------

_NAMESPACE = """
SELECT n.namespace AS name, n.first_seen AS created_at,
       greatest(n.first_seen, (SELECT max(d.last_seen) FROM lineage_datasets d WHERE d.namespace = n.namespace),
                (SELECT max(j.last_seen) FROM lineage_jobs j WHERE j.namespace = n.namespace)) AS updated_at
FROM lineage_namespaces n"""


def list_namespaces(conn: Any, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    rows = _rows(conn, _NAMESPACE + " ORDER BY n.namespace LIMIT %(limit)s OFFSET %(offset)s",
                 {"limit": limit, "offset": offset})
    return rows, _count(conn, "SELECT count(*) FROM lineage_namespaces", {})


def get_namespace(conn: Any, namespace: str) -> dict[str, Any] | None:
    return _one(conn, _NAMESPACE + " WHERE n.namespace = %(ns)s", {"ns": namespace})


# -- datasets -------------------------------------------------------------------------------------

_DATASET = """
SELECT d.dataset_id, d.namespace, d.name, d.node_type, d.description, d.owner, d.tags, d.fields,
       d.first_seen, d.last_seen, d.is_placeholder,
       v.version_id AS current_version, v.event_time AS version_time,
       (SELECT max(io.event_time) FROM lineage_run_io io JOIN lineage_runs r ON r.run_id = io.run_id
         WHERE io.dataset_id = d.dataset_id AND io.direction = 'output' AND r.state = 'COMPLETE') AS last_modified_at
FROM lineage_datasets d
LEFT JOIN LATERAL (SELECT version_id, event_time FROM lineage_dataset_versions dv
                   WHERE dv.dataset_id = d.dataset_id ORDER BY dv.event_time DESC, dv.version_id DESC LIMIT 1) v ON true"""


def list_datasets(conn: Any, namespace: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    params = {"ns": namespace, "limit": limit, "offset": offset}
    rows = _rows(conn, _DATASET + " WHERE d.namespace = %(ns)s AND d.alias_of IS NULL "
                 "ORDER BY d.name LIMIT %(limit)s OFFSET %(offset)s", params)
    return rows, _count(conn, "SELECT count(*) FROM lineage_datasets WHERE namespace = %(ns)s AND alias_of IS NULL",
                        params)


def get_dataset(conn: Any, namespace: str, name: str) -> dict[str, Any] | None:
    return _one(conn, _DATASET + " WHERE d.namespace = %(ns)s AND d.name = %(name)s", {"ns": namespace, "name": name})


def get_datasets(conn: Any, dataset_ids: list[str]) -> list[dict[str, Any]]:
    """Several datasets by id, in one query (the lineage graph's nodes)."""
    return _rows(conn, _DATASET + " WHERE d.dataset_id = ANY(%(ids)s::uuid[])", {"ids": dataset_ids})


def dataset_fields(conn: Any, dataset_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``{dataset_id: fields}`` of several datasets (the column lineage nodes' types)."""
    rows = _rows(conn, "SELECT dataset_id::text AS id, fields FROM lineage_datasets WHERE dataset_id = ANY(%(ids)s::uuid[])",
                 {"ids": dataset_ids})
    return {r["id"]: r["fields"] or [] for r in rows}


_VERSION = """
SELECT dv.version_id, dv.version, dv.event_time, dv.run_id, dv.row_count, dv.byte_count, dv.fields,
       d.namespace, d.name, d.node_type, d.description, d.tags, d.fields AS dataset_fields
FROM lineage_dataset_versions dv JOIN lineage_datasets d ON d.dataset_id = dv.dataset_id"""


def list_dataset_versions(conn: Any, namespace: str, name: str, limit: int, offset: int
                          ) -> tuple[list[dict[str, Any]], int]:
    params = {"ns": namespace, "name": name, "limit": limit, "offset": offset}
    where = " WHERE d.namespace = %(ns)s AND d.name = %(name)s"
    rows = _rows(conn, _VERSION + where + " ORDER BY dv.event_time DESC, dv.version_id LIMIT %(limit)s "
                 "OFFSET %(offset)s", params)
    total = _count(conn, "SELECT count(*) FROM lineage_dataset_versions dv JOIN lineage_datasets d "
                   "ON d.dataset_id = dv.dataset_id" + where, params)
    return rows, total


def get_dataset_version(conn: Any, namespace: str, name: str, version: str) -> dict[str, Any] | None:
    """A version by its id (Marquez's version UUID) or by the producer's version string."""
    return _one(conn, _VERSION + " WHERE d.namespace = %(ns)s AND d.name = %(name)s "
                "AND (dv.version_id::text = %(v)s OR dv.version = %(v)s) ORDER BY dv.event_time DESC LIMIT 1",
                {"ns": namespace, "name": name, "v": version})


# -- jobs and runs --------------------------------------------------------------------------------

_JOB = """
SELECT j.job_id, j.namespace, j.name, j.job_type, j.description, j.owners, j.first_seen, j.last_seen,
       jv.job_version_id AS current_version, jv.source_url, jv.sql
FROM lineage_jobs j
LEFT JOIN LATERAL (SELECT job_version_id, source_url, sql FROM lineage_job_versions v WHERE v.job_id = j.job_id
                   ORDER BY v.last_seen DESC, v.job_version_id LIMIT 1) jv ON true"""


def list_jobs(conn: Any, namespace: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    params = {"ns": namespace, "limit": limit, "offset": offset}
    rows = _rows(conn, _JOB + " WHERE j.namespace = %(ns)s ORDER BY j.name LIMIT %(limit)s OFFSET %(offset)s", params)
    return rows, _count(conn, "SELECT count(*) FROM lineage_jobs WHERE namespace = %(ns)s", params)


def get_job(conn: Any, namespace: str, name: str) -> dict[str, Any] | None:
    return _one(conn, _JOB + " WHERE j.namespace = %(ns)s AND j.name = %(name)s", {"ns": namespace, "name": name})


def get_jobs(conn: Any, job_ids: list[str]) -> list[dict[str, Any]]:
    """Several jobs by id, in one query (the lineage graph's nodes)."""
    return _rows(conn, _JOB + " WHERE j.job_id = ANY(%(ids)s::uuid[])", {"ids": job_ids})


def job_datasets(conn: Any, job_ids: list[str]) -> list[dict[str, Any]]:
    """The datasets each job reads and writes: ``{job_id, direction ('input'|'output'), namespace, name}``."""
    return _rows(conn, """
        SELECT e.job_id::text AS job_id, CASE e.kind WHEN 'reads' THEN 'input' ELSE 'output' END AS direction,
               d.namespace, d.name
        FROM lineage_edges e
        JOIN lineage_datasets d ON d.dataset_id = CASE e.kind WHEN 'reads' THEN e.source_node_id ELSE e.target_node_id END
        WHERE e.job_id = ANY(%(ids)s::uuid[]) AND e.kind IN ('reads', 'writes') AND e.valid_to IS NULL
        ORDER BY d.namespace, d.name""", {"ids": job_ids})


_RUN = """
SELECT r.run_id, r.job_id, r.job_version_id, r.state, r.started_at, r.ended_at, r.duration_ms, r.nominal_start,
       r.nominal_end, r.first_seen, r.last_seen, r.error_message, j.namespace AS job_namespace, j.name AS job_name
FROM lineage_runs r LEFT JOIN lineage_jobs j ON j.job_id = r.job_id"""


def list_runs(conn: Any, namespace: str, job: str, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    params = {"ns": namespace, "name": job, "limit": limit, "offset": offset}
    where = " WHERE j.namespace = %(ns)s AND j.name = %(name)s"
    rows = _rows(conn, _RUN + where + " ORDER BY coalesce(r.started_at, r.first_seen) DESC, r.run_id "
                 "LIMIT %(limit)s OFFSET %(offset)s", params)
    return rows, _count(conn, "SELECT count(*) FROM lineage_runs r JOIN lineage_jobs j ON j.job_id = r.job_id" + where,
                        params)


def latest_runs(conn: Any, job_ids: list[str], per_job: int = 10) -> list[dict[str, Any]]:
    """The ``per_job`` most recent runs of each job, newest first."""
    return _rows(conn, """
        SELECT x.* FROM unnest(%(ids)s::uuid[]) AS q(job_id)
        CROSS JOIN LATERAL (""" + _RUN + """ WHERE r.job_id = q.job_id
            ORDER BY coalesce(r.started_at, r.first_seen) DESC, r.run_id LIMIT %(n)s) x""",
                 {"ids": job_ids, "n": per_job})


def get_run(conn: Any, run_id: str) -> dict[str, Any] | None:
    return _one(conn, _RUN + " WHERE r.run_id = %(id)s::uuid", {"id": run_id})


def run_io(conn: Any, run_ids: list[str]) -> list[dict[str, Any]]:
    """Dataset versions each run read and wrote: ``{run_id, direction, namespace, name, version}``."""
    return _rows(conn, """
        SELECT io.run_id::text AS run_id, io.direction, d.namespace, d.name,
               coalesce(io.version_id::text, v.version_id::text) AS version
        FROM lineage_run_io io JOIN lineage_datasets d ON d.dataset_id = io.dataset_id
        LEFT JOIN LATERAL (SELECT version_id FROM lineage_dataset_versions dv
                           WHERE dv.dataset_id = io.dataset_id AND dv.event_time <= io.event_time
                           ORDER BY dv.event_time DESC LIMIT 1) v ON io.version_id IS NULL
        WHERE io.run_id = ANY(%(ids)s::uuid[]) ORDER BY io.direction, d.namespace, d.name""", {"ids": run_ids})


# -- facets ---------------------------------------------------------------------------------------
#
# The graph keeps what it reads out of facets (fields, owner, tags, ...), not the facets: those are in the stored
# events (lineage_events.payload, the canonical JSON text). A node's facets are read back from its latest
# events, each facet as the newest event that carried it gave it (a facet marked ``"_deleted": true`` there is
# left out), in one query for a whole page of nodes; every event set is bounded per node, through indexes.

#: Per page: ``candidates (k, event_hash)`` (the events to read for node ``k``) and ``names (k, namespace,
#: name)`` (the names those events give the dataset ``k``: its own, its aliases'; an Evo ``<object id>:<v>``
#: names the object id) -> ``(k, facets)``, each dataset facet from the newest candidate event naming it.
_DATASET_FACETS = """
, docs AS (SELECT c.k, e.event_hash, e.event_time, e.payload::jsonb AS doc
           FROM (SELECT DISTINCT k, event_hash FROM candidates) c JOIN lineage_events e ON e.event_hash = c.event_hash),
entries AS (
    SELECT d.k, d.event_hash, d.event_time, x.value AS ds
    FROM docs d
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE jsonb_typeof(d.doc -> 'inputs') WHEN 'array' THEN d.doc -> 'inputs' ELSE '[]' END
        || CASE jsonb_typeof(d.doc -> 'outputs') WHEN 'array' THEN d.doc -> 'outputs' ELSE '[]' END
        || CASE jsonb_typeof(d.doc -> 'dataset') WHEN 'object' THEN jsonb_build_array(d.doc -> 'dataset')
           ELSE '[]' END) x
),
facet_rows AS (
    SELECT DISTINCT ON (en.k, f.key) en.k, f.key, f.value
    FROM entries en
    JOIN names n ON n.k = en.k AND n.namespace = en.ds ->> 'namespace'
                AND (n.name = en.ds ->> 'name' OR (en.ds ->> 'name' ~ '^[0-9a-fA-F-]{36}:[^:/]+$'
                                                   AND lower(split_part(en.ds ->> 'name', ':', 1)) = n.name))
    CROSS JOIN LATERAL jsonb_each(CASE jsonb_typeof(en.ds -> 'facets') WHEN 'object' THEN en.ds -> 'facets'
                                  ELSE '{}' END) f
    ORDER BY en.k, f.key, en.event_time DESC, en.event_hash DESC
)
SELECT k::text AS k, jsonb_object_agg(key, value) AS facets FROM facet_rows
WHERE NOT value @> '{"_deleted": true}' GROUP BY k"""

#: How many of a node's latest events are read for its facets (per source of events below).
FACET_EVENTS = 10


def dataset_facets(conn: Any, dataset_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{dataset_id: facets}``: each dataset facet as the newest of the dataset's latest events gave it.

    The events: the latest :data:`FACET_EVENTS` that read or wrote the dataset, or were DatasetEvents about it
    (its provenance records, index ``lineage_provenance_node``; an alias's too), the other events of their runs
    (a START that announced the output's facets), and the latest JobEvents of the jobs that read or write it
    (a code scanner declares schemas there).
    """
    if not dataset_ids:
        return {}
    rows = _rows(conn, """
        WITH page AS (SELECT dataset_id, namespace, name FROM lineage_datasets WHERE dataset_id = ANY(%(ids)s::uuid[])),
        names AS (
            SELECT dataset_id AS k, dataset_id AS node, namespace, name FROM page
            UNION ALL
            SELECT p.dataset_id, a.dataset_id, a.namespace, a.name
            FROM page p JOIN lineage_datasets a ON a.alias_of = p.dataset_id AND a.alias_of IS NOT NULL
        ),
        touched AS (
            SELECT n.k, pv.event_hash FROM names n
            CROSS JOIN LATERAL (SELECT pr.event_hash FROM lineage_provenance pr WHERE pr.node_id = n.node
                                ORDER BY pr.event_time DESC LIMIT %(n)s) pv
        ),
        candidates AS (
            SELECT k, event_hash FROM touched
            UNION
            SELECT t.k, o.event_hash FROM touched t
            JOIN lineage_events e ON e.event_hash = t.event_hash AND e.run_id IS NOT NULL
            CROSS JOIN LATERAL (SELECT o.event_hash FROM lineage_events o WHERE o.run_id = e.run_id
                                ORDER BY o.event_time DESC LIMIT %(n)s) o
            UNION
            SELECT p.dataset_id, ev.event_hash FROM page p
            CROSS JOIN LATERAL (SELECT e.job_id FROM lineage_edges e
                                WHERE e.kind IN ('reads', 'writes') AND e.job_id IS NOT NULL AND e.valid_to IS NULL
                                  AND (e.source_node_id = p.dataset_id OR e.target_node_id = p.dataset_id)
                                GROUP BY e.job_id ORDER BY bool_or(e.kind = 'writes') DESC, e.job_id LIMIT 3) je
            JOIN lineage_jobs j ON j.job_id = je.job_id
            CROSS JOIN LATERAL (SELECT event_hash, event_kind FROM lineage_events
                                WHERE job_namespace = j.namespace AND job_name = j.name
                                ORDER BY event_time DESC LIMIT 3) ev
            WHERE ev.event_kind = 'job'
        )""" + _DATASET_FACETS, {"ids": dataset_ids, "n": FACET_EVENTS})
    return {r["k"]: r["facets"] for r in rows}


def version_facets(conn: Any, version_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{version_id: facets}``: the dataset facets the events of the run that wrote each version gave it (up to
    the version's time); a version with no run (a DatasetEvent's) from the events about the dataset at its time."""
    if not version_ids:
        return {}
    rows = _rows(conn, """
        WITH page AS (SELECT v.version_id, v.dataset_id, v.run_id, v.event_time FROM lineage_dataset_versions v
                      WHERE v.version_id = ANY(%(ids)s::uuid[])),
        names AS (
            SELECT p.version_id AS k, d.namespace, d.name FROM page p JOIN lineage_datasets d ON d.dataset_id = p.dataset_id
            UNION ALL
            SELECT p.version_id, a.namespace, a.name
            FROM page p JOIN lineage_datasets a ON a.alias_of = p.dataset_id AND a.alias_of IS NOT NULL
        ),
        candidates AS (
            SELECT p.version_id AS k, e.event_hash FROM page p
            CROSS JOIN LATERAL (SELECT e.event_hash FROM lineage_events e WHERE e.run_id = p.run_id
                                  AND e.event_time <= p.event_time ORDER BY e.event_time DESC LIMIT %(n)s) e
            UNION
            SELECT p.version_id, pr.event_hash FROM page p
            JOIN lineage_provenance pr ON p.run_id IS NULL AND pr.node_id = p.dataset_id AND pr.event_time = p.event_time
        )""" + _DATASET_FACETS, {"ids": version_ids, "n": FACET_EVENTS})
    return {r["k"]: r["facets"] for r in rows}


def _merged(conn: Any, sql: str, ids: list[str], path: str) -> dict[str, dict[str, Any]]:
    """``{k: facets}`` merged from ``sql``'s ``(k, event_hash, event_time, doc)`` rows at ``doc #> path``, each
    facet from the newest event that carried it (``_deleted`` facets left out)."""
    if not ids:
        return {}
    rows = _rows(conn, f"""
        WITH docs AS ({sql}),
        facet_rows AS (
            SELECT DISTINCT ON (d.k, f.key) d.k, f.key, f.value FROM docs d
            CROSS JOIN LATERAL jsonb_each(CASE jsonb_typeof(d.doc #> '{path}') WHEN 'object' THEN d.doc #> '{path}'
                                          ELSE '{{}}' END) f
            ORDER BY d.k, f.key, d.event_time DESC, d.event_hash DESC
        )
        SELECT k::text AS k, jsonb_object_agg(key, value) AS facets FROM facet_rows
        WHERE NOT value @> '{{"_deleted": true}}' GROUP BY k""", {"ids": ids, "n": FACET_EVENTS})
    return {r["k"]: r["facets"] for r in rows}


def job_facets(conn: Any, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{job_id: facets}``: each job facet as the newest of the job's latest :data:`FACET_EVENTS` events gave it
    (index ``lineage_events_job``)."""
    return _merged(conn, """
        SELECT j.job_id AS k, e.event_hash, e.event_time, e.payload::jsonb AS doc FROM lineage_jobs j
        CROSS JOIN LATERAL (SELECT event_hash, event_time, payload FROM lineage_events
                            WHERE job_namespace = j.namespace AND job_name = j.name
                            ORDER BY event_time DESC LIMIT %(n)s) e
        WHERE j.job_id = ANY(%(ids)s::uuid[])""", job_ids, "{job,facets}")


def run_facets(conn: Any, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{run_id: facets}``: each run facet as the newest of the run's latest :data:`FACET_EVENTS` events gave it
    (index ``lineage_events_run``)."""
    return _merged(conn, """
        SELECT r.id AS k, e.event_hash, e.event_time, e.payload::jsonb AS doc FROM unnest(%(ids)s::uuid[]) AS r(id)
        CROSS JOIN LATERAL (SELECT event_hash, event_time, payload FROM lineage_events WHERE run_id = r.id
                            ORDER BY event_time DESC LIMIT %(n)s) e""", run_ids, "{run,facets}")


# -- events ---------------------------------------------------------------------------------------

def list_events(conn: Any, *, limit: int, offset: int, ascending: bool = False, before: datetime | None = None,
                after: datetime | None = None, namespace: str | None = None) -> tuple[list[str], int]:
    """Stored events (canonical JSON text), by event time, and how many match."""
    where = ["(%(before)s::timestamptz IS NULL OR event_time < %(before)s)",
             "(%(after)s::timestamptz IS NULL OR event_time > %(after)s)",
             "(%(ns)s::text IS NULL OR job_namespace = %(ns)s)"]
    params = {"before": before, "after": after, "ns": namespace, "limit": limit, "offset": offset}
    clause = " WHERE " + " AND ".join(where)
    order = "ASC" if ascending else "DESC"
    rows = conn.execute(f"SELECT payload::text FROM lineage_events{clause} ORDER BY event_time {order}, event_hash "
                        "LIMIT %(limit)s OFFSET %(offset)s", params).fetchall()
    return [r[0] for r in rows], _count(conn, f"SELECT count(*) FROM lineage_events{clause}", params)


# -- column lineage -------------------------------------------------------------------------------

def column_lineage_edges(conn: Any, dataset_id: str, column: str | None, depth: int, downstream: bool
                         ) -> list[dict[str, Any]]:
    """Column lineage rows reachable from ``dataset_id`` (one ``column``, or every column), upstream to
    ``depth`` hops, and downstream too with ``downstream``. Each row: source/target namespace, dataset,
    column, ``transformation_type`` / ``transformation_logic``."""
    sql = """
    WITH RECURSIVE up(ds, col, hop) AS (
        SELECT %(ds)s::uuid, c, 0 FROM unnest(%(cols)s::text[]) AS c
        UNION
        SELECT cl.source_dataset_id, cl.source_column, up.hop + 1 FROM up
        JOIN lineage_column_lineage cl ON cl.target_dataset_id = up.ds AND cl.target_column = up.col
        WHERE up.hop < %(depth)s
    ), down(ds, col, hop) AS (
        SELECT %(ds)s::uuid, c, 0 FROM unnest(%(cols)s::text[]) AS c WHERE %(down)s
        UNION
        SELECT cl.target_dataset_id, cl.target_column, down.hop + 1 FROM down
        JOIN lineage_column_lineage cl ON cl.source_dataset_id = down.ds AND cl.source_column = down.col
        WHERE down.hop < %(depth)s
    ), reached AS (SELECT ds, col FROM up UNION SELECT ds, col FROM down)
    SELECT DISTINCT cl.source_dataset_id::text AS source_id, s.namespace AS source_namespace,
           s.name AS source_name, cl.source_column, cl.target_dataset_id::text AS target_id,
           t.namespace AS target_namespace, t.name AS target_name, cl.target_column,
           cl.transformation_type, cl.transformation_logic
    FROM lineage_column_lineage cl
    JOIN reached r ON r.ds = cl.target_dataset_id AND r.col = cl.target_column
    JOIN reached r2 ON r2.ds = cl.source_dataset_id AND r2.col = cl.source_column
    JOIN lineage_datasets s ON s.dataset_id = cl.source_dataset_id
    JOIN lineage_datasets t ON t.dataset_id = cl.target_dataset_id
    ORDER BY 2, 3, 4, 6, 7, 8
    LIMIT 5000"""
    if column is None:
        cols = [r[0] for r in conn.execute(
            "SELECT DISTINCT target_column FROM lineage_column_lineage WHERE target_dataset_id = %(ds)s "
            "UNION SELECT DISTINCT source_column FROM lineage_column_lineage WHERE source_dataset_id = %(ds)s",
            {"ds": dataset_id}).fetchall()]
    else:
        cols = [column]
    return _rows(conn, sql, {"ds": dataset_id, "cols": cols, "depth": depth, "down": downstream})
