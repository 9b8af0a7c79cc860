"""``POST /api/v1/lineage``: OpenLineage events over HTTP, published to the input topic once acknowledged.

The path the OpenLineage clients' HTTP transport posts to (``OPENLINEAGE_URL=<http_url>``). The body is
one event, or a JSON array of events (a batch: one result per event, in order).

- Validation is the stream's own (:func:`schemas.validate.validate_openlineage_event`, the entry point the
  decoder uses): a core error rejects the event (400 for a single event, naming the field); the processor
  validates again and stores.
- Each accepted event is published as UTF-8 JSON (what the official Kafka transport sends, the bytes of
  a single-event body as they came) with the official transport's key (:func:`producers.keys.message_key`),
  by an idempotent ``acks=all`` producer. The response is sent only after the broker acknowledged
  every accepted event: 201 (one event) / 200 (a batch, all accepted) / 207 (a batch, some rejected) /
  400 (nothing valid). A broker that is down or does not acknowledge within
  ``delivery_timeout_seconds``: 503 with ``Retry-After`` (nothing is published while it is known down).
- Standard facets that break their schema are dropped (when :mod:`schemas.validate` reports them): the
  event is published without them, each dropped facet is reported in the response (``dropped_facets``)
  and a ``dead_letter`` record with code ``validation.facet`` goes to the dead-letter topic, as the
  stream does.
- Limits: ``max_body_bytes`` before and after gzip (413), JSON content types only (415), API keys
  (401 / 403, :mod:`api.deps`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from api.body import BodyError, read_body
from api.deps import check_key
from api.producer import Delivered, DeliveryFailure, Message
from api.settings import ApiSettings
from producers.keys import message_key
from schemas.errors import LineageError
from sink.fastjson import dumps_compact

__all__ = ["router", "check_event", "Checked", "ingest", "asgi_ingest", "Answer", "PATH"]

router = APIRouter(tags=["ingest"])
log = logging.getLogger(__name__)
#: Bodies larger than this are parsed and validated in a worker thread, so the event loop keeps serving.
_THREAD_BODY_BYTES = 256 * 1024

_JSON_TYPES = ("application/json", "text/json")
_REQUEST_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"oneOf": [
        {"$ref": "https://openlineage.io/spec/2-0-2/OpenLineage.json"},
        {"type": "array", "items": {"$ref": "https://openlineage.io/spec/2-0-2/OpenLineage.json"}},
    ]}}},
    "description": "An OpenLineage RunEvent, JobEvent or DatasetEvent, or a JSON array of them; "
                   "`Content-Encoding: gzip` accepted.",
}


@dataclass
class Checked:
    """One event after validation: ``error`` set when rejected, else the document to publish."""

    index: int
    document: Any
    value: bytes | None = None
    key: str | None = None
    error: LineageError | None = None
    dropped: list[dict[str, Any]] = field(default_factory=list)


def _validate(document: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(event, dropped facets)`` by the stream's validation entry point.

    :func:`schemas.validate.validate_openlineage_event` (core checks, then standard facets: a facet that
    breaks its schema is left out of the returned event and reported) when the schemas package has it;
    otherwise :func:`schemas.validate.validate_event` (core checks only, nothing dropped).
    Core errors raise :class:`schemas.errors.EventValidationError`.
    """
    from schemas import validate

    full = getattr(validate, "validate_openlineage_event", None)
    if full is None:
        return validate.validate_event(document), []
    event, violations = full(document)
    return event, [{"facet": v.facet, "path": v.path, "facet_path": v.facet_path, "message": v.message[:2000]}
                   for v in violations]


def check_event(index: int, document: Any, raw: bytes | None = None) -> Checked:
    """Validate one event with the stream's validation; the message value and key when it passes.

    The value is the event as sent (``raw``: the body's own bytes for a single event); with dropped
    facets, the validated event without them (the stream then finds nothing more to drop)."""
    item = Checked(index, document)
    try:
        published, item.dropped = _validate(document)
    except LineageError as exc:
        item.error = exc
        return item
    except RecursionError as exc:
        item.error = LineageError("the event is nested too deeply", code="decode.too_deep", field="$")
        item.error.__cause__ = exc
        return item
    if not item.dropped:
        published = document
    item.value = raw if raw is not None and not item.dropped else dumps_compact(published).encode("utf-8")
    item.key = message_key(published)
    return item


def _error_body(exc: LineageError) -> dict[str, Any]:
    return {"code": exc.code, "field": exc.field, "message": str(exc)}


