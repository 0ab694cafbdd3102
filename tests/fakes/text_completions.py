"""OpenAI's legacy text completions (``POST /v1/completions``) as the stand-ins speak them.

Each stand-in answers a ``prompt`` with the same scripted generation as a chat request,
written as its upstream writes a ``text_completion``:

- llama-server (``tools/server``, measured on this machine's build, see
  docs/agents.md): ``choices[{text, index, logprobs, finish_reason}]`` with
  ``logprobs: null`` unless asked, and then its chat-style ``{"content": [entries]}``;
  ``object: "text_completion"``, a ``chatcmpl-`` id, ``usage`` and ``timings``. A stream
  has no role chunk: one ``text`` chunk per token, then a finishing chunk with empty text,
  ``usage`` (always, asked or not) and ``timings``; ``echo`` is ignored.
- Cerebras (``POST /v1/completions``, its SDK's ``Completion`` types):
  ``choices[{index, text, finish_reason, logprobs}]``, ``logprobs`` in the legacy shape
  (``tokens``, ``token_logprobs``, ``top_logprobs`` as dicts, ``text_offset``) when asked
  for with an integer, ``system_fingerprint``, ``time_info`` and ``usage``; a stream's
  chunks are ``text_completion`` objects, ``usage`` and ``time_info`` on the last one.
"""

from __future__ import annotations

from typing import Any

from .script import JSON, Stream

KIND = "text_completion"


def is_text(body: JSON) -> bool:
    """A legacy completion request: a ``prompt`` and no ``messages``."""
    return "prompt" in body and "messages" not in body


def prompt_text(body: JSON) -> str:
    """The prompt as text (a list of strings joined; token ids written as numbers)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return " ".join(str(p) for p in prompt)
    return str(prompt or "")


def _text_of(choice: JSON) -> str:
    message = choice.get("message") or choice.get("delta") or {}
    return str(message.get("content") or "")


def llama_answer(chat: JSON) -> JSON:
    """llama-server's whole ``text_completion`` from the chat completion it would give."""
    choices = []
    for choice in chat["choices"]:
        choices.append(
            {
                "text": _text_of(choice),
                "index": choice["index"],
                "logprobs": choice.get("logprobs"),
                "finish_reason": choice["finish_reason"],
            }
        )
    return chat | {"choices": choices, "object": KIND}


def llama_stream(chat: Stream) -> Stream:
    """llama-server's streamed ``text_completion`` chunks: no role chunk, usage always on
    the finishing chunk."""

    def text_chunk(chunk: JSON) -> JSON:
        choice = chunk["choices"][0]
        out = {
            "text": _text_of(choice),
            "index": 0,
            "logprobs": choice.get("logprobs"),
            "finish_reason": choice["finish_reason"],
        }
        return chunk | {"choices": [out], "object": KIND}

    finish = text_chunk(chat.tail[0])
    for extra in chat.tail[1:]:  # the separate usage chunk of a chat stream, and timings
        finish |= {k: v for k, v in extra.items() if k in ("usage", "timings")}
    return Stream(head=[], content=[text_chunk(c) for c in chat.content], tail=[finish])


def legacy_logprobs(entries: list[JSON], n: int, offset: int = 0) -> JSON:
    """OpenAI's legacy ``logprobs`` from chat-style entries: ``n`` alternatives each."""
    tokens, token_logprobs, top, offsets = [], [], [], []
    for entry in entries:
        tokens.append(entry["token"])
        token_logprobs.append(entry["logprob"])
        top.append({alt["token"]: alt["logprob"] for alt in entry["top_logprobs"][:n]})
        offsets.append(offset)
        offset += len(entry["token"])
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }


def cerebras_answer(chat: JSON, n_logprobs: int | None) -> JSON:
    """Cerebras' whole ``text_completion`` from the chat completion it would give."""
    choices = []
    for choice in chat["choices"]:
        out: JSON = {
            "index": choice["index"],
            "text": _text_of(choice),
            "finish_reason": choice["finish_reason"],
        }
        if n_logprobs is not None:
            entries = (choice.get("logprobs") or {}).get("content") or []
            out["logprobs"] = legacy_logprobs(entries, n_logprobs)
        choices.append(out)
    return chat | {"choices": choices, "object": KIND}


def cerebras_stream(chat: Stream, n_logprobs: int | None) -> Stream:
    """Cerebras' streamed ``text_completion`` chunks (usage and time_info on the last)."""

    def text_chunk(chunk: JSON) -> JSON:
        choice = chunk["choices"][0]
        out: JSON = {
            "index": 0,
            "text": _text_of(choice),
            "finish_reason": choice["finish_reason"],
        }
        if n_logprobs is not None and choice.get("logprobs"):
            out["logprobs"] = legacy_logprobs(choice["logprobs"]["content"], n_logprobs)
        return chunk | {"choices": [out], "object": KIND}

    return Stream(
        head=[], content=[text_chunk(c) for c in chat.content], tail=[text_chunk(chat.tail[0])]
    )


def asked_logprobs(body: JSON) -> int | None:
    """A legacy request's ``logprobs`` (an integer: alternatives per token), or None."""
    value: Any = body.get("logprobs")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
