"""Scripted replies, the fake tokenizer and the queue-backed base of the stand-in servers."""

from __future__ import annotations

import asyncio
import math
import re
import threading
import uuid
import zlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

JSON = dict[str, Any]
_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]")
VOCAB_SIZE = 49152  # SmolLM2's vocabulary, so fake token ids look plausible
HOLD_LIMIT_S = 30.0  # a held reply is let go after this even if the test never releases it


def tokenize(text: str) -> list[str]:
    """Split text into word and punctuation pieces that keep their leading whitespace."""
    return _PIECE.findall(text)


def token_id(token: str) -> int:
    """A stable fake vocabulary id for a token's text."""
    return zlib.crc32(token.encode()) % VOCAB_SIZE


@dataclass
class Reply:
    """What the fake upstream answers to the next chat completion request."""

    text: str = "Hello! I am a small local model and I am happy to help you today."
    token_probs: list[float] | None = None  # per token of tokenize(text); default 0.9 each
    finish_reason: str | None = None  # None: "length" if cut by the token limit, else "stop"
    status: int = 200
    error: JSON | None = None  # whole error body when status != 200, or the mid-stream error
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the response starts
    chunk_delay: float = 0.0  # seconds between SSE events
    stream_done: bool = True  # end a complete stream with `data: [DONE]`
    fail_after_chunks: int | None = None  # break the stream after this many content chunks
    raw_body: bytes | None = None  # sent verbatim as application/json with `status`
    # function calls answered instead of (or after) the text: {"name", "arguments", "id"?};
    # `arguments` is the raw JSON string, broken on purpose where a test wants it
    tool_calls: list[JSON] | None = None
    # the answer waits until a test sets this (at most HOLD_LIMIT_S): a request held in flight
    hold: threading.Event | None = None
    # with `hold`: a stream sends this many events first, then waits (a stream held midway)
    hold_after: int | None = None
    # the stream stays open after its last event, without `[DONE]` (at most HOLD_LIMIT_S)
    linger: bool = False
    # text an answer repeats before its first token, whole or streamed (llama-server's answer
    # to an assistant prefill begins with the prefill; its usage counts only what it generated)
    echo: str = ""

    def __post_init__(self) -> None:
        if self.token_probs is None:
            return
        n_tokens = len(tokenize(self.text))
        if len(self.token_probs) != n_tokens:
            raise ValueError(
                f"token_probs has {len(self.token_probs)} values but the text has {n_tokens} "
                f"tokens: {tokenize(self.text)!r}"
            )
        if not all(0.0 < p <= 1.0 for p in self.token_probs):
            raise ValueError(f"token_probs must lie in (0, 1]: {self.token_probs!r}")


@dataclass(frozen=True)
class Generation:
    """The tokens one reply yields for one request, after the request's token limit."""

    tokens: list[str]
    probs: list[float]
    finish_reason: str
    prompt_tokens: int
    tool_calls: list[JSON] = field(default_factory=list)  # OpenAI's message.tool_calls items

    @classmethod
    def of(
        cls, reply: Reply, limit: int | None, prompt_tokens: int, *, with_calls: bool = True
    ) -> Generation:
        """Apply a token limit (None or negative: unlimited) to a scripted reply; its tool
        calls (unless ``with_calls`` is off) follow the text."""
        tokens = tokenize(reply.text)
        probs = reply.token_probs or [0.9] * len(tokens)
        cut = limit is not None and 0 <= limit < len(tokens)
        if cut:
            tokens, probs = tokens[:limit], probs[:limit]
        calls = [_tool_call(c) for c in reply.tool_calls or ()] if with_calls else []
        finish = reply.finish_reason or ("length" if cut else "tool_calls" if calls else "stop")
        return cls(tokens, probs, finish, prompt_tokens, calls)

    @property
    def call_tokens(self) -> list[str]:
        """The tokens the calls took to generate: each name, then its arguments."""
        return [
            t
            for c in self.tool_calls
            for t in tokenize(c["function"]["name"] + " " + c["function"]["arguments"])
        ]

    @property
    def text(self) -> str:
        """The generated text."""
        return "".join(self.tokens)

    def message(self) -> JSON:
        """The non-streaming `choices[0].message`: text, and the calls if any."""
        if not self.tool_calls:
            return {"role": "assistant", "content": self.text}
        return {"role": "assistant", "content": self.text or None, "tool_calls": self.tool_calls}

    def call_deltas(self) -> list[JSON]:
        """The calls as streamed `delta`s: per call its head (index, id, type, name), then
        argument fragments that concatenate to the arguments."""
        deltas: list[JSON] = []
        for index, call in enumerate(self.tool_calls):
            function = call["function"]
            head = {"index": index, "id": call["id"], "type": "function"}
            deltas.append(
                {"tool_calls": [head | {"function": {"name": function["name"], "arguments": ""}}]}
            )
            pieces = tokenize(function["arguments"])
            if "".join(pieces) != function["arguments"]:
                pieces = [function["arguments"]]  # trailing whitespace: sent whole
            deltas += [
                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                for piece in pieces
            ]
        return deltas

    def usage(self) -> JSON:
        """OpenAI `usage` counts (the calls' tokens included)."""
        n = len(self.tokens) + len(self.call_tokens)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": n,
            "total_tokens": self.prompt_tokens + n,
        }


