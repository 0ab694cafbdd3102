"""A whole answer passed on as the bytes the upstream sent: read, not parsed.

The pass-through strategies (and the speculative steps that serve an upstream's own
answer) need only a few fields of a non-streaming answer: the token counts, the
number of tool calls, llama-server's draft counters. ``msgspec`` decodes just those
into ``AnswerView`` and skips the rest (a llama-server answer with logprobs: ~5 µs
here, against ~19 µs to parse it and ~7 µs to dump it again), so the answer goes out
as it came, with the configured model name put in and the proxy's fields added at
the end (``app.pipeline.wire.with_fields``).

``AnswerView`` is at least as strict as ``app.upstreams.shape.completion_problem``
(a property test holds it to that): an answer it refuses is the upstream's protocol
failure, named as ``completion_body`` names it (or, where the view is the stricter of
the two, as msgspec does: a second choice without a message, a count that is not one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import orjson

from app.errors import UpstreamError, UpstreamProtocolError
from app.upstreams.parsing import completion_body

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _Object(msgspec.Struct):
    """Any JSON object, its members skipped."""


class _Usage(msgspec.Struct):
    prompt_tokens: _Count | None = None
    completion_tokens: _Count | None = None
    total_tokens: _Count | None = None


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[Any] | None = None


class _Logprobs(msgspec.Struct):
    content: list[_Object] | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None


class _Timings(msgspec.Struct):
    draft_n: int | None = None
    draft_n_accepted: int = 0


class AnswerView(msgspec.Struct):
    """What the proxy reads of a whole answer, checked."""

    choices: Annotated[list[_Choice], msgspec.Meta(min_length=1)]
    model: Any = msgspec.UNSET
    usage: _Usage | None = None
    timings: _Timings | None = None


_DECODER = msgspec.json.Decoder(AnswerView)
_MODEL, _MODEL_USED, _SPECULATIVE = b'"model":', b'"model_used"', b'"speculative_decoding"'


@dataclass(frozen=True, slots=True)
class PassedAnswer:
    """A finished non-streaming answer to pass on: ``content`` is the JSON object to send
    (the upstream's bytes, naming the configured model), ``view`` what was read of it."""

    content: bytes
    view: AnswerView
    headers: Mapping[str, str]
    latency_s: float
    upstream: str = ""  # the name of the upstream that answered (a group's member)
    fell_over: tuple[UpstreamError, ...] = ()  # a group's members that failed before it

    @property
    def completion_tokens(self) -> int:
        usage = self.view.usage
        return (usage.completion_tokens or 0) if usage else 0

    @property
    def prompt_tokens(self) -> int:
        usage = self.view.usage
        return (usage.prompt_tokens or 0) if usage else 0

    @property
    def tool_calls(self) -> int:
        """How many tool calls the first choice makes."""
        return len(self.view.choices[0].message.tool_calls or ())

    @property
    def speculation(self) -> dict[str, int] | None:
        """llama-server's own draft counters, when it speculates with a draft model."""
        timings = self.view.timings
        if timings is None or timings.draft_n is None:
            return None
        return {"draft_n": timings.draft_n, "draft_n_accepted": timings.draft_n_accepted}


def read_answer(upstream: str, content: bytes, model: str | None) -> tuple[bytes, AnswerView]:
    """The bytes to pass on for an answer (``model``, the configured name, in place of its
    own) and the view read of it; a broken answer raises ``UpstreamProtocolError``.

    The bytes are the upstream's own whenever that is safe: the model renamed in place
    when the answer has one ``"model":`` member, written compactly as orjson writes its
    value, and none of the proxy's own fields. Otherwise the answer is parsed and dumped.
    (A quote cannot stand unescaped inside a JSON string, so these searches find keys,
    never generated text.)
    """
    try:
        view = _DECODER.decode(content)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        completion_body(upstream, content)  # raises, naming the problem, if there is one
        raise UpstreamProtocolError(upstream, f"answer: {exc}") from exc
    if _MODEL_USED in content or _SPECULATIVE in content:
        return _dumped(upstream, content, model), view
    if model is None or view.model is msgspec.UNSET or view.model == model:
        return content, view
    theirs = _MODEL + orjson.dumps(view.model)
    if content.count(_MODEL) != 1 or theirs not in content:
        return _dumped(upstream, content, model), view
    return content.replace(theirs, _MODEL + orjson.dumps(model), 1), view


def _dumped(upstream: str, content: bytes, model: str | None) -> bytes:
    """The answer parsed and written again (``model`` in place of its own)."""
    return orjson.dumps(completion_body(upstream, content, model))
