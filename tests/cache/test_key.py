"""The cache's keys: the fields that change the answer, scoped to the hashed client key,
never the key or the prompt in the clear, and no body breaks them."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cache.key import ANONYMOUS, keys_of, scope_of

ASK: dict[str, Any] = {
    "model": "speculative",
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "temperature": 0,
}


def exact(body: dict[str, Any], scope: str = ANONYMOUS) -> str:
    keys = keys_of(body, scope, near=True)
    assert keys is not None
    return keys.exact


def test_scope_is_the_hash_of_the_bearer_token() -> None:
    assert scope_of("Bearer sk-a") == hashlib.sha256(b"sk-a").hexdigest()
    assert scope_of(None) == scope_of("") == scope_of("Basic x") == ANONYMOUS
    assert scope_of("Bearer sk-a") != scope_of("Bearer sk-b")


def test_a_key_in_another_scope_is_another_key() -> None:
    a, b = scope_of("Bearer sk-a"), scope_of("Bearer sk-b")
    assert exact(ASK, a) != exact(ASK, b) != exact(ASK)
    near_a, near_b = keys_of(ASK, a, near=True), keys_of(ASK, b, near=True)
    assert near_a is not None and near_b is not None and near_a.near != near_b.near


def test_what_does_not_change_the_answer_is_left_out() -> None:
    same = {**ASK, "stream": True, "stream_options": {"include_usage": True}, "user": "u1"}
    assert exact(same) == exact(ASK)
    assert exact({**ASK, "temperature": 0.0}) == exact(ASK)  # 0.0 is 0
    assert exact(dict(reversed(list(ASK.items())))) == exact(ASK)  # order aside


def test_what_changes_the_answer_changes_the_key() -> None:
    changes: list[dict[str, Any]] = [
        {"temperature": 0.7},
        {"top_p": 0.5},
        {"max_tokens": 5},
        {"seed": 1},
        {"stop": ["\n"]},
        {"n": 2},
        {"logprobs": True},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "required"},
        {"response_format": {"type": "json_object"}},
        {"model": "cerebras"},
        {"some_new_sampling_field": 1},  # unknown: kept, it may change the answer
        {"messages": [{"role": "user", "content": "What is the capital of Spain?"}]},
    ]
    keys = {exact({**ASK, **change}) for change in changes}
    assert len(keys) == len(changes) and exact(ASK) not in keys


def test_near_key_joins_case_and_spacing_only() -> None:
    base = keys_of(ASK, ANONYMOUS, near=True)
    loud = {**ASK, "messages": [{"role": "user", "content": "  WHAT is the capital of france"}]}
    other = {**ASK, "messages": [{"role": "user", "content": "What is the capital of Spain?"}]}
    loud_keys, other_keys = (
        keys_of(loud, ANONYMOUS, near=True),
        keys_of(other, ANONYMOUS, near=True),
    )
    assert base is not None and loud_keys is not None and other_keys is not None
    assert loud_keys.exact != base.exact and loud_keys.near == base.near
    assert other_keys.near != base.near
    assert keys_of(ASK, ANONYMOUS, near=False).near is None  # type: ignore[union-attr]


def test_only_the_question_is_normalized_the_conversation_must_match() -> None:
    def convo(earlier: str, question: str) -> Any:
        messages = [
            {"role": "system", "content": earlier},
            {"role": "user", "content": "First question?"},
            {"role": "assistant", "content": "First answer."},
            {"role": "user", "content": question},
        ]
        return keys_of({**ASK, "messages": messages}, ANONYMOUS, near=True)

    base = convo("Be brief.", "And the capital of Spain?")
    assert convo("Be brief.", "and the CAPITAL of spain").near == base.near
    assert convo("be brief.", "And the capital of Spain?").near != base.near
    assert base.question == "And the capital of Spain?"


def test_keys_never_hold_the_key_or_the_prompt() -> None:
    keys = keys_of(ASK, scope_of("Bearer sk-secret-123"), near=True)
    assert keys is not None
    for key in (keys.exact, keys.near):
        assert key is not None and len(key) == 64 and int(key, 16) >= 0
        assert "secret" not in key and "France" not in key


JSONS = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=200)
@given(st.dictionaries(st.text(), JSONS, max_size=6), JSONS)
def test_any_body_gives_keys_or_none_never_an_error(body: dict[str, Any], messages: Any) -> None:
    result = keys_of({**body, "messages": messages}, "s", near=True)
    assert result is None or len(result.exact) == 64


def test_hostile_bodies() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    assert keys_of({"messages": deep}, "s", near=True) is None  # too deep to write: not cached
    huge = {"messages": [{"role": "user", "content": "a " * 2_000_000}]}
    assert keys_of(huge, "s", near=True) is not None
    odd = orjson.loads('{"messages": [{"role": "user", "content": "nul \\u0000 \\u202e"}]}')
    assert keys_of(odd, "s", near=True) is not None
    lone = {"messages": [{"role": "user", "content": "\ud800"}]}  # JSON cannot bring one
    assert keys_of(lone, "s", near=True) is None
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}, "x", None]}]}
    assert keys_of(parts, "s", near=True) is not None


def test_cache_control_and_scope_from_the_headers() -> None:
    from app.cache import CacheAsk

    plain = CacheAsk.of({"authorization": "Bearer sk-a"})
    assert (plain.scope, plain.read, plain.store) == (scope_of("Bearer sk-a"), True, True)
    no_cache = CacheAsk.of({"cache-control": "max-age=0, No-Cache"})
    assert (no_cache.scope, no_cache.read, no_cache.store) == (ANONYMOUS, False, True)
    no_store = CacheAsk.of({"cache-control": "no-store"})
    assert (no_store.read, no_store.store) == (False, False)
