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
from typing import Any

from fastapi import FastAPI
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


_RAW_HEADERS = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in _HEADERS.items()]


class _UiHeaders:
    """The security headers on every response outside ``/api/`` that does not set them itself (a pure ASGI
    middleware: Starlette's ``@app.middleware("http")`` runs each request in a task group and re-streams it)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *((k, v) for k, v in _RAW_HEADERS if k not in present)]
            await send(message)

        await self.app(scope, receive, with_headers)


def mount(app: FastAPI, dist: Path | None = None) -> None:
    """Serve the UI in ``dist`` (default :data:`DIST`) at ``/``; a missing build answers 503 saying how to build."""
    root = (dist or DIST).resolve()
    index = root / "index.html"
    if (root / "assets").is_dir():
        app.mount("/assets", StaticFiles(directory=root / "assets"), name="web-assets")

    app.add_middleware(_UiHeaders)

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
