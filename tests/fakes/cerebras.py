"""A stand-in for the Cerebras Inference API (https://api.cerebras.ai/v1)."""

from __future__ import annotations

import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import text_completions
from .script import (
    JSON,
    Generation,
    Reply,
    ScriptedServer,
    Stream,
    first_int,
    logprob_entry,
    read_json,
)

# status: (message, type, param, code); 401 and 429 are the bodies Cerebras is seen to send
_ERRORS: dict[int, tuple[str, str, str | None, str | None]] = {
    400: ("Bad request: the body is not valid.", "invalid_request_error", None, "bad_request"),
    401: ("Wrong API Key", "invalid_request_error", "api_key", "wrong_api_key"),
    402: ("Payment required: no credits left.", "payment_required_error", None, "payment_required"),
    403: ("Permission denied.", "permission_denied_error", None, "permission_denied"),
    404: ("Not found.", "not_found_error", None, "not_found"),
    422: ("Unprocessable entity.", "invalid_request_error", None, "unprocessable_entity"),
    429: (
        "Requests per minute limit exceeded - too many requests sent.",
        "too_many_requests_error",
        "quota",
        "request_quota_exceeded",
    ),
    500: ("Internal server error.", "server_error", None, "internal_server_error"),
    503: ("Service unavailable, retry later.", "service_unavailable_error", None, "unavailable"),
}
DEFAULT_RATE_LIMITS = {
    "x-ratelimit-limit-requests-day": "14400",
    "x-ratelimit-limit-tokens-minute": "60000",
    "x-ratelimit-remaining-requests-day": "14399",
    "x-ratelimit-remaining-tokens-minute": "59000",
    "x-ratelimit-reset-requests-day": "33011.5",
    "x-ratelimit-reset-tokens-minute": "11.5",
}
COMPLETION_TOKENS_PER_SECOND = 2500.0
PROMPT_TOKENS_PER_SECOND = 20000.0


def cerebras_error(status: int, message: str | None = None, **fields: str | None) -> JSON:
    """Cerebras' flat error body `{message, type, param, code}` (not nested under "error")."""
    fallback = "server_error" if status >= 500 else "invalid_request_error"
    default, kind, param, code = _ERRORS.get(status, (f"HTTP {status}", fallback, None, None))
    return {"message": message or default, "type": kind, "param": param, "code": code} | fields


def time_info(generation: Generation) -> JSON:
    """Cerebras' `time_info` (seconds) at its published speed."""
    prompt = generation.prompt_tokens / PROMPT_TOKENS_PER_SECOND
    completion = len(generation.tokens) / COMPLETION_TOKENS_PER_SECOND
    queue = 0.0002
    return {
        "queue_time": queue,
        "prompt_time": prompt,
        "completion_time": completion,
        "total_time": queue + prompt + completion,
        "created": time.time(),
    }


