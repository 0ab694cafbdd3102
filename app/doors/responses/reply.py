"""A chat completion as a Responses ``response`` object, and the pieces the stream shares.

Pure. Output items: the upstream's reasoning text where it gave one (``reasoning_content``,
as llama-server does), the message's text, then one ``function_call`` per tool call (its
``call_id`` is the chat call's id). A ``length`` finish is ``incomplete`` with reason
``max_output_tokens``. The proxy's own fields ride in the top-level ``specproxy`` object
(as on the Messages door); ``metadata`` is the client's, echoed as it came.
"""

from __future__ import annotations

import os
import time
from typing import Any

import orjson

from app.doors.responses.request import ResponsesRequest

# chat's finishes that cut an answer short -> the Responses API's incomplete reason
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
# the chat answer's proxy fields, carried under ``EXTRA``
PROXY_FIELDS = ("model_used", "speculative_decoding")
EXTRA = "specproxy"


def new_id(prefix: str) -> str:
    """An id as OpenAI's look: ``resp_...``, ``msg_...``, ``fc_...``."""
    return f"{prefix}_{os.urandom(12).hex()}"


def message_item(text: str, item_id: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content if status == "completed" else [],
    }


def call_item(
    call_id: str, name: str, arguments: str, item_id: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def reasoning_item(text: str, item_id: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


def usage(chat_usage: Any) -> dict[str, Any] | None:
    """Chat's usage as the Responses API counts it (None: the upstream gave none)."""
    if not isinstance(chat_usage, dict):
        return None
    prompt = _int(chat_usage.get("prompt_tokens"))
    completion = _int(chat_usage.get("completion_tokens"))
    details = chat_usage.get("prompt_tokens_details") or {}
    reasoning = (chat_usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": _int(details.get("cached_tokens")),
            "cache_write_tokens": 0,
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _int(reasoning)},
        "total_tokens": _int(chat_usage.get("total_tokens")) or prompt + completion,
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def with_report(response: dict[str, Any], proxy: dict[str, Any]) -> dict[str, Any]:
    """``response`` with the chat answer's proxy fields added under ``EXTRA``."""
    report = {k: v for k in PROXY_FIELDS if (v := proxy.get(k)) is not None}
    return {**response, EXTRA: {**response.get(EXTRA, {}), **report}} if report else response


def skeleton(request: ResponsesRequest, response_id: str, created_at: float) -> dict[str, Any]:
    """The response object before its output: what the request asked for, echoed."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created_at),  # Unix seconds, as OpenAI's
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": request.model or "auto",
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": request.store,
        "temperature": request.temperature,
        "text": _echo(request, "text", {"format": {"type": "text"}}),
        "tool_choice": _echo(request, "tool_choice", "auto"),
        "tools": _echo(request, "tools", []),
        "top_p": request.top_p,
        "truncation": "disabled",
        "usage": None,
        "metadata": dict(request.metadata or {}),
    }


def _echo(request: ResponsesRequest, field: str, default: Any) -> Any:
    value = getattr(request, field)
    if value is None:
        return default
    return request.model_dump(mode="json", by_alias=True)[field]


def finished(
    response: dict[str, Any],
    output: list[dict[str, Any]],
    finish_reason: str | None,
    chat_usage: Any,
) -> dict[str, Any]:
    """``response`` with its output, status and usage once the answer is whole: cut short
    (``incomplete``), its last item is too."""
    done = dict(response, output=output, usage=usage(chat_usage), completed_at=int(time.time()))
    if (why := _INCOMPLETE.get(finish_reason or "")) is None:
        return done | {"status": "completed"}
    if output and output[-1].get("status") == "completed":
        output[-1] = output[-1] | {"status": "incomplete"}
    return done | {"status": "incomplete", "incomplete_details": {"reason": why}}


def item_status(finish_reason: str | None) -> str:
    """The status of the item an answer ended in: ``incomplete`` if it was cut short."""
    return "incomplete" if finish_reason in _INCOMPLETE else "completed"


def output_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat answer's message as output items: reasoning, text, function calls."""
    items: list[dict[str, Any]] = []
    if isinstance(reasoning := message.get("reasoning_content"), str) and reasoning:
        items.append(reasoning_item(reasoning, new_id("rs")))
    text = message.get("content")
    calls = message.get("tool_calls") or []
    if isinstance(text, str) and (text or not calls):
        items.append(message_item(text, new_id("msg")))
    for call in calls:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments or {}).decode()
        call_id = call.get("id") or new_id("call")
        items.append(call_item(call_id, function.get("name", ""), arguments, new_id("fc")))
    return items


def from_chat(
    completion: dict[str, Any], request: ResponsesRequest, response_id: str
) -> dict[str, Any]:
    """A whole chat completion as the Responses object."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    response = skeleton(request, response_id, float(completion.get("created") or time.time()))
    response = with_report(response, completion)
    return finished(
        response, output_items(message), choice.get("finish_reason"), completion.get("usage")
    )


def assistant_message(output: list[dict[str, Any]]) -> dict[str, Any]:
    """A response's output as the chat assistant message a next turn carries."""
    text = "".join(
        part.get("text", "")
        for item in output
        if item["type"] == "message"
        for part in item["content"]
    )
    calls = [
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        for item in output
        if item["type"] == "function_call"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message
