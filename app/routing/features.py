"""The numbers a scored routing policy reads from a draft. Pure.

One flat vector per draft, the same in the proxy, the speculation log and the evaluation
harness, so a scorer fitted on the harness's records scores live traffic the same way and
``specproxy calibrate`` can rescore logged traffic. Every feature is defined for every draft
(an empty draft has no tokens: its token features are those of full confidence, and its
length features say it is empty).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from app.routing.signals import DraftSignals, TokenSignal
from app.vocabulary import ContextType

# Token log-probabilities below this are clamped: p = 1e-9 and p = 1e-30 mean the same here.
_LOGP_FLOOR = math.log(1e-9)

LOGPROB_FEATURES: tuple[str, ...] = (
    "mean_logp",
    "min_logp",
    "mean_entropy",
    "max_entropy",
    "mean_margin",
    "min_margin",
)
FEATURES: tuple[str, ...] = (
    *LOGPROB_FEATURES,
    "log_tokens",
    "log_chars",
    "repetition",
    "marker",
    "ctx_code",
    "ctx_math",
    "ctx_json",
    "ctx_list",
)


def token_margin(token: TokenSignal) -> float:
    """Top-1 minus top-2 probability among the token's candidates (top-1 alone: its p)."""
    probs = sorted((p for _, p in token.top_k), reverse=True)
    if not probs:
        return token.p
    return probs[0] - (probs[1] if len(probs) > 1 else 0.0)


def repetition(text: str) -> float:
    """Share of the text's word bigrams that already appeared in it: a small model that has
    lost its way often loops ("la femme au martyre, la femme au martyre")."""
    words = text.lower().split()
    bigrams = list(pairwise(words))
    return 1.0 - len(set(bigrams)) / len(bigrams) if bigrams else 0.0


def hedged(text: str, markers: Sequence[str]) -> bool:
    """Whether the text carries one of the uncertainty markers (case-insensitive)."""
    lowered = text.lower()
    return any(m.lower() in lowered for m in markers)


def draft_features(
    signals: DraftSignals, *, markers: Sequence[str], context_type: ContextType | str
) -> dict[str, float]:
    """The feature vector of one draft, keyed by the names in ``FEATURES``."""
    tokens = signals.tokens
    logps = [max(math.log(t.p), _LOGP_FLOOR) if t.p > 0 else _LOGP_FLOOR for t in tokens]
    entropies = [t.entropy for t in tokens]
    margins = [token_margin(t) for t in tokens]
    n = len(tokens)
    context = str(context_type)
    return {
        "mean_logp": math.fsum(logps) / n if n else 0.0,
        "min_logp": min(logps, default=0.0),
        "mean_entropy": math.fsum(entropies) / n if n else 0.0,
        "max_entropy": max(entropies, default=0.0),
        "mean_margin": math.fsum(margins) / n if n else 1.0,
        "min_margin": min(margins, default=1.0),
        "log_tokens": math.log1p(signals.n_tokens),
        "log_chars": math.log1p(len(signals.text.strip())),
        "repetition": repetition(signals.text),
        "marker": float(hedged(signals.text, markers)),
        "ctx_code": float(context == ContextType.CODE),
        "ctx_math": float(context == ContextType.MATH),
        "ctx_json": float(context == ContextType.JSON),
        "ctx_list": float(context == ContextType.LIST),
    }
