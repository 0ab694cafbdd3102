"""One chat request on its way through the proxy, and everything it carries.

The client's JSON, its checked view, the record telemetry will read and the start
time travel together as one ``Call``, with the few operations every path needs:
count tokens, note an upstream's failure, finish with an outcome, know the
request's context type and its contract (what any answer must keep; each worked
out once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.errors import UpstreamError
from app.protocol import ChatCompletionRequest
from app.record import RequestRecord, Usage
from app.routing.classify import classify, prompt_text
from app.routing.validity import Contract
from app.vocabulary import ContextType, Outcome, Purpose


@dataclass(slots=True, eq=False)
class Call:
    """A request, its record and its start; the record is telemetry's once the call ends."""

    raw: dict[str, Any]
    _request: ChatCompletionRequest | None = field(repr=False)
    record: RequestRecord
    started: float = field(default_factory=time.perf_counter)
    _contract: Contract | None = field(default=None, repr=False)
    _prompt: str | None = field(default=None, repr=False)
    audit: asyncio.Task[None] | None = field(default=None, repr=False)  # verifying it later
    audit_rate: float = 0.0  # the rate it was picked at (its label's weight is 1 / rate)

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
        """The text of the request's messages, worked out once."""
        if self._prompt is None:
            self._prompt = prompt_text(self.raw["messages"])
        return self._prompt

    def context(self) -> ContextType:
        """The request's context type (seed 001's heuristics), worked out once."""
        rec = self.record
        if not rec.classified:
            response_format = self.raw.get("response_format")
            json_mode = isinstance(response_format, dict) and response_format.get("type") != "text"
            context = classify(self.prompt(), json_mode=json_mode)
            rec.context_type, rec.classified = context.value, True
        return ContextType(rec.context_type)

    def count(
        self,
        model: str,
        purpose: Purpose,
        completion_tokens: int,
        prompt_tokens: int = 0,
        *,
        latency_s: float | None = None,
        estimated: bool = False,
    ) -> None:
        """One upstream call's tokens and why it was made, and its latency unless one is
        known already (``estimated``: the upstream gave no counts)."""
        rec = self.record
        rec.usage.append(Usage(model, purpose, prompt_tokens, completion_tokens, estimated))
        if model == rec.draft_model:
            rec.local_tokens += completion_tokens
            rec.draft_s = rec.draft_s or latency_s
        else:
            rec.cloud_tokens += completion_tokens
            rec.verify_s = rec.verify_s or latency_s

    def fail(self, exc: UpstreamError) -> None:
        """An upstream failed this request (counted by upstream and kind), and so did the
        members of its group that were asked before it."""
        self.fell_over(exc.fell_over)
        self.record.upstream_errors.append((exc.upstream, exc.kind))

    def fell_over(self, failures: Sequence[UpstreamError]) -> None:
        """Members of a group that failed before another answered (counted like ``fail``)."""
        self.record.upstream_errors += [(exc.upstream, exc.kind) for exc in failures]

    def finish(self, outcome: Outcome) -> None:
        """How the request ended (a later failure of its stream may still overrule it)."""
        self.record.outcome = outcome
