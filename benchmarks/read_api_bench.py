"""Read API latency on a large graph: lineage around a node at depth 3 (p95 goal <= 100 ms) and search
(p95 goal <= 50 ms), through the HTTP API and through the library.

Run: ``python benchmarks/read_api_bench.py [--datasets 100000] [--jobs 20000] [--edges 1000000]
[--samples 200] [--dsn DSN] [--reuse] [--json FILE]``. The graph is benchmarks/query_bench.py's (same
generator and loader, same seed: ``--reuse`` on a database it already loaded skips the load); each dataset
then gets 4..8 columns in ``fields`` (column search has something to find). Without ``--dsn`` an embedded
PostgreSQL is started in a temporary directory and removed at the end. Prints figures; asserts nothing.

What is timed
    * ``lineage_http``: ``GET /api/graph/lineage?node=<ns/name>&direction=both&depth=3&budget=500`` on a
      real ``lineage serve`` process (``benchmarks/serving.py``), one keep-alive client, from random datasets of the
      middle layers (3..6, so both directions have depth to walk); wall time per request, JSON included.
    * ``lineage_lib``: the same question through :func:`sink.neighbourhood.neighbourhood` on one connection,
      with CPU time (client thread + backend, as query_bench does).
    * ``search_http`` / ``search_lib``: ``/api/graph/search?q=...&limit=20`` with a mix of queries drawn
      from the graph: exact dataset names, name prefixes, substrings inside names, job names, column names,
      namespace prefixes and texts that match nothing.
    The median number of nodes returned and the share of truncated answers are printed beside the times.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from benchmarks.query_bench import CpuClock, Warehouse, load, loaded, percentiles  # noqa: E402

COLUMN_WORDS = ("id", "amount", "customer_id", "order_id", "created_at", "updated_at", "status", "region",
                "price", "quantity", "email", "country", "sku", "currency", "score", "event_time")


def add_columns(dsn: str) -> int:
    """Give every dataset 4..8 columns (deterministic from its name) unless it has some already."""
    words = "ARRAY[" + ", ".join(f"'{w}'" for w in COLUMN_WORDS) + "]"
    with psycopg.connect(dsn, autocommit=True) as conn:
        n = conn.execute(f"""
            UPDATE lineage_datasets d SET fields = (
                SELECT jsonb_agg(jsonb_build_object('name', ({words})[1 + abs(hashtext(d.name || k::text)) % 16]
                                                    || CASE WHEN k > 4 THEN '_' || k::text ELSE '' END,
                                                    'type', 'varchar'))
                FROM generate_series(1, 4 + abs(hashtext(d.name)) % 5) k)
            WHERE d.fields = '[]'::jsonb""").rowcount
        if n:
            conn.execute("VACUUM ANALYZE lineage_datasets")
    return n


def search_queries(wh: Warehouse, rng: random.Random, n: int) -> list[str]:
    out = []
    kinds = ("exact", "prefix", "substring", "job", "column", "namespace", "none")
    for i in range(n):
        kind = kinds[i % len(kinds)]
        ns, name = wh.ds_names[rng.randrange(wh.n_datasets)]
        if kind == "exact":
            out.append(name)
        elif kind == "prefix":
            out.append(name[:rng.randint(8, 12)])
        elif kind == "substring":
            out.append(name[rng.randint(7, 9):])          # "t000123"-like: inside the name
        elif kind == "job":
            out.append(wh.jobs[rng.randrange(len(wh.jobs))][1].split(".")[1])
        elif kind == "column":
            out.append(rng.choice(COLUMN_WORDS))
        elif kind == "namespace":
            out.append(ns.split(":")[0])
        else:
            out.append(f"zz{rng.randrange(10**6)}qq")
    return out


class Http:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.conn.request("GET", f"{path}?{urllib.parse.urlencode(params)}")
        response = self.conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{path} {params}: {response.status} {body[:200]!r}")
        return json.loads(body)


def measure(dsn: str, wh: Warehouse, samples: int, seed: int, only: str | None = None) -> dict[str, Any]:
    from benchmarks.serving import served
    from sink.catalog import search
    from sink.neighbourhood import neighbourhood

    rng = random.Random(seed)
    per = wh.per_layer
    starts = [wh.label(rng.randrange(3 * per, 7 * per)) for _ in range(samples)]
    queries = search_queries(wh, rng, samples)
    out: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        cpu = CpuClock(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        for s in starts[:10]:
            neighbourhood(conn, s, direction="both", depth=3, budget=500)
        times, cpus, sizes, cut = [], [], [], 0
        for s in starts if only != "search" else starts[:1]:
            c0, t0 = cpu.now(), time.perf_counter()
            found = neighbourhood(conn, s, direction="both", depth=3, budget=500)
            times.append(time.perf_counter() - t0)
            cpus.append(cpu.now() - c0)
            sizes.append(len(found.nodes))
            cut += found.truncated
        out["lineage_lib"] = {**percentiles(times), **percentiles(cpus, "cpu_"),
                              "median_nodes": statistics.median(sizes), "max_nodes": max(sizes),
                              "truncated_share": round(cut / len(starts), 2)}
        times, cpus, hits = [], [], []
        for q in queries if only != "lineage" else queries[:7]:
            c0, t0 = cpu.now(), time.perf_counter()
            page = search(conn, q, limit=20)
            times.append(time.perf_counter() - t0)
            cpus.append(cpu.now() - c0)
            hits.append(len(page.results))
        out["search_lib"] = {**percentiles(times), **percentiles(cpus, "cpu_"),
                             "median_results": statistics.median(hits)}
        by_kind: dict[str, list[float]] = {}
        for i, t in enumerate(times):
            by_kind.setdefault(("exact", "prefix", "substring", "job", "column", "namespace", "none")[i % 7],
                               []).append(t)
        out["search_lib_by_kind_p95_ms"] = {k: percentiles(v)["p95_ms"] for k, v in by_kind.items()}
    if only:
        out["load_average"] = os.getloadavg()[0]
        return out
    with served("--bootstrap-servers", "127.0.0.1:1", env={"LINEAGE_POSTGRES_DSN": dsn}) as url:
        client = Http(url)
        for s in starts[:10]:
            client.get("/api/graph/lineage", node=s, direction="both", depth=3, budget=500)
        times, sizes = [], []
        for s in starts:
            t0 = time.perf_counter()
            doc = client.get("/api/graph/lineage", node=s, direction="both", depth=3, budget=500)
            times.append(time.perf_counter() - t0)
            sizes.append(len(doc["nodes"]))
        out["lineage_http"] = {**percentiles(times), "median_nodes": statistics.median(sizes)}
        times = []
        for q in queries:
            t0 = time.perf_counter()
            client.get("/api/graph/search", q=q, limit=20)
            times.append(time.perf_counter() - t0)
        out["search_http"] = percentiles(times)
        client.conn.close()
    out["load_average"] = os.getloadavg()[0]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--window", type=int, default=40)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dsn", default=os.environ.get("LINEAGE_BENCH_POSTGRES_DSN"))
    parser.add_argument("--reuse", action="store_true", help="skip loading when the database holds this graph")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--only", choices=("lineage", "search"), default=None,
                        help="time only this, through the library (no HTTP)")
    args = parser.parse_args(argv)

    server = tmp = None
    dsn = args.dsn
    if not dsn:
        from lineage.embedded.postgres import EmbeddedPostgres

        tmp = tempfile.mkdtemp(prefix="read-api-bench-")
        server = EmbeddedPostgres(Path(tmp) / "pg", database="bench").start()
        dsn = server.dsn
    try:
        wh = Warehouse(args.datasets, args.jobs, args.edges, args.window, args.seed)
        wh.build()
        figures: dict[str, Any] = {"graph": loaded(dsn, wh) if args.reuse else None}
        figures["graph"] = figures["graph"] or load(dsn, wh)
        t0 = time.perf_counter()
        figures["graph"]["columns_added_to"] = add_columns(dsn)
        figures["graph"]["columns_seconds"] = round(time.perf_counter() - t0, 1)
        print(f"graph: {figures['graph']}", flush=True)
        figures["read_api"] = measure(dsn, wh, args.samples, args.seed, args.only)
        print(json.dumps(figures["read_api"], indent=2), flush=True)
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
