"""What a learned scorer reads of the request itself, beside the draft. Pure.

Drafts alone do not say which questions a small model gets wrong; the question does
("how many letters are in X" against "what is the capital of X"). So the learner also
reads the request:

* its **words**: hashed word unigrams and bigrams, and each word's character trigrams, of
  the first 32 words of the last user message (and word unigrams of the system prompt),
  each a bucket index in ``0..buckets-1`` (CRC32, the same in every process and after a
  restart; no model to download, no vocabulary to keep). Words are hashed once and
  cached, so a request costs a few set updates;
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
_WORD_LIMIT = 32  # words of the message (and of the system prompt) read
_CHAR_LIMIT = 256  # characters of the message those words are looked for in
_CACHE_WORDS = 1 << 16  # words whose buckets are kept: traffic repeats its words
_WORDS_SEEN: dict[int, dict[str, tuple[int, frozenset[int]]]] = {}  # by bucket count
_TRIGRAM_CHARS = 24  # characters of a word whose trigrams are read
_MIX = 0x9E3779B1  # combines two word hashes into a bigram's
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """The shape features (by name) and the hashed n-gram buckets present (each once)."""

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
    """The distinct buckets (in no set order) of the user text's words, word bigrams and
    the character trigrams of each word, and the system text's words."""
    cache = _WORDS_SEEN.setdefault(buckets, {})
    if len(cache) >= _CACHE_WORDS:
        cache.clear()  # a flood of new words: start over rather than grow
    words = _WORDS.findall(user[:_CHAR_LIMIT].lower())[:_WORD_LIMIT]
    seen = [cache.get(w) or cache.setdefault(w, _word(w, buckets)) for w in words]
    found: set[int] = set().union(*(parts for _, parts in seen))
    hashes = [unigram for unigram, _ in seen]
    found.update(((a * _MIX) ^ b) % buckets for a, b in pairwise(hashes))
    if system:
        found.update(_system(system, buckets))
    return tuple(found)


def _word(word: str, buckets: int) -> tuple[int, frozenset[int]]:
    """A word's hash, and the buckets of the word and of its character trigrams (the word
    between spaces, so prefixes and suffixes count)."""
    unigram = zlib.crc32(f"w:{word}".encode())
    padded = f" {word[:_TRIGRAM_CHARS]} "
    grams = (zlib.crc32(f"c:{padded[i : i + 3]}".encode()) for i in range(len(padded) - 2))
    return unigram, frozenset({unigram % buckets, *(g % buckets for g in grams)})


@lru_cache(maxsize=256)
def _system(system: str, buckets: int) -> frozenset[int]:
    """The system prompt's word buckets (cached: a deployment has a few system prompts)."""
    words = _WORDS.findall(system.lower())[:_WORD_LIMIT]
    return frozenset(zlib.crc32(f"s:{w}".encode()) % buckets for w in words)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""
