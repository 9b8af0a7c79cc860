"""The web UI (web/, served by api/web.py) in a real browser: Debian's chromium driven by Playwright, against
the real server (api.testing.running_server: uvicorn, the graph API, SSE) over a real PostgreSQL graph (the
hand-built warehouse of tests/test_catalog.py, demo events written by the store, and events written while the
page is open). Screenshots go to the test's tmp_path."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright import sync_api as playwright_api

from tests.graph_rows import NS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags chromium keeps dialling Google on this closed network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HOSTILE = "<img src=x onerror=alert(1)>"
TIMEOUT_MS = 30_000


def ensure_web_build() -> Path:
    """web/dist, built with npm when missing (`make web-build` does the same)."""
    dist = WEB / "dist"
    if not (dist / "index.html").is_file():
        npm = shutil.which("npm")
        assert npm, "npm is needed to build the web UI (web/): install Node.js and npm"
        if not (WEB / "node_modules").is_dir():
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True)
        subprocess.run([npm, "run", "build"], cwd=WEB, check=True)
    return dist


def ol_event(job: str, inputs: list[tuple[str, str]], outputs: list[tuple[str, str]]) -> dict:
    return {"eventType": "COMPLETE", "eventTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "producer": "https://example.com/test_web_ui", "schemaURL":
            "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": str(uuid.uuid4())}, "job": {"namespace": "airflow", "name": job},
            "inputs": [{"namespace": ns, "name": name} for ns, name in inputs],
            "outputs": [{"namespace": ns, "name": name} for ns, name in outputs]}


def write_events(dsn: str, batch_id: int, events: list) -> None:
    """Through the store's own write path (one micro-batch, one lineage_transactions row)."""
    from schemas.codec import decode_message
    from schemas.validate import validate_message
    from sink.postgres import GraphStore
    from tests.test_derive import stored

    rows = [stored(validate_message(m), f"web-ui@{batch_id}.{i}") if isinstance(e, dict) else e
            for i, e in enumerate(events) for m in (decode_message(json.dumps(e).encode(), None)
                                                    if isinstance(e, dict) else [None])]
    with GraphStore(dsn) as store:
        store.write_batch(batch_id, rows)


@pytest.fixture(scope="module")
def graph_db(pg_server) -> str:
    from tests.test_catalog import build_warehouse, demo_events

    dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:16]}")
    build_warehouse(dsn)
    write_events(dsn, 1, demo_events(120))
    write_events(dsn, 2, [ol_event("publish_hostile", [(NS, "raw.orders")], [(NS, HOSTILE)])])
    return dsn


@pytest.fixture(scope="module")
def server(graph_db) -> Iterator[str]:
    ensure_web_build()
    from api.settings import ApiSettings
    from api.testing import running_server

    settings = ApiSettings(postgres_dsn=graph_db, bootstrap_servers="127.0.0.1:1")
    with running_server(settings) as url:
        yield url


