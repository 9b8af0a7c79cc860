"""The web UI at ``/``: the Vite build of ``web/`` (``web/dist``, built by ``make web-build``, not committed).

:func:`mount` is called last by :func:`api.app.create_app`: the built assets under ``/assets`` (immutable,
content-hashed names) and every other GET that no API route matched answered with ``index.html`` (the UI
keeps its view in the URL, so a deep link such as ``/?node=...&depth=5`` must load the page). Paths under
``/api/`` never fall back to the page: an unknown API path stays a JSON 404. Everything is served by the
product itself (no CDN), with a Content-Security-Policy that allows only this origin's scripts, so an
injected name could not load or run a script even if it reached the DOM as markup.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["DIST", "mount", "CONTENT_SECURITY_POLICY"]

#: Where ``npm run build`` in ``web/`` writes the UI.
DIST = Path(__file__).resolve().parent.parent / "web" / "dist"

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; worker-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin"}
_NOT_BUILT = ("The web UI is not built: run `make web-build` (npm ci && npm run build in web/) "
              "and restart the server. The API is served under /api.\n")
_API_PREFIXES = ("api/", "openapi.json", "docs", "metrics", "healthz")


def mount(app: FastAPI, dist: Path | None = None) -> None:
    """Serve the UI in ``dist`` (default :data:`DIST`) at ``/``; a missing build answers 503 saying how to build."""
    root = (dist or DIST).resolve()
    index = root / "index.html"
    if (root / "assets").is_dir():
        app.mount("/assets", StaticFiles(directory=root / "assets"), name="web-assets")

    @app.middleware("http")
    async def _ui_headers(request: Request, call_next):  # type: ignore[no-untyped-def]
        response = await call_next(request)
        if not request.url.path.startswith("/api/"):
            for key, value in _HEADERS.items():
                response.headers.setdefault(key, value)
        return response

    @app.get("/{path:path}", include_in_schema=False)
    async def _page(path: str) -> Response:
        if path.startswith(_API_PREFIXES):
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        if not index.is_file():
            return PlainTextResponse(_NOT_BUILT, status_code=503)
        candidate = (root / path).resolve()
        if path and candidate.is_file() and candidate.is_relative_to(root):
            return FileResponse(candidate)
        return FileResponse(index, headers={"Cache-Control": "no-cache"})
