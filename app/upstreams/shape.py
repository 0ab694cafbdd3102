"""The shape an upstream's answer must have before the proxy reads it.

An answer that parses as JSON but breaks OpenAI's documented shape (a choice that is
not an object, a null message, a content that is not text, a usage count that is not a
number, logprobs that are not an object) is that upstream's protocol failure. It is
found here, once, at the boundary, so the request path reads the fields it needs
without guarding every access, and a broken upstream takes the normal fallback
instead of costing the client a 500. Pure functions: a problem's description, or None.
"""

from __future__ import annotations

from typing import Any

_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def completion_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a non-streaming chat completion body, or None."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "answer has no choices"
    choice = choices[0]
    if not isinstance(choice, dict):
        return "choices[0] is not an object"
    message = choice.get("message")
    if not isinstance(message, dict):
        return "choices[0].message is not an object"
    return (
        _message_problem(message, "choices[0].message")
        or _choice_problem(choice, "choices[0]")
        or _usage_problem(data.get("usage"))
    )


def chunk_problem(data: dict[str, Any]) -> str | None:
    """What is wrong with a stream chunk, or None."""
    choices = data.get("choices")
    if choices is None:
        return _usage_problem(data.get("usage"))
    if not isinstance(choices, list):
        return "chunk choices is not a list"
    for i, choice in enumerate(choices):
        where = f"chunk choices[{i}]"
        if not isinstance(choice, dict):
            return f"{where} is not an object"
        delta = choice.get("delta")
        if delta is not None and not isinstance(delta, dict):
            return f"{where}.delta is not an object"
        if problem := _message_problem(delta or {}, f"{where}.delta") or _choice_problem(
            choice, where
        ):
            return problem
    return _usage_problem(data.get("usage"))


def _message_problem(message: dict[str, Any], where: str) -> str | None:
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return f"{where}.content is not text"
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return f"{where}.tool_calls is not a list"
    return None


def _choice_problem(choice: dict[str, Any], where: str) -> str | None:
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        return f"{where}.finish_reason is not text"
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return None
    if not isinstance(logprobs, dict):
        return f"{where}.logprobs is not an object"
    entries = logprobs.get("content")
    if entries is not None and (
        not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries)
    ):
        return f"{where}.logprobs.content is not a list of objects"
    return None


def _usage_problem(usage: Any) -> str | None:
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return "usage is not an object"
    for key in _COUNTS:
        value = usage.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            return f"usage.{key} is not a count"
    return None