class FakeCerebras(ScriptedServer):
    """Scripted Cerebras cloud: bearer auth, /v1/models, /v1/chat/completions and
    /v1/completions (``tests.fakes.text_completions``)."""

    def __init__(
        self,
        default: Reply | None = None,
        *,
        api_key: str | None = "test-cerebras-key",
        models: list[str] | None = None,
    ) -> None:
        super().__init__(
            [
                Route("/v1/models", self._models),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._text, methods=["POST"]),
            ],
            default,
        )
        self.api_key = api_key  # None: no auth required
        self.models = list(models or ["gpt-oss-120b"])
        self.rate_limits = dict(DEFAULT_RATE_LIMITS)  # sent on every response

    def error_body(self, status: int) -> JSON:
        """Cerebras' flat error body for an HTTP status."""
        return cerebras_error(status)

    def stream_failure(self, reply: Reply) -> list[JSON]:
        """Nothing: the body just ends, as a dropped connection looks to the client."""
        return []

    def refuse(self, request: Request) -> Response | None:
        """401 unless the request carries `Authorization: Bearer <api_key>`."""
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return self.error(401)
        return None

    def response_headers(self, reply: Reply | None) -> dict[str, str]:
        """The rate-limit headers, overridden by the reply's own headers."""
        return self.rate_limits | (reply.headers if reply else {})

    async def _models(self, request: Request) -> Response:
        data = [
            {"id": m, "object": "model", "created": 1735689600, "owned_by": "Cerebras"}
            for m in self.models
        ]
        return JSONResponse({"object": "list", "data": data}, headers=self.response_headers(None))

    async def _chat(self, request: Request) -> Response:
        body = await read_json(request)
        if body is None:
            return self.error(400)
        model = body.get("model")
        if model not in self.models:
            message = f"Model {model} does not exist or you do not have access to it."
            return self.error(
                404, cerebras_error(404, message, param="model", code="model_not_found")
            )
        return await self.play(
            request, body, first_int(body, "max_completion_tokens", "max_tokens")
        )

    async def _text(self, request: Request) -> Response:
        """``POST /v1/completions``: ``max_tokens`` (not renamed there), ``logprobs: N``."""
        body = await read_json(request)
        if body is None or "prompt" not in body:
            return self.error(400)
        if body.get("model") not in self.models:
            message = f"Model {body.get('model')} does not exist or you do not have access to it."
            return self.error(
                404, cerebras_error(404, message, param="model", code="model_not_found")
            )
        if (n := text_completions.asked_logprobs(body)) is not None:
            body = body | {"logprobs": True, "top_logprobs": n}
        return await self.play(request, body, first_int(body, "max_tokens"))

    def text_answer(self, chat: JSON, body: JSON) -> JSON:
        n = body.get("top_logprobs") if body.get("logprobs") else None
        return text_completions.cerebras_answer(chat, n)

    def text_stream(self, chat: Stream, body: JSON) -> Stream:
        n = body.get("top_logprobs") if body.get("logprobs") else None
        return text_completions.cerebras_stream(chat, n)

    def completion(self, generation: Generation, body: JSON) -> JSON:
        """OpenAI's chat.completion plus `time_info`; logprob entries carry no `id`."""
        choice: JSON = {
            "finish_reason": generation.finish_reason,
            "index": 0,
            "message": generation.message(),
        }
        if (n_top := _top_logprobs(body)) is not None:
            choice["logprobs"] = {
                "content": [
                    logprob_entry(t, p, n_top, with_id=False)
                    for t, p in zip(generation.tokens, generation.probs, strict=True)
                ]
                + [logprob_entry(t, 0.9, n_top, with_id=False) for t in generation.call_tokens]
            }
        return self._envelope(body, "chat.completion", [choice]) | self._accounting(generation)

    def stream(self, generation: Generation, body: JSON) -> Stream:
        """Chunks; `usage` and `time_info` only on the final one, with the finish_reason."""
        cmpl_id = f"chatcmpl-{uuid.uuid4()}"
        n_top = _top_logprobs(body)

        def chunk(delta: JSON, token: str | None = None, prob: float = 1.0) -> JSON:
            choice: JSON = {"delta": delta, "index": 0, "finish_reason": None}
            if n_top is not None and token is not None:
                choice["logprobs"] = {"content": [logprob_entry(token, prob, n_top, with_id=False)]}
            return self._envelope(body, "chat.completion.chunk", [choice], cmpl_id)

        final = chunk({})
        final["choices"][0]["finish_reason"] = generation.finish_reason
        return Stream(
            head=[chunk({"role": "assistant"})],
            content=[
                chunk({"content": t}, t, p)
                for t, p in zip(generation.tokens, generation.probs, strict=True)
            ]
            + [chunk(delta) for delta in generation.call_deltas()],
            tail=[final | self._accounting(generation)],
        )

    def _envelope(
        self, body: JSON, kind: str, choices: list[JSON], cmpl_id: str | None = None
    ) -> JSON:
        return {
            "id": cmpl_id or f"chatcmpl-{uuid.uuid4()}",
            "choices": choices,
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": "fp_fake0cerebras",
            "object": kind,
        }

    @staticmethod
    def _accounting(generation: Generation) -> JSON:
        usage = generation.usage() | {"prompt_tokens_details": {"cached_tokens": 0}}
        return {"usage": usage, "time_info": time_info(generation)}


def _top_logprobs(body: JSON) -> int | None:
    """Alternatives per logprob entry (OpenAI default 0), or None when logprobs are off."""
    return int(body.get("top_logprobs") or 0) if body.get("logprobs") else None
