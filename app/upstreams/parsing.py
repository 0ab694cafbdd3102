"""What an upstream says, read: completion bodies, stream chunks and error bodies.

Pure: bytes in, ``Completion`` / typed chunks / ``UpstreamError`` out, with no I/O and no
clock, so a bad chunk, an odd error shape or an error that echoes our key can be tested
on its own. The configured key is masked in every upstream message passed on, and
answers name the configured model (llama-server names its GGUF file path).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson
from pydantic import SecretStr

from app.chat_completion import (
    CHUNK_DECODER,
    ChatCompletionChunk,
    Chunk,
    add_counts,
    draft_counters,
)
from app.errors import UpstreamError, UpstreamProtocolError, UpstreamRejected
from app.protocol import JSONObject
from app.sse import DataLines, passes_unread
from app.upstreams.numbers import inexact_number
from app.upstreams.shape import chunk_problem, completion_problem

# A ``"model": "..."`` member in a raw payload (a quote cannot stand unescaped inside a
# JSON string, so this matches a key, never generated text).
_MODEL_FIELD = re.compile(rb'"model":"(?:[^"\\]|\\.)*"')

# Headers worth handing back to the client when an upstream rate-limits.
_PASS_ON_HEADERS = ("retry-after", "retry-after-ms")


@dataclass(frozen=True)
class Completion:
    """A finished non-streaming answer."""

    body: JSONObject  # the answer as the upstream sent it, naming the configured model
    headers: Mapping[str, str]
    latency_s: float
    upstream: str = ""  # the name of the upstream that answered (a group's member)
    fell_over: tuple[UpstreamError, ...] = ()  # a group's members that failed before it

    @property
    def choice(self) -> JSONObject:
        return self.body["choices"][0]

    @property
    def text(self) -> str:
        return self.choice.get("message", {}).get("content") or ""

    @property
    def finish_reason(self) -> str | None:
        return self.choice.get("finish_reason")

    @property
    def completion_tokens(self) -> int:
        usage = self.body.get("usage") or {}
        return int(usage.get("completion_tokens") or 0)

    @property
    def prompt_tokens(self) -> int:
        usage = self.body.get("usage") or {}
        return int(usage.get("prompt_tokens") or 0)


def error_message(payload: Any) -> tuple[str, str | None]:
    """Message and code of an error body, nested (OpenAI, llama-server) or flat (Cerebras)."""
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict) and "message" in inner:
            code = inner.get("code")
            return str(inner["message"]), None if code is None else str(code)
        if isinstance(inner, str):
            return inner, None
    return "no error message", None


def error_param(payload: Any) -> str | None:
    """The ``param`` of an error body (nested or flat): the request field it names."""
    inner = payload.get("error", payload) if isinstance(payload, dict) else None
    param = inner.get("param") if isinstance(inner, dict) else None
    return param if isinstance(param, str) else None


def error_type(payload: Any) -> str | None:
    """The ``type`` of an error body (nested or flat), e.g. ``exceed_context_size_error``."""
    inner = payload.get("error", payload) if isinstance(payload, dict) else None
    kind = inner.get("type") if isinstance(inner, dict) else None
    return kind if isinstance(kind, str) else None


def redact(text: str, key: SecretStr | None) -> str:
    """Upstream text with ``key`` masked: some APIs echo the key they refuse."""
    return text.replace(key.get_secret_value(), "***") if key else text


def completion_body(upstream: str, content: bytes, model: str | None = None) -> JSONObject:
    """A non-streaming answer's JSON object, which must carry at least one choice;
    ``model`` (the configured name) replaces the one it gives."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        why = inexact_number(content) or "answered with invalid JSON"
        raise UpstreamProtocolError(upstream, why) from exc
    if not isinstance(data, dict):
        raise UpstreamProtocolError(upstream, "answer is not a JSON object")
    if problem := completion_problem(data) or inexact_number(content):
        raise UpstreamProtocolError(upstream, problem)
    if model is not None and "model" in data:
        data["model"] = model
    return data


