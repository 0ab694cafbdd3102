"""Legacy text completions (``POST /v1/completions``): pure.

The pass-through strategies (``local_only``, ``cerebras_only``) send the client's body to
the upstream's own ``/v1/completions`` (``upstream_body``; ``passes_raw``), its answer
passed on as it came but for ``echo`` and the legacy logprobs (``reworked``). The
speculative strategy speaks it through chat: the prompt becomes one user message of a chat
request (``chat_body``), so its draft and judgement (both upstreams give logprobs on chat)
serve it as they serve chat; the chat answer becomes a ``text_completion``
(``text_completion``), and a chat stream's chunks become ``text_completion`` chunks
(``text_chunk``). What cannot be said through chat is the client's 400, never guessed:
token-array prompts, several prompts, ``suffix``, ``n``/``best_of`` above 1, and
``echo`` with ``logprobs`` (the prompt's own logprobs come from no chat answer).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.errors import InvalidRequest
from app.problems import first_problem
from app.protocol import JSONObject
from app.vocabulary import Strategy

REASON = "completion_as_chat"  # said in the answer's reasons and its X-Door header
# The client's sampling fields that mean the same on chat, passed on as they are.
_SAME = (
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "stream",
    "stream_options",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "user",
)


class CompletionRequest(BaseModel):
    """The legacy completion request, checked strictly; unknown fields are dropped (chat
    upstreams may refuse them)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | int | None = Field(None, ge=0, le=2)
    top_p: float | int | None = Field(None, ge=0, le=1)
    stop: str | list[str] | None = None
    n: int | None = Field(None, ge=1)
    best_of: int | None = Field(None, ge=1)
    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    seed: int | None = None
    presence_penalty: float | int | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | int | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float | int] | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _at_most_four(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("at most 4 stop sequences")
        return value

    @property
    def text(self) -> str:
        """The one prompt (``check`` made sure there is exactly one, as a string)."""
        prompt = self.prompt
        return prompt if isinstance(prompt, str) else str(prompt[0])


def parse(data: JSONObject) -> CompletionRequest:
    """The checked request, or the client's 400 naming its first problem (``messages``
    among them: a chat request sent to this door, which llama-server would answer as chat)."""
    if "messages" in data:
        raise InvalidRequest(
            "messages: the completions API takes a prompt; send chat messages to "
            "/v1/chat/completions",
            param="messages",
        )
    try:
        request = CompletionRequest.model_validate(data)
    except ValidationError as exc:
        param, message = first_problem(data, exc.errors())
        raise InvalidRequest(f"{param}: {message}" if param else message, param=param) from None
    _check(request)
    return request


def _check(request: CompletionRequest) -> None:
    prompt = request.prompt
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(p, str) for p in prompt):
            raise InvalidRequest(
                "prompt: token arrays are not supported: send the prompt as text",
                param="prompt",
            )
        if len(prompt) != 1:
            raise InvalidRequest(
                f"prompt: {len(prompt)} prompts in one request; send one prompt per request",
                param="prompt",
            )
    if request.suffix:
        raise InvalidRequest(
            "suffix: insertion (fill-in-the-middle) is not supported by this proxy",
            param="suffix",
        )
    for field in ("n", "best_of"):
        if (getattr(request, field) or 1) > 1:
            raise InvalidRequest(
                f"{field}: only 1 completion per request; send the request again for more",
                param=field,
            )
    if request.echo and request.logprobs is not None:
        raise InvalidRequest(
            "echo: echo with logprobs needs the prompt's logprobs, which no upstream gives "
            "here; drop one of them",
            param="echo",
        )


def chat_body(request: CompletionRequest) -> JSONObject:
    """The chat request that asks the same: the prompt as one user message."""
    body: JSONObject = {"messages": [{"role": "user", "content": request.text}]}
    for field in _SAME:
        if (value := getattr(request, field)) is not None:
            body[field] = value
    if request.logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = request.logprobs
    return body


def completion_id(chat_id: Any) -> str:
    """``cmpl-...`` from a chat answer's id (``chatcmpl-...``)."""
    rest = str(chat_id or "")
    for prefix in ("chatcmpl-", "cmpl-"):
        rest = rest.removeprefix(prefix)
    return f"cmpl-{rest}"


def legacy_logprobs(content: Any, offset: int) -> JSONObject | None:
    """Chat's per-token ``logprobs.content`` as the legacy ``logprobs`` object (its text
    offsets counted from ``offset``); None when there are none."""
    if not isinstance(content, list):
        return None
    tokens: list[str] = []
    token_logprobs: list[float | None] = []
    top: list[dict[str, Any] | None] = []
    offsets: list[int] = []
    for entry in content:
        if not isinstance(entry, dict):
            continue
        token = str(entry.get("token", ""))
        tokens.append(token)
        token_logprobs.append(entry.get("logprob"))
        alternatives = entry.get("top_logprobs")
        top.append(
            {str(a.get("token", "")): a.get("logprob") for a in alternatives if isinstance(a, dict)}
            if isinstance(alternatives, list)
            else None
        )
        offsets.append(offset)
        offset += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    }


