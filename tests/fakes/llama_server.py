"""A stand-in for llama.cpp's `llama-server` OpenAI-compatible API (tools/server/)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import text_completions
from .script import (
    HOLD_LIMIT_S,
    JSON,
    VOCAB_SIZE,
    Generation,
    Reply,
    ScriptedServer,
    Stream,
    first_int,
    logprob_entry,
    prompt_tokens,
    read_json,
    token_id,
    tokenize,
)

# (type, message) per status, as format_error_response() in server-common.cpp names them
_ERRORS = {
    400: ("invalid_request_error", "Invalid request"),
    401: ("authentication_error", "Invalid API Key"),
    403: ("permission_error", "Permission denied"),
    404: ("not_found_error", "File Not Found"),
    500: ("server_error", "Internal server error"),
    501: ("not_supported_error", "This server does not support this feature"),
    503: ("unavailable_error", "Loading model"),
}
PROMPT_MS_PER_TOKEN = 8.0  # ~125 tok/s, as measured with SmolLM2-135M on 2 cores
PREDICTED_MS_PER_TOKEN = 14.0  # ~70 tok/s
RECORDED_METRICS = Path(__file__).parents[1] / "fixtures" / "llama_server" / "metrics.txt"


def llama_error(
    status: int, message: str | None = None, kind: str | None = None, **extra: int
) -> JSON:
    """llama-server's nested error body `{"error": {code, message, type, ...}}`."""
    default_kind, default_message = _ERRORS.get(status, ("server_error", f"HTTP {status}"))
    error = {"code": status, "message": message or default_message, "type": kind or default_kind}
    return {"error": error | extra}


EOG_ID = 2  # SmolLM2's end-of-generation token
EOG_PROB = 0.9


def generated(generation: Generation) -> int:
    """Tokens llama-server counts: an answer that stopped by itself includes its end token,
    which is listed last in logprobs (no text) and never streamed."""
    return (
        len(generation.tokens) + len(generation.call_tokens) + (generation.finish_reason == "stop")
    )


def timings(generation: Generation) -> JSON:
    """The `timings` object llama-server adds to final responses."""
    prompt_n, predicted_n = generation.prompt_tokens, generated(generation)
    return {
        "cache_n": 0,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_n * PROMPT_MS_PER_TOKEN,
        "prompt_per_token_ms": PROMPT_MS_PER_TOKEN,
        "prompt_per_second": 1e3 / PROMPT_MS_PER_TOKEN,
        "predicted_n": predicted_n,
        "predicted_ms": predicted_n * PREDICTED_MS_PER_TOKEN,
        "predicted_per_token_ms": PREDICTED_MS_PER_TOKEN,
        "predicted_per_second": 1e3 / PREDICTED_MS_PER_TOKEN,
    }


def usage(generation: Generation) -> JSON:
    """llama-server's `usage`: OpenAI's counts plus `prompt_tokens_details.cached_tokens`."""
    # The fake caches no prompt, as `timings.cache_n` says.
    n, prompt = generated(generation), generation.prompt_tokens
    counts = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
    return counts | {"prompt_tokens_details": {"cached_tokens": 0}}


@dataclass(frozen=True)
class Speculation:
    """As if started with ``-md DRAFT --spec-type draft-simple --spec-draft-n-max n_max``.

    The draft gets ``agree`` tokens right, then one wrong, at every verification step;
    so acceptance falls as the depth rises past ``agree``. ``per_request``: the build takes
    ``speculative.n_max`` in the body (and ``/props`` lists it); this machine's does not.
    """

    n_max: int = 8
    agree: int = 4
    per_request: bool = True

    def counts(self, generated: int, body: JSON) -> JSON:
        """``timings.draft_n`` / ``draft_n_accepted`` for an answer of ``generated`` tokens."""
        n_max = self.n_max
        if self.per_request and isinstance(body.get("speculative.n_max"), int):
            n_max = body["speculative.n_max"]
        drafted = accepted = 0
        remaining = generated - 1  # the first token comes from the prompt pass
        while remaining > 0:
            step = min(n_max, remaining)
            drafted += step
            accepted += min(step, self.agree)
            remaining -= min(step, self.agree) + 1  # the target's own token after the draft
        return {"draft_n": drafted, "draft_n_accepted": accepted}


