"""`lineage load DIR --data-dir D` next to a running `lineage up --data-dir D` (issue 15, item 1).

The documented backfill path: the loader writes the same PostgreSQL graph and the same Parquet store as the
stream processor, at the same time, with its own (negative, content-derived) batch ids. The Parquet store
orders rows by the commit sequence of migration 008, so neither writer's rows shadow the other's. The same
stack also serves the web UI: a short chromium step finds a streamed demo dataset and its upstream there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, assert_eventually
from tests.test_derive import ds, run_event

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NS = "backfill://warehouse"


def _lineage(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-m", "lineage", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout)


def _events(prefix: str, count: int, day: int) -> list[dict]:
    """``count`` COMPLETE runs ``src -> {prefix}_i``, each also writing the dataset ``shared`` (a row the
    stream and the load both change)."""
    out = []
    for i in range(count):
        out.append(run_event("COMPLETE", f"2024-06-{day:02d}T10:{i % 60:02d}:00Z", str(uuid.uuid4()),
                             job=f"{prefix}.job{i}", inputs=[ds("src", NS)],
                             outputs=[ds(f"{prefix}_{i}", NS, fields=["id"]), ds("shared", NS)]))
    return out


def _snapshot(dsn: str) -> dict[str, object]:
    with psycopg.connect(dsn) as conn:
        return {
            "datasets": conn.execute("SELECT count(*) FROM lineage_datasets WHERE namespace = %s", (NS,)).fetchone()[0],
            "events": conn.execute("SELECT count(*) FROM lineage_events").fetchone()[0],
            "load_batches": conn.execute(
                "SELECT count(*) FROM lineage_transactions WHERE batch_id < 0").fetchone()[0],
            "nodes": dict(conn.execute(
                "SELECT dataset_id::text, last_seen FROM lineage_datasets WHERE namespace = %s", (NS,)).fetchall()),
        }


def _evo_versions(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM lineage_dataset_versions v JOIN lineage_datasets d USING "
                            "(dataset_id) WHERE d.namespace LIKE 'evogeoscienceobject://%%'").fetchone()[0]


def _browse_the_streamed_demo(http_url: str, dsn: str, tmp_path: Path) -> None:
    """The stack's web UI in chromium: a dataset the streamed demo traffic wrote, found with the search box,
    lists at least one of the upstream nodes the graph API names for it."""
    from producers.demo import NAMESPACES
    from tests.test_web_ui import browser_page, chromium, ensure_web_build, nodes_in_view, playwright_api

    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT d.name, d.qualified_name FROM lineage_datasets d WHERE d.namespace = ANY(%s) AND d.alias_of IS "
            "NULL AND EXISTS (SELECT 1 FROM lineage_edges e WHERE e.target_node_id = d.dataset_id AND e.valid_to "
            "IS NULL) ORDER BY d.qualified_name LIMIT 1", (list(NAMESPACES),)).fetchone()
    assert found, "no dataset of the demo traffic has an upstream"
    name, qualified = found
    query = urllib.parse.urlencode({"node": qualified, "direction": "upstream", "depth": 3})
    with urllib.request.urlopen(f"{http_url}/api/graph/lineage?{query}", timeout=60) as response:
        answer = json.load(response)
    upstream = sorted(n["qualified_name"] for n in answer["nodes"] if n["id"] != answer["root"])
    assert upstream, answer

    ensure_web_build()
    with chromium() as browser, browser_page(browser, tmp_path) as page:
        page.goto(http_url)
        page.get_by_role("searchbox").fill(name)
        page.get_by_role("option").filter(has=page.get_by_text(qualified, exact=True)).click()
        try:
            page.wait_for_function("""(upstream) => document.body.dataset.state === 'ready' && [...document
                .querySelectorAll('#nodes-in-view li')].some((li) => upstream.includes(li.textContent))""",
                                   arg=upstream)
        except playwright_api.TimeoutError:
            raise AssertionError(f"none of {upstream} in view: {nodes_in_view(page)}, status "
                                 f"{page.locator('#status').inner_text()!r}") from None
        shown = nodes_in_view(page)
        page.screenshot(path=str(tmp_path / "ui-running-stack.png"))
    assert qualified in shown and set(shown) & set(upstream), (qualified, shown, upstream)


def test_load_into_a_running_stack_twice_while_the_stream_writes(tmp_path: Path) -> None:
    from sink.parquet import ParquetGraphStore

    data_dir = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    up = subprocess.Popen([sys.executable, "-m", "lineage", "up", "--data-dir", str(data_dir), "--no-demo",
                           "--duration", "600"], cwd=ROOT, env=env, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stream_threads: list[threading.Thread] = []
    try:
        endpoints_path = data_dir / "endpoints.json"
        assert_eventually(lambda: endpoints_path.exists() or up.poll() is not None, timeout=240,
                          message="lineage up did not write endpoints.json")
        assert up.poll() is None, up.stderr.read() if up.stderr else ""
        endpoints = json.loads(endpoints_path.read_text())
        dsn = endpoints["postgres_dsn"]

        backfill = tmp_path / "backfill"
        backfill.mkdir()
        (backfill / "a.jsonl").write_text("\n".join(json.dumps(e) for e in _events("loaded", 30, 1)) + "\n")
        (backfill / "b.json").write_text(json.dumps(_events("loaded_more", 5, 2)))

        # the stream writes while the load runs: events in several emits, the `shared` row changed by both
        streamed = _events("streamed", 20, 3)

        def stream() -> None:
            for n in range(2):
                path = tmp_path / f"stream{n}.jsonl"
                path.write_text("\n".join(json.dumps(e) for e in streamed[n * 10:(n + 1) * 10]) + "\n")
                done = _lineage("emit", str(path), "--data-dir", str(data_dir), "--encoding", "json", timeout=120)
                assert done.returncode == 0, done.stderr
            # demo traffic too (aliases through symlinks, `/lake/...` names, Evo object versions), then a
            # sentinel: the stream path of items 2, 3 and 5 is checked on it below
            done = _lineage("demo", "--rate", "0", "--max-messages", "80", "--seed", "2", "--data-dir",
                            str(data_dir), timeout=120)
            assert done.returncode == 0, done.stderr
            path = tmp_path / "sentinel.jsonl"
            path.write_text(json.dumps(_events("sentinel", 1, 4)[0]) + "\n")
            done = _lineage("emit", str(path), "--data-dir", str(data_dir), "--encoding", "json", timeout=120)
            assert done.returncode == 0, done.stderr

        stream_threads.append(threading.Thread(target=stream, name="stream-emitter"))
        stream_threads[0].start()
        first = _lineage("load", str(backfill), "--data-dir", str(data_dir), "--batch-size", "7",
                         "--engine", "local")
        assert first.returncode == 0, first.stderr
        assert "35 new" in first.stdout and "5 batch(es)" in first.stdout, first.stdout
        stream_threads[0].join(timeout=300)

        def streamed_landed() -> bool:
            assert up.poll() is None, (data_dir / "logs" / "processor.log").read_text()[-3000:]
            with psycopg.connect(dsn) as conn:
                return conn.execute("SELECT count(*) FROM lineage_datasets WHERE namespace = %s AND name LIKE "
                                    "'s%%'", (NS,)).fetchone()[0] == 1 + 1 + 20 + 1   # src, shared, streamed, sentinel
        assert_eventually(streamed_landed, timeout=240, message="the streamed events did not land")
        assert_eventually(lambda: _evo_versions(dsn), timeout=120, message="no Evo object version streamed in")
        _browse_the_streamed_demo(endpoints["http_url"], dsn, tmp_path)
        before = _snapshot(dsn)
        assert before["datasets"] == 1 + 1 + 30 + 5 + 20 + 1 and before["load_batches"] == 5

        # the same directory again, through the default (Spark) engine: nothing changes
        second = _lineage("load", str(backfill), "--data-dir", str(data_dir), "--batch-size", "7")
        assert second.returncode == 0, second.stderr
        assert "0 new" in second.stdout and "35 duplicate" in second.stdout, second.stdout
        assert _snapshot(dsn) == before

        # the Parquet projection holds the loaded AND the streamed rows, each as PostgreSQL has it now
        parquet = ParquetGraphStore(endpoints["parquet_dir"])

        def parquet_matches() -> bool:
            nodes = {r["node_id"]: r["last_seen"] for r in parquet.read_table("lineage_nodes").to_pylist()
                     if r["namespace"] == NS}
            return nodes == _snapshot(dsn)["nodes"]
        assert_eventually(parquet_matches, timeout=120, message="Parquet nodes differ from PostgreSQL's")
        events = parquet.read_table("lineage_events")
        assert events.num_rows >= 55
        assert min(events.column("_batch_id").to_pylist()) < 0 <= max(events.column("_batch_id").to_pylist())

        # the stream path of item 2: the export of the streamed demo traffic names only its own nodes
        exported = _lineage("export", "--format", "wia-json", "--output", str(tmp_path / "g.json"),
                            "--data-dir", str(data_dir))
        assert exported.returncode == 0, exported.stderr
        assert "referential_integrity" not in exported.stderr, exported.stderr
        doc = json.loads((tmp_path / "g.json").read_text())
        assert doc["metadata"]["custom"]["aliases"] > 0
        # item 5: each dataset written has exactly one `created` record, its earliest write (no lifecycle facets)
        writes: dict[str, list[tuple[str, str]]] = {}
        for p in doc["provenance"]:
            if p["event_type"] != "accessed":
                writes.setdefault(p["node_id"], []).append((p["event_time"], p["event_type"]))
        assert writes and all([k for _, k in sorted(w)] == ["created"] + ["modified"] * (len(w) - 1)
                              for w in writes.values()), writes
        # item 3: an Evo object version from the stream is queryable as the producer named it
        name = next(v["name"] for v in doc["versions"] if v["qualified_name"].startswith("evogeoscienceobject://"))
        walked = _lineage("upstream", name, "--data-dir", str(data_dir), "--json")
        assert walked.returncode == 0, walked.stderr
        assert json.loads(walked.stdout)["root"]["version"] == name.rsplit(":", 1)[1]
    finally:
        for thread in stream_threads:
            thread.join(timeout=300)
        up.terminate()
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