def rejection(
    upstream: str, status: int, headers: Mapping[str, str], body: bytes, key: SecretStr | None
) -> UpstreamRejected:
    """The error for an HTTP error answer: its message, code and retry-after (key masked)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = None
    message, code = error_message(payload)
    param = error_param(payload)
    # Every string the client may see is masked: a cloud may echo the key it refuses
    # into any field or header.
    passed = {h: redact(headers[h], key) for h in _PASS_ON_HEADERS if h in headers}
    return UpstreamRejected(
        upstream,
        status,
        redact(message, key),
        code=None if code is None else redact(code, key),
        param=None if param is None else redact(param, key),
        headers=passed,
        upstream_type=error_type(payload),
    )


def chunk(
    upstream: str,
    data: bytes,
    key: SecretStr | None,
    decoder: msgspec.json.Decoder[Any] = CHUNK_DECODER,
) -> ChatCompletionChunk:
    """One ``data:`` payload read into a ``ChatCompletionChunk``; an unreadable one or an
    error event raises.

    msgspec checks the shape as it decodes; a payload it refuses is read again as a dict
    only to name the problem as ``app.upstreams.shape`` does (or as msgspec does, where it
    is the stricter of the two: a count past 63 bits). What msgspec skips is checked as
    JSON and as UTF-8, not read: a number past a double in a member the proxy does not
    read passes (orjson refused the chunk; a relay that writes it again still does).
    """
    try:
        typed: ChatCompletionChunk = decoder.decode(data)
        data.decode()  # what msgspec skipped is UTF-8 too
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError) as exc:
        _refuse(upstream, data, key)  # raises, naming the problem, if there is one
        raise UpstreamProtocolError(upstream, f"chunk: {exc}") from exc
    if typed.choices is msgspec.UNSET and (
        typed.error is not msgspec.UNSET or typed.message is not msgspec.UNSET
    ):
        _refuse(upstream, data, key)
    return typed


def _refuse(upstream: str, data: bytes, key: SecretStr | None) -> None:
    """Raise what is wrong with a payload: not JSON, not an object, an error event, a
    broken shape; return if none of these is."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(upstream, "sent an invalid stream chunk") from exc
    if not isinstance(parsed, dict):
        raise UpstreamProtocolError(upstream, "sent a non-object chunk")
    if "choices" not in parsed and ("error" in parsed or "message" in parsed):
        message, code = error_message(parsed)
        raise UpstreamError(
            upstream,
            f"error mid-stream: {redact(message, key)}",
            code=None if code is None else redact(code, key),
        )
    if problem := chunk_problem(parsed):
        raise UpstreamProtocolError(upstream, problem)


@dataclass(frozen=True)
class Batch:
    """What one block of a streamed body brought."""

    chunks: list[Chunk]
    done: bool = False  # ``[DONE]`` came, or the body ended
    error: UpstreamError | None = None  # a bad chunk after ``chunks``: the stream ends there


class ChunkParser:
    """The chunks of one streamed completion, from body blocks cut anywhere.

    Each is a ``Chunk``: its raw payload and what it says, typed. ``unread``: content
    chunks that finish nothing come as their raw ``data:`` payload only, not read
    (``app.sse.passes_unread``).
    """

    def __init__(
        self,
        upstream: str,
        key: SecretStr | None,
        *,
        unread: bool = False,
        model: str | None = None,
        decoder: msgspec.json.Decoder[Any] = CHUNK_DECODER,
    ) -> None:
        self.upstream = upstream
        self.key = key
        self.unread = unread
        self.decoder = decoder  # a text completion's chunks: ``app.upstreams.text_completion``
        self.model = model  # the configured name, put in place of the chunks' own
        self._model_field = b'"model":' + orjson.dumps(model) if model is not None else None
        self._lines = DataLines()

    def feed(self, block: bytes) -> Batch:
        """The chunks of ``block`` (b"" ends the body) up to ``[DONE]`` or a bad chunk.

        A bad chunk is returned, after the good ones before it; an event line over the
        limit raises ``UpstreamProtocolError``: the stream itself is broken.
        """
        try:
            payloads = self._lines.feed(block or b"\n")
        except ValueError as exc:
            raise UpstreamProtocolError(self.upstream, f"stream: {exc}") from exc
        chunks: list[Chunk] = []
        for data in payloads:
            if data == b"[DONE]":
                return Batch(chunks, done=True)
            if self.unread and passes_unread(data):
                chunks.append(Chunk(self._renamed(data)))
                continue
            try:
                typed = chunk(self.upstream, data, self.key, self.decoder)
            except UpstreamError as error:
                return Batch(chunks, error=error)
            if self.model is not None and typed.model is not msgspec.UNSET:
                typed.model = self.model
            chunks.append(Chunk(data, typed))
        return Batch(chunks, done=not block)

    def _renamed(self, payload: bytes) -> bytes:
        """A raw payload naming the configured model."""
        field = self._model_field
        if field is None or field in payload:
            return payload
        return _MODEL_FIELD.sub(lambda _: field, payload, count=1)


# -- llama-server's draft counters (its ``timings`` when it speculates with a draft model)


def server_speculation(body: JSONObject) -> dict[str, int] | None:
    """llama-server's own draft counters, when it speculates with a draft model."""
    return draft_counters(body.get("timings"))


def add_speculation(seen: dict[str, int] | None, body: JSONObject) -> dict[str, int] | None:
    """llama-server's draft counters of one more local answer (a continuation after the
    draft) added to those already seen."""
    return add_counts(seen, server_speculation(body))
