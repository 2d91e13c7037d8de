"""The app factory: ``create_app(settings)`` wires the routers, the limits and the errors.

Every error leaves as one shape, an RFC 9457 problem details object
(``application/problem+json``: ``type``, ``title``, ``status``, ``detail``, ``instance``,
plus the extension members ``kind``, ``rule``, ``location``, ``diagnostics``, ...;
:class:`server.models.ErrorResponse`, built in :func:`error_response`): a :class:`PlannerError`
maps its ``kind`` to a status (unknown-target 404, too-large 413, unsupported 400, the
rest 422); request validation is 422 (400 for a body that is not JSON); a body over
``max_body_bytes`` is 413 before any route runs, a body slower than ``body_timeout_s``
408, and a JSON body with a non-finite number, a lone surrogate, an integer beyond 64
bits or nesting deeper than :data:`server.guard.MAX_DEPTH` is 422 naming the JSON path
(:mod:`server.guard`), before any hashing or work.  An unexpected exception becomes a 500
with the request id (also sent as ``X-Request-ID`` on every response) and is logged;
client input is never supposed to reach that path.  Lists in error bodies hold at most
:data:`server.models.MAX_LIST_ITEMS` entries (``omitted`` counts the rest), and no error
names a file of the server: a catalog file is named by its file name (``<target>.yaml``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from planner.catalog import BUILTIN_DIR
from planner.errors import Diagnostic, PlannerError, SourceLoc
from planner.server.guard import check_json_body
from planner.server.metrics import Metrics
from planner.server.models import PROBLEM_MEDIA_TYPE, ErrorResponse
from planner.server.routers import catalogs, docs, health, plan, schemas, sweeps
from planner.server.service import DISCONNECTED, REQUEST_FILE, ApiError, Service
from planner.server.settings import Settings

log = logging.getLogger("planner.server")

#: HTTP status of a PlannerError by kind; any other kind is 422.  ``internal`` is a
#: planner bug (an invariant the library checks itself), never the client's fault.
STATUS_OF_KIND = {"unknown-target": 404, "not-found": 404, "too-large": 413,
                  "unsupported": 400, "usage": 400, "internal": 500}
_HTTP_KINDS = {400: "bad-request", 404: "not-found", 405: "method-not-allowed",
               413: "too-large", 415: "unsupported-media-type"}
REQUEST_ID = "planner.request_id"

DESCRIPTION = """Plans tile kernels against target catalogs.

Kernels are sent as the JSON IR or the text IR, never as Python: the service executes
no submitted code. Catalog writes need a bearer token and an `If-Match` precondition.
Every error body is an RFC 9457 problem (`application/problem+json`): `type`, `title`,
`status`, `detail`, `instance`, and the extension members `kind`, `rule`, `location`,
`diagnostics`, `explanation`, `request_id`.
"""


def create_app(settings: Settings) -> FastAPI:
    """A new app with its own :class:`Service` (catalogs, cache, worker pool, metrics)."""
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(app_: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(service.workers.warm)
        try:
            yield
        finally:
            await asyncio.to_thread(sweeps.shutdown_sweeps, app_)
            service.close()

    app = FastAPI(title="planner", version=health.package_version(), description=DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    for module in (health, plan, catalogs, schemas, sweeps):
        app.include_router(module.router)
    docs.install(app)
    _install_error_handlers(app)
    _problem_media_type_only(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
                       timeout_s=settings.body_timeout_s)
    app.add_middleware(RequestContextMiddleware, metrics=service.metrics)
    return app


# -- errors ----------------------------------------------------------------------------


def _request_id(scope: Scope) -> str | None:
    rid = scope.get(REQUEST_ID)
    return rid if isinstance(rid, str) else None


def _private_dirs(scope: Scope) -> list[str]:
    """The server's catalog directories (never shown to a client), longest first."""
    app = scope.get("app")
    service = getattr(getattr(app, "state", None), "service", None)
    dirs = {str(BUILTIN_DIR.resolve())}
    if service is not None:
        dirs.update(str(d) for d in service.registry.dirs)
    return sorted(dirs, key=len, reverse=True)


