"""Continuing an answer whose stream broke after its text had reached the client.

A relayed stream that drops, sends an error event or stalls past ``timeout.read`` after
some of its text went out is continued instead of ended: the next member of the verifier
chain, then the local model (``continuers``), is asked for the rest of the same answer
(``continue_body``), and only what it adds is relayed. An upstream that continues a final
assistant message (``Upstream.continues_prefill``: llama-server's assistant prefill) gets
the text sent as that message; one that does not gets it as its own earlier turn and an
instruction to go on from where it stopped (``CONTINUE``): a fallback, since such a model
may restate a few words. A stream cut once tool calls had begun is not continued (a call's
arguments cannot be resumed as text): it ends with the error event as before.

Pure but for ``Continuation.after``, which asks the continuers in turn: the pipeline's
relay (``app.pipeline.answer.LiveRelay``) calls it and relays what it opens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.errors import UpstreamError
from app.protocol import JSONObject
from app.upstreams.interface import Upstream
from app.upstreams.relay import Carried, StreamRelay

# What an upstream without the prefill is told after the text it is to continue.
CONTINUE = (
    "Your previous answer was cut off. Continue it exactly where it stopped, without "
    "repeating anything already written and without any preamble."
)
_LIMITS = ("max_tokens", "max_completion_tokens", "n_predict")
# Not carried into a continuation: a grammar or schema would constrain the rest alone.
_DROPPED = ("response_format", "n", "logprobs", "top_logprobs")


def continuable(relay: StreamRelay) -> bool:
    """Whether a relayed stream that ended is to be continued: it broke, and no tool call
    had begun (one cut inside its arguments is an error, as before)."""
    return relay.error is not None and not relay.tool_calls


Part = tuple[StreamRelay, UpstreamError, tuple[UpstreamError, ...]]


@dataclass(slots=True)
class Continuation:
    """A relayed stream and its continuations: who may still continue it, in order (each
    asked once), the local model's name (its tokens are the local model's), and each part
    that continued it with the failure that cut the one before and the continuers that
    failed to open first."""

    first: StreamRelay
    left: list[Upstream]
    local: str
    parts: list[Part] = field(default_factory=list)

    @property
    def relays(self) -> list[StreamRelay]:
        """Every part relayed so far, the first stream's first."""
        return [self.first, *(part[0] for part in self.parts)]

    async def after(self, ended: StreamRelay, raw: JSONObject) -> StreamRelay | None:
        """The relay of the next continuer's stream for the rest of the answer, when the
        part that ``ended`` broke and may be continued; None otherwise, or when no
        continuer opened (their failures are then carried by ``ended``'s error)."""
        broken = ended.error
        if broken is None or not continuable(ended):
            return None
        sent = self.relays
        text, spent = "".join(r.text for r in sent), sum(r.n_tokens for r in sent)
        failures: list[UpstreamError] = []
        while self.left:
            upstream = self.left.pop(0)
            body = continue_body(raw, text, spent, prefill=upstream.continues_prefill)
            try:
                opened = await upstream.open_stream(body)
            except UpstreamError as exc:
                failures += [*exc.fell_over, exc]
                continue
            carried = Carried(text, self.first.identity, spent)
            more = StreamRelay(opened, keep_usage=ended.keep_usage, carried=carried)
            self.parts.append((more, broken, (*failures, *opened.fell_over)))
            return more
        broken.fell_over = (*broken.fell_over, *failures)
        return None


def continuation(chain: Upstream, local: Upstream, relay: StreamRelay) -> Continuation:
    """``relay``'s continuation, should it break: the verifier chain's members after the
    one sending it, then the local model. The local model's own stream stays local
    (``local_only`` asked for it): the other servers of its pool continue it, if it has
    any (they are one model: the answer goes on as it began)."""
    broken = relay.upstream
    if any(m is broken for m in local.members):
        return Continuation(relay, [m for m in local.members if m is not broken], local.name)
    members = list(chain.members)
    at = next((i for i, m in enumerate(members) if any(x is broken for x in m.members)), None)
    left = [] if at is None else [*(m for m in members[at + 1 :] if m is not local), local]
    return Continuation(relay, left, local.name)


def passes_unread(upstream: Upstream, local: Upstream) -> bool:
    """Whether ``upstream``'s own stream may be passed on unread (its usage chunk counts
    it): only where nobody would continue it, which needs its text: the local model's
    own single server (a pool's others would; a verifier's, the local model would)."""
    return upstream is local and upstream.streams_usage and len(upstream.members) < 2


def continue_body(raw: JSONObject, text: str, spent: int, *, prefill: bool) -> JSONObject:
    """The request that continues an answer of which ``text`` (``spent`` tokens) was sent:
    the client's, with the text as the assistant's last message (``prefill``) or as its
    turn followed by ``CONTINUE``, and the token limit less what was spent (at least 1)."""
    body = {k: v for k, v in raw.items() if k not in _DROPPED}
    messages = list(raw.get("messages") or [])
    if text:
        messages.append({"role": "assistant", "content": text})
        if not prefill:
            messages.append({"role": "user", "content": CONTINUE})
    body["messages"] = messages
    for key in _LIMITS:
        if isinstance(limit := body.get(key), int) and not isinstance(limit, bool):
            body[key] = max(1, limit - spent)
    return body
