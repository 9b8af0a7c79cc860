"""First render of the web UI's lineage view, measured in the browser with the Performance API.

Builds a layered upstream graph (datasets and the jobs between them, 10 dataset hops deep) in a fresh
PostgreSQL database, serves it with the real server (api.testing.running_server: uvicorn, /api/graph and the
built UI), and opens ``/?node=ROOT&depth=10&budget=5000`` in Debian's chromium (Playwright) for a 200-node and
a 2,000-node neighbourhood. Per page load it reads:

- ``render``: the UI's ``lineage-first-render`` measure, from the lineage request to the drawing laid out
  (ELK in a worker) and painted (two animation frames);
- ``since_navigation``: ``performance.now()`` at that point, i.e. page load included;
- ``api``: the Resource Timing duration of the ``/api/graph/lineage`` response.

Goals (issue 16): 200 nodes <= 1 s, 2,000 nodes <= 3 s.

    python benchmarks/ui_render_bench.py [--admin-dsn postgresql://postgres@127.0.0.1:5432/postgres] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import uuid
from urllib.parse import quote

import psycopg

NS = "bench://warehouse"


def build_graph(dsn: str, nodes: int) -> str:
    """About `nodes` datasets and jobs upstream of one root; returns the root's qualified name."""
    from tests.graph_rows import GraphRows

    layers = 10
    width = max(1, round((nodes - 2) / (2 * layers - 1)))
    g = GraphRows(dsn)
    try:
        g.conn.execute("BEGIN")
        root = g.dataset(NS, "mart.root")
        grid = [[g.dataset(NS, f"l{k}.t{i}") for i in range(width)] for k in range(1, layers + 1)]
        g.flow(g.job("bench", "build_root"), grid[0], [root])
        for k in range(layers - 1):
            for i, out in enumerate(grid[k]):
                reads = sorted({grid[k + 1][i], grid[k + 1][(i + 1) % width]})
                g.flow(g.job("bench", f"l{k + 1}_job{i}"), reads, [out])
        g.conn.execute("COMMIT")
    finally:
        g.close()
    return f"{NS}/mart.root"


def measure(url: str, root: str, repeat: int, screenshot: str | None = None) -> list[dict]:
    from playwright.sync_api import sync_playwright

    from tests.test_web_ui import CHROMIUM, CHROMIUM_ARGS

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for _ in range(repeat):
                context = browser.new_context(viewport={"width": 1440, "height": 900}, bypass_csp=True)
                page = context.new_page()
                page.goto(f"{url}/?node={quote(root, safe='')}&depth=10&budget=5000")
                page.wait_for_function("performance.getEntriesByName('lineage-first-render').length > 0",
                                       timeout=120_000)
                out.append(page.evaluate("""() => {
                    const m = performance.getEntriesByName('lineage-first-render')[0];
                    const api = performance.getEntriesByType('resource').find((r) => r.name.includes('/api/graph/lineage'));
                    const at = (name) => { const e = performance.getEntriesByName(name).at(-1); return e ? e.startTime - m.startTime : null; };
                    return { nodes: Number(document.getElementById('nodes-count').textContent),
                             laid_out_ms: at('render:laid-out'), added_ms: at('render:added'),
                             render_ms: m.duration, since_navigation_ms: m.startTime + m.duration,
                             api_ms: api ? api.duration : null };
                }"""))
                if screenshot:
                    page.screenshot(path=screenshot)
                context.close()
        finally:
            browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="200,2000")
    parser.add_argument("--screenshots", help="a folder for a screenshot of each size's last page load")
    args = parser.parse_args()

    from api.settings import ApiSettings
    from api.testing import running_server
    from tests.test_web_ui import ensure_web_build

    ensure_web_build()
    report = {}
    for size in (int(s) for s in args.sizes.split(",")):
        name = f"ui_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(args.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        dsn = psycopg.conninfo.make_conninfo(args.admin_dsn, dbname=name)
        try:
            root = build_graph(dsn, size)
            with running_server(ApiSettings(postgres_dsn=dsn, bootstrap_servers="127.0.0.1:1")) as url:
                shot = f"{args.screenshots}/ui-{size}.png" if args.screenshots else None
                runs = measure(url, root, args.repeat, shot)
        finally:
            with psycopg.connect(args.admin_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        goal = 1000 if size <= 200 else 3000
        summary = {key: round(statistics.median(r[key] for r in runs), 1) for key in ("render_ms", "since_navigation_ms")}
        summary["api_ms"] = round(statistics.median(r["api_ms"] for r in runs if r["api_ms"] is not None), 1)
        report[size] = {"nodes_in_view": runs[0]["nodes"], "median": summary, "goal_ms": goal,
                        "runs": [{k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()} for r in runs]}
        print(json.dumps({size: report[size]}), flush=True)


if __name__ == "__main__":
    main()
