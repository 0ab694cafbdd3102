"""The wire under an upstream: the pooled aiohttp session, and the one place where
aiohttp's errors become the proxy's ``UpstreamError``.

Everything above this module (resilience, parsing, the ``ChatUpstream`` facade) sees
``Response`` and ``UpstreamError`` only. The mapping is one table (``ERRORS``), so the
kinds counted in /stats and /metrics can be read in one place.

Why aiohttp and not httpx: on this machine's loopback bench, one core, httpx 0.28
managed 1,681 requests/s at concurrency 1 and 659 at concurrency 64 (its pool checks
every idle connection's socket on every request), aiohttp 3.14 4,548 and 13,276
(``bench/overhead.py`` shows the effect on the whole proxy).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from app.config import ModelConfig
from app.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamTransportError,
    UpstreamUnavailable,
)
from app.upstreams.deadlines import Deadline, Deadlines

log = logging.getLogger("specproxy.upstream")

# aiohttp's error -> the proxy's, first match wins. aiohttp's connect and read timeouts
# are TimeoutErrors as well as ClientErrors, so that row comes first; a refused
# connection is a ClientConnectorError; anything else is a transport failure.
ERRORS: tuple[tuple[type[BaseException], type[UpstreamError], str], ...] = (
    (TimeoutError, UpstreamTimeout, "{what}: timed out ({name})"),
    (aiohttp.ClientConnectorError, UpstreamUnavailable, "{what} ({name})"),
    (aiohttp.ClientError, UpstreamTransportError, "{what} ({name})"),
)

# A reused connection that the upstream closed under us (keep-alive race); a refused
# or timed-out connect is a ClientConnectorError/ServerTimeoutError, caught before these.
_DROPPED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


def translate(
    upstream: str, exc: aiohttp.ClientError, what: str, *, mid_stream: bool = False
) -> UpstreamError:
    """The proxy's error for aiohttp's ``exc`` while doing ``what`` (per ``ERRORS``).

    ``mid_stream``: the answer was already streaming, so a failure the table does not
    name is a broken stream (``UpstreamError``, kind ``stream``), not a transport one.
    """
    for caught, error, template in ERRORS:
        if isinstance(exc, caught):
            broke = mid_stream and error is UpstreamTransportError
            return (UpstreamError if broke else error)(
                upstream, template.format(what=what, name=type(exc).__name__)
            )
    raise TypeError(f"not an aiohttp error: {exc!r}")  # the last row takes every ClientError


def create_client(config: ModelConfig) -> aiohttp.ClientSession:
    """The one pooled session an upstream uses, with explicit timeouts and limits.

    ``timeout.first_byte`` and ``timeout.total`` are enforced per call (``Transport``
    and the call's ``Deadline``); the session bounds connecting and each socket read
    (``timeout.read``: a stall between two reads, not a clock on the call).
    Environment proxies (``HTTPS_PROXY``...) apply to remote upstreams, never to
    the local model; ``.netrc`` is never read (``trust_env`` stays off: aiohttp would
    take a ``.netrc`` login for the upstream and then refuse the key's header), and
    redirects are not followed (``Transport.post``).
    """
    t = config.timeout
    proxy, proxy_auth = _env_proxy(config)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=config.max_connections,
            keepalive_timeout=config.keepalive_expiry_s,
        ),
        timeout=aiohttp.ClientTimeout(sock_connect=t.connect, sock_read=t.read),
        proxy=proxy,
        proxy_auth=proxy_auth,
    )


def _env_proxy(config: ModelConfig) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The environment's proxy for a remote upstream's (first) server, if any
    (``NO_PROXY`` honoured); the local model is always reached directly."""
    url = config.base_url or next(iter(config.base_urls or []), None)
    if config.provider == "llama_server" or url is None:
        return None, None
    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None, None


def _not_redirected(upstream: str, raw: aiohttp.ClientResponse) -> Response:
    """The answer, unless it is a redirect: that is the upstream's failure (its target,
    which may carry credentials, is not named)."""
    if 300 <= raw.status < 400:
        raw.release()
        raise UpstreamProtocolError(
            upstream, f"answered {raw.status} (a redirect; redirects are not followed)"
        )
    return Response(upstream, raw)


class Response:
    """An answer whose headers have arrived; reading its body raises ``UpstreamError`` only."""

    def __init__(self, upstream: str, raw: aiohttp.ClientResponse) -> None:
        self.upstream = upstream
        self.status = raw.status
        self.headers: Mapping[str, str] = raw.headers
        self._raw = raw

    async def read(self, limit: int) -> bytes:
        """The whole body of a non-streaming answer, at most ``limit`` bytes (more is the
        upstream's protocol failure: it is not held in memory); the connection is released."""
        blocks: list[bytes] = []
        size = 0
        try:
            while block := await self._raw.content.readany():
                size += len(block)
                if size > limit:
                    raise UpstreamProtocolError(self.upstream, f"answer over {limit} bytes")
                blocks.append(block)
        except aiohttp.ClientError as exc:
            raise translate(self.upstream, exc, "reading the answer") from exc
        finally:
            self._raw.release()
        return b"".join(blocks)

    async def error_body(self) -> bytes:
        """An error answer's body, or nothing if it cannot be read; the connection is released."""
        try:
            return await self._raw.read()
        except aiohttp.ClientError:
            return b""
        finally:
            self._raw.release()

    async def next_block(self) -> bytes:
        """What has arrived of a streamed body (never waiting for more); b"" at its end."""
        try:
            return await self._raw.content.readany()
        except aiohttp.ClientError as exc:
            raise translate(self.upstream, exc, "stream broke", mid_stream=True) from exc

    def release(self) -> None:
        """Give the connection back; an unfinished body closes it, so the upstream stops."""
        self._raw.release()


class Transport:
    """POSTs to one upstream over the shared session: a ``Response`` or an ``UpstreamError``."""

    def __init__(self, upstream: str, client: aiohttp.ClientSession, first_byte_s: float) -> None:
        self.upstream = upstream
        self.first_byte_s = first_byte_s
        self._client = client
        self._first_byte = Deadlines(  # one timer for every stream's wait for its headers
            first_byte_s,
            lambda: UpstreamTimeout(self.upstream, f"no response within {first_byte_s:g} s"),
        )
        # A whole answer's headers come with its end: no clock on the socket's reads.
        self._whole = aiohttp.ClientTimeout(sock_connect=client.timeout.sock_connect)

    async def post(
        self,
        url: str,
        content: bytes,
        headers: Mapping[str, str],
        deadline: Deadline | None = None,
        *,
        streamed: bool = True,
    ) -> Response:
        """One attempt: the response once its headers arrive.

        A stream's headers must come within ``first_byte_s``, unless the call's
        ``deadline`` (``timeout.total``, over this attempt) passes first, and no read of
        it may wait longer than the session's ``sock_read``. A whole answer's headers
        come only once it is all generated, so neither applies to it: the call's
        deadline bounds it.
        """
        # Never followed: the prompt and the key go to the configured host only.
        once: dict[str, Any] = {"headers": headers, "allow_redirects": False}
        for dropped_before in (False, True):
            try:
                if streamed and (deadline is None or deadline.left() > self.first_byte_s):
                    async with self._first_byte.new():
                        raw = await self._client.post(url, data=content, **once)
                elif streamed:  # the call's deadline comes first: it alone bounds the wait
                    raw = await self._client.post(url, data=content, **once)
                else:
                    raw = await self._client.post(url, data=content, timeout=self._whole, **once)
                return _not_redirected(self.upstream, raw)
            except (aiohttp.ServerTimeoutError, aiohttp.ClientConnectorError) as exc:
                raise translate(self.upstream, exc, "cannot connect") from exc
            except TimeoutError as exc:
                raise UpstreamTimeout(
                    self.upstream, f"no response within {self.first_byte_s:g} s"
                ) from exc
            except _DROPPED as exc:
                # A pooled connection the upstream closed as we reused it: nothing was
                # answered, so one immediate retry on a fresh connection is safe.
                if dropped_before:
                    what = "connection dropped before a response"
                    raise translate(self.upstream, exc, what) from exc
                log.debug("%s: pooled connection dropped (%r); retrying once", self.upstream, exc)
            except aiohttp.ClientError as exc:
                raise translate(self.upstream, exc, "cannot connect") from exc
        raise AssertionError("unreachable")  # pragma: no cover
