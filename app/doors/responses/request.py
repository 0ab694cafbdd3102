"""A Responses request checked, and translated to the proxy's chat request body.

Pure: ``ResponsesRequest`` checks what the translation reads (the first problem is the
client's 400 naming its field); ``chat_body`` builds the chat body from it and the
stored conversation its ``previous_response_id`` names. What the proxy does not act on
(``reasoning``, ``include``, ``parallel_tool_calls``, ``prompt_cache_key``, ``user``,
``truncation``, ``service_tier``, item ids, ``status``...) is accepted and dropped;
built-in tools the proxy cannot run (web search, file search, computer use...) are
refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.errors import InvalidRequest
from app.schemas import inline_schema

Message = dict[str, Any]  # a chat message


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ContentPart(_Open):
    type: str
    text: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class Item(_Open):
    """One input item: a message (``type`` ``message`` or none), a function call, its
    output, or a kind the proxy drops (reasoning, item references...)."""

    type: str = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[ContentPart] | None = None
    call_id: str | None = Field(None, min_length=1)
    name: str | None = Field(None, min_length=1)
    arguments: str | None = None
    output: str | list[ContentPart] | None = None


class Tool(_Open):
    type: str
    name: str | None = Field(None, min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, min_length=1)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(_Open):
    format: TextFormat | None = None


class ToolChoice(_Open):
    type: str
    name: str | None = Field(None, min_length=1)
    mode: Literal["auto", "required"] | None = None
    tools: list[Tool] | None = None  # allowed_tools: the tools the model may call


class ResponsesRequest(_Open):
    """The fields of a Responses request the door reads (others pass and are dropped)."""

    model: str | None = None
    input: str | list[Item] | None = None
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | ToolChoice | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    # OpenAI's bounds: 16 pairs, keys to 64 characters, values to 512
    metadata: (
        dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None
    ) = Field(None, max_length=16)


# input items that carry nothing an upstream can take: accepted, and dropped
DROPPED_ITEMS = ("reasoning", "item_reference")
# the content parts a user message may hold -> the member that carries each
_PART_MEMBER = {
    "input_text": "text",
    "output_text": "text",
    "text": "text",
    "input_image": "image_url",
}


def input_messages(
    items: str | list[Item] | None, history: Sequence[Message] = ()
) -> list[Message]:
    """The chat messages of a request's ``input`` (a string is one user message) after the
    conversation ``history``: a function call's output answers a call made before it."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    called = {call["id"] for m in history for call in m.get("tool_calls") or ()}
    messages: list[Message] = []
    for at, item in enumerate(items):
        if item.type == "message":
            messages.append(_message(item, at))
        elif item.type == "function_call":
            if item.call_id is None or item.name is None:
                raise InvalidRequest(
                    f"input.{at}: a function_call item needs its call_id and name",
                    param=f"input.{at}",
                )
            called.add(item.call_id)
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments or "{}"},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.type == "function_call_output":
            if item.call_id is None or item.output is None:
                raise InvalidRequest(
                    f"input.{at}: a function_call_output item needs its call_id and output",
                    param=f"input.{at}",
                )
            if item.call_id not in called:  # as OpenAI refuses it
                raise InvalidRequest(
                    f"input.{at}: no function call found for the output's call_id "
                    f"{item.call_id!r}; it answers a function_call made before it",
                    param=f"input.{at}.call_id",
                )
            messages.append(
                {"role": "tool", "tool_call_id": item.call_id, "content": _text(item.output)}
            )
        elif item.type not in DROPPED_ITEMS:  # silently dropped, the turn would lose it
            raise InvalidRequest(
                f"input.{at}.type: a {item.type!r} item is not supported by this proxy (message, "
                "function_call and function_call_output are; reasoning and item_reference are "
                "accepted and dropped)",
                param=f"input.{at}.type",
            )
    return messages


def _message(item: Item, at: int) -> Message:
    if item.role is None or item.content is None:
        raise InvalidRequest(
            f"input.{at}: a message item needs its role and content", param=f"input.{at}"
        )
    role = "system" if item.role == "developer" else item.role
    content = item.content
    if isinstance(content, str) or role != "user":
        return {"role": role, "content": _text(content)}
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if (member := _PART_MEMBER.get(part.type)) is None:
            raise InvalidRequest(
                f"input.{at}.content.{j}: a {part.type!r} part is not supported by this proxy "
                "(text and images by URL are)",
                param=f"input.{at}.content.{j}.type",
            )
        if getattr(part, member) is None:
            raise InvalidRequest(
                f"input.{at}.content.{j}: an {part.type!r} part needs its {member}",
                param=f"input.{at}.content.{j}.{member}",
            )
        if member == "text":
            parts.append({"type": "text", "text": part.text})
        else:
            image = {"url": part.image_url} | ({"detail": part.detail} if part.detail else {})
            parts.append({"type": "image_url", "image_url": image})
    return {"role": role, "content": parts}


def _text(content: str | list[ContentPart]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.text or "" for part in content)


