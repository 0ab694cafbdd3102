"""The cloud stand-in: paced like Cerebras, answering each prompt with its item's
reference, billing per API key the prompt of every call and the completion it sent."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tests.fakes.by_prompt import last_message
from tests.fakes.cerebras import FakeCerebras
from tests.fakes.script import JSON, Generation, Reply, Stream, _pause, prompt_tokens

FIRST_TOKEN_S = 0.2
TOKENS_PER_S = 2000.0
CLOUD_MODEL = "gpt-oss-120b"
UNKNOWN_PROMPT = "I do not know."


@dataclass
class Bill:
    """What the cloud stand-in sent one API key: calls, prompt and completion tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def usd(self, input_per_mtok: float, output_per_mtok: float) -> float:
        """The bill at these prices (USD per million tokens)."""
        return (
            self.prompt_tokens * input_per_mtok + self.completion_tokens * output_per_mtok
        ) / 1e6

    def minus(self, other: Bill) -> Bill:
        """What was billed since ``other`` (a copy taken earlier)."""
        return Bill(
            self.calls - other.calls,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
        )


class BillingCloud(FakeCerebras):
    """The Cerebras stand-in: answers each prompt with its reference at Cerebras' pace and
    bills, per API key, the prompt of every call and the completion tokens it sent."""

    def __init__(self, references: dict[str, str], keys: Sequence[str]) -> None:
        super().__init__(api_key=None, models=[CLOUD_MODEL])
        self.references = references
        self.bills = {key: Bill() for key in keys}
        self.unknown_prompts = 0  # calls whose prompt is no item's: the bench is broken
        self._billing = threading.Lock()

    def bill(self, key: str) -> Bill:
        """A copy of one key's bill so far."""
        with self._billing:
            return copy.copy(self.bills[key])

    def refuse(self, request: Request) -> Response | None:
        """401 unless the bearer key is one of the arms'."""
        header = request.headers.get("authorization", "")
        if header.removeprefix("Bearer ") not in self.bills:
            return self.error(401)
        return None

    def _charge(self, key: str, prompt: int = 0, completion: int = 0, call: int = 0) -> None:
        with self._billing:
            bill = self.bills[key]
            bill.calls += call
            bill.prompt_tokens += prompt
            bill.completion_tokens += completion

    async def play(self, request: Request, body: JSON, limit: int | None) -> Response:
        key = request.headers["authorization"].removeprefix("Bearer ")
        text = self.references.get(last_message(body))
        if text is None:
            self.unknown_prompts += 1
            text = UNKNOWN_PROMPT
        generation = Generation.of(Reply(text=text), limit, prompt_tokens(body))
        self._charge(key, prompt=generation.prompt_tokens, call=1)
        headers = self.response_headers(None)
        if body.get("stream"):
            if not await _pause(request, FIRST_TOKEN_S):
                return Response(status_code=499)
            events = self._paced(self.stream(generation, body), key)
            return StreamingResponse(events, headers=headers, media_type="text/event-stream")
        if not await _pause(request, FIRST_TOKEN_S + len(generation.tokens) / TOKENS_PER_S):
            return Response(status_code=499)
        self._charge(key, completion=len(generation.tokens))
        return JSONResponse(self.completion(generation, body), headers=headers)

    async def _paced(self, stream: Stream, key: str) -> AsyncIterator[bytes]:
        """The stream's events, a content chunk every 1/TOKENS_PER_S s, each billed as it
        goes out (a stream the caller stops is billed up to there)."""
        for chunk in stream.head:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        for chunk in stream.content:
            await asyncio.sleep(1 / TOKENS_PER_S)
            self._charge(key, completion=1)
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        for chunk in stream.tail:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        yield b"data: [DONE]\n\n"


def settle(cloud: BillingCloud, quiet_s: float = 0.5, limit_s: float = 30.0) -> None:
    """Wait until the stand-in has had no call in flight for ``quiet_s`` (a proxy's audits
    and hedges run on after its answer)."""
    deadline = time.monotonic() + limit_s
    calm_since = time.monotonic()
    while time.monotonic() < deadline:
        if cloud.in_flight:
            calm_since = time.monotonic()
        elif time.monotonic() - calm_since >= quiet_s:
            return
        time.sleep(0.05)
