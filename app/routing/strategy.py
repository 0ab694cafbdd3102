"""Which strategy serves a request: header, then model name, then the default."""

from __future__ import annotations

from collections.abc import Sequence

from app.errors import InvalidRequest
from app.vocabulary import Strategy

ROUTING_HEADER = "x-routing-strategy"


def choose_strategy(
    *,
    header: str | None,
    model: str | None,
    default: Strategy,
    draft_model: str,
    verify_model: Sequence[str],
    speculation_enabled: bool,
    speculative_model: str = "speculative",
) -> Strategy:
    """The strategy for one request; an unknown header value is the client's error."""
    if header:
        try:
            chosen = Strategy(header.strip().lower())
        except ValueError:
            allowed = ", ".join(s.value for s in Strategy)
            raise InvalidRequest(
                f"X-Routing-Strategy '{header}' is not one of: {allowed}",
                param="X-Routing-Strategy",
            ) from None
    elif model == speculative_model:
        chosen = Strategy.SPECULATIVE
    elif model == draft_model:
        chosen = Strategy.LOCAL_ONLY
    elif model in verify_model:  # a chain's every verifier
        chosen = Strategy.CEREBRAS_ONLY
    else:
        chosen = default
    if chosen is Strategy.SPECULATIVE and not speculation_enabled:
        return Strategy.LOCAL_ONLY
    return chosen
