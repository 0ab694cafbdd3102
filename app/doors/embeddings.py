"""``POST /v1/embeddings``: the request checked, its upstream chosen, the answer shaped: pure.

The upstream is a ``models:`` entry with ``embeddings: true`` (``choose``). It is always
asked for floats (llama-server may not encode base64); ``encoding_format: base64`` is
then done here, as OpenAI does it: the little-endian float32 bytes, base64-encoded
(``base64_of``). No embeddings upstream configured is a 404 in OpenAI's shape that says
how to configure one.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import InvalidRequest, ProxyError, UpstreamProtocolError
from app.problems import first_problem
from app.protocol import JSONObject


class NoEmbeddingsModel(ProxyError):
    """No ``models:`` entry serves embeddings, or the request names one that does not."""

    status = 404
    type = "invalid_request_error"


class EmbeddingRequest(BaseModel):
    """OpenAI's embeddings request, checked strictly; unknown fields are dropped."""

    model_config = ConfigDict(extra="ignore", strict=True)

    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    @property
    def count(self) -> int:
        """How many inputs: one string or one token array counts as one."""
        given = self.input
        if isinstance(given, str) or (given and isinstance(given[0], int)):
            return 1
        return len(given)


def parse(data: JSONObject) -> EmbeddingRequest:
    """The checked request, or the client's 400 naming its first problem."""
    try:
        request = EmbeddingRequest.model_validate(data)
    except ValidationError as exc:
        param, message = first_problem(data, exc.errors())
        raise InvalidRequest(f"{param}: {message}" if param else message, param=param) from None
    given = request.input
    tokens = isinstance(given, list) and bool(given) and isinstance(given[0], int)
    if not tokens and (not given or any(not x for x in given if not isinstance(given, str))):
        raise InvalidRequest("input: an empty input has no embedding", param="input")
    return request


def choose(serving: Sequence[str], model: str | None) -> str:
    """The name of the upstream that answers: the one named by ``model``, or the only one
    (``model`` is then ignored)."""
    if not serving:
        raise NoEmbeddingsModel(
            "no embeddings model is configured: add a models: entry with embeddings: true to "
            "config.yaml (a llama-server started with --embeddings, which launch: adds, or "
            "any OpenAI-compatible server); see docs/agents.md",
            param="model",
            code="model_not_found",
        )
    if len(serving) == 1:
        return serving[0]
    if model is not None and model in serving:
        return model
    raise NoEmbeddingsModel(
        f"the model '{model}' serves no embeddings; name one of: {', '.join(serving)}",
        param="model",
        code="model_not_found",
    )


def upstream_body(request: EmbeddingRequest, upstream_model: str) -> JSONObject:
    """What the upstream is asked: floats, always; ``dimensions`` when the client gave it."""
    body: JSONObject = {"input": request.input, "model": upstream_model, "encoding_format": "float"}
    if request.dimensions is not None:
        body["dimensions"] = request.dimensions
    return body


def base64_of(vector: Sequence[float]) -> str:
    """OpenAI's base64 encoding: the vector as little-endian float32, base64-encoded."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def floats_of(encoded: str) -> list[float]:
    """The inverse of ``base64_of`` (as the ``openai`` SDK decodes it)."""
    raw = base64.b64decode(encoded)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def answer(upstream: str, data: Any, request: EmbeddingRequest, model: str) -> JSONObject:
    """The upstream's answer in OpenAI's shape, encoded as the client asked; vectors of
    another size than the ``dimensions`` asked (an upstream that ignores it, as
    llama-server does) are the client's 400, never served as they came."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(_vector(item) for item in items):
        raise UpstreamProtocolError(upstream, "the embeddings answer has no list of vectors")
    sizes = {len(item["embedding"]) for item in items if isinstance(item["embedding"], list)}
    if request.dimensions is not None and sizes - {request.dimensions}:
        raise InvalidRequest(
            f"dimensions: the model gives vectors of {max(sizes)} dimensions and cannot "
            f"shorten them to {request.dimensions}; leave dimensions out",
            param="dimensions",
        )
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    prompt = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else 0
    encode = request.encoding_format == "base64"
    out = []
    for index, item in enumerate(items):
        vector = item["embedding"]
        if encode and isinstance(vector, list):
            vector = base64_of(vector)
        out.append({"object": "embedding", "index": item.get("index", index), "embedding": vector})
    return {
        "object": "list",
        "data": out,
        "model": model,
        "usage": {"prompt_tokens": prompt, "total_tokens": usage.get("total_tokens", prompt)},
    }


def _vector(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    vector = item.get("embedding")
    if isinstance(vector, str):
        return True
    return isinstance(vector, list) and all(
        isinstance(x, float | int) and not isinstance(x, bool) for x in vector
    )
