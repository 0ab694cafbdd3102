"""The keys a proxy accepts, by their hashes: the plain ``server.api_keys``, the named
``server.keys`` and the managed ones (``app.keys.registry``; docs/teams.md)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.config.keys import VirtualKeyConfig
from app.keys import Caller, configured_caller, key_hash, plain_caller


@dataclass(frozen=True, slots=True)
class KeyRing:
    """Every accepted key's SHA-256 with the caller it names. Empty: no auth, unless
    ``required`` (the admin API is on: no key, nobody served)."""

    entries: tuple[tuple[bytes, Caller], ...] = ()
    required: bool = False
    _by_hash: dict[bytes, tuple[bytes, Caller]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The last entry of a hash wins, as the scan over every entry did.
        object.__setattr__(
            self, "_by_hash", {digest: (digest, who) for digest, who in self.entries}
        )

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
        """The caller ``presented`` names, or None. The presented key is hashed first and
        looked up by its hash, then compared in constant time with the one found (with a
        stand-in when none is): the time depends neither on how near the key comes to an
        accepted one, nor on its length, nor on how many keys there are (a scan of every
        entry took 170 us a request with 1000 managed keys: bench.keys_lookup)."""
        given = key_hash(presented).encode()
        digest, who = self._by_hash.get(given, (None, None))
        same = hmac.compare_digest(given, digest if digest is not None else _NOBODY)
        return who if same else None


_NOBODY = b"-" * 64  # no SHA-256 in hex: the compare made when no entry has the hash
