"""OpenAI chat-completion answers as typed wire structs: the completion, the stream chunk,
the delta, the tool call, the usage, a logprob entry (and llama-server's ``timings``).

The answers' sibling of ``app.protocol`` (which validates requests). ``msgspec`` decodes
an upstream's bytes straight into these, skipping what the proxy does not read, so an
upstream's extras (llama-server's ``timings`` beyond its draft counters, Cerebras'
``time_info``) cost nothing and are never lost: the proxy passes the upstream's own
bytes on (``app.upstreams.passthrough``), not these structs dumped again. Unknown fields
are allowed everywhere; what is declared is checked (a count is a non-negative integer,
a content a string or null).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # msgspec bounds no further


class Usage(msgspec.Struct):
    """Token counts of an answer (a stream sends them in its last chunk, if asked)."""

    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    total_tokens: Count | None = None


class Timings(msgspec.Struct):
    """llama-server's ``timings``: read for its draft counters, present only when it
    speculates with a draft model."""

    draft_n: Count | None = None
    draft_n_accepted: Count = 0

    def draft_counters(self) -> dict[str, int] | None:
        """The draft counters as the spec log and ``speculative_decoding`` write them."""
        if self.draft_n is None:
            return None
        return {"draft_n": self.draft_n, "draft_n_accepted": self.draft_n_accepted}


class TokenLogprob(msgspec.Struct):
    """One entry of ``logprobs.content`` (a token, its log-probability, the top ones):
    checked only as an object here; the draft's judge reads the entries it keeps."""


class Logprobs(msgspec.Struct):
    content: list[TokenLogprob] | None = None


class FunctionCall(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCall(msgspec.Struct):
    """A whole tool call of a message (``choices[0].message.tool_calls``)."""

    id: str | None = None
    type: str = "function"
    function: FunctionCall | None = None


class ToolCallDelta(msgspec.Struct):
    """One fragment of a streamed tool call: its head (index, id, name) or arguments."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: FunctionCall | None = None


class Message(msgspec.Struct):
    role: str | None = None
    content: str | None = None
    tool_calls: list[Any] | None = None  # checked only as a list: a call is read by index


class Choice(msgspec.Struct):
    message: Message
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class ChatCompletion(msgspec.Struct):
    """A whole answer, as far as the proxy reads it."""

    choices: Annotated[list[Choice], msgspec.Meta(min_length=1)]
    model: Any = msgspec.UNSET
    usage: Usage | None = None
    timings: Any = None  # llama-server's, as it sent it: ``app.upstreams.parsing.draft_counters``


class Delta(msgspec.Struct):
    """What one chunk adds to the answer."""

    role: str | None = None
    content: str | None = None
    tool_calls: list[Any] | None = None  # fragments, malformed ones skipped when joined


class ChunkChoice(msgspec.Struct):
    delta: Delta | None = None
    finish_reason: str | None = None
    logprobs: Logprobs | None = None


class ChatCompletionChunk(msgspec.Struct):
    """One streamed chunk, as far as the proxy reads it (``choices`` is empty in a
    usage-only chunk)."""

    choices: list[ChunkChoice] | None = None
    usage: Usage | None = None
    timings: Timings | None = None

    @property
    def delta(self) -> Delta | None:
        """The first choice's delta, if any."""
        return self.choices[0].delta if self.choices else None

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None


CHUNK_DECODER = msgspec.json.Decoder(ChatCompletionChunk)
COMPLETION_DECODER = msgspec.json.Decoder(ChatCompletion)