def _choice(choice: Any, text: str, offset: int) -> JSONObject:
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    return {
        "text": text,
        "index": 0,
        "logprobs": legacy_logprobs(content, offset),
        "finish_reason": choice.get("finish_reason") if isinstance(choice, dict) else None,
    }


def _extras(chat: JSONObject) -> JSONObject:
    """The answer's own fields beyond OpenAI's (the proxy's, the upstream's timings)."""
    known = {"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}
    out = {k: v for k, v in chat.items() if k not in known}
    spec = out.get("speculative_decoding")
    if isinstance(spec, dict):
        out["speculative_decoding"] = spec | {"reasons": [*spec.get("reasons", []), REASON]}
    return out


def text_completion(chat: JSONObject, request: CompletionRequest) -> JSONObject:
    """A whole chat answer as the ``text_completion`` the client asked for."""
    choices = chat.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = first.get("message") if isinstance(first.get("message"), dict) else {}
    text = str((message or {}).get("content") or "")
    echo = request.text if request.echo else ""
    answer: JSONObject = {
        "id": completion_id(chat.get("id")),
        "object": "text_completion",
        "created": chat.get("created", 0),
        "model": chat.get("model", request.model or ""),
        "choices": [_choice(first, echo + text, len(request.text))],
        "usage": chat.get("usage"),
    }
    return answer | _extras(chat)


def text_chunk(chat: JSONObject, request: CompletionRequest, first: bool) -> JSONObject:
    """One streamed chat chunk as a ``text_completion`` chunk (``first``: the stream's
    first, which carries the prompt when echoing)."""
    choices = chat.get("choices") or []
    out_choices = []
    for choice in choices[:1]:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        text = str((delta or {}).get("content") or "") if isinstance(delta, dict) else ""
        out_choices.append(_choice(choice, text, len(request.text)))
    if first and request.echo:
        if out_choices:
            out_choices[0]["text"] = request.text + out_choices[0]["text"]
        else:
            out_choices.append(
                {"text": request.text, "index": 0, "logprobs": None, "finish_reason": None}
            )
    chunk: JSONObject = {
        "id": completion_id(chat.get("id")),
        "object": "text_completion",
        "created": chat.get("created", 0),
        "model": chat.get("model", request.model or ""),
        "choices": out_choices,
    }
    if "usage" in chat:
        chunk["usage"] = chat["usage"]
    return chunk | _extras(chat)


# -- the raw pass-through (local_only, cerebras_only) -----------------------------------------

RAW = "completion"  # the X-Door header of a completion passed to the upstream's own endpoint


def passes_raw(strategy: Strategy) -> bool:
    """Whether a strategy sends the completion to the upstream's own ``/v1/completions``
    (the pass-through ones); the speculative one drafts and judges it as chat."""
    return strategy is not Strategy.SPECULATIVE


def upstream_body(data: JSONObject, chat: JSONObject) -> JSONObject:
    """The client's own body for the upstream's ``/v1/completions``: every field as it
    came (an upstream's own extras too), but ``echo``, which the proxy does (llama-server
    ignores it), and the output cap the chat view got (``server.max_tokens_cap``)."""
    body = {k: v for k, v in data.items() if k != "echo"}
    if "max_tokens" in chat:
        body["max_tokens"] = chat["max_tokens"]
    return body


def reworks(request: CompletionRequest) -> bool:
    """Whether an upstream's text completion is changed on its way out: ``echo`` (the
    prompt put first) or ``logprobs`` (llama-server writes them as chat's ``content``
    entries, put in the legacy shape here); else its bytes pass as they came."""
    return bool(request.echo) or request.logprobs is not None


def reworked(answer: JSONObject, request: CompletionRequest, first: bool = True) -> JSONObject:
    """An upstream's ``text_completion`` (whole, or one streamed chunk: ``first``, the
    stream's first) with the prompt put first when echoing and its logprobs in the legacy
    shape."""
    choices = answer.get("choices")
    if not isinstance(choices, list):
        return answer
    out = []
    for choice in choices:
        if not isinstance(choice, dict):
            out.append(choice)
            continue
        choice = dict(choice)
        if request.echo and first and choice.get("index", 0) == 0:
            choice["text"] = request.text + str(choice.get("text") or "")
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and "tokens" not in logprobs and "content" in logprobs:
            choice["logprobs"] = legacy_logprobs(logprobs["content"], len(request.text))
        out.append(choice)
    return answer | {"choices": out}
