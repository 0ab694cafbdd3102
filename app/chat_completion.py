"""OpenAI chat-completion answers as typed wire structs: the completion, the stream chunk,
the delta, the tool call, the usage, a logprob entry; ``Chunk``, one streamed payload (its
bytes and what it says); llama-server's draft counters (read from its ``timings``, kept as
it sent them: an odd value there is not the proxy's to refuse).

The answers' sibling of ``app.protocol`` (which validates requests). ``msgspec`` decodes
an upstream's bytes straight into these, skipping what the proxy does not read, so an
upstream's extras (llama-server's ``timings`` beyond its draft counters, Cerebras'
``time_info``) cost nothing and are never lost: the proxy passes the upstream's own
bytes on (``app.upstreams.passthrough``, an unread stream chunk), not these structs
dumped again. Unknown fields are allowed everywhere; what is declared is checked (a count
is a non-negative integer, a content a string or null).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import orjson

Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # msgspec bounds no further


class Usage(msgspec.Struct):
    """Token counts of an answer (a stream sends them in its last chunk, if asked)."""

    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    total_tokens: Count | None = None


class TokenLogprob(msgspec.Struct):
    """One entry of ``logprobs.content`` (a token, its log-probability, the top ones):
    checked only as an object here; the draft's judge reads the entries it keeps."""


class Logprobs(msgspec.Struct):
    content: list[TokenLogprob] | None = None


class ChunkLogprobs(msgspec.Struct):
    """A chunk's ``logprobs``: its entries kept as the upstream wrote them (objects), for
    the draft's judge (``app.routing.signals`` reads them) and the assembled answer."""

    content: list[dict[str, Any]] | None = None


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
    """What one chunk adds to the answer (``role`` is not read: any value passes)."""

    role: Any = None
    content: str | None = None
    tool_calls: list[Any] | None = None  # fragments, malformed ones skipped when joined

    @property
    def carries(self) -> bool:
        """It brings a token: non-empty content or any tool call (the one rule every
        reader of a stream counts by)."""
        return bool(self.content or self.tool_calls)


class ChunkChoice(msgspec.Struct):
    delta: Delta | None = None
    finish_reason: str | None = None
    logprobs: ChunkLogprobs | None = None


class ChatCompletionChunk(msgspec.Struct):
    """One streamed chunk, as far as the proxy reads it (``choices`` is empty in a
    usage-only chunk, unset in an error event: ``error`` / ``message``)."""

    choices: list[ChunkChoice] | msgspec.UnsetType | None = msgspec.UNSET
    usage: Usage | None = None
    timings: Any = None  # llama-server's, as it sent it: ``draft_counters``
    id: Any = msgspec.UNSET
    created: Any = msgspec.UNSET
    model: Any = msgspec.UNSET  # the configured name, once ``ChunkParser`` has put it in
    error: Any = msgspec.UNSET
    message: Any = msgspec.UNSET

    @property
    def delta(self) -> Delta | None:
        """The first choice's delta, if any."""
        return self.choices[0].delta if self.choices else None

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason if self.choices else None


class Chunk(msgspec.Struct, gc=False):
    """One ``data:`` payload of a stream: ``raw`` as it came and, unless it was passed on
    unread (a content chunk that finishes nothing, ``app.sse.passes_unread``: its raw
    bytes name the configured model), ``typed``, what it says."""

    raw: bytes
    typed: ChatCompletionChunk | None = None

    def json(self) -> dict[str, Any]:
        """The payload as a JSON object, to write out again (naming the configured model);
        one orjson cannot read is the upstream's protocol failure (``ValueError``)."""
        body = orjson.loads(self.raw)
        typed = self.typed
        if typed is not None and typed.model is not msgspec.UNSET and "model" in body:
            body["model"] = typed.model
        return body


CHUNK_DECODER = msgspec.json.Decoder(ChatCompletionChunk)
COMPLETION_DECODER = msgspec.json.Decoder(ChatCompletion)


# -- llama-server's draft counters (its ``timings`` when it speculates with a draft model)


def draft_counters(timings: Any) -> dict[str, int] | None:
    """The draft counters of llama-server's ``timings``, if it has them."""
    if not isinstance(timings, dict) or "draft_n" not in timings:
        return None
    return {"draft_n": timings["draft_n"], "draft_n_accepted": timings.get("draft_n_accepted", 0)}


def add_counts(seen: dict[str, int] | None, more: dict[str, int] | None) -> dict[str, int] | None:
    """Two sets of llama-server draft counters added up (either may be missing)."""
    if seen is None or more is None:
        return more or seen
    return {key: seen[key] + more[key] for key in seen}
