"""Graph-query latency on a large lineage graph: upstream / downstream to depth 5, and routes.

Run: ``python benchmarks/query_bench.py [--datasets 100000] [--jobs 20000] [--edges 1000000]
[--samples 200] [--dsn DSN] [--json FILE]``. Without ``--dsn`` (env ``LINEAGE_BENCH_POSTGRES_DSN``)
an embedded PostgreSQL is started in a temporary directory and stopped at the end. The graph is
generated once and loaded with ``COPY`` straight into the graph tables. Prints figures; asserts nothing.

The generated warehouse
    Datasets sit in 10 layers (sources -> staging -> ... -> marts), 5 namespaces. Each job lives in a
    layer L >= 1 at a position p; it reads 5..15 datasets (80 % from layer L-1, else an older layer)
    and writes 1..5 datasets of layer L, all near p (``--window``, the "team" locality real
    warehouses have: a job reads its domain, not the whole company). Edges: ``reads`` and
    ``writes`` for every job, a ``dataset`` edge per (input, output); then history (older job
    versions that read other inputs, ``valid_to`` set) until ``--edges`` rows exist. 1 % of jobs
    are terminal (tracing), 0.5 % of datasets have an alias row.

What is timed (per call of the Python API, round trips and name resolution included)
    ``upstream(d, depth=5)`` from random datasets of layers 5..9, ``downstream(d, depth=5)`` from
    random datasets of layers 0..4, ``routes(a, b, max_length=10)`` between a random dataset b and
    an ancestor a 2..4 hops above it (found from the generated data). p50 / p95 / p99 and the
    median number of nodes returned are printed, as wall time and as CPU time (client thread +
    PostgreSQL backend, from ``/proc/<pid>/schedstat``): on a loaded machine the CPU figure is the
    one that says what a call costs; the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from schemas.identity import dataset_id, job_id  # noqa: E402
from sink.queries import LineageQueries  # noqa: E402

LAYERS = 10
NAMESPACES = ("postgres://warehouse:5432", "snowflake://acme", "s3://lake", "bigquery://proj", "kafka://bus:9092")
EDGE_TYPES = ("derived_from", "aggregated_from", "joined_with", "filtered_from", "projected_from")
T_OLD, T_NEW, T_END = "2026-01-01 00:00:00+00", "2026-02-01 00:00:00+00", "2026-03-01 00:00:00+00"

#: Indexes this benchmark proposes for a migration (applied with --extra-indexes; see the report).
EXTRA_INDEXES = (
    "CREATE INDEX IF NOT EXISTS lineage_edges_tgt_walk ON lineage_edges (target_node_id, kind) "
    "INCLUDE (source_node_id, edge_type, first_seen, valid_to)",
    "CREATE INDEX IF NOT EXISTS lineage_edges_src_walk ON lineage_edges (source_node_id, kind) "
    "INCLUDE (target_node_id, edge_type, first_seen, valid_to)",
)


class Warehouse:
    """The generated graph: dataset ids per (layer, position), job inputs/outputs."""

    def __init__(self, n_datasets: int, n_jobs: int, n_edges: int, window: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.per_layer = n_datasets // LAYERS
        self.n_datasets = self.per_layer * LAYERS
        self.n_jobs = n_jobs
        self.n_edges = n_edges
        self.window = window
        self.ds_names = [(NAMESPACES[i % len(NAMESPACES)], f"layer{i // self.per_layer}.t{i % self.per_layer:06d}")
                         for i in range(self.n_datasets)]
        self.ds_ids = [dataset_id(ns, name) for ns, name in self.ds_names]
        self.jobs: list[tuple[str, str, list[int], list[int]]] = []   # (id, name, inputs, outputs)
        self.writers: dict[int, list[int]] = {}     # dataset index -> job indexes writing it
        self.aliases: list[tuple[str, str, str, str]] = []

    def label(self, index: int) -> str:
        """The name a user types: ``namespace/name`` (resolved by the API, as the CLI does)."""
        return "/".join(self.ds_names[index])

    def _near(self, layer: int, pos: int, spread: int) -> int:
        return layer * self.per_layer + (pos + self.rng.randint(-spread, spread)) % self.per_layer

    def build(self) -> None:
        rng = self.rng
        for j in range(self.n_jobs):
            layer = 1 + j % (LAYERS - 1)
            pos = rng.randrange(self.per_layer)
            inputs = set()
            for _ in range(rng.randint(5, 15)):
                src = layer - 1 if rng.random() < 0.8 else rng.randrange(0, layer)
                inputs.add(self._near(src, pos, self.window))
            outputs = {self._near(layer, pos, self.window // 2) for _ in range(rng.randint(1, 5))}
            name = f"team{pos // 500}.job{j:06d}"
            self.jobs.append((job_id("airflow", name), name, sorted(inputs), sorted(outputs)))
            for o in outputs:
                self.writers.setdefault(o, []).append(j)
        for i in rng.sample(range(self.n_datasets), self.n_datasets // 200):
            ns, name = self.ds_names[i]
            self.aliases.append((dataset_id("hive://metastore", f"alias_{i}"), "hive://metastore", f"alias_{i}",
                                 self.ds_ids[i]))

    def dataset_lines(self) -> Iterator[str]:
        for (ns, name), did in zip(self.ds_names, self.ds_ids, strict=True):
            yield f"{did}\t{ns}\t{name}\t{ns}/{name}\ttable\tteam-{name[5]}\t\\N\t{T_OLD}\t{T_END}\t1\n"
        for did, ns, name, canonical in self.aliases:
            yield f"{did}\t{ns}\t{name}\t{ns}/{name}\ttable\t\\N\t{canonical}\t{T_OLD}\t{T_END}\t1\n"

    def job_lines(self) -> Iterator[str]:
        terminal = set(self.rng.sample(range(self.n_jobs), self.n_jobs // 100))
        for j, (jid, name, _, _) in enumerate(self.jobs):
            tracing = '{"terminal": true}' if j in terminal else "{}"
            yield f"{jid}\tairflow\t{name}\tairflow/{name}\tBATCH\t{tracing}\t{T_OLD}\t{T_END}\t1\n"

    def edge_lines(self) -> Iterator[str]:
        rng = self.rng
        count = 0

        def line(src: str, tgt: str, kind: str, etype: str, job: str, first: str, valid_to: str) -> str:
            return f"{uuid.UUID(int=rng.getrandbits(128))}\t{src}\t{tgt}\t{kind}\t{etype}\t{job}\t{first}\t{T_END}\t{valid_to}\t1\n"

        for jid, _, inputs, outputs in self.jobs:
            etype = rng.choice(EDGE_TYPES)
            for i in inputs:
                yield line(self.ds_ids[i], jid, "reads", "reads", jid, T_NEW, "\\N")
            for o in outputs:
                yield line(jid, self.ds_ids[o], "writes", "writes", jid, T_NEW, "\\N")
                for i in inputs:
                    yield line(self.ds_ids[i], self.ds_ids[o], "dataset", etype, jid, T_NEW, "\\N")
            count += len(inputs) + len(outputs) * (1 + len(inputs))
        while count < self.n_edges:       # history: older job versions that read other inputs
            jid, _, inputs, outputs = self.jobs[rng.randrange(self.n_jobs)]
            layer = outputs[0] // self.per_layer
            old = self._near(layer - 1, outputs[0] % self.per_layer, self.window)
            yield line(self.ds_ids[old], jid, "reads", "reads", jid, T_OLD, T_NEW)
            count += 1
            for o in outputs:
                if count >= self.n_edges:
                    break
                yield line(self.ds_ids[old], self.ds_ids[o], "dataset", "derived_from", jid, T_OLD, T_NEW)
                count += 1


def copy_lines(conn: psycopg.Connection, table: str, columns: str, lines: Iterator[str], chunk: int = 20000) -> int:
    n = 0
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        buf: list[str] = []
        for line in lines:
            buf.append(line)
            n += 1
            if len(buf) >= chunk:
                copy.write("".join(buf).encode())
                buf.clear()
        if buf:
            copy.write("".join(buf).encode())
    return n


def load(dsn: str, wh: Warehouse) -> dict[str, Any]:
    from sink.migrate import apply_migrations

    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_migrations(conn)
        for table in ("lineage_edges", "lineage_jobs", "lineage_datasets"):
            conn.execute(f"TRUNCATE {table}")
        counts = {
            "datasets": copy_lines(conn, "lineage_datasets", "dataset_id, namespace, name, qualified_name, node_type, "
                                   "owner, alias_of, first_seen, last_seen, last_batch_id", wh.dataset_lines()),
            "jobs": copy_lines(conn, "lineage_jobs", "job_id, namespace, name, qualified_name, job_type, tracing, "
                               "first_seen, last_seen, last_batch_id", wh.job_lines()),
            "edges": copy_lines(conn, "lineage_edges", "edge_id, source_node_id, target_node_id, kind, edge_type, "
                                "job_id, first_seen, last_seen, valid_to, last_batch_id", wh.edge_lines()),
        }
        conn.execute("VACUUM ANALYZE lineage_edges")
        conn.execute("VACUUM ANALYZE lineage_datasets")
        conn.execute("VACUUM ANALYZE lineage_jobs")
    counts["load_seconds"] = round(time.perf_counter() - started, 1)
    return counts


def loaded(dsn: str, wh: Warehouse) -> dict[str, Any] | None:
    """The counts of a graph already loaded with the same sizes, else None."""
    try:
        with psycopg.connect(dsn) as conn:
            edges, datasets = conn.execute("SELECT (SELECT count(*) FROM lineage_edges), "
                                           "(SELECT count(*) FROM lineage_datasets)").fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    if edges == wh.n_edges and datasets == wh.n_datasets + len(wh.aliases):
        return {"datasets": datasets, "jobs": wh.n_jobs, "edges": edges, "reused": True}
    return None


class CpuClock:
    """CPU seconds used by this thread plus the PostgreSQL backend serving it (``/proc/<pid>/schedstat``).

    On a busy machine wall time measures the queue for the CPU as much as the query; the CPU time
    of client + server is what the same call costs on an idle machine (the data is in memory).
    Falls back to this thread's CPU time alone where the backend's schedstat is unreadable.
    """

    def __init__(self, backend_pid: int) -> None:
        self.path = Path(f"/proc/{backend_pid}/schedstat")
        self.readable = self.path.exists()

    def now(self) -> float:
        server = int(self.path.read_text().split()[0]) if self.readable else 0
        return (server + time.thread_time_ns()) / 1e9


def percentiles(samples: list[float], prefix: str = "") -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    return {f"{prefix}p50_ms": round(at(0.50) * 1000, 1), f"{prefix}p95_ms": round(at(0.95) * 1000, 1),
            f"{prefix}p99_ms": round(at(0.99) * 1000, 1), f"{prefix}max_ms": round(ordered[-1] * 1000, 1)}


def ancestor_of(wh: Warehouse, rng: random.Random, start: int, hops: int) -> int | None:
    node = start
    for _ in range(hops):
        writers = wh.writers.get(node)
        if not writers:
            return None
        node = rng.choice(wh.jobs[rng.choice(writers)][2])
    return node if node != start else None


def measure(dsn: str, wh: Warehouse, samples: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    per = wh.per_layer
    written = [i for i in wh.writers if i >= 5 * per]
    upstream_starts = [rng.choice(written) for _ in range(samples)]
    downstream_starts = [rng.randrange(0, 5 * per) for _ in range(samples)]
    pairs = []
    while len(pairs) < samples:
        b = rng.choice(written)
        a = ancestor_of(wh, rng, b, rng.randint(2, 4))
        if a is not None:
            pairs.append((a, b))
    out: dict[str, Any] = {}
    with LineageQueries(dsn) as q:
        backend = q.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        cpu = CpuClock(backend)
        for i in range(10):          # warm-up: connection, catalog, buffer cache
            q.upstream(wh.ds_ids[upstream_starts[i]], depth=5)
        for label, starts, fn in (("upstream_depth5", upstream_starts, q.upstream),
                                  ("downstream_depth5", downstream_starts, q.downstream)):
            times, cpus, sizes = [], [], []
            for s in starts:
                c0, t0 = cpu.now(), time.perf_counter()
                result = fn(wh.label(s), depth=5)
                times.append(time.perf_counter() - t0)
                cpus.append(cpu.now() - c0)
                sizes.append(len(result.hits))
            out[label] = {**percentiles(times), **percentiles(cpus, "cpu_"),
                          "median_nodes": statistics.median(sizes), "max_nodes": max(sizes)}
        times, cpus, found = [], [], []
        for a, b in pairs:
            c0, t0 = cpu.now(), time.perf_counter()
            result = q.routes(wh.label(a), wh.label(b), max_length=10)
            times.append(time.perf_counter() - t0)
            cpus.append(cpu.now() - c0)
            found.append(len(result.routes))
        out["route_max_length10"] = {**percentiles(times), **percentiles(cpus, "cpu_"),
                                     "median_routes": statistics.median(found),
                                     "pairs_with_route": sum(1 for f in found if f)}
    out["load_average"] = os.getloadavg()[0]
    return out


def explain(dsn: str, wh: Warehouse) -> str:
    from sink.queries import walk_sql

    with LineageQueries(dsn) as q:
        start = next(iter(i for i in wh.writers if i >= 9 * wh.per_layer))
        plan = q.conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + walk_sql("upstream", None, True),
                              {"root": wh.ds_ids[start], "root_is_job": False, "steps": 10, "as_of": None,
                               **q._alias_maps()}).fetchall()
    return "\n".join(r[0] for r in plan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=40, help="locality: how far (positions) a job reads")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dsn", default=os.environ.get("LINEAGE_BENCH_POSTGRES_DSN"))
    parser.add_argument("--extra-indexes", action="store_true", help="add the proposed indexes, then measure again")
    parser.add_argument("--explain", action="store_true", help="print EXPLAIN ANALYZE of one upstream walk")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--reuse", action="store_true",
                        help="skip loading when the database already holds a graph of this size (same --seed)")
    args = parser.parse_args(argv)

    server = None
    tmp = None
    dsn = args.dsn
    if not dsn:
        from lineage.embedded.postgres import EmbeddedPostgres

        tmp = tempfile.mkdtemp(prefix="query-bench-")
        server = EmbeddedPostgres(Path(tmp) / "pg", database="bench").start()
        dsn = server.dsn
    try:
        wh = Warehouse(args.datasets, args.jobs, args.edges, args.window, args.seed)
        t0 = time.perf_counter()
        wh.build()
        print(f"generated {wh.n_datasets} datasets, {len(wh.jobs)} jobs in {time.perf_counter() - t0:.1f}s", flush=True)
        figures: dict[str, Any] = {"graph": loaded(dsn, wh) if args.reuse else None}
        figures["graph"] = figures["graph"] or load(dsn, wh)
        print(f"loaded: {figures['graph']}", flush=True)
        with psycopg.connect(dsn, autocommit=True) as conn:    # measure the migration's indexes first
            for ddl in EXTRA_INDEXES:
                conn.execute("DROP INDEX IF EXISTS " + ddl.split(" EXISTS ")[1].split(" ")[0])
        figures["base_indexes"] = measure(dsn, wh, args.samples, args.seed)
        print(json.dumps(figures["base_indexes"], indent=2), flush=True)
        if args.explain:
            print(explain(dsn, wh))
        if args.extra_indexes:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for ddl in EXTRA_INDEXES:
                    conn.execute(ddl)
                conn.execute("VACUUM ANALYZE lineage_edges")
            figures["extra_indexes"] = measure(dsn, wh, args.samples, args.seed)
            print("with the proposed indexes:")
            print(json.dumps(figures["extra_indexes"], indent=2), flush=True)
            if args.explain:
                print(explain(dsn, wh))
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
    finally:
        if server is not None:
            server.stop(mode="immediate")
        if tmp is not None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
