"""One chat request on its way through the proxy.

The client's JSON, its checked view, the record telemetry will read, the start time and
the request's story (``app.story``) travel together as one ``Call``, with what every
path reads of the request (its context type, its contract, its prompt; each worked out
once). The pipeline's top module alone applies the story to the record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.protocol import ChatCompletionRequest
from app.record import RequestRecord
from app.routing.classify import classify, prompt_text
from app.routing.validity import Contract
from app.story import Audited, Event, LateDraft
from app.telemetry.trace_context import current
from app.vocabulary import ContextType

if TYPE_CHECKING:
    from app.cache import Looked
    from app.telemetry.tracing import Trace


@dataclass(slots=True, eq=False)
class Call:
    """A request, its record and its start; the record is telemetry's once the call ends."""

    raw: dict[str, Any]
    _request: ChatCompletionRequest | None = field(repr=False)
    record: RequestRecord
    started: float = field(default_factory=time.perf_counter)
    events: list[Event] = field(default_factory=list)  # its story; the top module applies it
    _contract: Contract | None = field(default=None, repr=False)
    _prompt: str | None = field(default=None, repr=False)
    _context: ContextType | None = field(default=None, repr=False)
    audit: asyncio.Task[Audited | None] | None = field(default=None, repr=False)
    audit_rate: float = 0.0  # the rate it was picked at (its label's weight is 1 / rate)
    looked: Looked | None = field(default=None, repr=False)  # the cache's look-up (app.cache)
    # its spans (telemetry.otel); None: tracing off or not sampled (app.telemetry.tracing)
    trace: Trace | None = field(default_factory=current.get, repr=False)
    # a draft finishing for a label after its stream was relayed (app.pipeline.verify)
    late: asyncio.Task[LateDraft | None] | None = field(default=None, repr=False)

    @property
    def request(self) -> ChatCompletionRequest:
        """The request's checked view, until its answer is on its way (``answered``)."""
        if self._request is None:
            raise RuntimeError("the checked request is let go once answered: read raw")
        return self._request

    def answered(self) -> None:
        """The answer is on its way: what is left to do (stream, record) reads ``raw`` and the
        record, and an open stream should not keep the checked view (~1.3 KB)."""
        self._request = None

    def contract(self) -> Contract:
        """What any answer to this request must keep (tools, tool_choice, JSON output)."""
        if self._contract is None:
            self._contract = Contract.of(self.raw)
        return self._contract

    def prompt(self) -> str:
        """The text of the request's messages, worked out once (a legacy completion passed
        on as it came, ``app.upstreams.text_completion``: its prompt)."""
        if self._prompt is None:
            raw = self.raw
            if "messages" in raw or "prompt" not in raw:
                self._prompt = prompt_text(raw["messages"])
            else:
                prompt = raw["prompt"]
                self._prompt = str(prompt[0] if isinstance(prompt, list) and prompt else prompt)
        return self._prompt

    def prompt_tokens_guess(self) -> int:
        """The prompt's tokens where no upstream counted them (a draft stream stopped before
        its usage): about four characters a token, as OpenAI's rule of thumb has it."""
        return len(self.prompt()) // 4

    def context(self) -> ContextType:
        """The request's context type (seed 001's heuristics), worked out once."""
        if self._context is None:
            response_format = self.raw.get("response_format")
            json_mode = isinstance(response_format, dict) and response_format.get("type") != "text"
            self._context = classify(self.prompt(), json_mode=json_mode)
        return self._context
