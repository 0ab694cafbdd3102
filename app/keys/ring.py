"""The keys a proxy accepts, by their hashes: the plain ``server.api_keys`` and the named
``server.keys`` (docs/teams.md)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from app.config.keys import VirtualKeyConfig
from app.keys import Caller, configured_caller, key_hash, plain_caller


@dataclass(frozen=True, slots=True)
class KeyRing:
    """Every accepted key's SHA-256 with the caller it names. Empty: no auth, unless
    ``required`` (the admin API is on: no key, nobody served)."""

    entries: tuple[tuple[bytes, Caller], ...] = ()
    required: bool = False

    @classmethod
    def of(
        cls, plain: Iterable[bytes], named: Iterable[VirtualKeyConfig], required: bool = False
    ) -> KeyRing:
        entries = [(key_hash(k).encode(), plain_caller(k)) for k in plain]
        entries += [
            (key_hash(c.key.get_secret_value()).encode(), configured_caller(c)) for c in named
        ]
        return cls(tuple(entries), required)

    @property
    def empty(self) -> bool:
        """Whether no key is asked for."""
        return not self.entries and not self.required

    def find(self, presented: str) -> Caller | None:
        """The caller ``presented`` names, or None; compares with every entry in constant
        time (hashes, so the time says nothing of a key's length either)."""
        given = key_hash(presented).encode()
        found = None
        for digest, who in self.entries:
            if hmac.compare_digest(given, digest):
                found = who
        return found