def _tool_call(call: JSON) -> JSON:
    """A scripted call in OpenAI's `message.tool_calls` shape, with an id."""
    function = {"name": call["name"], "arguments": call["arguments"]}
    return {
        "id": call.get("id") or f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": function,
    }


def prompt_tokens(body: JSON) -> int:
    """Count the fake tokens of a chat request's message texts (a legacy completion's
    prompt)."""
    total = 0
    if isinstance(prompt := body.get("prompt"), str) and "messages" not in body:
        total += len(tokenize(prompt))  # a legacy completion's prompt
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += len(tokenize(content)) if isinstance(content, str) else 0
    return total


def first_int(body: JSON, *keys: str) -> int | None:
    """The first of `keys` present in `body` with an integer value."""
    for key in keys:
        if isinstance(value := body.get(key), int):
            return value
    return None


def logprob_entry(token: str, prob: float, n_top: int, *, with_id: bool) -> JSON:
    """One `logprobs.content` item; the chosen token heads `top_logprobs`.

    The alternatives share the remaining mass geometrically, capped at `prob` so the
    list stays sorted, and floored so every logprob is finite.
    """

    def item(text: str, p: float) -> JSON:
        head = {"id": token_id(text)} if with_id else {}
        return head | {"token": text, "bytes": list(text.encode()), "logprob": math.log(p)}

    rest = 1.0 - prob
    alternatives = [
        item(f"{token}~{k}", max(min(prob, rest / 2**k), 1e-12)) for k in range(1, n_top)
    ]
    top = [item(token, prob), *alternatives] if n_top > 0 else []
    return item(token, prob) | {"top_logprobs": top}


