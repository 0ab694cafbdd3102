"""Token-level acceptance of a verified draft: how far the verifier agrees. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_SPACES = re.compile(r"\s+")
_NEXT_PIECE = re.compile(r"\s?\w+|\s?[^\w\s]")


@dataclass(frozen=True, slots=True)
class Acceptance:
    """Seed 000's ``verify`` block: accepted prefix, first rejection, the verifier's text there."""

    n_drafted: int
    n_accepted: int
    rej_pos: int  # -1 when every draft token was accepted
    target: str | None  # the verifier's text at the rejection point (ids differ across tokenizers)


def _normalise(text: str) -> str:
    return _SPACES.sub(" ", text).lstrip()


def token_acceptance(draft_tokens: Sequence[str], verified: str) -> Acceptance:
    """Accept draft tokens in order while the verified text still starts with the draft so far.

    Whitespace is normalised on both sides (runs folded, leading dropped), so
    tokenizers that place spaces differently still agree.
    """
    target_text = _normalise(verified)
    prefix = ""
    for pos, token in enumerate(draft_tokens):
        extended = _normalise(prefix + token)
        if not target_text.startswith(extended):
            agreed = len(_normalise(prefix))
            piece = _NEXT_PIECE.match(target_text, agreed)
            return Acceptance(len(draft_tokens), pos, pos, piece.group(0) if piece else None)
        prefix += token
    return Acceptance(len(draft_tokens), len(draft_tokens), -1, None)
