"""The Cerebras Inference API: the cloud verifier."""

from __future__ import annotations

from app.protocol import JSONObject
from app.upstreams.base import ChatUpstream


class Cerebras(ChatUpstream):
    """Cerebras chat completions: bearer key, flat errors, retried on 429/5xx."""

    needs_key = True
    retries = True

    def prepare(self, body: JSONObject) -> JSONObject:
        # max_tokens is deprecated there; rename, never invent a budget the
        # client did not ask for (the token bucket is charged for it up front).
        body = super().prepare(body)
        if "max_tokens" in body and "max_completion_tokens" not in body:
            body["max_completion_tokens"] = body.pop("max_tokens")
        return body
