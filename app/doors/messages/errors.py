"""A ``ProxyError`` in Anthropic's error shape and status.

    {"type": "error", "error": {"type": ..., "message": ...}}

400 invalid_request_error, 401 authentication_error, 403 permission_error,
404 not_found_error, 413 request_too_large, 429 rate_limit_error, 529
overloaded_error (an upstream unavailable or busy; one not configured is an
api_error 503: waiting will not help), other upstream failures api_error with their
own 502/504. Never a 500. The message is the proxy's own,
which never carries a key (``app.errors``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.errors import ProxyError, UpstreamNotConfigured

_BY_STATUS = {
    400: (400, "invalid_request_error"),
    401: (401, "authentication_error"),
    403: (403, "permission_error"),
    404: (404, "not_found_error"),
    405: (405, "invalid_request_error"),
    408: (408, "invalid_request_error"),
    413: (413, "request_too_large"),
    422: (400, "invalid_request_error"),
    429: (429, "rate_limit_error"),
    499: (499, "invalid_request_error"),
    503: (529, "overloaded_error"),
}


@dataclass(frozen=True, slots=True)
class AnthropicError:
    """The status and error type Anthropic's clients read, and the message."""

    status: int
    type: str
    message: str


def anthropic_error(exc: ProxyError) -> AnthropicError:
    """The Anthropic status and type for the proxy's error."""
    status, kind = _BY_STATUS.get(exc.status, (0, ""))
    if isinstance(exc, UpstreamNotConfigured):
        status, kind = exc.status, "api_error"
    if not status:
        client_fault = 400 <= exc.status < 500
        status = 400 if client_fault else (exc.status if exc.status in (502, 504) else 502)
        kind = "invalid_request_error" if client_fault else "api_error"
    return AnthropicError(status, kind, exc.message)


def error_body(error: AnthropicError) -> dict[str, Any]:
    """The JSON body (and an ``error`` event's data)."""
    return {"type": "error", "error": {"type": error.type, "message": error.message}}
