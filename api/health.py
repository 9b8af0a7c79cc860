"""``GET /healthz``: the broker and the graph database are reachable (200), else 503 naming which is not."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

__all__ = ["router"]

router = APIRouter(tags=["health"])


def _database_ok(pool: Any, timeout_seconds: float) -> str | None:
    try:
        with pool.connection(timeout=timeout_seconds) as conn:
            conn.execute("SELECT 1").fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure is "not reachable", with its reason
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


@router.get("/healthz", summary="broker and database reachable")
async def healthz(request: Request) -> JSONResponse:
    state = request.app.state
    db_error, broker_ok = await asyncio.gather(
        asyncio.to_thread(_database_ok, state.pool, 2.0),
        asyncio.to_thread(state.producer.broker_reachable, 2.0),
    )
    body = {
        "status": "ok" if db_error is None and broker_ok else "unavailable",
        "database": "ok" if db_error is None else db_error,
        "broker": "ok" if broker_ok else "unreachable",
    }
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)
