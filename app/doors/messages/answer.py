"""A chat completion as a Message: text and tool_use blocks, the stop reason, usage."""

from __future__ import annotations

import os
from typing import Any

import orjson

from app.doors.messages.ids import tool_use_id

JSON = dict[str, Any]
# chat finish_reason -> Messages stop_reason ("stop" is end_turn: chat does not say
# whether a stop sequence ended it)
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
EXTRA = "specproxy"  # the top-level field that carries the proxy's own report


def message_id() -> str:
    """A fresh Message id."""
    return "msg_" + os.urandom(12).hex()


def stop_reason(finish_reason: Any) -> str | None:
    """The Messages stop_reason for a chat finish_reason (None: not finished)."""
    if finish_reason is None:
        return None
    return STOP_REASONS.get(str(finish_reason), "end_turn")


def tool_input(arguments: Any) -> JSON:
    """A tool call's arguments (a JSON string) as the tool_use block's input object; what
    is not a JSON object is kept whole under ``arguments``, never dropped."""
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = orjson.loads(arguments or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def usage(chat_usage: Any) -> JSON:
    """Messages usage from chat usage (zeros where the upstream gave none)."""
    chat_usage = chat_usage if isinstance(chat_usage, dict) else {}
    return {
        "input_tokens": int(chat_usage.get("prompt_tokens") or 0),
        "output_tokens": int(chat_usage.get("completion_tokens") or 0),
    }


def to_message(completion: JSON, model: str, extra: JSON | None = None) -> JSON:
    """A chat completion (its first choice) as a Message for a request that named
    ``model``; ``extra``: the proxy's fields, under ``specproxy``."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[JSON] = []
    if text := message.get("content"):
        content.append({"type": "text", "text": str(text)})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call.get("id")),
                "name": function.get("name") or "",
                "input": tool_input(function.get("arguments")),
            }
        )
    reason = stop_reason(choice.get("finish_reason")) or "end_turn"
    if reason == "end_turn" and any(b["type"] == "tool_use" for b in content):
        reason = "tool_use"
    out: JSON = {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": None,
        "usage": usage(completion.get("usage")),
    }
    if extra:
        out[EXTRA] = extra
    return out
