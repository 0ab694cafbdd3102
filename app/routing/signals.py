"""What a draft tells about itself: text, length, finish and per-token confidence."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeGuard

from app.routing.tool_calls import ToolCall, tool_calls_of
from app.vocabulary import StopReason

ABORTED = StopReason.P_MIN.value  # the finish_reason of a draft stopped early
# The finish_reason of a streamed draft stopped at the first-token budget (never judged)
OUT_OF_TIME = "first_token_budget"


@dataclass(frozen=True, slots=True)
class TokenSignal:
    """One drafted token: its probability and the entropy of its top-k candidates."""

    text: str
    p: float
    entropy: float
    token_id: int | None = None
    top_k: tuple[
        tuple[int | str, float], ...
    ] = ()  # (id, or text when the upstream gives no id; p)


@dataclass(frozen=True, slots=True)
class DraftSignals:
    """Everything the decision reads about a draft (plain data, no I/O)."""

    text: str
    n_tokens: int
    budget: int
    finish_reason: str | None
    tokens: tuple[TokenSignal, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    client_limit: int | None = None  # the client's own max_tokens, if any

    @property
    def truncated(self) -> bool:
        """Stopped at its token budget (``n_max`` in the speculation log)."""
        return self.finish_reason == "length"

    @property
    def at_client_limit(self) -> bool:
        """Stopped where the client's own ``max_tokens`` stops any answer: as whole as the
        cloud's would be (``finish_reason`` ``length`` either way), so it can be judged,
        served and labelled like a draft that ended by itself."""
        limit = self.client_limit
        # filled: a ``length`` short of it is the server's own cap (a full context, say)
        return self.truncated and limit is not None and limit <= self.budget <= self.n_tokens

    @property
    def cut(self) -> bool:
        """Stopped at the proxy's draft budget, short of what the client allows."""
        return self.truncated and not self.at_client_limit

    @property
    def aborted(self) -> bool:
        """Stopped early by the proxy: a token fell under ``abort_min_token_prob``."""
        return self.finish_reason == ABORTED

    @property
    def out_of_time(self) -> bool:
        """Stopped by the proxy at a stream's first-token budget."""
        return self.finish_reason == OUT_OF_TIME

    @property
    def partial(self) -> bool:
        """Not a whole answer: cut at the draft budget, aborted or out of time."""
        return self.cut or self.aborted or self.out_of_time

    @property
    def mean_prob(self) -> float | None:
        return sum(t.p for t in self.tokens) / len(self.tokens) if self.tokens else None

    @property
    def min_prob(self) -> float | None:
        return min(t.p for t in self.tokens) if self.tokens else None


def top_k_entropy(logprobs: list[float]) -> float:
    """Entropy (nats) of the top-k candidates, renormalised to sum to one."""
    return _entropy([math.exp(lp) for lp in logprobs])


def _entropy(probs: list[float]) -> float:
    total = sum(probs)
    if total <= 0:
        return 0.0
    log_total = math.log(total)
    # -sum(q log q) with q = p / total, as sum(p (log total - log p)) / total
    return max(0.0, sum(p * (log_total - math.log(p)) for p in probs if p > 0) / total)


def entry_logprob(entry: Any) -> float | None:
    """A logprob entry's log probability, whichever way the upstream wrote it: ``logprob``,
    or ``prob`` (llama-server with ``post_sampling_probs``); clamped to at most 0; None
    when it has neither as a number (an upstream's odd value is never raised on)."""
    if not isinstance(entry, dict):
        return None
    value = entry.get("logprob")
    if _is_number(value):
        logprob = float(value)
    elif _is_number(prob := entry.get("prob")) and prob >= 0:
        logprob = math.log(prob) if prob > 0 else -math.inf
    else:
        return None
    return None if math.isnan(logprob) else min(logprob, 0.0)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def token_signals(logprobs_content: list[dict[str, Any]] | None) -> tuple[TokenSignal, ...]:
    """Per-token signals from OpenAI-shaped ``choices[0].logprobs.content``.

    Entries without text are left out: llama-server lists its end-of-generation
    token there, which is never part of the answer; so are entries whose probability
    cannot be read (``entry_logprob``).
    """
    signals = []
    for entry in logprobs_content or ():
        logprob = entry_logprob(entry)
        if not entry.get("token") or logprob is None:
            continue
        top = entry.get("top_logprobs") or entry.get("top_probs") or ()
        top_k = tuple(
            (c.get("id", c.get("token", "")), math.exp(lp))
            for c in top
            if (lp := entry_logprob(c)) is not None
        )
        signals.append(
            TokenSignal(
                text=str(entry["token"]),
                p=math.exp(logprob),
                entropy=_entropy([p for _, p in top_k]),
                token_id=entry.get("id"),
                top_k=top_k,
            )
        )
    return tuple(signals)


def draft_signals(
    body: dict[str, Any], budget: int, client_limit: int | None = None
) -> DraftSignals:
    """Signals of a non-streaming chat completion body drafted with ``budget`` tokens for a
    client that allows ``client_limit``."""
    choice = body["choices"][0]
    logprobs = choice.get("logprobs") or {}
    tokens = token_signals(logprobs.get("content"))
    usage = body.get("usage") or {}
    message = choice.get("message") or {}
    return DraftSignals(
        text=message.get("content") or "",
        n_tokens=int(usage.get("completion_tokens") or len(tokens)),
        budget=budget,
        finish_reason=choice.get("finish_reason"),
        tokens=tokens,
        tool_calls=tool_calls_of(message),
        client_limit=client_limit,
    )
