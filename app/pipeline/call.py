"""One chat request on its way through the proxy, and the typed results of its steps.

The client's JSON, its checked view, the record telemetry will read and the start
time travel together as one ``Call``, with what every path reads of the request
(its context type, its contract, its prompt; each worked out once). Each step of
the request (draft, judge, verify, serve, relay, audit) returns what it did as one
of the frozen results below; the speculative path keeps them in ``Call.results``
in order, and only the pipeline's top module (``app.pipeline``) applies them to the
record. Nothing here or below writes the record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from app.errors import UpstreamError
from app.protocol import ChatCompletionRequest
from app.record import RequestRecord, Usage
from app.routing.acceptance import Acceptance
from app.routing.classify import classify, prompt_text
from app.routing.signals import DraftSignals
from app.routing.validity import Contract
from app.vocabulary import ContextType, Outcome, Purpose


@dataclass(frozen=True, slots=True)
class Counted:
    """One upstream call's tokens and why it was made, and its latency unless one is known
    already (``estimated``: the upstream gave no counts)."""

    model: str
    purpose: Purpose
    completion_tokens: int
    prompt_tokens: int = 0
    latency_s: float | None = None
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """An upstream failed this request, and so did the members of its group asked before it."""

    error: UpstreamError


@dataclass(frozen=True, slots=True)
class FellOver:
    """Members of a group that failed before another answered."""

    failures: tuple[UpstreamError, ...]


@dataclass(frozen=True, slots=True)
class Finished:
    """How the request ended (a later result may still overrule it)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Prepared:
    """What was read of the request before the draft: its hashed n-grams (learning on)."""

    ngrams: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Steered:
    """Adaptive K sent to llama-server as ``speculative.n_max``."""

    server_depth: int


@dataclass(frozen=True, slots=True)
class Hedged:
    """The cloud was called alongside the draft."""


@dataclass(frozen=True, slots=True)
class Trusted:
    """A streamed draft was waited for past the first-token budget."""


@dataclass(frozen=True, slots=True)
class Drafted:
    """The draft's signals (None: stopped before it could be judged whole), the prompt's
    tokens (None: unknown) and llama-server's own draft counters."""

    signals: DraftSignals | None
    prompt_tokens: int | None = None
    server_spec: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Judged:
    """The decision on the draft: its reasons (with a broken contract), score and features."""

    reasons: tuple[str, ...]
    spill_score: float | None
    features: dict[str, float] | None


@dataclass(frozen=True, slots=True)
class Compared:
    """A draft compared with the verified answer (``verify_s``: a live one's latency)."""

    similarity: float | None
    agreement: bool | None
    acceptance: Acceptance | None
    verified_text: str | None = None
    verify_s: float | None = None


@dataclass(frozen=True, slots=True)
class Served:
    """An answer on its way: the reasons the client is told, its tool calls, and when its
    first token went out (a replayed stream: now)."""

    reasons: tuple[str, ...] | None
    tool_calls: int
    first_token_s: float | None = None


@dataclass(frozen=True, slots=True)
class LocalCounters:
    """llama-server's draft counters of one more local answer (added to those seen)."""

    counters: dict[str, int] | None


@dataclass(frozen=True, slots=True)
class RelayOutcome:
    """What a relayed stream did, told when its chunks end (or the client left): its
    tokens, tool calls, first token, reasons, local counters; ``error``: the failure that
    cut it (told to the client); ``compared``: a live verification's comparison."""

    upstream: str
    purpose: Purpose
    n_tokens: int
    prompt_tokens: int
    estimated: bool
    tool_calls: int
    first_token_at: float | None
    reasons: tuple[str, ...] | None
    counters: LocalCounters | None = None
    error: UpstreamError | None = None
    compared: Compared | None = None


@dataclass(frozen=True, slots=True)
class Audited:
    """An accepted draft verified in the background: the agreement and the audit's call."""

    agreement: bool | None
    usage: Usage  # the audit's own call: spend, not the request's tokens


Result = (
    Counted
    | Failed
    | FellOver
    | Finished
    | Prepared
    | Steered
    | Hedged
    | Trusted
    | Drafted
    | Judged
    | Compared
    | Served
    | LocalCounters
    | RelayOutcome
    | Audited
)


@dataclass(slots=True, eq=False)
class Call:
    """A request, its record and its start; the record is telemetry's once the call ends."""

    raw: dict[str, Any]
    _request: ChatCompletionRequest | None = field(repr=False)
    record: RequestRecord
    started: float = field(default_factory=time.perf_counter)
    results: list[Result] = field(default_factory=list)  # applied by the top module, in order
    _contract: Contract | None = field(default=None, repr=False)
    _prompt: str | None = field(default=None, repr=False)
    _context: ContextType | None = field(default=None, repr=False)
    audit: asyncio.Task[Audited | None] | None = field(default=None, repr=False)
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
        if self._context is None:
            response_format = self.raw.get("response_format")
            json_mode = isinstance(response_format, dict) and response_format.get("type") != "text"
            self._context = classify(self.prompt(), json_mode=json_mode)
        return self._context

    @property
    def classified(self) -> bool:
        """Whether the context type has been worked out."""
        return self._context is not None
