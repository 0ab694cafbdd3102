"""One exception handler per error type, each answering with OpenAI's error envelope."""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from app.errors import InvalidRequest, ProxyError
from app.telemetry.logs import request_id

log = logging.getLogger("specproxy.api")


def _envelope(error: ProxyError) -> Response:
    """The error's envelope and headers, with the request's id once a door gave it one
    (the id its log lines carry)."""
    headers = error.headers
    if (rid := request_id.get()) != "-":
        headers = {**headers, "X-Request-Id": rid}
    return Response(
        orjson.dumps(error.envelope()),
        status_code=error.status,
        media_type="application/json",
        headers=headers,
    )


async def _proxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProxyError)
    return error_response(request, exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = ProxyError(str(exc.detail), code=str(exc.status_code))
    error.status = exc.status_code
    error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
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
    """The envelope for an exception raised by a route that bypasses the handlers."""
    if isinstance(exc, ProxyError):
        if exc.status >= 500:
            log.warning(
                "%s %s -> %d: %s", request.method, request.url.path, exc.status, exc.message
            )
        return _envelope(exc)
    log.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return _envelope(ProxyError("internal error in the proxy; see its log", code="internal_error"))


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers; no request ever gets a traceback or a non-OpenAI error body."""
    app.add_exception_handler(ProxyError, _proxy_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)
