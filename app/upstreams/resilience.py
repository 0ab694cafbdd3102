"""What stands between a call and a failing or overloaded upstream.

    call()      one of ``concurrency.max_in_flight`` slots, waited for at most
                ``queue_timeout_s`` (then 503 busy, with retry-after), and the call's
                one ``Deadline`` (``timeout.total``), started as the slot is held
    send()      POSTs through the transport while the circuit breaker allows,
                retried per ``retry.py`` within the call's deadline, the rate budget
                updated from every answer

The policies themselves (``breaker.py``, ``ratelimit.py``, ``retry.py``) are pure;
this module carries them out around a transport, which tests replace with a fake.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from app.config import ModelConfig
from app.errors import UpstreamBusy, UpstreamError, UpstreamTimeout, UpstreamUnavailable
from app.upstreams.breaker import CircuitBreaker
from app.upstreams.deadlines import Deadline, Deadlines
from app.upstreams.parsing import rejection
from app.upstreams.ratelimit import RateBudget
from app.upstreams.retry import retry_delay
from app.upstreams.transport import Response, Transport

log = logging.getLogger("specproxy.upstream")


class Resilience:
    """Slots, deadline, retries, breaker and rate budget of one upstream."""

    def __init__(
        self, upstream: str, config: ModelConfig, transport: Transport, *, max_retries: int
    ) -> None:
        self.upstream = upstream
        self.config = config
        self.transport = transport
        self.max_retries = max_retries
        breaker = config.circuit_breaker
        self.breaker = CircuitBreaker(breaker.failures, breaker.cooldown_s)
        reserve = config.rate_limit_reserve
        self.budget = RateBudget(probe_every_s=reserve.probe_every_s, stale_s=reserve.stale_s)
        limit = config.concurrency.max_in_flight
        self._slots = asyncio.Semaphore(limit) if limit else None
        total = config.timeout.total
        self.deadlines = Deadlines(  # one timer for every call's
            total, lambda: UpstreamTimeout(self.upstream, f"no answer within {total:g} s")
        )
        self.queued = 0

    def call(self) -> _Call:
        """One call (``async with ... as deadline``): a slot held, waited for a bounded
        time, and the call's deadline (``timeout.total``) counted from then on."""
        return _Call(self)

    async def acquire_slot(self) -> None:
        """Take a slot (what ``slot()`` does on entry); raises ``UpstreamBusy`` after
        ``queue_timeout_s``."""
        if self._slots is None:
            return
        wait = self.config.concurrency.queue_timeout_s
        self.queued += 1
        try:
            async with asyncio.timeout(wait):
                await self._slots.acquire()
        except TimeoutError:
            raise UpstreamBusy(
                self.upstream,
                f"{self.config.concurrency.max_in_flight} requests in flight; "
                f"no slot freed within {wait:g} s",
                headers={"retry-after": "1"},
            ) from None
        finally:
            self.queued -= 1

    def release_slot(self) -> None:
        """Give a slot back (what ``slot()`` does on exit)."""
        if self._slots is not None:
            self._slots.release()

    async def send(
        self,
        url: str,
        content: bytes,
        headers: Mapping[str, str],
        deadline: Deadline,
        *,
        streamed: bool = True,
    ) -> Response:
        """POST with retries while ``deadline`` (the call's) leaves time for them;
        returns an open 2xx response whose body is not read yet."""
        attempt = 0
        while True:
            if not self.breaker.allow():
                raise UpstreamUnavailable(self.upstream, self.breaker.why_open())
            status: int | None = None
            response_headers: Mapping[str, str] = {}
            self.budget.sent()
            try:
                response = await self.transport.post(
                    url, content, headers, deadline, streamed=streamed
                )
            except UpstreamError as error:
                self.breaker.failure()
                failure: UpstreamError = error
            except BaseException:
                self.breaker.abandon()  # cancelled: no verdict on the upstream's health
                raise
            else:
                self.budget.update(response.headers)
                status, response_headers = response.status, response.headers
                if status < 500:
                    self.breaker.success()  # it answered: alive, whatever it said
                else:
                    self.breaker.failure()
                if 200 <= status < 300:
                    return response
                body, key = await response.error_body(), self.config.api_key
                failure = rejection(self.upstream, status, response_headers, body, key)
            delay = None
            if attempt < self.max_retries:
                delay = retry_delay(
                    attempt,
                    status,
                    response_headers,
                    deadline.left(),
                    max_wait_s=self.config.max_retry_wait_s,
                )
            if delay is None:
                raise failure
            log.info("%s: retrying in %.2f s after %s", self.upstream, delay, failure.detail)
            await asyncio.sleep(delay)
            attempt += 1


class _Call:
    """``Resilience.call()``: a slotted class, not an @asynccontextmanager, because an
    open stream holds it for its whole length (an async generator and its frame are
    ~0.4 KB per stream)."""

    __slots__ = ("deadline", "resilience")

    def __init__(self, resilience: Resilience) -> None:
        self.resilience = resilience
        self.deadline: Deadline | None = None

    async def __aenter__(self) -> Deadline:
        await self.resilience.acquire_slot()
        self.deadline = self.resilience.deadlines.start()
        return self.deadline

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.deadline is not None
        self.deadline.close()
        self.resilience.release_slot()
