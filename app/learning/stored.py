"""A stored scorer read back (``scorer.json``, or the fleet's in Redis), checked at the
boundary like an upstream's answer: its ``version`` and ``fitted_on`` are another
process's (or a hand's) word, so an odd one (null, a string, ``1e400``) makes the stored
scorer unreadable, and the learner keeps its prior instead of failing to start."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import msgspec

from app.routing.scorer import Scorer

log = logging.getLogger("specproxy.learning")

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _Fitted(msgspec.Struct):
    """What the learner reads of ``fitted_on`` (other keys, such as ``logs``, are kept)."""

    labels: _Count = 0
    holdout: _Count | None = None
    auroc_holdout: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class _Stored(msgspec.Struct):
    version: _Count = 0
    fitted_on: _Fitted | None = None


def stored_scorer(data: Any) -> tuple[Scorer, int]:
    """The scorer and version a stored JSON object holds; ValueError naming what is odd."""
    try:
        envelope = msgspec.convert(data, _Stored)
    except msgspec.ValidationError as exc:
        raise ValueError(f"not a stored scorer: {exc}") from None
    return Scorer.from_mapping(data), envelope.version


def skipped(where: object, reason: object) -> None:
    """Say once per read that a stored scorer was unreadable and the prior serves."""
    log.warning("learning: the scorer in %s is unreadable (%s); the prior serves", where, reason)
