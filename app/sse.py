"""Server-sent events: encoding, and replaying a finished completion as chunks.

Tool calls travel as OpenAI streams them: per call, a chunk with its index, id,
type and name (arguments ``""``), then argument fragments that concatenate to the
full JSON; ``ToolCallDeltas`` puts them back together.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
import orjson

from app.chat_completion import ChatCompletionChunk, Chunk, Delta, add_counts, draft_counters

DONE = b"data: [DONE]\n\n"
_WORDS = re.compile(r"\s*\S+|\s+$")


class DataLines:
    """The ``data:`` payloads of an event stream, fed in blocks cut anywhere.

    Blank separators, comments and ``event:`` lines are dropped; a line longer
    than ``limit`` bytes is an error (a broken or hostile upstream).
    """

    def __init__(self, limit: int = 1 << 20) -> None:
        self.limit = limit
        self._rest = b""

    def feed(self, block: bytes) -> list[bytes]:
        lines = (self._rest + block).split(b"\n")
        self._rest = lines.pop()
        if len(self._rest) > self.limit:
            raise ValueError(f"an event line over {self.limit} bytes")
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]


_NOT_FINISHED = b'"finish_reason":null'


def passes_unread(payload: bytes) -> bool:
    """Whether a chunk can be relayed without parsing it: it finishes nothing
    (``"finish_reason":null``) and carries no usage, no error and no tool call (the
    relay counts those).

    A quote cannot stand unescaped inside a JSON string, so these byte patterns
    match keys, never generated text. Other spellings (a space after the colon)
    are simply parsed.
    """
    return (
        _NOT_FINISHED in payload
        and b'"usage"' not in payload
        and b'"error"' not in payload
        and b'"tool_calls"' not in payload
    )


def carries_text(payload: bytes) -> bool:
    """Whether an unread chunk's delta brings text: a ``content`` string that is not empty
    (a role-only chunk's is null or "", or absent)."""
    return b'"content":"' in payload and b'"content":""' not in payload


def event(payload: dict[str, Any]) -> bytes:
    """One ``data:`` event."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _pieces(message: str, logprobs: list[dict[str, Any]] | None) -> list[tuple[str, Any]]:
    """Split the answer into chunk texts: the model's own tokens when they add up to it."""
    if logprobs and "".join(str(e.get("token", "")) for e in logprobs) == message:
        return [(str(e["token"]), e) for e in logprobs]
    return [(p, None) for p in _WORDS.findall(message)] or [("", None)]


class ToolCallDeltas:
    """Tool calls streamed as ``delta.tool_calls`` fragments, put back together by index."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._calls)

    def add(self, deltas: Any) -> None:
        """Take one delta's ``tool_calls`` list (malformed items are skipped)."""
        for i, delta in enumerate(deltas if isinstance(deltas, list) else ()):
            if not isinstance(delta, dict):
                continue
            index = delta.get("index", i)
            call = self._calls.setdefault(
                index if isinstance(index, int) else i,
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if isinstance(delta.get("id"), str):
                call["id"] = delta["id"]
            function = delta.get("function")
            if isinstance(function, dict):
                if isinstance(name := function.get("name"), str) and name:
                    call["function"]["name"] = name  # sent whole, once (some servers repeat it)
                if isinstance(fragment := function.get("arguments"), str):
                    call["function"]["arguments"] += fragment

    def calls(self) -> list[dict[str, Any]]:
        """The calls so far, in index order, in ``message.tool_calls`` shape."""
        return [self._calls[i] for i in sorted(self._calls)]


def tool_call_deltas(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A message's tool calls as the deltas a stream sends: per call its head (index, id,
    type, name), then its arguments in fragments."""
    deltas: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        head = {"index": index, "id": call.get("id"), "type": call.get("type", "function")}
        deltas.append({**head, "function": {"name": function.get("name"), "arguments": ""}})
        for piece in _WORDS.findall(function.get("arguments") or ""):
            deltas.append({"index": index, "function": {"arguments": piece}})
    return deltas


def completion_to_chunks(
    body: dict[str, Any], *, with_logprobs: bool, include_usage: bool, extra: dict[str, Any]
) -> list[dict[str, Any]]:
    """A non-streaming completion as the chunk sequence a streaming call would give.

    ``extra`` (``model_used``, ``speculative_decoding``) goes on the chunk that
    carries ``finish_reason``; usage follows in its own chunk when asked for.
    """
    choice = body["choices"][0]
    message = (choice.get("message") or {}).get("content") or ""
    tool_calls = (choice.get("message") or {}).get("tool_calls") or []
    logprobs = (choice.get("logprobs") or {}).get("content")
    head = {
        "id": body.get("id", "chatcmpl-specproxy"),
        "object": "chat.completion.chunk",
        "created": body.get("created", 0),
        "model": body.get("model", ""),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, lp: Any = None) -> dict[str, Any]:
        c: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if with_logprobs:
            c["logprobs"] = {"content": [lp]} if lp else None
        return {**head, "choices": [c]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message or not tool_calls:
        chunks += [chunk({"content": text}, lp=lp) for text, lp in _pieces(message, logprobs)]
    chunks += [chunk({"tool_calls": [delta]}) for delta in tool_call_deltas(tool_calls)]
    chunks.append({**chunk({}, choice.get("finish_reason") or "stop"), **extra})
    if include_usage and body.get("usage"):
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    return chunks


class StreamReader:
    """The one reader of an upstream's stream: what each chunk adds, typed, and the counts.

    A stream is read for three ends (the relay passes it on, the draft and the hedge
    assemble it: ``CompletionAssembler``), and each needs the same counts: chunks that
    brought text, chunks that brought tool-call fragments, the usage when it comes,
    llama-server's draft counters. ``take`` keeps them and hands back the chunk's
    ``Delta`` and ``finish_reason``; a chunk passed on unread (its raw bytes) is counted
    without being read, as one that brought text.
    """

    def __init__(self) -> None:
        self.content_chunks = 0  # chunks whose delta brought text (an unread one counts)
        self.tool_call_deltas = 0  # chunks whose delta brought tool-call fragments
        self.token_chunks = 0  # chunks that brought either (a chunk is about a token)
        self.completion_tokens: int | None = None  # the upstream's usage, when it came
        self.prompt_tokens = 0
        self.speculation: dict[str, int] | None = None  # llama-server's draft counters
        self.first_token_at: float | None = None  # perf_counter when text first came
        self.text: list[str] = []
        self.tool_calls = ToolCallDeltas()  # the calls streamed so far

    def take(self, chunk: Chunk) -> tuple[Delta, str | None]:
        """Read one chunk: its totals, then its delta, counted; returns the delta and the
        choice's ``finish_reason`` (an unread chunk: no delta read, no finish)."""
        typed = chunk.typed
        if typed is None:
            self.content_chunks += 1
            self.token_chunks += 1
            if self.first_token_at is None and carries_text(chunk.raw):
                self.first_token_at = time.perf_counter()
            return _NO_DELTA, None
        self.take_totals(typed)
        choices = typed.choices
        if not choices:
            return _NO_DELTA, None
        choice = choices[0]
        delta = choice.delta
        if delta is None:
            return _NO_DELTA, choice.finish_reason
        if content := delta.content:
            self.text.append(content)
            self.content_chunks += 1
        if calls := delta.tool_calls:
            self.tool_calls.add(calls)
            self.tool_call_deltas += 1
        if delta.carries:  # the one rule: non-empty content or any tool call
            self.token_chunks += 1
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
        return delta, choice.finish_reason

    def take_totals(self, typed: ChatCompletionChunk) -> None:
        """Keep a chunk's usage and draft counters (they may come after the finish)."""
        if usage := typed.usage:
            if usage.completion_tokens is not None:
                self.completion_tokens = usage.completion_tokens
            self.prompt_tokens = usage.prompt_tokens or self.prompt_tokens
        if typed.timings is not None:
            self.speculation = add_counts(self.speculation, draft_counters(typed.timings))


_NO_DELTA = Delta()


class CompletionAssembler(StreamReader):
    """Builds the non-streaming body of a streamed completion, chunk by chunk, as the
    stream's reader (its counts are ``StreamReader``'s).

    The inverse of ``completion_to_chunks`` for one choice: content and logprob entries are
    concatenated, ``finish_reason``, ``usage`` and llama-server's ``timings`` are kept, so a
    draft read as a stream can be judged and served like one read whole.
    """

    def __init__(self) -> None:
        super().__init__()
        self.head: dict[str, Any] = {}
        self.logprobs: list[dict[str, Any]] = []
        self.finish_reason: str | None = None
        self.extra: dict[str, Any] = {}  # usage, timings, as the upstream wrote them

    def add(self, chunk: Chunk) -> list[dict[str, Any]]:
        """Take one read chunk; returns the logprob entries it brought."""
        typed = chunk.typed
        assert typed is not None, "an assembled stream is read whole (not ``unread``)"
        if not self.head:
            head = {"id": typed.id, "created": typed.created, "model": typed.model}
            self.head = {k: v for k, v in head.items() if v is not msgspec.UNSET}
        if typed.usage is not None or typed.timings is not None:
            whole = _whole(chunk)  # kept as written: the served answer carries all of them
            self.extra.update((key, whole[key]) for key in ("usage", "timings") if whole.get(key))
        _, finish = self.take(chunk)
        if not typed.choices:
            return []
        if finish:
            self.finish_reason = finish
        logprobs = typed.choices[0].logprobs
        entries = (logprobs.content if logprobs is not None else None) or []
        self.logprobs += entries
        return entries

    def completion(self, finish_reason: str | None = None) -> dict[str, Any]:
        """The body so far; ``finish_reason`` overrides the stream's (e.g. an aborted draft)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls.calls()
            message["content"] = message["content"] or None
        choice = {
            "index": 0,
            "message": message,
            "logprobs": {"content": self.logprobs},
            "finish_reason": finish_reason or self.finish_reason,
        }
        return {"object": "chat.completion", **self.head, "choices": [choice], **self.extra}


def _whole(chunk: Chunk) -> dict[str, Any]:
    """A chunk as the upstream wrote it, or (one orjson refuses: a number past a double
    in a field msgspec skipped) as far as it was read."""
    try:
        return chunk.json()
    except orjson.JSONDecodeError:
        return msgspec.to_builtins(chunk.typed)
