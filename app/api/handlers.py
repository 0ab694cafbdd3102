"""One exception handler per error type, each answering with OpenAI's error envelope
(Anthropic's shape under the Messages door's paths: ``anthropic_response``)."""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from app.doors.messages.errors import anthropic_error, error_body
from app.errors import InvalidRequest, ProxyError
from app.telemetry.logs import request_id

log = logging.getLogger("specproxy.api")
MESSAGES_PATH = "/v1/messages"
# what an error's headers tell an Anthropic client (when to retry, whether to)
_ANTHROPIC_HEADERS = ("retry-after", "x-should-retry", "allow")


def _anthropics(path: str) -> bool:
    """Whether ``path`` is the Messages door's (``/v1/messages`` and below it)."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def _with_id(headers: dict[str, str], name: str) -> dict[str, str]:
    """``headers`` with the request's id under ``name``, once a door gave it one (the id
    its log lines carry)."""
    if (rid := request_id.get()) == "-":
        return headers
    return {**headers, name: rid}


def _envelope(error: ProxyError) -> Response:
    """The error's envelope and headers, with the request's id."""
    return Response(
        orjson.dumps(error.envelope()),
        status_code=error.status,
        media_type="application/json",
        headers=_with_id(error.headers, "X-Request-Id"),
    )


def anthropic_response(exc: ProxyError) -> Response:
    """The error in Anthropic's shape and status, with the request's id as ``request-id``
    (as on its answers)."""
    error = anthropic_error(exc)
    headers = {k: v for k, v in exc.headers.items() if k.lower() in _ANTHROPIC_HEADERS}
    return Response(
        orjson.dumps(error_body(error)),
        status_code=error.status,
        media_type="application/json",
        headers=_with_id(headers, "request-id"),
    )


async def _proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    return error_response(request, exc)


# Starlette's own refusals (no such route, or not by this method), as OpenAI words them
_ROUTING = {404: "unknown_url", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's refusals in the shape of the door asked: Anthropic's under
    ``/v1/messages``, OpenAI's elsewhere (``Invalid URL (GET /v1/nothing)``)."""
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    if status in _ROUTING:
        message = f"Invalid URL ({request.method} {request.url.path})"
        if status == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        error = ProxyError(message, code=_ROUTING[status], headers=dict(exc.headers or {}))
    else:
        error = ProxyError(str(exc.detail), code=str(status), headers=dict(exc.headers or {}))
    error.status = status
    error.type = "invalid_request_error" if status < 500 else "server_error"
    if _anthropics(request.url.path):
        return anthropic_response(error)
    return _envelope(error)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    param = ".".join(str(p) for p in first["loc"] if p != "body") or None
    message = str(first["msg"])
    return _envelope(InvalidRequest(f"{param}: {message}" if param else message, param=param))


async def _unexpected(request: Request, exc: Exception) -> Response:
    return error_response(request, exc)


def error_response(request: Request, exc: Exception) -> Response:
    """The error in the shape of the door asked (Anthropic's under ``/v1/messages``), for
    the handlers and the routes that catch their own; one that is not the client's is
    logged (an unexpected one with its traceback, and answered without it)."""
    if not isinstance(exc, ProxyError):
        log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        exc = ProxyError("internal error in the proxy; see its log", code="internal_error")
    elif exc.status >= 500:
        log.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status, exc.message)
    if _anthropics(request.url.path):
        return anthropic_response(exc)
    return _envelope(exc)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers; no request ever gets a traceback or a non-OpenAI error body."""
    app.add_exception_handler(ProxyError, _proxy_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
