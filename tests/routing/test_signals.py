"""Signals from llama-server's logprobs: probabilities, entropy, counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.signals import DraftSignals, draft_signals, top_k_entropy


def entry(token: str, p: float, alternatives: list[float]) -> dict:
    top = [{"id": 1, "token": token, "bytes": [], "logprob": math.log(p)}]
    top += [
        {"id": 2 + i, "token": f"alt{i}", "bytes": [], "logprob": math.log(q)}
        for i, q in enumerate(alternatives)
    ]
    return {"id": 1, "token": token, "bytes": [], "logprob": math.log(p), "top_logprobs": top}


def test_body_to_signals() -> None:
    body = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "Hi there"},
                "finish_reason": "length",
                "logprobs": {"content": [entry("Hi", 0.5, [0.5]), entry(" there", 1.0, [])]},
            }
        ],
        "usage": {"completion_tokens": 2},
    }
    s = draft_signals(body, budget=2)
    assert (s.text, s.n_tokens, s.budget, s.truncated) == ("Hi there", 2, 2, True)
    assert s.mean_prob == pytest.approx(0.75)
    assert s.min_prob == pytest.approx(0.5)
    assert s.tokens[0].entropy == pytest.approx(math.log(2))  # two equal candidates
    assert s.tokens[1].entropy == pytest.approx(0.0)
    assert s.tokens[0].token_id == 1


def test_missing_logprobs_gives_no_token_signals() -> None:
    body = {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}
    s = draft_signals(body, budget=10)
    assert s.tokens == () and s.mean_prob is None and s.n_tokens == 0


@given(st.lists(st.floats(-30, 0), min_size=1, max_size=20))
def test_entropy_bounded_by_log_k(logprobs: list[float]) -> None:
    assert 0.0 <= top_k_entropy(logprobs) <= math.log(len(logprobs)) + 1e-9


@pytest.mark.parametrize(
    ("finish", "client_limit", "cut", "partial"),
    [
        ("length", None, True, True),  # no limit of its own: the proxy's budget cut it
        ("length", 11, True, True),  # the client allows more than the draft's 10
        ("length", 10, False, False),  # the client's own limit: as whole as the cloud's
        ("length", 4, False, False),
        ("stop", None, False, False),
    ],
)
def test_a_draft_stopped_at_the_clients_own_limit_is_whole(
    finish: str, client_limit: int | None, cut: bool, partial: bool
) -> None:
    s = DraftSignals("x", 10, 10, finish, client_limit=client_limit)
    assert (s.cut, s.partial, s.truncated) == (cut, partial, finish == "length")


def test_a_length_short_of_the_clients_limit_is_the_servers_own_cap() -> None:
    """llama-server also says ``length`` when its context is full: 6 of the 10 the client
    allows is not a whole answer."""
    s = DraftSignals("x", 6, 10, "length", client_limit=10)
    assert s.cut and s.partial and not s.at_client_limit