@contextmanager
def chromium() -> Iterator[object]:
    """Debian's chromium under Playwright (also used by tests/test_load_running_stack.py)."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run scripts/ensure-chromium.sh (make install-test-deps)"
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@contextmanager
def browser_page(browser, tmp_path: Path) -> Iterator[object]:
    """A 1440x900 page that records dialogs (``page.dialogs``) and script errors, asserts there were none of
    the latter, and leaves ``last.png`` in ``tmp_path``."""
    # Playwright's own waits evaluate strings, which the UI's Content-Security-Policy (no eval) would refuse;
    # the policy itself is checked in test_a_hostile_name_renders_as_text.
    context = browser.new_context(viewport={"width": 1440, "height": 900}, bypass_csp=True)
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    dialogs: list[str] = []
    errors: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.dialogs, pg.errors = dialogs, errors
    try:
        yield pg
        pg.screenshot(path=str(tmp_path / "last.png"))
    finally:
        context.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, tmp_path) -> Iterator[object]:
    with browser_page(browser, tmp_path) as pg:
        yield pg


def nodes_in_view(page) -> list[str]:
    return page.get_by_role("list", name="Nodes in view").get_by_role("listitem").all_inner_texts()


def wait_nodes(page, present=(), absent=()) -> list[str]:
    """Waits (deadline TIMEOUT_MS) until the list holds every name of `present` and none of `absent`."""
    try:
        page.wait_for_function(
        """([present, absent]) => {
             const items = [...document.querySelectorAll('#nodes-in-view li')].map((li) => li.textContent);
             return document.body.dataset.state === 'ready' && present.every((n) => items.includes(n))
                    && !absent.some((n) => items.includes(n));
           }""", arg=[list(present), list(absent)])
    except playwright_api.TimeoutError:
        raise AssertionError(f"want {present}, not {absent}; shown: {nodes_in_view(page)}; "
                             f"status: {page.locator('#status').inner_text()!r}") from None
    return nodes_in_view(page)


def open_view(page, server: str, **params) -> None:
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
    page.goto(f"{server}/?{query}")
    page.wait_for_function("document.body.dataset.state === 'ready'")


def test_search_opens_the_lineage_and_lists_its_upstream_nodes(page, server, tmp_path) -> None:
    page.goto(server)
    box = page.get_by_role("searchbox")
    box.fill("mart.reven")
    page.get_by_role("option").first.wait_for()
    assert page.get_by_role("option").first.inner_text().endswith(f"{NS}/mart.revenue")
    box.press("Enter")
    names = wait_nodes(page, present=[f"{NS}/mart.revenue", f"{NS}/stg.orders", "airflow/revenue"])
    assert f"{NS}/public.revenue_anon" not in names           # downstream: not in an upstream view
    assert "node=" in page.url and page.get_by_label("Direction").input_value() == "upstream"
    page.screenshot(path=str(tmp_path / "ui-lineage.png"))
    page.get_by_role("list", name="Nodes in view").get_by_text(f"{NS}/stg.orders", exact=True).click()
    page.get_by_role("heading", name=f"{NS}/stg.orders").wait_for()
    page.screenshot(path=str(tmp_path / "ui-details.png"))


def test_search_keyboard_navigation(page, server) -> None:
    page.goto(server)
    box = page.get_by_role("searchbox")
    box.fill("orders")
    page.get_by_role("option").nth(1).wait_for()
    second = page.get_by_role("option").nth(1).inner_text().split("\n")[-1]
    box.press("ArrowDown")
    assert box.get_attribute("aria-activedescendant") == "search-result-1"
    box.press("Enter")
    wait_nodes(page, present=[second])


def test_frontier_node_expands_on_click_and_collapses(page, server) -> None:
    open_view(page, server, node=f"{NS}/mart.revenue", depth=1, direction="upstream", jobs="folded")
    names = wait_nodes(page, present=[f"{NS}/stg.orders"], absent=[f"{NS}/raw.customers"])
    assert "airflow/revenue" not in names                       # jobs folded into the edges
    # click the frontier node on the canvas itself
    box = page.locator("#graph").bounding_box()
    x, y = page.evaluate("""() => { const n = window.lineageCy.getElementById(
        window.lineageCy.nodes().filter((n) => n.data('label').startsWith('stg.orders'))[0].id());
        const p = n.renderedPosition(); return [p.x, p.y]; }""")
    assert "more" in page.evaluate("window.lineageCy.nodes().filter((n) => n.data('label').startsWith('stg.orders'))"
                                   "[0].data('label')")
    page.mouse.click(box["x"] + x, box["y"] + y)
    wait_nodes(page, present=[f"{NS}/raw.customers", f"{NS}/raw.orders"])
    page.get_by_role("button", name="Collapse").click()
    wait_nodes(page, present=[f"{NS}/stg.orders"], absent=[f"{NS}/raw.customers"])


def test_column_level_shows_the_upstream_column_and_its_transformation(page, server) -> None:
    open_view(page, server, node=f"{NS}/mart.revenue", depth=3)
    page.get_by_role("list", name="Nodes in view").get_by_text(f"{NS}/mart.revenue", exact=True).click()
    page.get_by_role("button", name="Open columns").click()
    names = wait_nodes(page, present=[f"{NS}/stg.orders"])
    total = next(n for n in names if n.endswith("total"))
    page.get_by_role("list", name="Nodes in view").get_by_text(total, exact=True).click()
    paths = page.get_by_role("list", name="Column paths")
    paths.get_by_text("amount -> total").wait_for()
    assert any("stg.orders" in t and "amount" in t for t in paths.get_by_role("listitem").all_inner_texts())
    assert "level=column" in page.url and "select=" in page.url


def test_erd_view_and_back(page, server, tmp_path) -> None:
    open_view(page, server, node=f"{NS}/mart.revenue")
    page.get_by_role("button", name="ERD").click()
    names = wait_nodes(page, present=[f"{NS}/raw.orders", f"{NS}/raw.customers"])
    assert page.locator("#status").inner_text().count("relation") == 1
    assert "1 relation" in page.locator("#status").inner_text()
    page.get_by_label("Show").select_option("column")
    wait_nodes(page, present=[f"{NS}/raw.orders#customer_id"])
    page.get_by_label("Namespace", exact=True).fill("kafka://bus")
    page.get_by_label("Namespace", exact=True).press("Enter")
    wait_nodes(page, present=["kafka://bus"], absent=[f"{NS}/raw.orders"])
    page.screenshot(path=str(tmp_path / "ui-erd.png"))
    assert names
    page.get_by_role("button", name="Lineage").click()
    wait_nodes(page, present=[f"{NS}/mart.revenue", f"{NS}/stg.orders"])


def test_as_of_redraws_the_past(page, server) -> None:
    open_view(page, server, node="job:airflow/revenue", depth=1, direction="upstream")
    wait_nodes(page, present=[f"{NS}/stg.orders"], absent=[f"{NS}/raw.customers"])
    page.get_by_label("As of").fill("2026-01-15T00:00:00")
    page.get_by_label("As of").press("Enter")
    page.get_by_label("As of").dispatch_event("change")
    wait_nodes(page, present=[f"{NS}/stg.orders", f"{NS}/raw.customers"])
    assert "as_of=2026-01-15" in page.url


def test_a_deep_link_reproduces_the_view(page, server) -> None:
    open_view(page, server, node=f"{NS}/stg.orders")
    page.get_by_label("Depth").fill("2")
    page.get_by_label("Depth").dispatch_event("change")
    page.get_by_label("Direction").select_option("both")
    page.wait_for_function("location.search.includes('direction=both')")
    shown = sorted(wait_nodes(page, present=[f"{NS}/public.revenue_anon", f"{NS}/raw.orders"]))
    link = page.url
    other = page.context.new_page()
    try:
        other.goto(link)
        other.wait_for_function("document.body.dataset.state === 'ready' && "
                                "document.querySelectorAll('#nodes-in-view li').length > 0")
        assert sorted(nodes_in_view(other)) == shown
        assert other.get_by_label("Depth").input_value() == "2"
        assert other.get_by_label("Direction").input_value() == "both"
    finally:
        other.close()


def test_a_hostile_name_renders_as_text(page, server) -> None:
    page.goto(server)
    page.get_by_role("searchbox").fill("<img")
    page.get_by_role("option").first.wait_for()
    assert page.get_by_role("option").first.inner_text().endswith(HOSTILE)
    page.get_by_role("searchbox").press("Enter")
    wait_nodes(page, present=[f"{NS}/{HOSTILE}"])
    page.get_by_role("list", name="Nodes in view").get_by_text(f"{NS}/{HOSTILE}", exact=True).click()
    page.get_by_role("heading", name=f"{NS}/{HOSTILE}").wait_for()
    assert page.locator("img").count() == 0
    assert page.dialogs == []
    import urllib.request

    with urllib.request.urlopen(server) as response:
        csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_live_updates_appear_without_a_reload(page, server, graph_db) -> None:
    open_view(page, server, node=f"{NS}/mart.revenue", direction="downstream", depth=2)
    wait_nodes(page, present=[f"{NS}/public.revenue_anon"], absent=[f"{NS}/live.fresh"])
    page.wait_for_function("document.getElementById('live').dataset.state === 'open'")
    page.evaluate("window.__noReload = true")
    write_events(graph_db, 3, [ol_event("live_job", [(NS, "mart.revenue")], [(NS, "live.fresh")])])
    wait_nodes(page, present=[f"{NS}/live.fresh"])
    assert page.evaluate("window.__noReload") is True
    assert "updated" in page.locator("#live").inner_text()


FIT_MAX_ZOOM = 1.25   # web/src/graphview.js: a fit never zooms in further
# Labels of the drawn nodes whose rendered box is not wholly inside the part of #graph that shows (left of
# the details panel when it is open), measured in the page's own pixels.
HIDDEN_NODES = """() => {
  const graph = document.getElementById('graph').getBoundingClientRect();
  const panel = document.getElementById('details');
  const width = (panel.hidden ? graph.right : Math.min(graph.right, panel.getBoundingClientRect().left)) - graph.left;
  return window.lineageCy.nodes().filter((n) => {
    const b = n.renderedBoundingBox();   // in pixels from the top left corner of #graph
    return b.x1 < -1 || b.x2 > width + 1 || b.y1 < -1 || b.y2 > graph.height + 1;
  }).map((n) => n.data('label'));
}"""
POSITIONS = "() => Object.fromEntries(window.lineageCy.nodes().map((n) => [n.id(), n.position()]))"


def click_node(page, label: str) -> None:
    """A click on the canvas, where the node labelled ``label`` is drawn."""
    box = page.locator("#graph").bounding_box()
    x, y = page.evaluate("""(label) => { const n = window.lineageCy.nodes().filter((n) => n.data('label') === label);
        const p = n.renderedPosition(); return [p.x, p.y]; }""", label)
    page.mouse.click(box["x"] + x, box["y"] + y)


def wait_all_in_view(page) -> None:
    """Waits (5 s) until the drawing knows the size of #graph and every drawn node shows; fails naming the
    hidden ones."""
    try:
        page.wait_for_function(f"""window.lineageCy.width() === document.getElementById('graph').clientWidth
                                   && ({HIDDEN_NODES})().length === 0""", timeout=5_000)
    except playwright_api.TimeoutError:
        raise AssertionError(f"nodes outside the visible graph area: {page.evaluate(HIDDEN_NODES)}; drawing "
                             f"{page.evaluate('window.lineageCy.width()')} px wide, #graph "
                             f"{page.locator('#graph').bounding_box()['width']} px") from None


def test_the_drawing_refits_when_the_details_panel_opens_and_closes(page, server, tmp_path) -> None:
    open_view(page, server, node=f"{NS}/mart.revenue", depth=3, direction="upstream")
    wait_nodes(page, present=[f"{NS}/mart.revenue", f"{NS}/raw.orders"])
    assert page.evaluate(HIDDEN_NODES) == []
    laid_out = page.evaluate(POSITIONS)
    click_node(page, "mart.revenue")          # the root, drawn rightmost: where the panel opens
    page.get_by_role("heading", name=f"{NS}/mart.revenue").wait_for()
    wait_all_in_view(page)
    assert page.evaluate(POSITIONS) == laid_out                  # refit, not laid out again
    page.screenshot(path=str(tmp_path / "ui-details-refit.png"))
    page.get_by_role("button", name="Close details").click()
    page.locator("#details").wait_for(state="hidden")
    wait_all_in_view(page)
    # the same from the list beside the drawing (a small graph: no zooming in on the node)
    page.get_by_role("list", name="Nodes in view").get_by_text(f"{NS}/raw.orders", exact=True).click()
    page.get_by_role("heading", name=f"{NS}/raw.orders").wait_for()
    wait_all_in_view(page)
    page.get_by_role("button", name="Close details").click()
    page.locator("#details").wait_for(state="hidden")
    wait_all_in_view(page)

    # after the user zoomed in, the panel keeps the zoom and the selected node in view
    box = page.locator("#graph").bounding_box()
    x, y = page.evaluate("(() => { const p = window.lineageCy.nodes().filter((n) => n.data('label') === "
                         "'mart.revenue').renderedPosition(); return [p.x, p.y]; })()")
    page.mouse.move(box["x"] + x, box["y"] + y)
    page.mouse.wheel(0, -400)
    page.wait_for_function(f"window.lineageCy.zoom() > {FIT_MAX_ZOOM}")
    zoom = page.evaluate("window.lineageCy.zoom()")
    click_node(page, "mart.revenue")
    page.get_by_role("heading", name=f"{NS}/mart.revenue").wait_for()
    page.wait_for_function(f"""() => !({HIDDEN_NODES})().includes('mart.revenue')""", timeout=5_000)
    assert page.evaluate("window.lineageCy.zoom()") == zoom
    assert page.evaluate(POSITIONS) == laid_out


def test_a_fit_does_not_zoom_in_on_one_table_or_one_node(page, server) -> None:
    open_view(page, server, view="erd", namespace="kafka://bus")
    wait_nodes(page, present=["kafka://bus/orders"])
    assert page.locator("#status").inner_text().startswith("1 table,")
    assert page.evaluate("window.lineageCy.nodes().length") >= 1
    assert page.evaluate("window.lineageCy.zoom()") <= FIT_MAX_ZOOM
    open_view(page, server, node="kafka://bus/orders", depth=1)
    wait_nodes(page, present=["kafka://bus/orders"])
    assert page.evaluate("window.lineageCy.zoom()") <= FIT_MAX_ZOOM


def test_nodes_in_view_wrap_between_the_parts_of_a_name(page, server) -> None:
    open_view(page, server, node=f"{NS}/mart.revenue", depth=3, direction="upstream")
    names = wait_nodes(page, present=[f"{NS}/mart.revenue", f"{NS}/raw.customers"])
    # per item: the line tops of each text run between <wbr>s (a run split over two lines was broken mid-word)
    lines = page.evaluate("""() => [...document.querySelectorAll('#nodes-in-view li')].map((li) => [...li.childNodes]
        .filter((c) => c.nodeType === Node.TEXT_NODE).map((t) => {
          const r = document.createRange();
          r.selectNodeContents(t);
          return [...new Set([...r.getClientRects()].map((x) => Math.round(x.top)))];
        }))""")
    assert len(lines) == len(names)
    broken = [(name, runs) for name, runs in zip(names, lines, strict=True) if any(len(tops) != 1 for tops in runs)]
    assert not broken, broken
    wrapped = [name for name, runs in zip(names, lines, strict=True) if len({t for tops in runs for t in tops}) > 1]
    assert f"{NS}/raw.customers" in wrapped, wrapped     # the test's names are long enough to wrap
