"""What the pipeline calls: the ``Upstream`` protocol, and what its calls return beyond
``Completion`` and ``PassedAnswer``.

A single server (``ChatUpstream``), a group answering as one (``UpstreamGroup``: a pool,
a chain) and the tests' queue-backed fake (``tests/support/fake_upstream.py``) all
implement it, so no caller asks which one it holds. What an upstream can do is a
class attribute (``streams_usage``), as in simonw/llm's ``Model``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict, runtime_checkable

from app.chat_completion import Chunk
from app.config import ModelConfig
from app.errors import UpstreamError
from app.protocol import JSONObject
from app.upstreams.breaker import BreakerStatus
from app.upstreams.parsing import Completion
from app.upstreams.passthrough import PassedAnswer
from app.upstreams.ratelimit import BudgetStatus
from app.vocabulary import CloudState


class UpstreamStatus(TypedDict):
    """An upstream's resilience state for /stats (a group's adds its members)."""

    circuit: BreakerStatus
    rate_limit: BudgetStatus
    queued: int


class Props(TypedDict, total=False):
    """What a server says of itself (llama-server's ``GET /props``), as it said it: the
    keys the proxy reads, each checked where it is read (a build may send any value)."""

    default_generation_settings: object
    modalities: object
    chat_template_caps: object


@dataclass(slots=True)
class OpenStream:
    """An upstream stream whose first batch of chunks has arrived (``upstream``: the one
    sending it, a group's member; ``fell_over``: the members of its group that failed
    before it)."""

    upstream: Upstream
    first: list[Chunk]
    rest: AsyncGenerator[list[Chunk]]
    fell_over: tuple[UpstreamError, ...] = ()

    @classmethod
    async def first_of(cls, upstream: Upstream, chunks: AsyncGenerator[list[Chunk]]) -> OpenStream:
        """``chunks`` once its first batch has come; closed if none comes (the upstream's
        error: a stream that ends at once is one too)."""
        try:
            return cls(upstream, await anext(chunks), chunks)
        except StopAsyncIteration:
            raise UpstreamError(upstream.name, "stream ended before any chunk") from None
        except BaseException:
            await chunks.aclose()
            raise

    async def batches(self) -> AsyncGenerator[list[Chunk]]:
        """The first batch, then the rest as they come."""
        yield self.first
        async for batch in self.rest:
            yield batch


@runtime_checkable
class Upstream(Protocol):
    """Chat completions from one configured model entry: one server, or several as one.

    Every call raises ``UpstreamError`` (or a subclass) when the upstream fails; a group
    names the member that answered (``Completion.upstream``, ``OpenStream.upstream``) and
    the ones that failed before it (``fell_over``). ``pass_on`` and ``open_stream`` also
    take a legacy text completion's body (a ``prompt``, no ``messages``): it goes to the
    upstream's ``/v1/completions`` and its ``text_completion`` is read as a chat answer is
    (``app.upstreams.text_completion``), through the same resilience and transport.
    """

    name: str

    # Capabilities: class attributes of a single upstream.
    @property
    def streams_usage(self) -> bool:
        """Every stream ends with a usage chunk (the only exact token count), so content
        chunks need not be read to count them."""
        ...

    @property
    def continues_prefill(self) -> bool:
        """A request whose last message is the assistant's is answered by continuing that
        message (an assistant prefill, as llama-server does), not after it."""
        ...

    @property
    def has_props(self) -> bool:
        """It says what it can do beyond text (``props()``)."""
        ...

    @property
    def config(self) -> ModelConfig:
        """The model entry's configuration (a group's: its first member's)."""
        ...

    @property
    def base_url(self) -> str | None:
        """Where it is served (None: a managed server not started yet)."""
        ...

    @property
    def members(self) -> Sequence[Upstream]:
        """The single upstreams that answer (a single one: itself), in configured order."""
        ...

    @property
    def configured(self) -> bool:
        """It has what it needs to be called (an API key, if it needs one); a group, when
        any member has."""
        ...

    @property
    def unavailable_reason(self) -> str | None:
        """Why it cannot be called at all (no key, not started), or None."""
        ...

    @property
    def in_flight(self) -> int:
        """Calls under way."""
        ...

    @property
    def last_ok_at(self) -> float | None:
        """When it last answered (``time.time()``)."""
        ...

    @property
    def last_error(self) -> str | None:
        """The message of its last failure, while it has not answered since."""
        ...

    def availability(self, need: int) -> CloudState:
        """Whether it may be called now for an answer of ``need`` tokens; side-effect
        free (no probe is taken, nothing is logged)."""
        ...

    def status(self) -> UpstreamStatus:
        """Resilience state for /stats: circuit, rate budget, queue."""
        ...

    async def healthy(self) -> bool | None:
        """Whether it answers a cheap probe; None where no probe is free."""
        ...

    async def complete(self, body: JSONObject) -> Completion:
        """One non-streaming chat completion, parsed."""
        ...

    async def pass_on(self, body: JSONObject) -> PassedAnswer:
        """One non-streaming chat completion to pass on as it came, read but not parsed."""
        ...

    async def open_stream(
        self, body: JSONObject, *, unread: bool = False, bounded: bool = False
    ) -> OpenStream:
        """A stream whose first chunks have come, so an upstream that fails at once is
        still an HTTP error for the client; a group asks its next member while none has
        sent a chunk. ``bounded``: ``timeout.total`` bounds the whole stream (a draft read
        whole before answering), not only the wait for its first chunk. ``unread``:
        content chunks that finish nothing come as their raw ``data:`` payload only."""
        ...

    async def props(self) -> Props | None:
        """What the server says of itself (llama-server's ``/props``: its build's
        settings, what the model reads); None where it does not say."""
        ...

    async def metrics_text(self) -> str | None:
        """The server's own Prometheus metrics, or None where it has none to scrape."""
        ...


__all__ = [
    "CloudState",
    "Completion",
    "OpenStream",
    "PassedAnswer",
    "Props",
    "Upstream",
    "UpstreamStatus",
]