def _parse(body: bytes) -> Any:
    from sink.fastjson import loads

    if not body.strip():
        raise BodyError(400, "empty body: send an OpenLineage event or a JSON array of events")
    try:
        return loads(body)
    except RecursionError as exc:
        raise BodyError(400, "the JSON body is nested too deeply") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BodyError(400, f"the body is not valid JSON: {exc}") from exc


def _check_body(body: bytes) -> tuple[bool, list[Checked]]:
    """``(is a batch, checked events)`` of a request body."""
    document = _parse(body)
    if isinstance(document, list):
        return True, [check_event(i, doc) for i, doc in enumerate(document)]
    return False, [check_event(0, document, raw=body)]


def _check_content_type(headers: Mapping[str, str]) -> None:
    content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type not in _JSON_TYPES and not content_type.endswith("+json"):
        raise BodyError(415, f"Content-Type {content_type or '(none)'!r} is not JSON: send application/json")


def _unavailable(settings: ApiSettings, reason: str, results: list[dict[str, Any]] | None = None) -> Answer:
    body: dict[str, Any] = {"detail": f"the broker did not acknowledge: {reason}; retry later"}
    if results is not None:
        body["results"] = results
    return Answer(503, body, {"Retry-After": str(settings.retry_after_seconds)})


def _dead_letters(settings: ApiSettings, items: list[Checked], acks: dict[int, Delivered]) -> list[Message]:
    """``dead_letter`` records (code ``validation.facet``) of the dropped facets of published events."""
    from datetime import UTC, datetime

    from stream_processor.publish import encode_record

    out = []
    for item in items:
        ack = acks.get(item.index)
        if not item.dropped or ack is None:
            continue
        original = dumps_compact(item.document).encode("utf-8")
        for dropped in item.dropped:
            record = {"key": item.key.encode("utf-8") if item.key else None, "value": original, "headers": [],
                      "topic": ack.topic, "partition": ack.partition, "offset": ack.offset,
                      "error_class": "FacetValidationError", "error_code": "validation.facet",
                      "message": dropped["message"], "field": dropped["path"], "failed_at": datetime.now(UTC)}
            # the stream's record of a dropped facet (stream_processor/decode.py): code validation.facet,
            # field = the violation's JSON path, value = the event as sent; coordinates = the published event
            out.append(Message(settings.topic_dlq, encode_record("dead_letter", record), item.key))
    return out


async def _publish(state: Any, settings: ApiSettings, items: list[Checked]
                   ) -> tuple[dict[int, Delivered], dict[int, DeliveryFailure]]:
    producer = state.producer
    accepted = [i for i in items if i.error is None]
    sent = producer.send([Message(settings.topic_events, i.value, i.key) for i in accepted])  # type: ignore[arg-type]
    wait = settings.delivery_timeout_seconds + 2.0
    try:
        async with asyncio.timeout(wait):  # not wait_for: its extra waiter costs a loop turn per request
            results = await sent
    except TimeoutError:  # librdkafka's own delivery timeout should have answered first
        results = [DeliveryFailure("_TIMED_OUT", f"no acknowledgement in {wait:.0f}s")] * len(accepted)
    acks = {i.index: r for i, r in zip(accepted, results, strict=True) if isinstance(r, Delivered)}
    failures = {i.index: r for i, r in zip(accepted, results, strict=True) if isinstance(r, DeliveryFailure)}
    letters = _dead_letters(settings, accepted, acks) if any(i.dropped for i in accepted) else []
    if letters:  # the events are stored either way: a dead letter that fails is logged, not answered
        try:
            lost = [r for r in await asyncio.wait_for(producer.send(letters), wait) if isinstance(r, DeliveryFailure)]
        except TimeoutError:
            lost = letters  # type: ignore[assignment]
        if lost:
            log.error("%d dead-letter record(s) of dropped facets were not acknowledged by %s", len(lost),
                      settings.topic_dlq)
    return acks, failures


def _result(item: Checked, acks: dict[int, Delivered], failures: dict[int, DeliveryFailure]) -> dict[str, Any]:
    if item.error is not None:
        return {"index": item.index, "status": "rejected", "error": _error_body(item.error)}
    if item.index in failures:
        failure = failures[item.index]
        return {"index": item.index, "status": "failed", "error": {"code": f"delivery.{failure.reason.lower()}",
                                                                  "message": failure.message}}
    out: dict[str, Any] = {"index": item.index, "status": "accepted", "key": item.key}
    if item.dropped:
        out["dropped_facets"] = item.dropped
    return out


