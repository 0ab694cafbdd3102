"""Which strategy serves a request: header, then model name, then the default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def for_content(
    strategy: Strategy, media: Mapping[str, str], local_reads: frozenset[str] | None
) -> Strategy:
    """The strategy for a request whose content includes ``media`` (kind -> where it first
    is): one the local model cannot read (``local_reads``; None: it reads anything) is the
    cloud's alone (a draft would be blind, and llama-server answers it with a 500), or,
    asked of the local model only, the client's 400."""
    if local_reads is None or strategy is Strategy.CEREBRAS_ONLY:
        return strategy
    unread = next((kind for kind in media if kind not in local_reads), None)
    if unread is None:
        return strategy
    if strategy is Strategy.LOCAL_ONLY:
        raise InvalidRequest(
            f"{media[unread]}: the local model does not read {unread} content; "
            "send it to the cloud (X-Routing-Strategy: cerebras_only)",
            param=media[unread],
        )
    return Strategy.CEREBRAS_ONLY