@dataclass(frozen=True)
class Recorded:
    """One HTTP request as a fake server received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any  # the parsed body, or None when empty or not JSON


@dataclass(frozen=True)
class Stream:
    """A scripted SSE stream: opening chunks, one chunk per token, closing chunks."""

    head: list[JSON]
    content: list[JSON]
    tail: list[JSON]


class ScriptedServer:
    """Base of the fakes: an ASGI app answering from a FIFO of replies and recording requests."""

    def __init__(self, routes: list[Route], default: Reply | None = None) -> None:
        self.default = default or Reply()
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.url = ""  # set by whoever serves it
        # A request that ends with the assistant's text (llama-server's assistant prefill), or
        # with that text and then one user turn (an instruction to go on), is answered with
        # the scripted text after it: a stand-in that continues an answer (``continuing``).
        self.continues = False
        self.echoes_prefill = False  # a prefill's answer begins with it (as llama-server's)
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._router = Starlette(
            routes=routes, exception_handlers={HTTPException: self._http_error}
        )

    @property
    def app(self) -> ScriptedServer:
        """The ASGI app to serve: the fake itself."""
        return self

    @property
    def last_json(self) -> Any:
        """The JSON body of the most recent request."""
        return self.requests[-1].json

    def done_with(self, n: int) -> bool:
        """``n`` requests have come and none is in flight (read together, under the lock:
        a request that has come but is not yet counted in flight is not done)."""
        with self._lock:
            return len(self.requests) == n and self.in_flight == 0

    def enqueue(self, *replies: Reply) -> None:
        """Queue replies for the next chat completion requests, in order."""
        with self._lock:
            self._queue.extend(replies)

    def next_reply(self) -> Reply:
        """Take the next queued reply, or the default one when the queue is empty."""
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    def error_body(self, status: int) -> JSON:
        """The upstream's default error body for an HTTP status."""
        raise NotImplementedError

    def stream_failure(self, reply: Reply) -> list[JSON]:
        """What the upstream sends after `fail_after_chunks` content chunks."""
        raise NotImplementedError

    def refuse(self, request: Request) -> Response | None:
        """A response that pre-empts every route (model loading, bad key), or None."""
        return None

    def answers_calls(self, body: JSON) -> bool:
        """Whether a reply's tool calls are answered to this request."""
        return True

    def response_headers(self, reply: Reply | None) -> dict[str, str]:
        """Headers for a response, with the reply's extras."""
        return dict(reply.headers) if reply else {}

    def error(self, status: int, body: JSON | None = None, reply: Reply | None = None) -> Response:
        """An error response with the upstream's default body unless one is given."""
        headers = self.response_headers(reply)
        return JSONResponse(body or self.error_body(status), status, headers)

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        """Answer with the next reply: wait its delay, then raw bytes, an error or a completion."""
        reply = self.next_reply()
        if reply.hold is not None and reply.hold_after is None:
            await asyncio.to_thread(reply.hold.wait, HOLD_LIMIT_S)
        if not await _pause(request, reply.delay):
            return Response(status_code=499)  # the client hung up; nobody reads this
        headers = self.response_headers(reply)
        if reply.raw_body is not None:
            return Response(reply.raw_body, reply.status, headers, "application/json")
        if reply.status != 200:
            return self.error(reply.status, reply.error, reply)
        if self.continues:
            reply = continuing(reply, body, echoes=self.echoes_prefill)
        generation = Generation.of(
            reply, limit, prompt_tokens(body), with_calls=self.answers_calls(body)
        )
        text = "prompt" in body and "messages" not in body  # a legacy /v1/completions
        if body.get("stream"):
            stream = self.stream(generation, body)
            events = self._sse(self.text_stream(stream, body) if text else stream, reply)
            return StreamingResponse(events, headers=headers, media_type="text/event-stream")
        answer = self.completion(generation, body)
        if reply.echo and not text:  # a whole answer repeats it too (measured: the real one)
            message = answer["choices"][0]["message"]
            message["content"] = reply.echo + (message.get("content") or "")
        return JSONResponse(self.text_answer(answer, body) if text else answer, headers=headers)

    def completion(self, generation: Generation, body: JSON) -> JSON:
        """The non-streaming chat completion body."""
        raise NotImplementedError

    def stream(self, generation: Generation, body: JSON) -> Stream:
        """The chunks of a streamed chat completion."""
        raise NotImplementedError

    def text_answer(self, chat: JSON, body: JSON) -> JSON:
        """A legacy completion's whole ``text_completion``, from the chat answer it would be
        (``tests.fakes.text_completions``)."""
        raise NotImplementedError

    def text_stream(self, chat: Stream, body: JSON) -> Stream:
        """A legacy completion's streamed chunks, from the chat stream it would be."""
        raise NotImplementedError

    async def _sse(self, stream: Stream, reply: Reply) -> AsyncIterator[bytes]:
        content, tail, done = stream.content, stream.tail, reply.stream_done
        if (cut := reply.fail_after_chunks) is not None:
            content, tail, done = content[:cut], self.stream_failure(reply), False
        if reply.echo and content:  # the first token's chunk carries the echo before it
            first = orjson.loads(orjson.dumps(content[0]))
            delta = first["choices"][0]["delta"]
            delta["content"] = reply.echo + (delta.get("content") or "")
            content = [first, *content[1:]]
        events = [orjson.dumps(c) for c in (*stream.head, *content, *tail)]
        for i, event in enumerate([*events, b"[DONE]"] if done else events):
            if i and reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            if i == reply.hold_after and reply.hold is not None:
                await asyncio.to_thread(reply.hold.wait, HOLD_LIMIT_S)
            yield b"data: " + event + b"\n\n"
        if reply.linger:
            await asyncio.sleep(HOLD_LIMIT_S)  # cancelled when the client hangs up

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.error(exc.status_code)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._router(scope, receive, send)
            return
        body = await _read_body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        with self._lock:
            self.requests.append(Recorded(scope["method"], scope["path"], headers, _parse(body)))
            self.in_flight += 1
        try:
            refusal = self.refuse(Request(scope))
            await (refusal or self._router)(scope, _replay(body, receive), send)
        finally:
            with self._lock:
                self.in_flight -= 1


def continuing(reply: Reply, body: JSON, *, echoes: bool = False) -> Reply:
    """``reply`` as the rest of an answer the request has begun: its last message the
    assistant's (a prefill), or the assistant's then one user turn (an instruction to
    continue); the scripted text after that beginning (as it is when it does not begin so),
    a prefill repeated first when the server ``echoes`` it."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tail = messages[-2:] if messages and messages[-1].get("role") == "user" else messages[-1:]
    begun = tail[0].get("content") if tail and tail[0].get("role") == "assistant" else None
    if not isinstance(begun, str) or not reply.text.startswith(begun):
        return reply
    echo = begun if echoes and tail[-1].get("role") == "assistant" else ""
    return replace(reply, text=reply.text[len(begun) :], token_probs=None, echo=echo)


async def read_json(request: Request) -> JSON | None:
    """The request body as a JSON object, or None when it is not one."""
    body = _parse(await request.body())
    return body if isinstance(body, dict) else None


def _parse(body: bytes) -> Any:
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the already-read body out once, then defers to the real one."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


async def _pause(request: Request, seconds: float) -> bool:
    """Sleep `seconds`, returning False early if the client disconnects meanwhile."""
    if seconds <= 0:
        return True

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    try:
        await asyncio.wait_for(disconnected(), seconds)
    except TimeoutError:
        return True
    return False
