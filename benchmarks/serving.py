"""``lineage serve`` in its own process for the HTTP benchmarks, as it runs in production (uvloop, httptools).

Benchmarks must not serve from a thread of their own process (``api.testing.running_server``): measured
on 2026-11-25, every GET answered by the in-process server (asyncio loop in a thread, the client's
Python beside it) took ~44 ms whatever its work (``/openapi.json`` too), against 0.4 ms from
``lineage serve``; the read-API figures of the earlier sessions carried that constant.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

from lineage.embedded.ports import free_port

__all__ = ["served"]


@contextlib.contextmanager
def served(*args: str, env: dict[str, str] | None = None, start_timeout_seconds: float = 60) -> Iterator[str]:
    """``python -m lineage serve --port P *args`` with ``env`` added; yields ``http://127.0.0.1:P``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "lineage", "serve", "--port", str(port), *args],
                            env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_seconds
        while True:
            try:
                urllib.request.urlopen(f"{url}/openapi.json", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("lineage serve did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
