"""One chat request on its way through the proxy, and its story as typed events.

The client's JSON, its checked view, the record telemetry will read and the start
time travel together as one ``Call``, with what every path reads of the request
(its context type, its contract, its prompt; each worked out once). Each step of
the request (set up, draft, judge, plan, verify, serve, relay, audit) returns what it
did as the frozen events below, kept in ``Call.events`` in order: the story, written
once. The seed's log lines (``narrative``), the response's ``speculative_decoding``
object and headers (``wire.SpeculationReport.of``) and the record's fields (applied by
the pipeline's top module, ``app.pipeline.apply``, and read by the spec log) are all
derived from it. Nothing here or below writes the record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from app.errors import UpstreamError
from app.protocol import ChatCompletionRequest
from app.record import RequestRecord, Usage
from app.routing.acceptance import Acceptance
from app.routing.classify import classify, prompt_text
from app.routing.signals import DraftSignals
from app.routing.validity import Contract
from app.vocabulary import ContextType, Outcome, Purpose

if TYPE_CHECKING:
    from app.pipeline.plan import CloudState, Plan


class Counted(msgspec.Struct, frozen=True):
    """One upstream call's tokens and why it was made, and its latency unless one is known
    already (``estimated``: the upstream gave no counts)."""

    model: str
    purpose: Purpose
    completion_tokens: int
    prompt_tokens: int = 0
    latency_s: float | None = None
    estimated: bool = False


class Failed(msgspec.Struct, frozen=True):
    """An upstream failed this request, and so did the members of its group asked before it
    (``stage``: the speculative step it failed, when that is told: draft, verify, continue)."""

    error: UpstreamError
    stage: str | None = None


class FellOver(msgspec.Struct, frozen=True):
    """Members of a group that failed before another answered."""

    failures: tuple[UpstreamError, ...]


class Finished(msgspec.Struct, frozen=True):
    """How the request ended (a later result may still overrule it)."""

    outcome: Outcome


class Prepared(msgspec.Struct, frozen=True):
    """What was read of the request before the draft: its hashed n-grams (learning on)."""

    ngrams: tuple[int, ...] | None


class Steered(msgspec.Struct, frozen=True):
    """Adaptive K sent to llama-server as ``speculative.n_max``."""

    server_depth: int


class Started(msgspec.Struct, frozen=True):
    """The draft is about to be asked for, with this budget."""

    budget: int


class Hedged(msgspec.Struct, frozen=True):
    """The cloud was called alongside the draft."""


class Trusted(msgspec.Struct, frozen=True):
    """A streamed draft was waited for past the first-token budget (P(wrong) at most this)."""

    trust_score: float | None


class Drafted(msgspec.Struct, frozen=True):
    """The whole draft: its signals, the prompt's tokens, llama-server's draft counters."""

    signals: DraftSignals
    prompt_tokens: int
    server_spec: dict[str, int] | None = None


class Stopped(msgspec.Struct, frozen=True):
    """The draft was cancelled for the cloud: its first-token budget ran out
    (``out_of_time``; ``signals``: what a streamed draft had sent) or the hedge came first."""

    signals: DraftSignals | None
    out_of_time: bool


class Judged(msgspec.Struct, frozen=True):
    """The decision on the draft: its reasons (with a broken contract), score, features,
    and what the log tells of it (accepted, the broken contract, each doubt's detail, the
    policy's name and threshold)."""

    reasons: tuple[str, ...]
    spill_score: float | None
    features: dict[str, float] | None
    accepted: bool = False
    violation: str | None = None
    details: tuple[str, ...] = ()
    policy: str = "seed"
    threshold: float = 0.5


class Planned(msgspec.Struct, frozen=True):
    """The next step the plan chose (``first``: the first one for this draft); ``cloud``:
    the cloud's state it was chosen with; ``why``: why the verifier cannot answer."""

    plan: Plan
    cloud: CloudState
    first: bool = False
    violation: str | None = None
    why: str = ""


class Opened(msgspec.Struct, frozen=True):
    """A cloud stream opened for relaying (``live``: a verification streamed live)."""

    upstream: str
    fell_over: tuple[UpstreamError, ...]
    live: bool = False


class Answered(msgspec.Struct, frozen=True):
    """An upstream's whole answer for the client: its tokens, whether the local model gave
    it, and the verifiers that failed before it (named to the client)."""

    upstream: str
    n_tokens: int
    local: bool
    fell_over: tuple[UpstreamError, ...] = ()


class Compared(msgspec.Struct, frozen=True):
    """A draft compared with the verified answer (``use_draft`` None: a live one)."""

    similarity: float | None
    agreement: bool | None
    acceptance: Acceptance | None
    verified_text: str | None = None
    verify_s: float | None = None
    n_tokens: int = 0
    n_chars: int = 0
    use_draft: bool | None = None
    reason: str | None = None
    upstream: str = ""
    fell_over: tuple[UpstreamError, ...] = ()


class Served(msgspec.Struct, frozen=True):
    """An answer on its way: the reasons the client is told, its tool calls, and when its
    first token went out (a replayed stream: now)."""

    reasons: tuple[str, ...] | None
    tool_calls: int
    first_token_s: float | None = None


class LocalCounters(msgspec.Struct, frozen=True):
    """llama-server's draft counters of one more local answer (added to those seen)."""

    counters: dict[str, int] | None


class RelayOutcome(msgspec.Struct, frozen=True):
    """What a relayed stream did, told when its chunks end (or the client left): its
    tokens, tool calls, first token, reasons, local counters; ``error``: the failure that
    cut it (told to the client); ``compared``: a live verification's comparison."""

    upstream: str
    purpose: Purpose
    local: bool
    n_tokens: int
    prompt_tokens: int
    estimated: bool
    tool_calls: int
    first_token_at: float | None
    reasons: tuple[str, ...] | None
    counters: LocalCounters | None = None
    error: UpstreamError | None = None
    compared: Compared | None = None


class Audited(msgspec.Struct, frozen=True):
    """An accepted draft verified in the background: the agreement and the audit's call."""

    agreement: bool | None
    usage: Usage  # the audit's own call: spend, not the request's tokens


Event = (
    Counted
    | Failed
    | FellOver
    | Finished
    | Prepared
    | Steered
    | Started
    | Hedged
    | Trusted
    | Drafted
    | Stopped
    | Judged
    | Planned
    | Opened
    | Answered
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
    events: list[Event] = field(default_factory=list)  # its story; the top module applies it
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
