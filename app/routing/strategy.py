"""Which strategy serves a request: header, then model name, then the default."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

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


# what each kind of content is, in words every door's client reads (not chat's own names)
_WORDS = {"image_url": "images", "input_audio": "audio", "file": "files"}


class Unmet(NamedTuple):
    """A need of the request the local model cannot meet: the field that asks it, and
    what the model does not do."""

    field: str
    cannot: str

    def __str__(self) -> str:
        return f"{self.field}: the local model {self.cannot}"


def cannot_meet(needs: Mapping[str, str], local_can: frozenset[str] | None) -> Unmet | None:
    """The first of a request's ``needs`` (need -> the field that needs it) the local
    model cannot meet; None when it can meet them all (``local_can`` None: anything)."""
    if local_can is None:
        return None
    unmet = next((need for need in needs if need not in local_can), None)
    if unmet is None:
        return None
    if unmet == TOOL_CALLS:
        return Unmet(needs[unmet], "does not make tool calls (its chat template has none)")
    return Unmet(needs[unmet], f"does not read {_WORDS.get(unmet, unmet + ' content')}")


def for_local(
    strategy: Strategy, needs: Mapping[str, str], local_can: frozenset[str] | None
) -> tuple[Strategy, Unmet | None]:
    """The strategy for a request with ``needs`` beyond text (``ChatCompletionRequest.needs``),
    and the need that made it the cloud's (None: it stays as it was). One the local model
    cannot meet (``cannot_meet``) makes it the cloud's alone: a draft would be blind to an
    image (and llama-server answers it with a 500), or could never make the call demanded.
    Asked of the local model only, it is the client's 400."""
    if strategy is Strategy.CEREBRAS_ONLY or (unmet := cannot_meet(needs, local_can)) is None:
        return strategy, None
    if strategy is Strategy.LOCAL_ONLY:
        raise InvalidRequest(
            f"{unmet}; send it to the cloud (X-Routing-Strategy: cerebras_only)",
            param=unmet.field,
        )
    return Strategy.CEREBRAS_ONLY, unmet
