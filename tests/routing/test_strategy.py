"""choose_strategy(): header beats model name beats the default."""

from __future__ import annotations

import pytest

from app.errors import InvalidRequest
from app.routing.strategy import choose_strategy, for_local
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


IMAGE = {"image_url": "messages.0.content.1"}
AUDIO = {"input_audio": "messages.2.content.0"}
CALL = {"tool_calls": "tool_choice"}
S, L, C = Strategy.SPECULATIVE, Strategy.LOCAL_ONLY, Strategy.CEREBRAS_ONLY


@pytest.mark.parametrize(
    ("strategy", "needs", "can", "expected"),
    [
        (S, IMAGE, frozenset(), C),  # a blind draft: the cloud answers alone
        (S, IMAGE, frozenset({"image_url"}), S),  # a projector is loaded
        (S, IMAGE | AUDIO, frozenset({"image_url"}), C),  # one it cannot meet is enough
        (S, CALL, frozenset(), C),  # a call demanded of a template without tools
        (S, CALL, frozenset({"tool_calls"}), S),
        (S, IMAGE, None, S),  # not a llama-server: passed on as it is
        (C, IMAGE | CALL, frozenset(), C),
        (L, IMAGE, frozenset({"image_url"}), L),
        (L, {}, frozenset(), L),
    ],
)
def test_a_need_the_local_model_cannot_meet_is_the_clouds(strategy, needs, can, expected):
    assert for_local(strategy, needs, can)[0] is expected


@pytest.mark.parametrize(
    ("needs", "can", "param", "says"),
    [
        (
            IMAGE | AUDIO,
            frozenset({"image_url"}),
            "messages.2.content.0",
            "does not read audio",
        ),
        (CALL, frozenset({"image_url"}), "tool_choice", "does not make tool calls"),
    ],
)
def test_a_need_asked_of_the_local_model_alone_is_the_clients_400(needs, can, param, says) -> None:
    with pytest.raises(InvalidRequest) as refused:
        for_local(L, needs, can)
    assert refused.value.param == param
    assert says in str(refused.value)
