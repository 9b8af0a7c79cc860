"""``GET /api/graph/live``: Server-Sent Events, one ``graph`` event whenever new lineage commits.

One poller per application, shared by every client: while at least one client listens, it reads the
store's transaction log (``lineage_transactions``, one row per committed micro-batch) every
``POLL_SECONDS`` through the app's connection pool; for each new batch it sends
``event: graph`` with ``data: {"at": ISO time, "batch_id": int|null, "changed": [node ids]}`` to every
client (the ids of datasets and jobs the batch wrote, at most ``MAX_CHANGED``, through the
``last_batch_id`` indexes). With no client left it stops. A comment line every ``KEEPALIVE_SECONDS``
keeps proxies from closing an idle stream. The queries live in :mod:`sink.catalog` (``new_batches``,
``changed_nodes``); batches are found by commit time (``lineage load`` and the stream number them apart).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from api.deps import require_read_key

__all__ = ["router", "LivePoller", "POLL_SECONDS"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/graph", tags=["graph"], dependencies=[Depends(require_read_key)])

POLL_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
MAX_CHANGED = 1000
QUEUE_SIZE = 100


class LivePoller:
    """Polls the transaction log while clients listen and fans each new batch out to them."""

    def __init__(self, pool: Any, poll_seconds: float = POLL_SECONDS) -> None:
        self.pool, self.poll_seconds = pool, poll_seconds
        self.clients: set[asyncio.Queue[dict[str, Any]]] = set()
        self.task: asyncio.Task[None] | None = None
        self.watermark: datetime | None = None     # commit time of the newest batch seen
        self.primed = False
        self.polls = 0

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self.clients.add(queue)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run(), name="graph-live-poller")
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self.clients.discard(queue)

    def _read(self) -> list[dict[str, Any]]:
        from sink.catalog import changed_nodes, new_batches

        with self.pool.connection(timeout=5) as conn:
            if not self.primed:        # the first poll only sets the watermark: clients get what commits next
                self.watermark, _ = new_batches(conn, None)
                self.primed = True
                if self.watermark is None:
                    self.watermark = datetime(1970, 1, 1, tzinfo=UTC)
                return []
            self.watermark, batches = new_batches(conn, self.watermark)
            if not batches:
                return []
            return [{"at": datetime.now(UTC).isoformat(), "batch_id": batches[-1], "batches": batches,
                     "changed": changed_nodes(conn, batches, MAX_CHANGED)}]

    async def _run(self) -> None:
        while self.clients:
            try:
                self.polls += 1
                for message in await asyncio.to_thread(self._read):
                    for queue in list(self.clients):
                        with contextlib.suppress(asyncio.QueueFull):   # a stalled client misses events
                            queue.put_nowait(message)
            except Exception as exc:  # noqa: BLE001 - the database may be down: keep polling, log once a poll
                log.warning("live poller: %s", exc)
            await asyncio.sleep(self.poll_seconds)


def _poller(request: Request) -> LivePoller:
    state = request.app.state
    if getattr(state, "graph_live", None) is None:
        state.graph_live = LivePoller(state.pool, getattr(state, "graph_live_poll_seconds", POLL_SECONDS))
    return state.graph_live  # type: ignore[no-any-return]


def _stopping(request: Request) -> bool:
    """True once the server shuts down: ``app.state.stopping`` (a threading.Event the server may set when
    it is told to exit), so open streams end instead of holding a graceful shutdown to its timeout."""
    flag = getattr(request.app.state, "stopping", None)
    return bool(flag is not None and flag.is_set())


async def _stream(request: Request, poller: LivePoller) -> AsyncIterator[str]:
    queue = poller.subscribe()
    idle = 0.0
    try:
        yield "retry: 3000\n: connected\n\n"
        while not await request.is_disconnected() and not _stopping(request):
            try:
                message = await asyncio.wait_for(queue.get(), 1.0)
            except TimeoutError:
                idle += 1.0
                if idle >= KEEPALIVE_SECONDS:
                    idle = 0.0
                    yield ": keepalive\n\n"
                continue
            idle = 0.0
            yield f"event: graph\ndata: {json.dumps(message, separators=(',', ':'))}\n\n"
    finally:
        poller.unsubscribe(queue)


@router.get("/live", summary="server-sent events: a `graph` event whenever new lineage commits",
            response_class=StreamingResponse)
async def live(request: Request) -> StreamingResponse:
    return StreamingResponse(_stream(request, _poller(request)), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/live/status", summary="the live poller: clients listening, polls made, newest commit seen")
async def live_status(request: Request) -> dict[str, Any]:
    poller: LivePoller | None = getattr(request.app.state, "graph_live", None)
    if poller is None:
        return {"clients": 0, "polls": 0, "watermark": None, "running": False}
    return {"clients": len(poller.clients), "polls": poller.polls,
            "watermark": poller.watermark.isoformat() if poller.watermark else None,
            "running": poller.task is not None and not poller.task.done()}
