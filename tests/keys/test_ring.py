"""The key ring: a presented key names its caller; a wrong one names nobody."""

from __future__ import annotations

from pydantic import SecretStr

from app.config.keys import VirtualKeyConfig
from app.keys import key_hash
from app.keys.ring import KeyRing
from app.vocabulary import Strategy


def test_a_named_key_names_its_caller_with_team_and_policy() -> None:
    named = VirtualKeyConfig(
        name="search",
        key=SecretStr("sk-search"),
        team="retrieval",
        rpm=10,
        strategies=[Strategy.LOCAL_ONLY],
        on_budget="local",
    )
    ring = KeyRing.of([b"sk-plain"], [named])
    who = ring.find("sk-search")
    assert who is not None
    assert (who.key_id, who.name, who.team) == ("search", "search", "retrieval")
    assert who.policy.rpm == 10 and who.policy.on_budget == "local"
    assert who.policy.strategies == frozenset({Strategy.LOCAL_ONLY})


def test_a_plain_key_is_named_by_its_hash_and_never_by_itself() -> None:
    who = KeyRing.of([b"sk-plain"], []).find("sk-plain")
    assert who is not None
    assert who.name == f"key-{key_hash('sk-plain')[:12]}"
    assert "sk-plain" not in repr(who)


def test_an_unknown_or_empty_key_names_nobody() -> None:
    ring = KeyRing.of([b"sk-plain"], [])
    assert ring.find("sk-plai") is None
    assert ring.find("") is None
    assert KeyRing().empty and not ring.empty
