"""What a learned scorer reads of the request itself, beside the draft. Pure.

Drafts alone do not say which questions a small model gets wrong; the question does
("how many letters are in X" against "what is the capital of X"). So the learner also
reads the request:

* its **words**: hashed word unigrams and bigrams, and character trigrams, of the last
  user message (and word unigrams of the system prompt), each a bucket index in
  ``0..buckets-1`` (CRC32, the same in every process and after a restart; no model to
  download, no vocabulary to keep);
* its **shape**: tools, a response format, the client's ``max_tokens``, the turns.

The n-grams are indices, not words: they go to the speculation log (``ngrams``) so a
scorer can be fitted offline from it, and reveal nothing readable of the prompt.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Any

SHAPE_FEATURES: tuple[str, ...] = (
    "req_tools",
    "req_format",
    "req_log_max_tokens",
    "req_log_turns",
    "req_system",
)
BUCKETS = 1024  # hashed n-gram buckets
_CHAR_LIMIT = 160  # characters of the message whose trigrams are read
_WORD_LIMIT = 64  # words of the message (and of the system prompt) read
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """The shape features (by name) and the hashed n-gram buckets present (sorted, once)."""

    shape: dict[str, float]
    ngrams: tuple[int, ...]


def request_features(raw: Mapping[str, Any], buckets: int = BUCKETS) -> RequestFeatures:
    """The request's shape and hashed n-grams (see the module doc)."""
    messages = raw.get("messages") or []
    user, system = "", ""
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "user":
            user = _text(message.get("content"))
        elif message.get("role") in ("system", "developer") and not system:
            system = _text(message.get("content"))
    limit = raw.get("max_completion_tokens") or raw.get("max_tokens")
    shape = {
        "req_tools": float(bool(raw.get("tools"))),
        "req_format": float(bool(raw.get("response_format"))),
        "req_log_max_tokens": math.log1p(limit) if isinstance(limit, int) and limit > 0 else 0.0,
        "req_log_turns": math.log1p(len(messages)),
        "req_system": float(bool(system)),
    }
    return RequestFeatures(shape, ngrams(user, system, buckets))


def ngrams(user: str, system: str = "", buckets: int = BUCKETS) -> tuple[int, ...]:
    """The sorted, distinct buckets of the user text's word 1- and 2-grams and character
    trigrams, and the system text's words."""
    words = _WORDS.findall(user.lower())[:_WORD_LIMIT]
    grams = [f"w:{w}" for w in words]
    grams += [f"b:{a} {b}" for a, b in pairwise(words)]
    text = " ".join(words)[:_CHAR_LIMIT]
    grams += [f"c:{text[i : i + 3]}" for i in range(len(text) - 2)]
    grams += [f"s:{w}" for w in _WORDS.findall(system.lower())[:_WORD_LIMIT]]
    return tuple(sorted({_bucket(g) % buckets for g in grams}))


@lru_cache(maxsize=1 << 16)
def _bucket(gram: str) -> int:
    """CRC32 of the n-gram (cached: traffic repeats most of its n-grams)."""
    return zlib.crc32(gram.encode())


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""
