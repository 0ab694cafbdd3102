"""The Cerebras Inference API: the cloud verifier."""

from __future__ import annotations

from app.protocol import JSONObject
from app.upstreams.base import ChatUpstream
from app.upstreams.text_completion import is_text


class Cerebras(ChatUpstream):
    """Cerebras chat completions: bearer key, flat errors, retried on 429/5xx."""

    needs_key = True
    retries = True

    def prepare(self, body: JSONObject) -> JSONObject:
        # max_tokens is deprecated there; rename, never invent a budget the
        # client did not ask for (the token bucket is charged for it up front).
        # Its legacy /v1/completions takes max_tokens as it is.
        body = super().prepare(body)
        if is_text(body):
            return body
        if "max_tokens" in body and "max_completion_tokens" not in body:
            body["max_completion_tokens"] = body.pop("max_tokens")
        return body
