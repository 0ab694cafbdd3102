"""choose_strategy(): header beats model name beats the default."""

from __future__ import annotations

import pytest

from app.errors import InvalidRequest
from app.routing.strategy import choose_strategy
from app.vocabulary import Strategy


def choose(header=None, model=None, enabled=True, default=Strategy.SPECULATIVE) -> Strategy:
    return choose_strategy(
        header=header,
        model=model,
        default=default,
        draft_model="local",
        verify_model=["cerebras"],
        speculation_enabled=enabled,
    )


@pytest.mark.parametrize(
    ("header", "model", "expected"),
    [
        (None, None, Strategy.SPECULATIVE),
        (None, "gpt-4o", Strategy.SPECULATIVE),
        (None, "local", Strategy.LOCAL_ONLY),
        (None, "cerebras", Strategy.CEREBRAS_ONLY),
        (None, "speculative", Strategy.SPECULATIVE),
        ("cerebras_only", "local", Strategy.CEREBRAS_ONLY),
        ("local_only", "speculative", Strategy.LOCAL_ONLY),
        ("LOCAL_ONLY", None, Strategy.LOCAL_ONLY),
    ],
)
def test_choice(header, model, expected) -> None:
    assert choose(header, model) is expected


def test_disabled_speculation_drafts_only() -> None:
    assert choose(enabled=False) is Strategy.LOCAL_ONLY
    assert choose(model="speculative", enabled=False) is Strategy.LOCAL_ONLY


def test_the_speculative_model_name_wins_over_a_cloud_default() -> None:
    assert choose(model="speculative", default=Strategy.CEREBRAS_ONLY) is Strategy.SPECULATIVE


def test_unknown_header_is_the_clients_error() -> None:
    with pytest.raises(InvalidRequest, match="X-Routing-Strategy 'fastest'"):
        choose(header="fastest")
