"""FastAPI dependencies shared by the routers: settings, a pooled connection, API-key checks.

Keys: ``Authorization: Bearer <key>`` (the OpenLineage clients' ``api_key`` auth), compared with
:func:`hmac.compare_digest` against every configured key (constant time in the key's content).
With no keys configured, writes are open; reads need a key only with ``read_requires_key``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from api.settings import ApiSettings

__all__ = ["get_settings", "get_pool", "get_conn", "require_write_key", "require_read_key", "key_matches", "check_key"]


def get_settings(request: Request) -> ApiSettings:
    return request.app.state.settings  # type: ignore[no-any-return]


def get_pool(request: Request) -> Any:
    """The app's psycopg_pool.ConnectionPool."""
    return request.app.state.pool


def get_conn(request: Request) -> Iterator[Any]:
    """A pooled psycopg connection for the duration of the request (returned to the pool afterwards).

    No free connection within ``pool_timeout_seconds`` (database down or saturated): 503 with Retry-After.
    """
    from psycopg_pool import PoolTimeout

    pool = get_pool(request)
    settings = get_settings(request)
    try:
        conn_cm = pool.connection(timeout=settings.pool_timeout_seconds)
        conn = conn_cm.__enter__()
    except PoolTimeout as exc:
        raise HTTPException(503, "the graph database is not reachable; retry later",
                            headers={"Retry-After": str(settings.retry_after_seconds)}) from exc
    try:
        yield conn
    except BaseException as exc:
        conn_cm.__exit__(type(exc), exc, exc.__traceback__)
        raise
    else:
        conn_cm.__exit__(None, None, None)


def key_matches(presented: str, keys: list[Any]) -> bool:
    """True when ``presented`` equals one of ``keys`` (SecretStr); every key is compared (constant time)."""
    given = presented.encode("utf-8")
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key.get_secret_value().encode("utf-8"))
    return found


def check_key(headers: Any, settings: ApiSettings) -> None:
    """401 / 403 unless ``headers`` (a mapping with lower-case names) carry one of the configured keys."""
    header = headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(401, "missing API key: send `Authorization: Bearer <key>`",
                            headers={"WWW-Authenticate": "Bearer"})
    if not key_matches(token.strip(), settings.api_keys):
        raise HTTPException(403, "invalid API key")


def require_write_key(request: Request, settings: Annotated[ApiSettings, Depends(get_settings)]) -> None:
    """401 without / 403 with a wrong ``Authorization: Bearer`` key, when keys are configured."""
    if settings.api_keys:
        check_key(request.headers, settings)


def require_read_key(request: Request, settings: Annotated[ApiSettings, Depends(get_settings)]) -> None:
    """Like :func:`require_write_key`, for GET routes, only when ``read_requires_key`` is set."""
    if settings.read_requires_key and settings.api_keys:
        check_key(request.headers, settings)
