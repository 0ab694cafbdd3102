"""Legacy text completions (``POST /v1/completions``) through the same upstream calls as chat.

llama-server and Cerebras both serve OpenAI's legacy completions: a ``prompt`` in, a
``text_completion`` out (``choices[].text``), streamed as ``text_completion`` chunks.
The ``Upstream`` protocol's ``pass_on`` and ``open_stream`` take such a body as they take a
chat body: its dialect is the body's own (``is_text``: a ``prompt`` and no ``messages``,
which no chat request is), and picks the path (``completions_url``) and how the answer is
read. So a text completion passes the same resilience (slots, deadline, retries, breaker,
rate budget), transport, error table and key masking as chat, and the pipeline counts,
prices and logs it as it does a pass-through chat answer.

How it is read: ``TextAnswerView`` and ``TextCompletionChunk`` are the chat views with a
choice's ``text`` read as its message's (or delta's) content, so every reader of an answer
or a stream (the counts, the first token, the text kept for the spec log) reads it as it
reads chat, and the bytes pass on as the upstream sent them.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from app.chat_completion import ChatCompletionChunk, Choice, ChunkChoice, Delta, Message
from app.upstreams.passthrough import AnswerView

PATH = "/completions"


def is_text(body: Any) -> bool:
    """Whether ``body`` asks for a legacy text completion (a ``prompt``, no ``messages``)."""
    return isinstance(body, dict) and "prompt" in body and "messages" not in body


def completions_url(base_url: str) -> str:
    """Where text completions are POSTed (``/v1`` is added unless base_url has it)."""
    return base_url + (PATH if base_url.endswith("/v1") else "/v1" + PATH)


class TextChoice(Choice):
    """A ``text_completion`` choice: its ``text`` read as the message's content."""

    message: Message = msgspec.field(default_factory=Message)
    text: str | None = None

    def __post_init__(self) -> None:
        if self.text is not None and self.message.content is None:
            self.message = Message(role="assistant", content=self.text)


class TextAnswerView(AnswerView):
    """A whole ``text_completion``, read as ``AnswerView`` reads a chat answer."""

    choices: Annotated[list[TextChoice], msgspec.Meta(min_length=1)]  # type: ignore[assignment]


class TextChunkChoice(ChunkChoice):
    """A streamed ``text_completion`` choice: its ``text`` read as the delta's content."""

    text: str | None = None

    def __post_init__(self) -> None:
        if self.delta is None and self.text is not None:
            self.delta = Delta(content=self.text)


class TextCompletionChunk(ChatCompletionChunk):
    """One streamed ``text_completion`` chunk, read as a chat chunk is."""

    choices: list[TextChunkChoice] | msgspec.UnsetType | None = msgspec.UNSET  # type: ignore[assignment]


ANSWER_DECODER = msgspec.json.Decoder(TextAnswerView)
CHUNK_DECODER = msgspec.json.Decoder(TextCompletionChunk)
