"""Keys made through the admin API (``/admin/keys``), as stored and as shown. Pure.

A managed key is kept as its SHA-256 (``key_hash``) with its settings, never as itself:
the key is made here, shown once in the answer that made it, and forgotten. Its settings
are ``server.keys``' fields (``VirtualKeyConfig``) but ``key``: ``KeySettings`` is that
model derived without it, so a field added to one is taken by the other. What comes back
from Redis is another process's word: ``decode`` validates it as config is validated.
"""

from __future__ import annotations

import re
import secrets
from typing import Annotated, Any, cast

import msgspec
from pydantic import BaseModel, SecretStr, ValidationError, create_model

from app.config.keys import VirtualKeyConfig
from app.config.strict import Strict
from app.keys import Caller, KeyPolicy, key_hash

KEY_PREFIX = "sk-sp-"  # what a managed key starts with (a leak scanner can look for it)
ID_PREFIX = "key_"
_HASH = re.compile(r"[0-9a-f]{64}")
_Time = Annotated[float, msgspec.Meta(ge=0, le=1e11)]  # a wall time, in seconds

# ``server.keys``' fields but ``key``: what ``POST /admin/keys`` takes.
KeySettings: type[Strict] = create_model(  # type: ignore[call-overload]
    "KeySettings",
    __base__=Strict,
    __doc__="A managed key's settings: a ``server.keys`` entry without its key.",
    **{
        name: (field.annotation, field)
        for name, field in VirtualKeyConfig.model_fields.items()
        if name != "key"
    },
)


class StoredKey(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """A managed key as stored: its id, its key's hash, when, and its settings (JSON)."""

    id: str
    hash: str
    created_at: _Time
    rotated_at: _Time | None
    settings: dict[str, Any]


def new_key() -> str:
    """A fresh key: ``sk-sp-`` and 256 random bits."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def new_id() -> str:
    """A fresh key id (shown, listed, logged: never the key)."""
    return ID_PREFIX + secrets.token_hex(8)


def made(settings: BaseModel, now: float) -> tuple[StoredKey, str]:
    """A new key with these settings: what is stored, and the key (to be shown once)."""
    key = new_key()
    stored = StoredKey(
        id=new_id(),
        hash=key_hash(key),
        created_at=now,
        rotated_at=None,
        settings=settings.model_dump(mode="json"),
    )
    return stored, key


def rotated(stored: StoredKey, now: float) -> tuple[StoredKey, str]:
    """The same key id with a new key (the old one no longer names it), and the new key."""
    key = new_key()
    return msgspec.structs.replace(stored, hash=key_hash(key), rotated_at=now), key


def settings_of(stored: StoredKey) -> VirtualKeyConfig:
    """A stored key's settings as ``server.keys`` reads them (no key: it is not kept)."""
    fields = cast(Any, KeySettings).model_validate(stored.settings).model_dump()
    return VirtualKeyConfig.model_construct(key=SecretStr(""), **fields)


def caller_of(stored: StoredKey) -> Caller:
    """Who a request with this key is: its id, name, team and policy."""
    config = settings_of(stored)
    return Caller(key_id=stored.id, name=config.name, team=config.team, policy=KeyPolicy.of(config))


def shown(stored: StoredKey) -> dict[str, Any]:
    """A managed key as the admin API shows it: everything but its key and hash."""
    return {
        "id": stored.id,
        "object": "key",
        "managed": True,
        **stored.settings,
        "created_at": int(stored.created_at),
        "rotated_at": int(stored.rotated_at) if stored.rotated_at is not None else None,
    }


def shown_config(config: VirtualKeyConfig) -> dict[str, Any]:
    """A ``server.keys`` entry as the admin API lists it (read-only: its id is its name)."""
    settings = config.model_dump(mode="json", exclude={"key"})
    return {"id": config.name, "object": "key", "managed": False, **settings}


def encode(stored: StoredKey) -> bytes:
    return msgspec.json.encode(stored)


def decode(raw: bytes | str) -> StoredKey | None:
    """The stored key ``raw`` holds, or None when it is not one: not JSON, a field
    missing or ill-typed, a hash that is not a SHA-256, settings the admin API would
    refuse (``KeySettings``)."""
    try:
        stored = msgspec.json.decode(raw, type=StoredKey)
        cast(Any, KeySettings).model_validate(stored.settings)
    except (msgspec.DecodeError, msgspec.ValidationError, ValidationError, TypeError):
        return None
    if not _HASH.fullmatch(stored.hash) or not stored.id.startswith(ID_PREFIX):
        return None
    return stored
