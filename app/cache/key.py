"""The cache's keys: a request's canonical form, scoped to the client's API key, hashed. Pure.

The canonical form is the request's JSON with what does not change the answer left out
(``stream``, ``stream_options``, ``user``, ``metadata``, ``store``) and everything else
kept: messages, tools, tool_choice, response_format, the model and every sampling field
(temperature, top_p, max_tokens, seed, stop, n, logprobs, a field the proxy does not
know). Keys are sorted and an integral float is written as an int (``temperature: 1.0``
is ``1``). The near form is the same with the question, the last user message's text,
normalized (``guard.normalize``; the conversation before it must be the same to the
letter, and a long one is not normalized on every request). Each is hashed with the
client's scope, the SHA-256 of its bearer token (no token: one shared anonymous scope),
so neither the key nor the prompt ever appears in a key name, and a tenant's entries are
never another's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from app.cache.guard import normalize

NOT_THE_ANSWER = frozenset({"stream", "stream_options", "user", "metadata", "store"})
ANONYMOUS = "anonymous"


def scope_of(authorization: str | None) -> str:
    """The client's scope: the SHA-256 of its bearer token, or the anonymous scope."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return ANONYMOUS
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Keys:
    """A request's exact key, its near key (None: near hits off), and its question text
    (what the fact guard reads)."""

    exact: str
    near: str | None
    question: str


def keys_of(raw: Mapping[str, Any], scope: str, *, near: bool) -> Keys | None:
    """The request's keys in ``scope``; None when it cannot be keyed (a body orjson cannot
    write back, nested too deep): such a request is simply not cached."""
    try:
        exact_form = canonical(raw)
        near_form = canonical({**raw, "messages": _normalized(raw.get("messages"))})
        question = "\n".join(_texts(_last_user(raw.get("messages"))))
        return Keys(
            exact=_digest(scope, b"exact", exact_form),
            near=_digest(scope, b"near", near_form) if near else None,
            question=question,
        )
    except (TypeError, ValueError, RecursionError):
        return None


def canonical(raw: Mapping[str, Any]) -> bytes:
    """The request's answer-changing fields as sorted JSON."""
    kept = {k: _plain(v) for k, v in raw.items() if k not in NOT_THE_ANSWER}
    return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)


def _digest(scope: str, kind: bytes, form: bytes) -> str:
    return hashlib.sha256(scope.encode() + b"\0" + kind + b"\0" + form).hexdigest()


def _plain(value: Any) -> Any:
    """An integral float as an int, inside lists and objects too."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _last_user(messages: Any) -> list[Any]:
    """The last user message, as a list of one (none: empty)."""
    if not isinstance(messages, list):
        return []
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1:]


def _normalized(messages: Any) -> Any:
    """Messages with the last user message's text normalized (its other parts, and every
    other message, as they are)."""
    if not isinstance(messages, list):
        return messages
    last = next(iter(_last_user(messages)), None)
    out = []
    for message in messages:
        if message is last and isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str):
                message = {**message, "content": normalize(content)}
            elif isinstance(content, list):
                parts = [
                    {**p, "text": normalize(p["text"])}
                    if isinstance(p, dict) and isinstance(p.get("text"), str)
                    else p
                    for p in content
                ]
                message = {**message, "content": parts}
        out.append(message)
    return out


def _texts(messages: Any) -> list[str]:
    """Every text of the messages, in order (the fact guard's input)."""
    texts: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p["text"] for p in content if isinstance(p, dict) and "text" in p]
    return [t for t in texts if isinstance(t, str)]
