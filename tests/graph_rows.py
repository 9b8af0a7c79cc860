"""Test helper: build small lineage graphs with direct, parameterised INSERTs (no write path needed).

``GraphRows(dsn)`` applies the store's migrations (:mod:`sink.migrate`) and offers
``dataset()``, ``job()``, ``flow()`` (a job reading inputs and writing outputs: reads / writes /
dataset edges), ``version()``, ``run()``, ``column()``, ``provenance()``, ``quality()`` and
``event()``. Ids are the project's deterministic UUIDv5 ids.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from schemas.identity import dataset_id, edge_id, job_id, node_uuid

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def apply_migrations(dsn: str) -> None:
    """The store's own migrator (sink/migrate.py), so the tables are exactly those the write side makes."""
    from sink.migrate import apply_migrations as migrate

    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)


class GraphRows:
    def __init__(self, dsn: str, migrate: bool = True) -> None:
        if migrate:
            apply_migrations(dsn)
        self.conn = psycopg.connect(dsn, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def dataset(self, ns: str, name: str, node_type: str = "table", owner: str | None = None,
                alias_of: str | None = None, fields: list[dict[str, Any]] | None = None,
                t: datetime = T0, batch: int = 1, tags: list[str] | None = None) -> str:
        did = dataset_id(ns, name)
        self.conn.execute(
            "INSERT INTO lineage_datasets (dataset_id, namespace, name, qualified_name, node_type, owner, tags,"
            " fields, alias_of, first_seen, last_seen, last_batch_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
            " ON CONFLICT (dataset_id) DO UPDATE SET owner = EXCLUDED.owner, last_batch_id = EXCLUDED.last_batch_id,"
            " alias_of = EXCLUDED.alias_of, node_type = EXCLUDED.node_type",
            (did, ns, name, f"{ns}/{name}", node_type, owner, json.dumps(tags or []), json.dumps(fields or []),
             alias_of, t, t, batch))
        self.conn.execute("INSERT INTO lineage_namespaces VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", (ns, t, batch))
        return did

    def job(self, ns: str, name: str, tracing: dict[str, Any] | None = None, owners: list[Any] | None = None,
            t: datetime = T0, batch: int = 1, job_type: str = "BATCH") -> str:
        jid = job_id(ns, name)
        self.conn.execute(
            "INSERT INTO lineage_jobs (job_id, namespace, name, qualified_name, job_type, owners, tracing,"
            " first_seen, last_seen, last_batch_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
            " ON CONFLICT (job_id) DO UPDATE SET tracing = EXCLUDED.tracing, owners = EXCLUDED.owners",
            (jid, ns, name, f"{ns}/{name}", job_type, json.dumps(owners or []), json.dumps(tracing or {}), t, t, batch))
        return jid

    def edge(self, kind: str, source: str, target: str, job: str | None, edge_type: str,
             first_seen: datetime = T0, valid_to: datetime | None = None, batch: int = 1,
             transformation: dict[str, Any] | None = None) -> str:
        eid = edge_id(kind + (f"/{job}" if kind == "dataset" else ""), source, target)
        self.conn.execute(
            "INSERT INTO lineage_edges (edge_id, source_node_id, target_node_id, kind, edge_type, job_id,"
            " transformation, metadata, first_seen, last_seen, valid_to, last_batch_id)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (eid, source, target, kind, edge_type, job,
             json.dumps(transformation or {"type": "sql", "logic": "SELECT 1", "version": "1"}),
             json.dumps({"job_name": "j", "duration_ms": 5}), first_seen, first_seen, valid_to, batch))
        return eid

    def flow(self, job: str, inputs: list[str], outputs: list[str], first_seen: datetime = T0,
             valid_to: datetime | None = None, edge_type: str = "derived_from", batch: int = 1) -> None:
        """Job reads ``inputs`` and writes ``outputs``: reads + writes edges and dataset edges."""
        for i in inputs:
            self.edge("reads", i, job, job, "reads", first_seen, valid_to, batch)
        for o in outputs:
            self.edge("writes", job, o, job, "writes", first_seen, valid_to, batch)
            for i in inputs:
                self.edge("dataset", i, o, job, edge_type, first_seen, valid_to, batch)

    def version(self, ds: str, version: str, t: datetime, run: str | None = None, batch: int = 1) -> str:
        vid = node_uuid("version", ds, version)
        self.conn.execute(
            "INSERT INTO lineage_dataset_versions (version_id, dataset_id, version, event_time, run_id, row_count,"
            " last_batch_id) VALUES (%s,%s,%s,%s,%s,%s,%s)", (vid, ds, version, t, run, 100, batch))
        return vid

    def run(self, job: str, t: datetime, inputs: list[tuple[str, str | None]],
            outputs: list[tuple[str, str | None]], batch: int = 1, state: str = "COMPLETE") -> str:
        rid = str(uuid.uuid4())
        self.conn.execute(
            "INSERT INTO lineage_runs (run_id, job_id, state, state_time, started_at, ended_at, duration_ms,"
            " first_seen, last_seen, last_batch_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (rid, job, state, t, t - timedelta(seconds=1), t, 1000, t, t, batch))
        for direction, slots in (("input", inputs), ("output", outputs)):
            for ds, vid in slots:
                self.conn.execute("INSERT INTO lineage_run_io VALUES (%s,%s,%s,%s,%s,%s)",
                                  (rid, ds, direction, vid, t, batch))
        return rid

    def column(self, src: str, src_col: str, tgt: str, tgt_col: str, job: str | None = None,
               transformation_type: str = "direct", t: datetime = T0, batch: int = 1) -> str:
        cid = node_uuid("column", src, src_col, tgt, tgt_col)
        names = dict(self.conn.execute(
            "SELECT dataset_id::text, qualified_name FROM lineage_datasets WHERE dataset_id = ANY(%s::uuid[])",
            ([src, tgt],)).fetchall())
        self.conn.execute(
            "INSERT INTO lineage_column_lineage (column_lineage_id, source_dataset_id, source_table, source_column,"
            " target_dataset_id, target_table, target_column, transformation_type, transformation_logic,"
            " dependencies, job_id, first_seen, last_seen, last_batch_id)"
            " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (cid, src, names.get(src, src), src_col, tgt, names.get(tgt, tgt), tgt_col, transformation_type,
             f"{src_col} -> {tgt_col}", json.dumps([{"source_table": names.get(src, src), "source_column": src_col,
                                                    "expression": src_col}]), job, t, t, batch))
        return cid

    def provenance(self, node: str, event_hash: str, t: datetime = T0, batch: int = 1) -> str:
        pid = node_uuid("provenance", node, event_hash)
        self.conn.execute(
            "INSERT INTO lineage_provenance (provenance_id, node_id, event_hash, event_type, event_time, agent,"
            " operation, context, last_batch_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (pid, node, event_hash, "modified", t, json.dumps({"type": "job", "id": "j1", "name": "ns/j1"}),
             json.dumps({"type": "write", "method": "spark", "parameters": {}}),
             json.dumps({"purpose": "reporting", "legal_basis": "contract", "retention_period": "P1Y",
                         "sensitivity_level": "internal"}), batch))
        return pid

    def quality(self, node: str, version_id: str, t: datetime = T0, batch: int = 1) -> str:
        qid = node_uuid("quality", version_id)
        self.conn.execute(
            "INSERT INTO lineage_quality (quality_id, node_id, version_id, measured_at, metrics, validations,"
            " anomalies, last_batch_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
            (qid, node, version_id, t, json.dumps({"completeness": 0.98, "accuracy": 1.0, "consistency": 1.0,
                                                   "timeliness": 0.9}),
             json.dumps([{"rule_name": "id_not_null", "rule_type": "not_null", "passed": True, "failed_count": 0,
                          "details": ""}]), "[]", batch))
        return qid

    def event(self, payload: dict[str, Any], event_hash: str, t: datetime = T0, batch: int = 1) -> None:
        self.conn.execute(
            "INSERT INTO lineage_events (event_hash, event_kind, event_type, event_time, run_id, job_namespace,"
            " job_name, producer, source, payload, first_batch_id) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (event_hash, "run", payload.get("eventType"), t, payload.get("run", {}).get("runId"),
             payload.get("job", {}).get("namespace"), payload.get("job", {}).get("name"), payload.get("producer"),
             "test:1", json.dumps(payload), batch))


