"""A whole answer passed on as the bytes the upstream sent: read, not parsed.

The pass-through strategies (and the speculative steps that serve an upstream's own
answer) need only a few fields of a non-streaming answer: the token counts, the
number of tool calls, llama-server's draft counters. ``msgspec`` decodes just those
into ``AnswerView`` and skips the rest (a llama-server answer with logprobs: ~5 µs
here, against ~19 µs to parse it and ~7 µs to dump it again), so the answer goes out
as it came, with the configured model name put in and the proxy's fields added at
the end (``app.wire.with_fields``).

``AnswerView`` is at least as strict as ``app.upstreams.shape.completion_problem``
(a property test holds it to that), and the bytes must be UTF-8: an answer it refuses
is the upstream's protocol failure, named as ``completion_body`` names it (or, where the
view is the stricter of the two, as msgspec does: a second choice without a message, a
count past 63 bits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from app.chat_completion import ChatCompletion
from app.errors import UpstreamError, UpstreamProtocolError
from app.upstreams.numbers import inexact_number
from app.upstreams.parsing import completion_body


class AnswerView(ChatCompletion):
    """What the proxy reads of a whole answer, checked; ``model_used`` and
    ``speculative_decoding`` are read only to know whether the answer has them (however
    their names are written)."""

    model_used: Any = msgspec.UNSET
    speculative_decoding: Any = msgspec.UNSET


_DECODER = msgspec.json.Decoder(AnswerView)
_MODEL_KEY, _MODEL, _ESCAPE = b'"model"', b'"model":', b"\\u"


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
    def timings(self) -> Any:
        """llama-server's ``timings`` (its draft counters among them), as it sent them."""
        return self.view.timings


def read_answer(
    upstream: str, content: bytes, model: str | None, decoder: msgspec.json.Decoder[Any] = _DECODER
) -> tuple[bytes, AnswerView]:
    """The bytes to pass on for an answer (``model``, the configured name, in place of its
    own) and the view read of it; a broken answer raises ``UpstreamProtocolError``.

    The bytes are the upstream's own whenever that is safe: none of the proxy's own fields
    is there, and the model is renamed in place only when the answer has no ``\\u`` escape
    at all (so every key is written as it reads) and one ``"model"`` string, its key,
    written as orjson writes it. Otherwise the answer is parsed and dumped. What msgspec
    skips is checked as JSON and as UTF-8, not read: a lone surrogate escape in a member
    the proxy does not read goes on as written. A number it cannot hold exactly
    (``inexact_number``) is the upstream's failure here as where answers are parsed.
    """
    try:
        view = decoder.decode(content)
        content.decode()  # what msgspec skipped is UTF-8 too
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError) as exc:
        completion_body(upstream, content)  # raises, naming the problem, if there is one
        raise UpstreamProtocolError(upstream, f"answer: {exc}") from exc
    if problem := inexact_number(content):  # in a member msgspec skipped
        raise UpstreamProtocolError(upstream, problem)
    if view.model_used is not msgspec.UNSET or view.speculative_decoding is not msgspec.UNSET:
        return _dumped(upstream, content, model), view
    if model is None or view.model is msgspec.UNSET or view.model == model:
        return content, view
    theirs = _MODEL + orjson.dumps(view.model)
    if _ESCAPE in content or content.count(_MODEL_KEY) != 1 or theirs not in content:
        return _dumped(upstream, content, model), view
    return content.replace(theirs, _MODEL + orjson.dumps(model), 1), view


def _dumped(upstream: str, content: bytes, model: str | None) -> bytes:
    """The answer parsed and written again (``model`` in place of its own), without the
    proxy's own fields: the proxy writes those."""
    body = completion_body(upstream, content, model)
    body.pop("model_used", None)
    body.pop("speculative_decoding", None)
    return orjson.dumps(body)
