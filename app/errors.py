"""Errors the proxy raises, each mapped once to OpenAI's error envelope.

    ProxyError                      -> {"error": {message, type, param, code}}
    ├── InvalidRequest              400  the client's request is wrong
    ├── AuthenticationFailed        401  missing or unknown proxy key
    ├── KeyForbidden                403  the key may not use what it asked for (a strategy)
    ├── RateLimited                 429  a key's rpm, tpm or max_concurrent (with retry-after)
    │   └── BudgetExceeded          429  a key's cloud budget is spent (with retry-after)
    ├── ModelNotFound               404  no model of that id (GET /v1/models/{id})
    ├── PayloadTooLarge             413  body over server.max_body_bytes
    ├── RequestTimeout              408  the request body did not arrive in time
    ├── ClientGone                  499  the client left before its request was read
    ├── UpstreamError               502  one upstream failed (names it); a broken stream
    │   ├── UpstreamTransportError  502  the connection failed otherwise (dropped, garbled)
    │   ├── UpstreamUnavailable     503  cannot connect / not started / circuit open
    │   │   └── UpstreamNotConfigured   503  no API key: clients told not to retry
    │   ├── UpstreamBusy            503  its in-flight limit is reached (with retry-after)
    │   ├── UpstreamTimeout         504  no answer in time
    │   ├── UpstreamProtocolError   502  answered with something unreadable
    │   └── UpstreamRejected        the upstream answered with an HTTP error
    ├── AllUpstreamsFailed          4xx/502/503 every route failed; names each
    └── NoValidAnswer               503  the draft breaks the request's contract, no verifier

The official ``openai`` SDK turns the envelope into typed exceptions
(``BadRequestError``, ``AuthenticationError``, ``RateLimitError``, ...).
"""

from __future__ import annotations

from typing import Any


class ProxyError(Exception):
    """Base class: carries the HTTP status and the OpenAI error fields."""

    status = 500
    type = "server_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def envelope(self) -> dict[str, Any]:
        """The body OpenAI clients expect."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class AuthenticationFailed(ProxyError):
    status = 401
    type = "authentication_error"


class KeyForbidden(ProxyError):
    """The caller's key may not use what the request asks for (``server.keys`` → strategies;
    ``/stats`` and ``/metrics`` under ``server.telemetry_key``)."""

    status = 403
    type = "permission_error"


class RateLimited(ProxyError):
    """A key's own limit (app.keys.limits): try again after ``retry_after_s`` seconds."""

    status = 429
    type = "rate_limit_error"

    def __init__(self, message: str, *, code: str, retry_after_s: int) -> None:
        super().__init__(message, code=code, headers={"retry-after": str(retry_after_s)})
        self.retry_after_s = retry_after_s


class BudgetExceeded(RateLimited):
    """A key's cloud budget for the day or the month is spent (``on_budget: refuse``)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message, code="budget_exceeded", retry_after_s=retry_after_s)


class ModelNotFound(ProxyError):
    status = 404
    type = "invalid_request_error"

    def __init__(self, model_id: str) -> None:
        super().__init__(
            f"The model '{model_id}' does not exist; GET /v1/models lists them",
            param="model",
            code="model_not_found",
        )


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"


class RequestTimeout(ProxyError):
    status = 408
    type = "invalid_request_error"


class ClientGone(ProxyError):
    """The client hung up mid-upload; nobody reads the answer, but it is counted."""

    status = 499  # nginx's "client closed request"
    type = "invalid_request_error"


class UpstreamError(ProxyError):
    """One upstream failed; ``upstream`` is its name in config.yaml, ``kind`` labels counters."""

    status = 502
    type = "upstream_error"
    kind = "stream"

    def __init__(self, upstream: str, message: str, **kwargs: Any) -> None:
        super().__init__(f"{upstream}: {message}", **kwargs)
        self.upstream = upstream
        self.detail = message
        # In a group of upstreams (app.upstreams.group): the members that failed first.
        self.fell_over: tuple[UpstreamError, ...] = ()


class UpstreamTransportError(UpstreamError):
    """The connection failed in a way not named below (dropped, garbled, cut short);
    counted apart from a stream that broke once under way (kind ``stream``)."""

    kind = "transport"


class UpstreamUnavailable(UpstreamError):
    status = 503
    type = "upstream_unavailable"
    kind = "unavailable"


class UpstreamNotConfigured(UpstreamUnavailable):
    """The upstream cannot be called at all until the operator configures it (its API key
    is not set): asking again will not help, so the ``openai`` and ``anthropic`` SDKs are
    told not to (``x-should-retry: false``) rather than retrying a 503 twice."""

    def __init__(self, upstream: str, message: str) -> None:
        super().__init__(
            upstream, message, code="upstream_not_configured", headers={"x-should-retry": "false"}
        )


class UpstreamBusy(UpstreamError):
    status = 503
    type = "upstream_busy"
    kind = "busy"


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "upstream_timeout"
    kind = "timeout"


class UpstreamProtocolError(UpstreamError):
    status = 502
    type = "upstream_protocol_error"
    kind = "protocol"


class UpstreamRejected(UpstreamError):
    """The upstream answered with an HTTP error status.

    What the client sees depends on whose fault it was: a request the upstream
    found invalid is the client's (same 4xx), a rejected credential is the
    proxy's (502), a rate limit is passed on (429 with retry-after).
    """

    CLIENT_FAULTS = frozenset({400, 404, 413, 422})

    def __init__(
        self,
        upstream: str,
        upstream_status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
        upstream_type: str | None = None,
    ) -> None:
        super().__init__(
            upstream, f"HTTP {upstream_status}: {message}", code=code, param=param, headers=headers
        )
        self.upstream_status = upstream_status
        self.upstream_type = upstream_type  # the error body's own ``type``, if it had one
        self.kind = str(upstream_status)
        if upstream_status in self.CLIENT_FAULTS:
            self.status, self.type = upstream_status, "invalid_request_error"
        elif upstream_status == 429:
            self.status, self.type = 429, "rate_limit_error"
        elif upstream_status in (401, 403):
            self.type = "upstream_auth_error"

    @property
    def about_request(self) -> bool:
        """The upstream found the request itself invalid (not too long for its context,
        which another model may still take): the client's error whoever else is asked."""
        return self.upstream_status in (400, 422) and self.upstream_type != CONTEXT_TOO_LONG


CONTEXT_TOO_LONG = "exceed_context_size_error"  # llama-server: the prompt exceeds n_ctx


class AllUpstreamsFailed(ProxyError):
    """Every route for the request failed; the message names each failure."""

    type = "upstream_error"

    def __init__(self, failures: list[UpstreamError]) -> None:
        super().__init__("; ".join(f.message for f in failures) + " (no upstream could answer)")
        self.failures = failures
        unavailable = all(isinstance(f, UpstreamUnavailable) for f in failures)
        self.status = 503 if unavailable else 502
        if failures and all(f.status in UpstreamRejected.CLIENT_FAULTS for f in failures):
            # Every upstream found the request itself wrong: the client's error, as it said.
            self.status, self.type = failures[-1].status, "invalid_request_error"
            self.code = failures[-1].code


class NoValidAnswer(ProxyError):
    """The local draft breaks what the request asks for (a tool call, JSON output) and the
    verifier cannot answer now: an error rather than an answer the client cannot use."""

    status = 503
    type = "upstream_unavailable"

    def __init__(self, violation: str, why: str) -> None:
        super().__init__(
            f"the local model's answer is not usable ({violation}) and the verifier cannot "
            f"answer ({why}); retry later, or send the request to the cloud model",
            code="no_valid_answer",
        )