class FakeLlamaServer(ScriptedServer):
    """Scripted llama-server: /health, /props, /v1/models, /v1/chat/completions,
    /v1/completions (``tests.fakes.text_completions``) and /metrics."""

    def __init__(
        self,
        default: Reply | None = None,
        *,
        model: str = "SmolLM2-135M-Instruct.Q4_1.gguf",
        n_ctx: int = 8192,
    ) -> None:
        super().__init__(
            [
                Route("/health", self._health),
                Route("/v1/models", self._models),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._text, methods=["POST"]),
                Route("/metrics", self._metrics),
                Route("/props", self._props),
                Route("/apply-template", self._apply_template, methods=["POST"]),
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            ],
            default,
        )
        self.model = model
        self.n_ctx = n_ctx  # prompts of this many fake tokens or more get exceed_context_size
        self.loading = False  # True: every endpoint answers 503 "Loading model"
        self.echoes_prefill = True  # its answer to an assistant prefill begins with it
        # /props' modalities, as the real server lists them (True: a projector for it is loaded)
        self.modalities = {"vision": False, "video": False, "audio": False}
        # /props' chat_template_caps (the real SmolLM2 template's lack tools); None: not listed
        self.template_caps: dict[str, bool] | None = None
        # GET /metrics answers this text (the recorded one); None: as if started without --metrics
        self.metrics_text: str | None = RECORDED_METRICS.read_text()
        self.speculation: Speculation | None = None  # None: started without a draft model
        # A chat template with tool support answers calls; False: like SmolLM2's, whose
        # template ignores `tools` (plain text comes back)
        self.supports_tools = True
        # The next /health waits for this event (then it is cleared): a probe held midway
        self.health_hold: threading.Event | None = None
        self.health_asked = 0
        # /v1/embeddings: False answers 501 as a server started without --embeddings does;
        # True answers vectors of embedding_size floats (tests/test_fake_embeddings.py)
        self.embeddings = False
        self.embedding_size = 8

    def error_body(self, status: int) -> JSON:
        """llama-server's nested error body for an HTTP status."""
        return llama_error(status)

    def stream_failure(self, reply: Reply) -> list[JSON]:
        """An error event (`data: {"error": ...}`); llama-server then ends without [DONE]."""
        return [reply.error or llama_error(500, "Generation failed (scripted)")]

    def refuse(self, request: Request) -> Response | None:
        """503 "Loading model" on every endpoint while `loading`."""
        return self.error(503) if self.loading else None

    def answers_calls(self, body: JSON) -> bool:
        """Calls only to a request with tools, and only with a template that supports them."""
        return self.supports_tools and bool(body.get("tools"))

    async def _health(self, request: Request) -> Response:
        self.health_asked += 1
        hold, self.health_hold = self.health_hold, None
        if hold is not None:
            await asyncio.to_thread(hold.wait, HOLD_LIMIT_S)
        return JSONResponse({"status": "ok"})

    async def _metrics(self, request: Request) -> Response:
        if self.metrics_text is None:
            message = "This server does not support metrics endpoint. Start it with `--metrics`"
            return self.error(501, llama_error(501, message))
        # Exactly the recorded content type (Starlette would append a charset to media_type).
        return Response(self.metrics_text, headers={"Content-Type": "text/plain; version=0.0.4"})

    async def _props(self, request: Request) -> Response:
        # The default generation settings list the parameters a request may set.
        params = dict.fromkeys(("seed", "temperature", "max_tokens", "n_predict", "n_probs"), 0)
        params["speculative.types"] = "none"
        if self.speculation and self.speculation.per_request:
            params |= {"speculative.n_max": self.speculation.n_max, "speculative.n_min": 0}
        return JSONResponse(
            {
                "default_generation_settings": {"params": params, "n_ctx": self.n_ctx},
                "modalities": self.modalities,
                **({"chat_template_caps": self.template_caps} if self.template_caps else {}),
            }
        )

    async def _apply_template(self, request: Request) -> Response:
        """The chat template as a plain ``role: content`` transcript (tools listed first)."""
        body = await request.json()
        tools = [t["function"]["name"] for t in body.get("tools") or ()]
        lines = [f"tools: {' '.join(tools)}"] if tools else []
        lines += [f"{m['role']}: {m.get('content') or ''}" for m in body["messages"]]
        return JSONResponse({"prompt": "\n".join(lines)})

    async def _tokenize(self, request: Request) -> Response:
        """The fake tokenizer's ids for ``content``, as llama-server's ``/tokenize``."""
        body = await request.json()
        return JSONResponse({"tokens": [token_id(t) for t in tokenize(body["content"])]})

    def timings(self, generation: Generation, body: JSON) -> JSON:
        """The final ``timings``, with the draft counters when speculating."""
        spec = self.speculation.counts(generated(generation), body) if self.speculation else {}
        return timings(generation) | spec

    async def _models(self, request: Request) -> Response:
        meta = {"n_vocab": VOCAB_SIZE, "n_ctx_train": self.n_ctx}
        listed = {"name": self.model, "model": self.model, "capabilities": ["completion"]}
        model = {"id": self.model, "object": "model", "created": int(time.time())}
        return JSONResponse(
            {
                "models": [listed],
                "object": "list",
                "data": [model | {"owned_by": "llamacpp", "meta": meta}],
            }
        )

    async def _chat(self, request: Request) -> Response:
        body = await read_json(request)
        if body is None:
            return self.error(400, llama_error(400, "Invalid JSON body"))
        if body.get("top_logprobs") is not None and not body.get("logprobs"):
            message = "top_logprobs requires logprobs to be set to true"
            return self.error(400, llama_error(400, message))
        if body.get("tools") and body.get("stream") and body.get("logprobs"):
            message = "logprobs is not supported with tools + stream"
            return self.error(400, llama_error(400, message))
        n_prompt = prompt_tokens(body)
        if n_prompt >= self.n_ctx:
            message = (
                f"request ({n_prompt} tokens) exceeds the available context size "
                f"({self.n_ctx} tokens), try increasing it"
            )
            error = llama_error(
                400,
                message,
                "exceed_context_size_error",
                n_prompt_tokens=n_prompt,
                n_ctx=self.n_ctx,
            )
            return self.error(400, error)
        # server-task.cpp params_from_json_cmpl: n_predict, then max_completion_tokens, max_tokens
        limit = first_int(body, "n_predict", "max_completion_tokens", "max_tokens")
        return await self.play(request, body, limit)

    async def _text(self, request: Request) -> Response:
        """``POST /v1/completions``: ``logprobs: N`` asks for N alternatives per token."""
        body = await read_json(request)
        if body is None or "prompt" not in body:
            return self.error(400, llama_error(400, '"prompt" must be provided'))
        if (n := text_completions.asked_logprobs(body)) is not None:
            body = body | {"logprobs": True, "top_logprobs": n}
        if body.get("stream"):  # its text streams end with usage, asked or not
            body = body | {"stream_options": {"include_usage": True}}
        limit = first_int(body, "n_predict", "max_tokens")
        return await self.play(request, body, limit)

    def text_answer(self, chat: JSON, body: JSON) -> JSON:
        return text_completions.llama_answer(chat)

    def text_stream(self, chat: Stream, body: JSON) -> Stream:
        return text_completions.llama_stream(chat)

    def completion(self, generation: Generation, body: JSON) -> JSON:
        """`to_json_oaicompat_chat()`: `logprobs` only when probabilities were asked for."""
        choice: JSON = {
            "finish_reason": generation.finish_reason,
            "index": 0,
            "message": generation.message(),
        }
        if n_top := _n_probs(body):
            # the raw generated tokens, the calls' included
            entries = [
                logprob_entry(t, p, n_top, with_id=True)
                for t, p in zip(generation.tokens, generation.probs, strict=True)
            ]
            entries += [logprob_entry(t, 0.9, n_top, with_id=True) for t in generation.call_tokens]
            if generation.finish_reason == "stop":
                end = logprob_entry("", EOG_PROB, n_top, with_id=True)
                end["id"] = end["top_logprobs"][0]["id"] = EOG_ID
                entries.append(end)
            choice["logprobs"] = {"content": entries}
        return {
            **self._envelope(body, "chat.completion", [choice]),
            "usage": usage(generation),
            "timings": self.timings(generation, body),
        }

    def stream(self, generation: Generation, body: JSON) -> Stream:
        """`to_json_oaicompat_chat_stream()`: a separate usage chunk with empty `choices`
        when `stream_options.include_usage`, and `timings` on the very last chunk."""
        cmpl_id, n_top = _cmpl_id(), _n_probs(body)

        def chunk(choices: list[JSON]) -> JSON:
            return self._envelope(body, "chat.completion.chunk", choices, cmpl_id)

        def token_chunk(token: str, prob: float) -> JSON:
            choice: JSON = {"finish_reason": None, "index": 0, "delta": {"content": token}}
            if n_top:
                choice["logprobs"] = {"content": [logprob_entry(token, prob, n_top, with_id=True)]}
            return chunk([choice])

        tail = [chunk([{"finish_reason": generation.finish_reason, "index": 0, "delta": {}}])]
        if (body.get("stream_options") or {}).get("include_usage"):
            tail.append(chunk([]) | {"usage": usage(generation)})
        tail[-1]["timings"] = self.timings(generation, body)
        role = {"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}
        calls = [
            chunk([{"finish_reason": None, "index": 0, "delta": delta}])
            for delta in generation.call_deltas()
        ]
        return Stream(
            head=[chunk([role])],
            content=[
                token_chunk(t, p) for t, p in zip(generation.tokens, generation.probs, strict=True)
            ]
            + calls,
            tail=tail,
        )

    def _envelope(
        self, body: JSON, kind: str, choices: list[JSON], cmpl_id: str | None = None
    ) -> JSON:
        return {
            "choices": choices,
            "created": int(time.time()),
            "model": self.model,  # the real server names its GGUF file, whatever was asked
            "system_fingerprint": "b11434-fake",
            "object": kind,
            "id": cmpl_id or _cmpl_id(),
        }

    async def _embeddings(self, request: Request) -> Response:
        """As ``--embeddings --pooling mean`` answers: one vector per input (``index``,
        ``object``), ``usage`` in prompt tokens; never encoded (floats only)."""
        if not self.embeddings:
            message = "This server does not support embeddings. Start it with `--embeddings`"
            return self.error(501, llama_error(501, message))
        body = await read_json(request) or {}
        given = body.get("input")
        inputs = [given] if isinstance(given, str) or _tokens(given) else list(given or [])
        if not inputs or any(i in ("", []) for i in inputs):
            return self.error(400, llama_error(400, "Input content cannot be empty"))
        data, used = [], 0
        for index, item in enumerate(inputs):
            text = item if isinstance(item, str) else " ".join(map(str, item))
            used += max(1, prompt_tokens({"messages": [{"role": "user", "content": text}]}))
            seed = sum(map(ord, text)) or 1
            vector = [((seed * (k + 3)) % 89) / 89 - 0.5 for k in range(self.embedding_size)]
            data.append({"embedding": vector, "index": index, "object": "embedding"})
        return JSONResponse(
            {
                "model": body.get("model") or self.model,
                "object": "list",
                "usage": {"prompt_tokens": used, "total_tokens": used},
                "data": data,
            }
        )


def _cmpl_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def _n_probs(body: JSON) -> int:
    """How many top_logprobs llama-server returns: 0 (none at all) unless `logprobs` is set."""
    if not body.get("logprobs"):
        return 0
    n = body.get("top_logprobs")
    return 20 if n is None else int(n)  # server-common.cpp: json_value(body, "top_logprobs", 20)


def _tokens(value: object) -> bool:
    """A token array: a list of integers."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) for v in value)