def _count(state: Any, results: list[dict[str, Any]]) -> None:
    metrics = getattr(state, "metrics", None)
    if metrics is None:
        return
    for outcome in ("accepted", "rejected", "failed"):
        n = sum(1 for r in results if r["status"] == outcome)
        if n:
            metrics.events.labels(outcome).inc(n)


@dataclass
class Answer:
    """What :func:`ingest` answers: status, JSON body, extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


async def ingest(state: Any, headers: Mapping[str, str], chunks: AsyncIterator[bytes]) -> Answer:
    """One ``POST /api/v1/lineage``: ``headers`` with lower-case names, the body as ``chunks``, the app's
    ``state`` (settings, producer, metrics). Key, content-type and body errors raise ``HTTPException``."""
    settings: ApiSettings = state.settings
    if settings.api_keys:
        check_key(headers, settings)
    _check_content_type(headers)
    body = await read_body(headers, chunks, settings.max_body_bytes)
    if len(body) > _THREAD_BODY_BYTES:
        batch, items = await asyncio.to_thread(_check_body, body)
    else:
        batch, items = _check_body(body)
    if not batch and items[0].error is not None:
        _count(state, [{"status": "rejected"}])
        return Answer(400, {"detail": str(items[0].error), **_error_body(items[0].error)})
    if any(i.error is None for i in items):
        if not state.producer.available:
            return _unavailable(settings, "Kafka is unreachable")
        acks, failures = await _publish(state, settings, items)
    else:
        acks, failures = {}, {}
    results = [_result(i, acks, failures) for i in items]
    _count(state, results)
    if failures:
        reason = next(iter(failures.values()))
        return _unavailable(settings, f"{reason.reason} ({reason.message})", results if batch else None)
    if not batch:
        return Answer(201, results[0])
    rejected = sum(1 for r in results if r["status"] == "rejected")
    status = 200 if not rejected else (400 if rejected == len(results) else 207)
    return Answer(status, {"accepted": len(results) - rejected, "rejected": rejected, "results": results})


@router.post(
    "/api/v1/lineage", status_code=201, openapi_extra={"requestBody": _REQUEST_BODY},
    summary="ingest OpenLineage events (one, or a JSON array)",
    responses={200: {"description": "a batch, every event acknowledged by the broker"},
               201: {"description": "the event was acknowledged by the broker"},
               207: {"description": "a batch, some events rejected (per-event results)"},
               400: {"description": "invalid JSON or event; the body names the field"},
               401: {"description": "API key missing"}, 403: {"description": "API key wrong"},
               413: {"description": "body over the limit (before or after gzip)"},
               415: {"description": "not JSON, or an unsupported Content-Encoding"},
               503: {"description": "the broker is unavailable; Retry-After says when to retry"}},
)
async def post_lineage(request: Request) -> Response:
    """The route as FastAPI serves it (documented in the OpenAPI file); ``lineage serve`` answers this path
    through :func:`asgi_ingest`, the same :func:`ingest` without the framework's per-request layers."""
    answer = await ingest(request.app.state, request.headers, request.stream())
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers or None)


#: The path and method :func:`asgi_ingest` answers.
PATH = "/api/v1/lineage"
_JSON_HEADERS = [(b"content-type", b"application/json")]


async def _receive_chunks(receive: Any) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body"):
            return


class _ClientGone(Exception):
    """The client disconnected before its body arrived: nothing to answer."""


async def asgi_ingest(state: Any, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``POST /api/v1/lineage`` as a plain ASGI handler (see :func:`post_lineage`): the same answers, the
    same request metrics (route ``/api/v1/lineage``), without routing, dependency solving and the
    middleware stack (measured: they were most of a single-event request's server time)."""
    started = time.perf_counter()
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    extra: dict[str, str] = {}
    try:
        answer = await ingest(state, headers, _receive_chunks(receive))
        status, body, extra = answer.status, answer.body, answer.headers
    except _ClientGone:
        status, body = 499, None
    except HTTPException as exc:
        status, body, extra = exc.status_code, {"detail": exc.detail}, dict(exc.headers or {})
    except Exception:
        log.exception("POST %s failed", PATH)
        status, body = 500, {"detail": "Internal Server Error"}
    if body is not None:
        payload = dumps_compact(body).encode("utf-8")
        await send({"type": "http.response.start", "status": status,
                    "headers": [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode()),
                                *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items())]})
        await send({"type": "http.response.body", "body": payload})
    metrics = getattr(state, "metrics", None)
    if metrics is not None:
        metrics.observe("POST", PATH, status, time.perf_counter() - started)