NS = "postgres://warehouse:5432"


def sample_warehouse(g: GraphRows) -> dict[str, str]:
    """The test warehouse (see tests/test_queries.py's ``graph`` fixture docstring); returns the ids."""
    ids = {
        "A": g.dataset(NS, "raw.orders", owner="team-raw"),
        "B": g.dataset(NS, "raw.customers", owner="team-raw"),
        "C": g.dataset(NS, "stg.orders", owner="team-stg"),
        "D": g.dataset(NS, "mart.revenue", owner="team-mart"),
        "E": g.dataset(NS, "public.revenue_anon"),
        "F": g.dataset("s3://reports", "revenue.csv", node_type="file", owner="team-bi"),
        "J0": g.job("airflow", "ingest_orders"),
        "J1": g.job("airflow", "clean_orders", owners=["alice"]),
        "J2": g.job("airflow", "revenue", owners=[{"name": "bob", "type": "MAINTAINER"}]),
        "J3": g.job("airflow", "anonymise", tracing={"reversible": False, "privacy_preserving": True}),
        "J4": g.job("airflow", "report"),
        "J5": g.job("airflow", "dedupe_orders"),
        "J6": g.job("airflow", "quick_revenue"),
    }
    ids["A_alias"] = g.dataset("hive", "warehouse.orders", alias_of=ids["A"])
    g.flow(ids["J1"], [ids["A"], ids["B"]], [ids["C"]])
    g.flow(ids["J2"], [ids["C"]], [ids["D"]], edge_type="aggregated_from")
    g.flow(ids["J3"], [ids["D"]], [ids["E"]])
    g.flow(ids["J4"], [ids["E"]], [ids["F"]])
    g.flow(ids["J5"], [ids["C"]], [ids["C"]])
    g.flow(ids["J6"], [ids["A"]], [ids["D"]])
    g.flow(ids["J0"], [], [ids["A_alias"]])
    g.edge("reads", ids["B"], ids["J2"], ids["J2"], "reads", first_seen=T0, valid_to=T0 + timedelta(days=31))
    g.column(ids["A"], "amount", ids["C"], "amount", ids["J1"])
    g.column(ids["C"], "amount", ids["D"], "total", ids["J2"], "aggregated")
    g.column(ids["D"], "total", ids["E"], "total_bucket", ids["J3"], "computed")
    g.column(ids["C"], "amount", ids["C"], "amount", ids["J5"])
    return ids
