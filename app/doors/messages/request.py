"""A Messages request, checked, and the chat request body it becomes.

What the proxy does not act on (``metadata``, ``thinking``, ``cache_control``,
``context_management``, ``service_tier``, ``thinking``/``redacted_thinking`` blocks...)
is accepted and dropped: the chat body is built from the fields read here only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.doors.messages.ids import chat_call_id
from app.errors import InvalidRequest
from app.protocol import TOOL_CALLS

JSON = dict[str, Any]


class Open(BaseModel):
    # strict: "10" for an integer is the client's mistake (400 naming the field); unknown
    # members (cache_control, citations...) pass validation and are dropped
    model_config = ConfigDict(extra="allow", strict=True)


class TextBlock(Open):
    type: Literal["text"]
    text: str


class ImageSource(Open):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _member_given(self) -> Self:
        if self.type == "base64" and not (self.data and self.media_type):
            raise ValueError("a base64 image source needs its media_type and data")
        if self.type == "url" and not self.url:
            raise ValueError("a url image source needs its url")
        return self


class ImageBlock(Open):
    type: Literal["image"]
    source: ImageSource


class ToolUseBlock(Open):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(Open):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] = ""
    is_error: bool | None = None


class ThinkingBlock(Open):
    """Thinking the client sends back: accepted, never forwarded (no upstream reads it)."""

    type: Literal["thinking", "redacted_thinking"]


Block = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock,
    Field(discriminator="type"),
]


class Message(Open):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(Open):
    """A client tool; Anthropic's server tools (web search, bash...) have no input_schema
    and the proxy cannot run them: a 400."""

    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class ToolChoice(Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None

    @model_validator(mode="after")
    def _named(self) -> Self:
        if self.type == "tool" and not self.name:
            raise ValueError("a tool choice of type 'tool' needs the tool's name")
        return self


class CountTokensRequest(Open):
    """``POST /v1/messages/count_tokens``: a Messages request without its budget."""

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    max_tokens: int | None = Field(None, ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)

    @field_validator("tool_choice")
    @classmethod
    def _choice_offered(cls, choice: ToolChoice | None, info: ValidationInfo) -> ToolChoice | None:
        # as Anthropic refuses them: a call demanded of no tools, or of a tool not offered
        if choice is None or choice.type in ("auto", "none"):
            return choice
        tools = info.data.get("tools")
        if not tools:
            raise ValueError(f"a tool_choice of type {choice.type!r} needs tools")
        if choice.type == "tool" and choice.name not in {t.name for t in tools}:
            raise ValueError(f"names the tool {choice.name!r}, which is not among the tools")
        return choice

    def needs(self) -> dict[str, str]:
        """What it needs of a model beyond text, as ``ChatCompletionRequest.needs`` says it
        of the chat it becomes, but each with its own field: an image block, a demanded
        call (``tool_choice`` ``any`` or ``tool``; offered tools are checked above)."""
        found: dict[str, str] = {}
        for i, message in enumerate(self.messages):
            for j, block in enumerate(message.content if isinstance(message.content, list) else ()):
                if isinstance(block, ImageBlock):
                    found.setdefault("image_url", f"messages.{i}.content.{j}")
        if self.tool_choice is not None and self.tool_choice.type in ("any", "tool"):
            found[TOOL_CALLS] = "tool_choice"
        return found


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages``: ``max_tokens`` is required, as Anthropic requires it."""

    max_tokens: int = Field(ge=1)


def prefill(request: CountTokensRequest) -> str:
    """The text of a final assistant turn, which the reply continues (Anthropic's prefill:
    the reply holds only what follows it); "" when the last turn is the user's."""
    last = request.messages[-1]
    if last.role != "assistant":
        return ""
    if isinstance(last.content, str):
        return last.content
    return "".join(b.text for b in last.content if isinstance(b, TextBlock))


def to_chat(request: CountTokensRequest, *, top_k: bool) -> JSON:
    """The chat request body for a Messages request (``top_k``: forward ``top_k``, which
    only llama-server takes)."""
    _results_answer_calls(request.messages)
    messages: list[JSON] = []
    if request.system:
        system = request.system
        text = system if isinstance(system, str) else "\n\n".join(b.text for b in system)
        messages.append({"role": "system", "content": text})
    for message in request.messages:
        messages.extend(_chat_messages(message))
    body: JSON = {"model": request.model, "messages": messages}
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.stop_sequences:
        body["stop"] = request.stop_sequences
    for name in ("temperature", "top_p"):
        if (value := getattr(request, name)) is not None:
            body[name] = value
    if top_k and request.top_k is not None:
        body["top_k"] = request.top_k
    if request.tools:
        body["tools"] = [_chat_tool(t) for t in request.tools]
        if request.tool_choice is not None:
            body["tool_choice"] = _chat_choice(request.tool_choice)
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # message_delta's output_tokens
    return body


def _results_answer_calls(messages: list[Message]) -> None:
    """Each ``tool_result`` answers a ``tool_use`` of the assistant's turn before it, as
    Anthropic requires (else its 400, in its words). Consecutive messages of one role are
    one turn, as Anthropic combines them."""
    made: set[str] = set()  # the ids of the calls of the last assistant turn
    for i, message in enumerate(messages):
        blocks = message.content if isinstance(message.content, list) else []
        if message.role == "assistant":
            if i and messages[i - 1].role != "assistant":
                made = set()  # a new assistant turn: the user's turn answered the last
            made |= {b.id for b in blocks if isinstance(b, ToolUseBlock)}
            continue
        for j, block in enumerate(blocks):
            if isinstance(block, ToolResultBlock) and block.tool_use_id not in made:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block.tool_use_id}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message.",
                    param=f"messages.{i}.content.{j}",
                )


def _chat_tool(tool: Tool) -> JSON:
    function: JSON = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _chat_choice(choice: ToolChoice) -> Any:
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


def _chat_messages(message: Message) -> list[JSON]:
    """One Messages turn as chat messages: a user turn's tool results come first, each its
    own ``tool`` message (chat wants them right after the calls), then the rest of it."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "assistant":
        return [_assistant(message.content)]
    out: list[JSON] = []
    parts: list[JSON] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            out.append(_tool_message(block))
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block.source)}})
        # tool_use in a user turn and thinking blocks: nothing an upstream reads
    if parts:
        only_text = len(parts) == 1 and parts[0]["type"] == "text"
        out.append({"role": "user", "content": parts[0]["text"] if only_text else parts})
    return out


def _assistant(blocks: list[Any]) -> JSON:
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    calls = [
        {
            "id": chat_call_id(b.id),
            "type": "function",
            "function": {"name": b.name, "arguments": orjson.dumps(b.input).decode()},
        }
        for b in blocks
        if isinstance(b, ToolUseBlock)
    ]
    out: JSON = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    elif not text:
        out["content"] = ""
    return out


def _tool_message(block: ToolResultBlock) -> JSON:
    content = block.content
    if not isinstance(content, str):
        content = "\n".join(b.text for b in content if isinstance(b, TextBlock))
    if block.is_error:
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": chat_call_id(block.tool_use_id), "content": content}


def _image_url(source: ImageSource) -> str:
    if source.type == "url":
        return source.url or ""
    return f"data:{source.media_type};base64,{source.data}"
