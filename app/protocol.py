"""OpenAI chat-completion wire models: request validation (answers: ``app.chat_completion``).

The models check what the proxy relies on, strictly (no coercion: what passes is
exactly what is forwarded), and allow unknown fields, so a client's extra
parameters pass through to the upstream untouched: the proxy forwards the
client's own JSON object, never a re-serialised model. ``first_problem`` words a failed
validation as the client's mistake, in the client's own field names.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

JSONObject: TypeAlias = dict[str, Any]
"""The client's request body, as the JSON object it sent: the proxy forwards it (with
``model`` and a few of its own parameters set) rather than a re-serialised model, so the
client's unknown fields reach the upstream untouched. It is the one JSON object left
untyped on the way in; answers are typed (``app.chat_completion``)."""

TOOL_CALLS = "tool_calls"  # a need: the model makes tool calls (its chat template has them)


class Open(BaseModel):
    # strict: "10", true or 10.0 for an integer, "true" for a boolean are the client's
    # mistakes (400 naming the field), never coerced here and forwarded raw
    model_config = ConfigDict(extra="allow", strict=True)


# llama-server answers a malformed message, tool or tool call with a 500: forwarded,
# a handful of such requests from one client would open the local model's circuit for
# everyone. So what it chokes on is checked here, and is the client's 400 naming it.


class Typed(Open):
    """An object of several kinds (``type``), one of which must carry a member: a function
    tool its function, a text part its text... Other kinds pass as they are."""

    type: str
    needs: ClassVar[tuple[str, str, str]]  # (kind, the member it needs, what is said if not)

    @model_validator(mode="after")
    def _member_given(self) -> Self:
        kind, member, missing = self.needs
        if self.type == kind and getattr(self, member) is None:
            raise ValueError(missing)
        return self


# the kinds of content part OpenAI's chat takes (``refusal``: an assistant turn's; the
# local model cannot read it either: llama-server refuses it, "unsupported content[].type")
PART_KINDS = ("text", "image_url", "input_audio", "file", "refusal")


class ContentPart(Typed):
    """One part of a message's content, of a kind OpenAI's chat takes (images, audio and
    files pass as they are); another kind is the client's 400 in every strategy."""

    text: str | None = None
    needs = ("text", "text", "a text part needs its text")

    @field_validator("type")
    @classmethod
    def _known(cls, kind: str) -> str:
        if kind not in PART_KINDS:
            raise ValueError(f"{kind!r} is not a kind of content part ({', '.join(PART_KINDS)})")
        return kind


class FunctionCall(Open):
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] | None = None


class MessageToolCall(Typed):
    """A tool call in an assistant message of the conversation so far."""

    id: str | None = None
    function: FunctionCall | None = None
    needs = ("function", "function", "a function call needs its function (name, arguments)")


NEEDS_CONTENT = ("system", "developer", "user", "tool")


