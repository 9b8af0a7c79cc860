"""Request metrics (Prometheus) at ``GET /metrics``: count and latency by route template, method and status.

- ``lineage_http_requests_total{method, route, status}``
- ``lineage_http_request_duration_seconds{method, route}`` (histogram)
- ``lineage_http_ingested_events_total{outcome}`` (accepted / rejected / failed, from :mod:`api.ingest`)

``route`` is the matched route's template (``/api/v1/namespaces/{namespace}``), never the raw path, so
the label's values stay bounded; unmatched paths count as ``(unmatched)``. The metrics live in the
app's own registry (``app.state.metrics.registry``), so several apps in one process do not collide.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

__all__ = ["ApiMetrics", "install"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("lineage_http_requests_total", "HTTP requests served",
                                ("method", "route", "status"), registry=self.registry)
        self.latency = Histogram("lineage_http_request_duration_seconds", "HTTP request latency, seconds",
                                 ("method", "route"), buckets=_BUCKETS, registry=self.registry)
        self.events = Counter("lineage_http_ingested_events_total", "events posted to /api/v1/lineage by outcome",
                              ("outcome",), registry=self.registry)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one request and its latency (the labelled children are looked up once per label set)."""
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (self.requests.labels(method, route, str(status)),
                                              self.latency.labels(method, route))
        children[0].inc()
        children[1].observe(seconds)


def _route_template(scope: dict[str, Any]) -> str:
    route = scope.get("route")  # set by the router on the (shared) scope when a route matched
    return str(getattr(route, "path", None) or "(unmatched)")


class _Timing:
    """Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer the live event stream and cost more)."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.observe(scope["method"], _route_template(scope), status[0], time.perf_counter() - started)


def install(app: FastAPI) -> None:
    """Add the timing middleware and the ``/metrics`` route."""
    metrics = ApiMetrics()
    app.state.metrics = metrics
    app.add_middleware(_Timing, metrics=metrics)

    @app.get("/metrics", include_in_schema=False)
    def _metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
