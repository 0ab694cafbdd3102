"""A chat completion as a Message: text and tool_use blocks, the stop reason, usage."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import orjson

from app.doors.messages.ids import tool_use_id

JSON = dict[str, Any]
# chat finish_reason -> Messages stop_reason ("stop" is end_turn, or stop_sequence when
# ``matched_stop`` can tell which of the client's sequences ended it)
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


# Where an upstream names the stop string that ended its answer, in the choice: vLLM's
# ``stop_reason``, SGLang's ``matched_stop``, llama-server's native ``stopping_word``.
_NAMED_STOP = ("stop_reason", "matched_stop", "stopping_word")


def matched_stop(choice: Any, text: str, stops: Sequence[str]) -> str | None:
    """Which of the client's ``stop_sequences`` ended a chat answer, where that can be
    told; None otherwise (then its ``stop`` is ``end_turn``).

    The rule: the answer finished with ``stop``, and either the upstream names the
    string in its choice (``_NAMED_STOP``) and it is one of the client's, or the answer's
    ``text`` ends with one of them (an upstream that keeps the sequence in its text; the
    longest such is taken). llama-server and Cerebras, like OpenAI, cut the sequence out
    of the text and do not name it: their ``stop`` cannot be told from the model's own end
    of turn, and reads ``end_turn`` (never a guessed sequence).
    """
    if not stops or not isinstance(choice, dict) or choice.get("finish_reason") != "stop":
        return None
    for field in _NAMED_STOP:
        named = choice.get(field)
        if isinstance(named, str) and named in stops:
            return named
    ends = [stop for stop in stops if stop and text.endswith(stop)]
    return max(ends, key=len) if ends else None


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


def unechoed(text: str, prefill: str) -> str:
    """An answer's text less the ``prefill`` it begins by repeating (llama-server's answer
    to a final assistant turn does); any other text as it is."""
    return text[len(prefill) :] if prefill and text.startswith(prefill) else text


def to_message(
    completion: JSON,
    model: str,
    extra: JSON | None = None,
    stops: Sequence[str] = (),
    prefill: str = "",
) -> JSON:
    """A chat completion (its first choice) as a Message for a request that named
    ``model``, its ``stop_sequences`` (``stops``) and its ``prefill``, which the Message
    does not repeat; ``extra``: the proxy's fields, under ``specproxy``."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    text = unechoed(str(message.get("content") or ""), prefill)
    stopped = matched_stop(choice, text, stops)
    if stopped is not None and text.endswith(stopped):
        text = text[: len(text) - len(stopped)]  # Messages' text never holds the sequence
    content: list[JSON] = []
    if text:
        content.append({"type": "text", "text": text})
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
    elif stopped is not None:
        reason = "stop_sequence"
    out: JSON = {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": stopped if reason == "stop_sequence" else None,
        "usage": usage(completion.get("usage")),
    }
    if extra:
        out[EXTRA] = extra
    return out
