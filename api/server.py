"""Run the application under uvicorn on a socket we bind ourselves (so port 0 resolves before start).

uvicorn's ``Server`` handles SIGINT / SIGTERM: it stops accepting, lets running requests finish
(``timeout_graceful_shutdown``), then runs the lifespan's shutdown (producer flush, pool close).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import uvicorn

from api.settings import ApiSettings

__all__ = ["bind", "build_server", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, except that a SIGINT / SIGTERM that stopped it gracefully is not raised again
    afterwards (uvicorn re-raises it, so the process would die of the signal): ``lineage serve`` exits 0."""

    def __init__(self, config: Any, stopping: Any = None) -> None:
        super().__init__(config)
        self.stopped_by_signal: int | None = None
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Before uvicorn waits for open connections: long responses (the live event stream) watch
        # app.state.stopping and end, instead of holding the graceful stop to its timeout.
        if self.stopping is not None:
            self.stopping.set()
        await super().shutdown(sockets)

    def capture_signals(self) -> Any:
        inner = super().capture_signals()
        server = self

        class _Quiet:
            def __enter__(self) -> None:
                inner.__enter__()

            def __exit__(self, *exc: Any) -> bool:
                captured, server._captured_signals = list(server._captured_signals), []
                if captured:
                    server.stopped_by_signal = captured[-1]
                return bool(inner.__exit__(*exc))

        return _Quiet()


def build_server(settings: ApiSettings, *, log_level: str = "warning", access_log: bool = False) -> Any:
    """A ``uvicorn.Server`` for :func:`api.app.create_app` (uvloop and httptools when installed)."""
    import importlib.util

    from api.app import create_app

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    app = create_app(settings)
    config = uvicorn.Config(app, loop=loop, http=http, log_level=log_level,
                            access_log=access_log, timeout_graceful_shutdown=15, server_header=False,
                            proxy_headers=False, lifespan="on")
    return _Server(config, stopping=app.state.stopping)


def serve(settings: ApiSettings, *, on_ready: Callable[[str], None] | None = None,
          log_level: str = "warning") -> None:
    """Serve until SIGINT / SIGTERM; ``on_ready(url)`` once the socket is bound."""
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if on_ready is not None:
        on_ready(f"http://{shown}:{port}")
    server = build_server(settings, log_level=log_level)
    server.run(sockets=[sock])
