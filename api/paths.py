"""Names with ``/`` in path segments: ``/api/v1/namespaces/s3%3A%2F%2Fbucket/datasets/a%2Fb``.

OpenLineage namespaces are URIs (``s3://bucket``, ``postgres://host:5432``) and dataset names are often
paths, so Marquez clients percent-encode them (``%2F``) inside one path segment. ASGI servers decode
``%2F`` into ``/`` before routing, which would split the segment. :class:`EncodedSlashes` re-derives
``path`` from ``raw_path`` for ``/api/v1/`` requests, keeping an encoded slash as :data:`SLASH` (a
private-use character no name contains) so routing sees one segment; :func:`name` turns it back.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

__all__ = ["EncodedSlashes", "SLASH", "name"]

SLASH = "\uf8ff"
_PREFIX = b"/api/v1/"


def name(segment: str) -> str:
    """A path parameter with its encoded slashes restored."""
    return segment.replace(SLASH, "/")


class EncodedSlashes:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or b""
            if raw.startswith(_PREFIX) and (b"%2F" in raw or b"%2f" in raw):
                text = raw.decode("latin-1").replace("%2F", SLASH).replace("%2f", SLASH)
                scope["path"] = unquote(text, encoding="utf-8", errors="replace")  # in place: the metrics see the route
        await self.app(scope, receive, send)
