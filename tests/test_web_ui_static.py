"""api/web.py without a browser: the built UI at /, the SPA fallback for deep links, JSON 404s under /api,
no path traversal, the security headers, and a 503 that says how to build when web/dist is missing."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


@pytest.fixture
def dist(tmp_path):
    root = tmp_path / "dist"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>ui</title>")
    (root / "assets" / "app-1234.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("outside")
    return root


def client_for(dist):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from api.web import mount

    app = FastAPI()

    @app.get("/api/graph/ping")
    def ping() -> dict:
        return {"ok": True}

    mount(app, dist)
    return TestClient(app)


def test_index_assets_and_deep_links(dist) -> None:
    c = client_for(dist)
    page = c.get("/")
    assert page.status_code == 200 and "<title>ui</title>" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert c.get("/assets/app-1234.js").text == "console.log(1)"
    deep = c.get("/", params={"node": "ns/a.b", "depth": 5})
    assert deep.status_code == 200 and "<title>ui</title>" in deep.text
    assert c.get("/some/client/route").text == page.text


def test_api_paths_stay_json_and_files_stay_inside(dist) -> None:
    c = client_for(dist)
    assert c.get("/api/graph/ping").json() == {"ok": True}
    missing = c.get("/api/graph/nope")
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
    assert "content-security-policy" not in missing.headers
    assert "outside" not in c.get("/../secret.txt").text
    assert "outside" not in c.get("/%2e%2e/secret.txt").text


def test_missing_build_says_how_to_build(tmp_path) -> None:
    r = client_for(tmp_path / "nothing").get("/")
    assert r.status_code == 503 and "make web-build" in r.text