def chat_tools(tools: list[Tool]) -> list[dict[str, Any]]:
    """Function tools as chat tools; any other kind is a 400 naming it."""
    out = []
    for at, tool in enumerate(tools):
        if tool.type != "function":
            raise InvalidRequest(
                f"tools.{at}: the built-in tool {tool.type!r} is not supported by this proxy; "
                "only function tools are (run the tool yourself and send its result back)",
                param=f"tools.{at}.type",
                code="unsupported_tool",
            )
        if tool.name is None:
            raise InvalidRequest(f"tools.{at}: a function tool needs its name", param="tools")
        function: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
        if tool.strict is not None:
            function["strict"] = tool.strict
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(
    choice: str | ToolChoice, tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], Any]:
    """``auto``/``none``/``required``, a named function, or allowed tools, as chat's tools
    and tool_choice: allowed tools as the tools they allow, their ``mode`` the choice (as
    the chat door sends OpenAI's: no upstream reads the object)."""
    if isinstance(choice, str):
        return tools, choice
    if choice.type == "function" and choice.name is not None:
        return tools, {"type": "function", "function": {"name": choice.name}}
    if choice.type != "allowed_tools":
        raise InvalidRequest(
            f"tool_choice: {choice.type!r} is not supported by this proxy (auto, none, "
            "required, a named function or allowed_tools are)",
            param="tool_choice",
        )
    names: set[str] = set()
    for at, tool in enumerate(choice.tools or ()):
        if tool.type != "function" or tool.name is None:
            raise InvalidRequest(
                f"tool_choice.tools.{at}: only function tools, by name, can be allowed",
                param=f"tool_choice.tools.{at}",
            )
        names.add(tool.name)
    if not names:
        raise InvalidRequest("tool_choice: allowed_tools allows no tool", param="tool_choice")
    if missing := sorted(names - {tool["function"]["name"] for tool in tools}):
        raise InvalidRequest(
            f"tool_choice: names {missing[0]!r}, which is not among the tools",
            param="tool_choice",
        )
    narrowed = [tool for tool in tools if tool["function"]["name"] in names]
    return narrowed, choice.mode or "auto"


def response_format(fmt: TextFormat) -> dict[str, Any] | None:
    """``text.format`` as chat's response_format (None: plain text)."""
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.type == "json_schema":
        if fmt.name is None or fmt.schema_ is None:
            raise InvalidRequest(
                "text.format: a json_schema format needs its name and schema", param="text.format"
            )
        schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema_}
        if fmt.strict is not None:
            schema["strict"] = fmt.strict
        if fmt.description is not None:
            schema["description"] = fmt.description
        return {"type": "json_schema", "json_schema": schema}
    return None


# Chat's fields, which the Responses API does not take: refused as OpenAI refuses them,
# never dropped (a token cap the client believes in would not hold), with what to use.
CHAT_ONLY = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "messages": "input",
    "response_format": "text.format",
}


def chat_body(request: ResponsesRequest, history: list[Message]) -> dict[str, Any]:
    """The chat request for ``request`` after the conversation ``history`` (the stored
    turns its ``previous_response_id`` names; their instructions are not carried over)."""
    extra = request.model_extra or {}
    if extra.get("conversation") is not None:  # answered without it, the turn loses its past
        raise InvalidRequest(
            "conversation: this proxy keeps no conversations; chain turns with "
            "previous_response_id",
            param="conversation",
            code="unsupported_parameter",
        )
    if chat_only := sorted(CHAT_ONLY.keys() & extra.keys()):
        field = chat_only[0]
        raise InvalidRequest(
            f"Unknown parameter: '{field}'. The Responses API takes {CHAT_ONLY[field]} instead.",
            param=field,
            code="unknown_parameter",
        )
    turn = input_messages(request.input, history)
    if not history and not turn:
        raise InvalidRequest(
            "input: a request needs some input, or a previous_response_id to go on from",
            param="input",
        )
    messages: list[Message] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    messages += history + turn
    body: dict[str, Any] = {"messages": messages}
    if request.model is not None:
        body["model"] = request.model
    if request.tools:
        body["tools"] = chat_tools(request.tools)
    if (choice := request.tool_choice) is not None and request.tools:
        body["tools"], body["tool_choice"] = chat_tool_choice(choice, body["tools"])
    elif choice not in (None, "auto", "none"):
        raise InvalidRequest("tool_choice: no tools are given to choose", param="tool_choice")
    fmt = request.text.format if request.text is not None else None
    if fmt is not None and (chat_format := response_format(fmt)) is not None:
        body["response_format"] = chat_format
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    for field in ("temperature", "top_p"):
        if (value := getattr(request, field)) is not None:
            body[field] = value
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def request_json_schema() -> dict[str, Any]:
    """``ResponsesRequest``'s JSON schema for OpenAPI, whole (``app.schemas.inline_schema``),
    with ``input`` required and never null: a turn needs it unless it goes on from a stored
    response, which no schema can name."""
    schema = inline_schema(ResponsesRequest)
    given = schema["properties"]["input"]
    given["anyOf"] = [kind for kind in given["anyOf"] if kind.get("type") != "null"]
    given.pop("default", None)
    schema["required"] = ["input"]
    return schema
