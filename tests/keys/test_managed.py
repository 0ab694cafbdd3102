"""Managed keys as stored and as seen: the admin API's settings are server.keys' but the
key; a stored key never holds its key; what Redis hands back is validated; the view's
ring finds managed keys beside the configured ones."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from app.config.keys import VirtualKeyConfig
from app.keys import key_hash
from app.keys.managed import (
    KeySettings,
    StoredKey,
    caller_of,
    decode,
    encode,
    made,
    rotated,
    shown,
)
from app.keys.registry import KeyView
from app.keys.ring import KeyRing
from app.vocabulary import Strategy

SETTINGS: dict[str, Any] = {
    "name": "search",
    "team": "retrieval",
    "budget_usd_day": 2.5,
    "rpm": 10,
    "strategies": ["local_only"],
    "on_budget": "local",
}


def test_the_admin_settings_are_server_keys_fields_but_the_key() -> None:
    mine, theirs = KeySettings.model_fields, VirtualKeyConfig.model_fields
    assert set(mine) == set(theirs) - {"key"}
    for name, field in mine.items():
        assert (field.annotation, field.description) == (
            theirs[name].annotation,
            theirs[name].description,
        )


def test_a_made_key_is_stored_by_its_hash_and_names_its_caller() -> None:
    stored, key = made(KeySettings.model_validate(SETTINGS), 1000.0)
    assert key.startswith("sk-sp-") and stored.hash == key_hash(key)
    assert key not in encode(stored).decode() and "hash" not in shown(stored)
    who = caller_of(stored)
    assert (who.key_id, who.name, who.team) == (stored.id, "search", "retrieval")
    assert who.policy.rpm == 10 and who.policy.budget_usd_day == 2.5
    assert who.policy.strategies == frozenset({Strategy.LOCAL_ONLY})
    assert who.policy.on_budget == "local"
    again, new = rotated(stored, 2000.0)
    assert (again.id, again.settings, again.created_at) == (stored.id, stored.settings, 1000.0)
    assert again.hash == key_hash(new) != stored.hash and again.rotated_at == 2000.0
    assert decode(encode(again)) == again


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    field=st.sampled_from(["id", "hash", "created_at", "rotated_at", "settings"]),
    value=st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=70)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.sampled_from(["name", "rpm", "on_budget", "x"]), st.integers()),
)
def test_an_odd_stored_entry_is_refused_never_raised(field: str, value: Any) -> None:
    stored, _ = made(KeySettings.model_validate(SETTINGS), 1000.0)
    entry = msgspec.to_builtins(stored)
    entry[field] = value
    try:
        raw = msgspec.json.encode(entry)
    except (OverflowError, TypeError, msgspec.EncodeError):
        return
    got = decode(raw)
    if got is not None:  # then it is a key the admin API could have made
        assert len(got.hash) == 64 and got.id.startswith("key_")
        KeySettings.model_validate(got.settings)


@given(st.binary(max_size=200))
@settings(max_examples=200, deadline=None, derandomize=True, database=None)
def test_any_bytes_decode_to_a_key_or_to_none(raw: bytes) -> None:
    assert decode(raw) is None or isinstance(decode(raw), StoredKey)


def test_the_view_joins_the_configured_ring_and_rebuilds_only_on_change() -> None:
    config = VirtualKeyConfig(name="team", key=SecretStr("sk-team"))
    base = KeyRing.of([], [config])
    view = KeyView()
    assert view.joined(base) is base  # no managed key: the configured ring as it is
    stored, key = made(KeySettings.model_validate({"name": "bot"}), 1.0)
    view.set(stored)
    both = view.joined(base)
    assert both is view.joined(base)  # nothing changed: the same ring
    assert both.find(key) == caller_of(stored) and both.find("sk-team") is not None
    assert both.find("sk-sp-other") is None
    view.drop(stored.id)
    assert view.joined(base).find(key) is None
    view.reset({stored.id: stored})
    assert view.joined(base).find(key) is not None and len(view) == 1


def test_with_the_admin_api_on_an_empty_ring_still_asks_for_a_key() -> None:
    assert KeyRing.of([], []).empty
    required = KeyRing.of([], [], required=True)
    assert not required.empty and required.find("") is None
    view = KeyView()
    stored, _ = made(KeySettings.model_validate({"name": "bot"}), 1.0)
    view.set(stored)
    assert view.joined(required).required and not view.joined(KeyRing()).empty
