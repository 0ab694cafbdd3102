"""What the cache keeps of an answer, and which answers it keeps. Pure.

Only answers the cloud gave (spilled, verified and disagreed, hedged, the cloud when the
local model was down, a ``cerebras_only`` pass-through) or drafts the cloud agreed with
when it verified them (``verified_draft_used``): a local draft nobody checked is free to
make again and may be wrong; a degraded answer, an error, an answer cut at its token
limit (``finish_reason: length``: the limit may be the proxy's own cap) and a tool call
whose arguments are not a JSON object are never kept. An entry holds the whole answer as
the non-streamed completion body, the model that gave it, the question (the near hits'
fact guard reads it) and the cloud's token counts (a hit's baseline).
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from app.record import RequestRecord, Usage
from app.vocabulary import Outcome, Purpose, Strategy

# Outcomes whose answer the cloud gave or agreed with (pass-through: cerebras_only only).
VERIFIED = frozenset(
    {
        Outcome.SPILLED_OVER,
        Outcome.VERIFIED_DRAFT_USED,
        Outcome.LOCAL_DOWN_CLOUD_USED,
        Outcome.PASSED_THROUGH,
    }
)
_CLOUD_ANSWERS = frozenset(
    {Purpose.SPILL, Purpose.VERIFICATION, Purpose.HEDGE, Purpose.PASS_THROUGH}
)
_PROXY_FIELDS = ("model_used", "speculative_decoding")


class Entry(msgspec.Struct, frozen=True):
    """One kept answer: the completion body, the model that gave it, the question, and
    the cloud's own token counts for this request (``estimated``: it gave none)."""

    body: dict[str, Any]
    model_used: str
    question: str
    cloud_model: str
    prompt_tokens: int
    completion_tokens: int
    estimated: bool = False
    stored_at: float = 0.0  # wall clock, seconds
    key: str = ""  # the exact key it is kept under (an audit replaces it there)

    @property
    def text(self) -> str:
        """The answer's text (empty for a tool call alone)."""
        message = self.body["choices"][0].get("message") or {}
        return message.get("content") or ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Entry)


def encode(entry: Entry) -> bytes:
    """The entry as stored."""
    return _encoder.encode(entry)


def decode(data: bytes) -> Entry | None:
    """A stored entry; None for anything else under the cache's keys (another version's)."""
    try:
        entry = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return entry if _one_choice(entry.body) else None


def cloud_usage(rec: RequestRecord) -> Usage | None:
    """The cloud's call that answered this request in full (the baseline's counts)."""
    for usage in rec.usage:
        if usage.model != rec.draft_model and usage.purpose in _CLOUD_ANSWERS:
            return usage
    return None


def storable(rec: RequestRecord) -> bool:
    """Whether the request's record says its answer was a verified one."""
    if rec.outcome not in VERIFIED or rec.strategy is Strategy.LOCAL_ONLY:
        return False
    if rec.outcome is Outcome.PASSED_THROUGH and rec.strategy is not Strategy.CEREBRAS_ONLY:
        return False
    if rec.outcome is Outcome.VERIFIED_DRAFT_USED and rec.agreement is False:
        return False
    if rec.continued_by is not None:  # a broken stream's rest came from another upstream
        return False
    return cloud_usage(rec) is not None


def served_body(content: bytes) -> dict[str, Any] | None:
    """A whole answer's JSON as the client got it, the proxy's fields taken off; None
    when it is not one keepable choice."""
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    body = {k: v for k, v in body.items() if k not in _PROXY_FIELDS}
    return body if keepable(body) else None


def keepable(body: dict[str, Any]) -> bool:
    """One finished choice, not cut at its limit, its tool calls' arguments JSON objects."""
    if not _one_choice(body):
        return False
    choice = body["choices"][0]
    if choice.get("finish_reason") not in ("stop", "tool_calls", "function_call"):
        return False
    message = choice.get("message")
    if not isinstance(message, dict):
        return False
    for call in message.get("tool_calls") or ():
        try:
            arguments = orjson.loads((call.get("function") or {}).get("arguments") or "")
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return False
        if not isinstance(arguments, dict):
            return False
    return True


def _one_choice(body: Any) -> bool:
    choices = body.get("choices") if isinstance(body, dict) else None
    return isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
