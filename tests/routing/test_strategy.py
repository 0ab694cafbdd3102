"""choose_strategy(): header beats model name beats the default."""

from __future__ import annotations

import pytest

from app.errors import InvalidRequest
from app.routing.strategy import choose_strategy, for_content
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
S, L, C = Strategy.SPECULATIVE, Strategy.LOCAL_ONLY, Strategy.CEREBRAS_ONLY


@pytest.mark.parametrize(
    ("strategy", "media", "reads", "expected"),
    [
        (S, IMAGE, frozenset(), C),  # a blind draft: the cloud answers alone
        (S, IMAGE, frozenset({"image_url"}), S),  # a projector is loaded
        (S, IMAGE | AUDIO, frozenset({"image_url"}), C),  # one kind it cannot read is enough
        (S, IMAGE, None, S),  # not a llama-server: passed on as it is
        (C, IMAGE, frozenset(), C),
        (L, IMAGE, frozenset({"image_url"}), L),
        (L, {}, frozenset(), L),
    ],
)
def test_content_the_local_model_cannot_read_is_the_clouds(strategy, media, reads, expected):
    assert for_content(strategy, media, reads) is expected


def test_content_the_local_model_cannot_read_asked_of_it_alone_is_the_clients_400() -> None:
    with pytest.raises(InvalidRequest) as refused:
        for_content(L, IMAGE | AUDIO, frozenset({"image_url"}))
    assert refused.value.param == "messages.2.content.0"
    assert "does not read input_audio" in str(refused.value)
