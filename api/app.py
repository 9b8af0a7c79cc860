"""``create_app(settings)``: the FastAPI application of ``lineage serve``.

The lifespan opens a psycopg connection pool (``app.state.pool``) and the acking Kafka producer
(``app.state.producer``) and closes both on shutdown (the producer flushes what is queued first).
Routers come from :data:`ROUTER_MODULES` (each exposes ``router``; a module not built yet is
skipped, as ``lineage/cli.py`` does with its commands); ``api.web.mount(app)``, when present, is
called last because it mounts the UI at ``/``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from api.settings import ApiSettings

__all__ = ["create_app", "ROUTER_MODULES", "LineageApp"]

log = logging.getLogger(__name__)

#: Router modules, in the order their routes are matched. Missing modules are skipped.
ROUTER_MODULES = ("api.health", "api.ingest", "api.marquez", "api.graph", "api.live")


def _optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


def _open_pool(settings: ApiSettings) -> Any:
    from psycopg_pool import ConnectionPool

    timeout_ms = int(settings.statement_timeout_seconds * 1000)
    pool = ConnectionPool(
        settings.dsn(), min_size=settings.pool_min_size, max_size=settings.pool_max_size, open=False,
        timeout=settings.pool_timeout_seconds, name="lineage-api",
        kwargs={"autocommit": True, "connect_timeout": 5, "options": f"-c statement_timeout={timeout_ms}",
                "application_name": "lineage-api"},
    )
    pool.open(wait=False)  # a database that is down does not stop the server: /healthz and reads say 503
    return pool


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    from api.producer import AckingProducer

    settings: ApiSettings = app.state.settings
    app.state.pool = _open_pool(settings)
    app.state.producer = AckingProducer(settings.producer_config())
    try:
        yield
    finally:
        left = app.state.producer.close(settings.delivery_timeout_seconds)
        if left:
            log.error("%d ingested message(s) were still unacknowledged at shutdown", left)
        app.state.pool.close()


class LineageApp(FastAPI):
    """FastAPI, except that ``POST /api/v1/lineage`` (the hot path of every producer) goes straight to
    :func:`api.ingest.asgi_ingest`: the same handler as the documented route, without routing, dependency
    solving and the middleware stack (on a single-event request they cost more than the broker's ack).
    With CORS configured every request takes the full stack."""

    fast_ingest = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (self.fast_ingest and scope["type"] == "http" and scope["path"] == "/api/v1/lineage"
                and scope["method"] == "POST"):
            from api.ingest import asgi_ingest

            await asgi_ingest(self.state, scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def create_app(settings: ApiSettings) -> FastAPI:
    """The application; nothing connects until the lifespan starts (uvicorn's startup)."""
    app = LineageApp(
        title="lineage-stream",
        summary="OpenLineage ingest, a Marquez-compatible read API and the lineage graph API",
        version="0.1.0",
        lifespan=_lifespan,
        docs_url=None,  # /docs is served by api.docs without a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    #: Set when the server begins a graceful stop (api.server): streaming responses end on it.
    app.state.stopping = threading.Event()
    if settings.cors_origins:
        app.fast_ingest = False
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "Content-Encoding"])
    from api.paths import EncodedSlashes

    app.add_middleware(EncodedSlashes)
    metrics = _optional_module("api.metrics")
    if metrics is not None:
        metrics.install(app)
    for name in ("api.docs", *ROUTER_MODULES):
        module = _optional_module(name)
        if module is not None:
            app.include_router(module.router)
    web = _optional_module("api.web")
    if web is not None:
        web.mount(app)
    return app