class ChatMessage(Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = Field(None, validate_default=True)
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _content_given(
        cls, content: str | list[ContentPart] | None, info: ValidationInfo
    ) -> str | list[ContentPart] | None:
        # as OpenAI refuses it: only an assistant's turn (its tool calls) may go without
        if content is None and (role := info.data.get("role")) in NEEDS_CONTENT:
            raise ValueError(f"a {role} message needs its content")
        return content


class StreamOptions(Open):
    include_usage: bool = False


class Function(Open):
    name: str = Field(min_length=1)


class Tool(Typed):
    function: Function | None = None
    needs = ("function", "function", "a function tool needs its function (name, parameters)")


class JsonSchema(Open):
    name: str = Field(min_length=1)
    schema_: dict[str, Any] | None = Field(None, alias="schema")


class ResponseFormat(Typed):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None
    needs = ("json_schema", "json_schema", "a json_schema format needs its json_schema")


class AllowedFunction(Typed):
    function: Function | None = None
    needs = ("function", "function", "an allowed tool needs its function's name")

    @field_validator("type")
    @classmethod
    def _function(cls, kind: str) -> str:
        if kind != "function":
            raise ValueError(f"only function tools can be allowed by this proxy, not {kind!r}")
        return kind


class AllowedTools(Open):
    """``tool_choice.allowed_tools``: the tools the model may call, and whether it must."""

    mode: Literal["auto", "required"]
    tools: list[AllowedFunction] = Field(min_length=1)

    @property
    def names(self) -> set[str]:
        """The names of the functions allowed."""
        return {tool.function.name for tool in self.tools if tool.function}


class NamedToolChoice(Typed):
    """A tool choice that names a function, or (``allowed_tools``) narrows the tools to
    some of them; another kind passes as it is."""

    function: Function | None = None
    allowed_tools: AllowedTools | None = None
    needs = ("function", "function", "a function tool choice needs its function's name")

    @model_validator(mode="after")
    def _allowed_given(self) -> Self:
        if self.type == "allowed_tools" and self.allowed_tools is None:
            raise ValueError("an allowed_tools tool choice needs its allowed_tools")
        return self

    @property
    def named(self) -> set[str]:
        """The functions it names: the one a function choice demands, or those allowed."""
        if self.type == "function":
            return {self.function.name} if self.function else set()
        return self.allowed.names if self.allowed is not None else set()

    @property
    def allowed(self) -> AllowedTools | None:
        """An ``allowed_tools`` choice's tools and mode (None: another kind)."""
        return self.allowed_tools if self.type == "allowed_tools" else None


class ChatCompletionRequest(Open):
    """The fields of a chat request that the proxy reads or must refuse early."""

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    n: int | None = Field(None, ge=1, le=128)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stop: str | list[str] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    response_format: ResponseFormat | None = None
    # forwarded as they are, so checked here: llama-server's own refusal of a string seed
    # is a raw 400 of its, and Cerebras' would be another
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    @field_validator("top_logprobs")
    @classmethod
    def _logprobs_asked(cls, top: int | None, info: ValidationInfo) -> int | None:
        # As OpenAI and llama-server refuse it (the speculative draft asks for logprobs
        # itself, so without this check only local_only said so).
        if top is not None and info.data.get("logprobs") is not True:
            raise ValueError("requires logprobs to be set to true")
        return top

    @field_validator("tool_choice")
    @classmethod
    def _choice_offered(
        cls, choice: str | NamedToolChoice | None, info: ValidationInfo
    ) -> str | NamedToolChoice | None:
        # As OpenAI refuses them, in every strategy (a cloud that obeys would call a
        # function the client never offered, and the speculative merge trusts its calls)
        if choice is None or choice in ("none", "auto"):
            return choice
        if not (tools := info.data.get("tools")):
            raise ValueError("is only allowed when tools are specified")
        if not isinstance(choice, NamedToolChoice):
            return choice
        offered = {t.function.name for t in tools if t.function}
        if missing := sorted(choice.named - offered):
            raise ValueError(f"names {missing[0]!r}, which is not among the tools")
        return choice

    @property
    def token_limit(self) -> int | None:
        """The client's output-token budget, whichever field it used."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def needs(self) -> dict[str, str]:
        """What the request needs of a model beyond reading and writing text, each with
        the field that first needs it: a kind of content it carries (``image_url``,
        ``input_audio``, ``file``...), and ``tool_calls`` when it demands a call
        (``tool_choice`` ``required``, a named function, or allowed tools it must call)."""
        found: dict[str, str] = {}
        for i, message in enumerate(self.messages):
            if isinstance(message.content, list):
                for j, part in enumerate(message.content):
                    if part.type != "text":
                        found.setdefault(part.type, f"messages.{i}.content.{j}")
        if self.tools and self._demands_a_call:
            found[TOOL_CALLS] = "tool_choice"
        return found

    @property
    def _demands_a_call(self) -> bool:
        choice = self.tool_choice
        if not isinstance(choice, NamedToolChoice):
            return choice == "required"
        # allowed tools in mode auto may go uncalled; any other kind names what to call
        return choice.allowed is None or choice.allowed.mode == "required"

    def narrow_to_allowed(self, raw: dict[str, Any]) -> None:
        """An ``allowed_tools`` choice put as every upstream takes it, here and in ``raw``
        (the body forwarded): the tools narrowed to the allowed ones, and its mode as the
        choice (llama-server reads no such object, and the answer's contract is the same)."""
        choice = self.tool_choice
        if not isinstance(choice, NamedToolChoice) or choice.allowed is None:
            return
        allowed = choice.allowed.names
        self.tools = [t for t in self.tools or () if t.function and t.function.name in allowed]
        raw["tools"] = [
            tool
            for tool in raw.get("tools") or ()
            if isinstance(tool, dict) and (tool.get("function") or {}).get("name") in allowed
        ]
        raw["tool_choice"] = self.tool_choice = choice.allowed.mode
