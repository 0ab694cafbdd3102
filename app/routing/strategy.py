"""Which strategy serves a request: header, then model name, then the default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.errors import InvalidRequest
from app.protocol import TOOL_CALLS
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


def for_local(
    strategy: Strategy, needs: Mapping[str, str], local_can: frozenset[str] | None
) -> Strategy:
    """The strategy for a request with ``needs`` beyond text (``ChatCompletionRequest.needs``:
    need -> the field that needs it). One the local model cannot meet (``local_can``;
    None: it can do anything asked) makes it the cloud's alone: a draft would be blind
    to an image (and llama-server answers it with a 500), or could never make the call
    demanded. Asked of the local model only, it is the client's 400."""
    if local_can is None or strategy is Strategy.CEREBRAS_ONLY:
        return strategy
    unmet = next((need for need in needs if need not in local_can), None)
    if unmet is None:
        return strategy
    if strategy is Strategy.LOCAL_ONLY:
        field = needs[unmet]
        cannot = (
            "does not make tool calls (its chat template has none)"
            if unmet == TOOL_CALLS
            else f"does not read {unmet} content"
        )
        raise InvalidRequest(
            f"{field}: the local model {cannot}; send it to the cloud "
            "(X-Routing-Strategy: cerebras_only)",
            param=field,
        )
    return Strategy.CEREBRAS_ONLY
