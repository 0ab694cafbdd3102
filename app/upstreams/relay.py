"""Passing an upstream's stream on to the client, and what it showed on the way.

``Upstream.open_stream`` waits for the first chunk, so an upstream that fails at once
is still an HTTP error for the client. ``StreamRelay`` yields the stream's bytes as
they arrive, holding back only the finishing chunk (llama-server sends ``usage``
in a later ``choices: []`` chunk, and the counts belong in the proxy's fields);
when it is done it tells what it saw (text, tool calls, token count, llama-server's
draft counters, the failure that cut it) and ``ending(fields)`` writes the held chunk
with the proxy's fields. It reads an ``OpenStream`` as ``parsing`` hands it over, so it
lives beside it; the pipeline (``app.pipeline.answer.LiveRelay``) passes its bytes on and
reads the result: nothing calls back up.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import NamedTuple

import orjson

from app.chat_completion import ChatCompletionChunk, Chunk, Delta
from app.errors import UpstreamError, UpstreamProtocolError
from app.protocol import JSONObject
from app.sse import DONE, StreamReader, ToolCallDeltas, event
from app.upstreams.interface import OpenStream, Upstream

_CHUNK_FIELDS = frozenset(
    {"id", "object", "created", "model", "system_fingerprint", "choices", "usage"}
)
# what a usage chunk of the proxy's own making repeats of the finishing chunk
_USAGE_CHUNK = ("id", "object", "created", "model", "system_fingerprint")
# what names the answer: every chunk of one answer says the same (a continuation's too)
_IDENTITY = ("id", "created", "model", "system_fingerprint")


class Carried(NamedTuple):
    """What a continuation carries on from the parts before it: the text they sent, which
    its stream may start by repeating; their chunks' identity (``id``, ``model``...), which
    its chunks take; and the tokens they sent, which its usage adds to its own (and takes
    from its prompt, which held them)."""

    text: str
    identity: JSONObject
    tokens: int


class StreamRelay:
    """One upstream stream passed on; after ``chunks()`` it tells what it saw.

    Chunks that came unread (raw bytes only) are passed on as they came; they count as one
    token each only if the stream breaks before its usage. Read chunks are written again
    (``Chunk.json``: the configured model named, as orjson writes JSON).
    """

    def __init__(
        self,
        stream: OpenStream,
        *,
        keep_usage: bool,
        carried: Carried | None = None,
    ) -> None:
        self.stream = stream
        self.keep_usage = keep_usage
        # A continuation of a broken stream (``carried``): chunks that bring nothing (its
        # role) are dropped, and so is the text sent before, where its stream starts by
        # repeating it (llama-server's does: its answer begins with the prefill). Its chunks
        # are the answer's: one id, one model, the whole usage.
        self.continuing = carried is not None
        self._echo = carried.text if carried is not None else ""
        self._carried = carried
        self.identity: JSONObject = carried.identity if carried is not None else {}
        self.error: UpstreamError | None = None  # what cut the stream, if anything
        self.read = StreamReader()  # the counts: text, tool calls, usage, draft counters
        self._held: JSONObject | None = None
        self._tail: list[bytes] = []
        self._tail_usage = False  # a chunk after the finishing one brought usage

    @property
    def upstream(self) -> Upstream:
        """The upstream whose stream this is."""
        return self.stream.upstream

    @property
    def text(self) -> str:
        """The content streamed so far."""
        return "".join(self.read.text)

    @property
    def tool_calls(self) -> ToolCallDeltas:
        """The tool calls streamed so far."""
        return self.read.tool_calls

    @property
    def speculation(self) -> dict[str, int] | None:
        """llama-server's draft counters, if it sent them."""
        return self.read.speculation

    @property
    def prompt_tokens(self) -> int:
        """The prompt's tokens by the upstream's usage (0 when none came)."""
        return self.read.prompt_tokens

    @property
    def first_token_at(self) -> float | None:
        """perf_counter when text first went out."""
        return self.read.first_token_at

    @property
    def n_tokens(self) -> int:
        """Tokens generated: the upstream's usage, else the reader's count (one per chunk
        that brought a token: content or a tool call)."""
        read = self.read
        return read.completion_tokens or read.token_chunks

    @property
    def estimated(self) -> bool:
        """No usage came: ``n_tokens`` counts chunks and the prompt is unknown."""
        return self.read.completion_tokens is None

    @property
    def counts(self) -> tuple[int, int, bool]:
        """Its tokens, its prompt's tokens, and whether they are estimated."""
        return self.n_tokens, self.prompt_tokens, self.estimated

    async def chunks(self) -> AsyncGenerator[bytes]:
        """The stream up to its finishing chunk, one write per network read; a failure
        (or a stream that ends without ``finish_reason``) ends it and is kept in ``error``.

        The finishing chunk ends the answer whether or not ``[DONE]`` follows: once it (and
        the usage, when one is due) has come, nothing more is waited for, and a stream that
        breaks or stalls after it still ends normally."""
        try:
            batch: list[Chunk] | None = self.stream.first
            self.stream.first = []  # an open stream keeps no batch it has passed on
            while batch is not None:
                out = self._take(batch)
                del batch  # not kept while the next one is awaited
                if out:
                    yield out
                if self.finished:
                    break
                batch = await anext(self.stream.rest, None)
            if self._held is None:
                # [DONE] is optional (Cerebras), so only a missing finish_reason shows a cut.
                raise UpstreamError(self.upstream.name, "stream ended before finish_reason")
        except UpstreamError as exc:
            if self._held is None:  # after the finish the answer is whole: not a failure
                self.error = exc
        finally:
            await self.stream.rest.aclose()

    @property
    def finished(self) -> bool:
        """The answer is whole: its finishing chunk came, and the usage if one is due
        (asked for by the client, or always sent: llama-server, which ends with ``[DONE]``
        anyway, so its stream is read to the end)."""
        if self._held is None or self.upstream.streams_usage:
            return False
        return not self.keep_usage or self.read.completion_tokens is not None

    def ending(self, fields: JSONObject) -> bytes:
        """The held finishing chunk with the proxy's ``fields``, what followed it, ``[DONE]``.
        Usage the client asked for that came on the finishing chunk (Cerebras puts it
        there) goes out as OpenAI sends it: on a last chunk of its own, with no choices."""
        assert self._held is not None, "the stream has not finished"
        held = {**self._held, **fields}
        if self.keep_usage and held.get("choices") and held.get("usage") is not None:
            usage = held.pop("usage")
            if not self._tail_usage:  # (else the usage chunk that followed says it)
                own = {k: held[k] for k in _USAGE_CHUNK if k in held}
                last = event({**own, "choices": [], "usage": usage})
                return b"".join([event(held), *self._tail, last, DONE])
        return b"".join([event(held), *self._tail, DONE])

    def _take(self, batch: list[Chunk]) -> bytes:
        """Read one batch; returns what can go out now."""
        out: list[bytes] = []
        read = self.read
        for chunk in batch:
            typed = chunk.typed
            if typed is None:
                read.take(chunk)
                (out if self._held is None else self._tail).append(b"data: " + chunk.raw + b"\n\n")
                continue
            if self._held is not None:
                read.take_totals(typed)
                self._tail_usage = self._tail_usage or typed.usage is not None
                if typed.choices or self.keep_usage:
                    self._tail.append(event(self._json(chunk)))
                else:  # a usage chunk only the proxy asked for: keep its extras
                    extras = {k: v for k, v in self._json(chunk).items() if k not in _CHUNK_FIELDS}
                    self._held = {**self._held, **extras}
                continue
            cut = self._unecho(typed) if self._echo else None
            delta, finish = read.take(chunk)
            if finish:
                self._held = self._json(chunk, cut)
            elif not (self.continuing and _empty(typed, delta)):
                out.append(event(self._json(chunk, cut)))
        return b"".join(out)

    def _unecho(self, typed: ChatCompletionChunk) -> str | None:
        """Drop from a chunk's text what it repeats of the echo still expected; returns the
        text left (None: the chunk kept as it came). Text that differs from the echo ends
        the watch: it is the continuation's own."""
        delta = typed.choices[0].delta if typed.choices else None
        if delta is None or not delta.content:
            return None
        content, echo = delta.content, self._echo
        n = min(len(content), len(echo))
        if content[:n] != echo[:n]:
            self._echo = ""
            return None
        delta.content, self._echo = content[n:], echo[n:]
        return delta.content

    def _json(self, chunk: Chunk, content: str | None = None) -> JSONObject:
        """A read chunk as the object to write out again (``content``: its text replaced)."""
        try:
            body = chunk.json()
        except orjson.JSONDecodeError as exc:
            raise UpstreamProtocolError(self.upstream.name, "sent an invalid stream chunk") from exc
        if content is not None:
            body["choices"][0]["delta"]["content"] = content
        if self._carried is None:
            if not self.identity:  # the first chunk read names the answer
                self.identity = {k: body[k] for k in _IDENTITY if k in body}
            return body
        body.update(self.identity)
        if isinstance(usage := body.get("usage"), dict):
            body["usage"] = _whole(usage, self._carried.tokens)
        return body


def _whole(usage: JSONObject, before: int) -> JSONObject:
    """A continuation's usage as the whole answer's: the ``before`` tokens the parts before
    it sent added to its completion, and taken from its prompt (they were in it: the
    prefill, or its own earlier turn; an instruction to go on stays counted). Its details
    (cached prompt tokens...) were its own call's, and are left out."""
    completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    if not isinstance(completion, int) or not isinstance(prompt, int):
        return usage
    completion, prompt = completion + before, max(prompt - before, 0)
    rest = {k: v for k, v in usage.items() if not k.endswith("_details")}
    counts = {"prompt_tokens": prompt, "completion_tokens": completion}
    return rest | counts | {"total_tokens": prompt + completion}


def _empty(typed: ChatCompletionChunk, delta: Delta) -> bool:
    """A chunk that brings nothing: no text, no tool call, no usage (a role chunk)."""
    return not delta.carries and typed.usage is None