def error_response(status: int, body: ErrorResponse, scope: Scope,
                   headers: dict[str, str] | None = None) -> Response:
    """The one place an error leaves: an RFC 9457 problem (``application/problem+json``)
    with this response's ``status``, the request path as ``instance`` and the request id.

    Lists are capped (:meth:`ErrorResponse.capped`) and the server's catalog directories
    are cut from every string, so a catalog is named by its file name only."""
    body.status, body.instance = status, str(scope.get("path", ""))
    body.request_id = _request_id(scope)
    text = json.dumps(body.capped().model_dump(mode="json"), ensure_ascii=False,
                      separators=(",", ":"))
    for directory in _private_dirs(scope):
        text = text.replace(json.dumps(directory + os.sep)[1:-1], "")
        text = text.replace(json.dumps(directory)[1:-1], "<catalog dir>")
    return Response(text, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def _problem_media_type_only(app: FastAPI) -> None:
    """OpenAPI: error responses are ``application/problem+json`` only (FastAPI adds the
    route's JSON media type next to the one ``error_responses`` declares)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for operations in schema.get("paths", {}).values():
                for op in operations.values():
                    for response in (op.get("responses") or {}).values():
                        content = response.get("content") or {}
                        if PROBLEM_MEDIA_TYPE in content:
                            content.pop("application/json", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _install_error_handlers(app: FastAPI) -> None:
    async def planner_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, PlannerError)
        status = STATUS_OF_KIND.get(exc.kind, 422)
        if status >= 500:
            log.error("internal error in %s %s (request %s):\n%s", request.method,
                      request.url.path, _request_id(request.scope), exc.render())
        return error_response(status, ErrorResponse.from_planner_error(exc), request.scope)

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        body = ErrorResponse.of(exc.kind, exc.message, exc.diagnostics,
                                explanation=exc.explanation)
        return error_response(exc.status, body, request.scope, exc.headers)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors: list[Any] = list(exc.errors())
        bad_json = any(e.get("type") == "json_invalid" for e in errors)
        diags = [Diagnostic(_validation_message(e), SourceLoc(REQUEST_FILE, 0),
                            rule=str(e.get("type", ""))) for e in errors[:50]]
        kind = "bad-json" if bad_json else "validation"
        message = diags[0].message if diags else "invalid request"
        return error_response(400 if bad_json else 422, ErrorResponse.of(kind, message, diags),
                              request.scope)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        kind = _HTTP_KINDS.get(exc.status_code, "http-error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return error_response(exc.status_code, ErrorResponse.of(kind, str(exc.detail)),
                              request.scope, headers)

    app.add_exception_handler(PlannerError, planner_error)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)


def _allowed_methods(request: Request) -> list[str]:
    """The methods the OpenAPI schema documents for this path (Starlette names only the
    first matching route's)."""
    template = getattr(request.scope.get("route"), "path", None)
    operations = request.app.openapi().get("paths", {}).get(template, {})
    return sorted(m.upper() for m in operations if m != "parameters")


def _validation_message(e: dict[str, Any]) -> str:
    loc = ".".join(str(part) for part in e.get("loc", ()))
    msg = str(e.get("msg", "invalid"))
    if e.get("type") == "json_invalid":
        detail = (e.get("ctx") or {}).get("error", "")
        return f"invalid JSON at character {e.get('loc', ('', '?'))[-1]}: {detail}".rstrip(": ")
    return f"{loc}: {msg}" if loc else msg


# -- middleware ------------------------------------------------------------------------


class RequestContextMiddleware:
    """Request id, request counting, and the catch-all that turns a crash into a 500."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4().hex[:16]
        scope[REQUEST_ID] = rid
        status, started = 500, False

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
                MutableHeaders(scope=message).append("X-Request-ID", rid)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error in %s %s (request %s)", scope["method"],
                          scope["path"], rid)
            if started:
                raise
            body = ErrorResponse.of("internal", "unexpected server error (the server log "
                                    f"has the details under request id {rid})")
            await error_response(500, body, scope)(scope, receive, send_with_id)
        finally:
            route = getattr(scope.get("route"), "path", "<unmatched>")
            self.metrics.count_request(scope["method"], route, status)


class BodyLimitMiddleware:
    """The body's boundary: 413 over ``max_bytes`` (by Content-Length, else while it
    streams in), 408 when it takes longer than ``timeout_s`` to arrive, 422 when a JSON
    body fails :func:`server.guard.check_json_body`.

    The body is read here and replayed to the app; after it, this middleware listens
    for the client's disconnect and sets the request's :data:`service.DISCONNECTED`
    event, which stops its planning job.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._too_large(scope, receive, send, f"{declared} bytes declared")
            return
        chunks: list[bytes] = []
        size, more = 0, True
        try:
            async with asyncio.timeout(self.timeout_s):
                while more:
                    message = await receive()
                    if message["type"] != "http.request":  # client went away
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_bytes:
                        await self._too_large(scope, receive, send, f"over {size} bytes sent")
                        return
                    chunks.append(chunk)
                    more = message.get("more_body", False)
        except TimeoutError:
            body = ErrorResponse.of("request-timeout", f"the request body did not arrive "
                                    f"within {self.timeout_s:g} s ({size} bytes received)")
            await error_response(408, body, scope, {"Connection": "close"})(scope, receive,
                                                                             send)
            return
        data = b"".join(chunks)
        if data and _is_json(scope):
            problem = await (asyncio.to_thread(check_json_body, data) if len(data) > 65536
                             else _now(check_json_body(data)))
            if problem is not None:
                diag = Diagnostic(str(problem), SourceLoc(REQUEST_FILE, 0), rule=problem.rule)
                body = ErrorResponse.of("validation", str(problem), [diag])
                await error_response(422, body, scope)(scope, receive, send)
                return
        disconnected = asyncio.Event()
        later: asyncio.Queue[Message] = asyncio.Queue()

        async def watch() -> None:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
            later.put_nowait(message)

        watcher: asyncio.Task[None] | None = None
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await later.get()

        token = DISCONNECTED.set(disconnected)
        watcher = asyncio.ensure_future(watch())
        try:
            await self.app(scope, replay, send)
        finally:
            DISCONNECTED.reset(token)
            watcher.cancel()

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        body = ErrorResponse.of("too-large", f"request body too large ({what}; the limit is "
                                f"{self.max_bytes} bytes)")
        await error_response(413, body, scope, {"Connection": "close"})(scope, receive, send)


async def _now(value: Any) -> Any:
    return value


def _is_json(scope: Scope) -> bool:
    """Whether the route's parser reads this body as JSON (no Content-Type, or a JSON
    media type; catalogs sent as JSON are checked the same way)."""
    for key, value in scope.get("headers", ()):
        if key == b"content-type":
            media = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return True


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
