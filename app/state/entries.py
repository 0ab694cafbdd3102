"""The other replicas' entries as read from Redis, validated at the boundary. Pure.

Redis is shared, so what is under the prefix is another process's word, not this one's
state: an entry that does not decode to the shape below (a string where a number
belongs, ``NaN``, a field missing) is skipped and counted, never adopted, as an odd
upstream answer is. What passes is then bounded by this replica's own configuration
and clock in ``app.state.fleet`` (``MAX_SKEW_S``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeVar

import msgspec

# Reset times beyond a day are not a rate window's (the day's is the longest).
_Count = Annotated[float, msgspec.Meta(ge=0)]
_Reset = Annotated[float, msgspec.Meta(ge=0, le=86400)]
T = TypeVar("T")


class CircuitEntry(msgspec.Struct, forbid_unknown_fields=False):
    """A replica's word on a circuit: open until this wall time (None: not open)."""

    open_until: float | None

    def __post_init__(self) -> None:
        _finite(self.open_until)


class BudgetEntry(msgspec.Struct, forbid_unknown_fields=False):
    """A replica's rate-budget numbers and the wall time it saw them."""

    seen_wall: float
    tokens: _Count | None = None
    requests: _Count | None = None
    tokens_limit: _Count | None = None
    requests_limit: _Count | None = None
    tokens_reset_s: _Reset | None = None
    requests_reset_s: _Reset | None = None

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            _finite(getattr(self, name))


def _finite(value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError("not a finite number")


def decode(raw: bytes | str, kind: type[T]) -> T | None:
    """The entry ``raw`` holds, or None when it is not one (malformed, odd or not JSON)."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError):
        return None


def as_dict(entry: Any) -> dict[str, Any]:
    """A validated entry as the fleet's rules read it."""
    return {name: getattr(entry, name) for name in entry.__struct_fields__}
