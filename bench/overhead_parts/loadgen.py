"""Closed-loop HTTP/1.1 load: one keep-alive connection per client, precomputed request bytes.

Each ``Client`` is a raw asyncio Protocol: it writes the request, parses the
status line, then a Content-Length or chunked body, and on the last byte
hands the times to its sink, which at once sends the next request on the same
connection (no task or coroutine per request). An answer is an error unless
it is a 200 with a whole body (``"choices"`` in JSON, ``[DONE]`` in a stream; a Message
and ``message_stop`` through Anthropic's door);
resets, timeouts and failed connects are errors too, counted by kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter, process_time
from typing import Protocol, cast

_HEAD, _BODY, _CHUNKED = 0, 1, 2
RECONNECT_WAIT_S = 0.1
STEADY_ANSWERS = 2  # per client, before the measured window opens
MAX_EXTRA_WARMUP_S = 30.0
MAX_EXTRA_WINDOW_S = 30.0  # past --seconds, until the window holds one answer per client
PROMPT = "What is the capital of France? Answer in one sentence."
# Not a model name from specproxy's config (naming "local" would route it local_only):
# the configured strategy decides. LiteLLM serves it under this name.
MODEL = "bench"


class Sink(Protocol):
    def first(self, client: Client) -> None: ...
    def done(self, client: Client, error: str | None, now: float) -> None: ...
    def lost(self, client: Client) -> None: ...


def build_request(
    port: int,
    path: str,
    *,
    stream: bool,
    marker: str,
    auth: str | None,
    extra: dict[str, object] | None = None,
) -> bytes:
    """The request bytes one client sends over and over (``extra``: more body members)."""
    text = f"{PROMPT} {marker}".strip()
    # the same question in each door's words (chat's and Anthropic's Messages' alike)
    asked: dict[str, object] = {"messages": [{"role": "user", "content": text}]}
    if path == "/v1/responses":
        asked = {"input": text, "store": False}
    elif path == "/v1/completions":
        asked = {"prompt": text}
    elif path == "/v1/embeddings":
        asked = {"input": text}
    body: dict[str, object] = {"model": MODEL, **asked, **(extra or {})}
    if stream:
        body["stream"] = True
    data = json.dumps(body, separators=(",", ":")).encode()
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
    ]
    if auth:
        head.append(f"Authorization: Bearer {auth}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


# a whole JSON answer (chat's and completions', Messages', Responses', embeddings') and a
# stream's end (chat's and completions', Messages'; Responses' below)
WHOLE = (b'"choices"', b'"type":"message"', b'"output"', b'"embedding"')
DONE = (b"data: [DONE]", b"event: message_stop")


class Client(asyncio.Protocol):
    """One keep-alive connection that sends ``request`` whenever its sink says so."""

    def __init__(self, sink: Sink, request: bytes) -> None:
        self.sink = sink
        self.request = request
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.state = _HEAD
        self.busy = False
        self.t0 = self.t_first = 0.0
        self.status = 0
        self.need = 0
        self.head = b""
        self.saw_done = False

    # -- asyncio.Protocol ----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop: not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.busy:
            self.busy = False
            self.sink.done(self, "reset", perf_counter())
        self.sink.lost(self)

    def data_received(self, data: bytes) -> None:
        now = perf_counter()
        self.buf += data
        if self.state == _HEAD and not self._parse_head():
            return
        if self.state == _BODY:
            if self.buf and not self.t_first:
                self.t_first = now
                self.sink.first(self)
            if len(self.buf) >= self.need:
                ok = any(self.buf.find(mark, 0, self.need) >= 0 for mark in WHOLE)
                del self.buf[: self.need]
                self._finish(now, None if ok else "bad_body")
        else:
            self._parse_chunks(now)

    # -- requests ------------------------------------------------------------

    def send(self) -> None:
        assert self.transport is not None
        self.state, self.busy, self.saw_done = _HEAD, True, False
        self.t_first = 0.0
        self.t0 = perf_counter()
        self.transport.write(self.request)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    @property
    def accepted(self) -> bool:
        return b"x-draft-accepted: true" in self.head

    @property
    def must_close(self) -> bool:
        return b"connection: close" in self.head

    def _parse_head(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        self.head = head = bytes(self.buf[:end]).lower()
        del self.buf[: end + 4]
        self.status = int(head[9:12])
        if b"transfer-encoding: chunked" in head:
            self.state = _CHUNKED
        else:
            at = head.find(b"content-length:")
            stop = head.find(b"\r\n", at)
            self.need = int(head[at + 15 : stop if stop > 0 else None]) if at >= 0 else 0
            self.state = _BODY
        return True

    def _parse_chunks(self, now: float) -> None:
        buf, pos = self.buf, 0
        while (eol := buf.find(b"\r\n", pos)) >= 0:
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
            end = eol + 2 + size
            if len(buf) < end + 2:
                break
            pos = end + 2
            if size == 0:
                del buf[:pos]
                self._finish(now, None if self.saw_done else "no_done")
                return
            if not self.t_first:
                self.t_first = now
                self.sink.first(self)
            if any(buf.find(mark, eol + 2, end) >= 0 for mark in DONE):
                self.saw_done = True
            elif buf.find(b"event: response.completed", eol + 2, end) >= 0:
                self.saw_done = True  # /v1/responses ends its stream so
        del buf[:pos]

    def _finish(self, now: float, error: str | None) -> None:
        self.busy = False
        if self.status != 200:
            error = f"http_{self.status}"
        self.sink.done(self, error, now)


# -- closed-loop cells ---------------------------------------------------------


@dataclass
class Target:
    port: int
    request: bytes

    @property
    def body(self) -> bytes:
        return self.request.split(b"\r\n\r\n", 1)[1]


@dataclass
class CellResult:
    """What one cell measured: samples from answers finished inside the measured window."""

    seconds: float
    latencies: list[float]
    ttfb: list[float]
    accepted: int
    errors: Counter[str]
    cpu: dict[str, float] = field(default_factory=dict)  # seconds of CPU over the window
    warmup: float = 0.0  # seconds before the window (longer than asked for a slow arm)

    @property
    def requests(self) -> int:
        return len(self.latencies)


class Cell:
    """Sink of a closed-loop run: every answer is followed at once by the next request."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.running = True
        self.measuring = False
        self.latencies: list[float] = []
        self.ttfb: list[float] = []
        self.accepted = 0
        self.errors: Counter[str] = Counter()
        self.clients: set[Client] = set()
        self.in_flight = 0
        self.answers = 0  # finished, measured or not, good or not
        self.idle = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, wait: float = 0.0) -> None:
        """Open a replacement connection in the background (kept referenced until done)."""
        task = asyncio.get_running_loop().create_task(self.connect(wait))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def first(self, client: Client) -> None:
        pass

    def done(self, client: Client, error: str | None, now: float) -> None:
        self.in_flight -= 1
        self.answers += 1
        if error is not None:
            self.errors[error] += 1
        elif self.measuring:
            self.latencies.append(now - client.t0)
            self.ttfb.append((client.t_first or now) - client.t0)
            self.accepted += client.accepted
        if not self.running:
            if self.in_flight == 0:
                self.idle.set()
        elif client.transport is None or client.must_close:
            client.close()  # lost() opens a fresh connection in its place
        else:  # a whole answer, good or bad: the connection is fit for the next request
            self.in_flight += 1
            client.send()

    def lost(self, client: Client) -> None:
        self.clients.discard(client)
        if self.running:
            self.spawn()

    async def connect(self, wait: float = 0.0) -> None:
        """Open one more client connection and start its loop; a failure counts as an error."""
        if wait:
            await asyncio.sleep(wait)
        if not self.running:
            return
        loop = asyncio.get_running_loop()
        try:
            _, client = await loop.create_connection(
                lambda: Client(self, self.target.request), "127.0.0.1", self.target.port
            )
        except OSError:
            self.errors["connect"] += 1
            self.spawn(RECONNECT_WAIT_S)
            return
        self.clients.add(client)
        if self.running:
            self.in_flight += 1
            client.send()

    async def stop(self, drain_s: float) -> None:
        """No new requests; wait for those in flight; the unfinished count as timeouts."""
        self.running = False
        if self.in_flight > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.idle.wait(), drain_s)
        if self.in_flight > 0:
            self.errors["timeout"] += self.in_flight
            self.in_flight = 0
        for client in list(self.clients):
            client.busy = False
            client.abort()


Probe = Callable[[], dict[str, float]]


def load_probe() -> dict[str, float]:
    return {"load": process_time()}


async def run_cell(
    target: Target, clients: int, warmup: float, seconds: float, probe: Probe, drain_s: float
) -> CellResult:
    """``clients`` closed loops: ``warmup`` s unrecorded, then ``seconds`` s measured.

    Both stretch for a slow arm: the warm-up until each client had about two answers, the
    window until it holds as many answers as there are clients (each at most 30 s more).
    """
    cell = Cell(target)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(*(cell.connect() for _ in range(clients)))
    await asyncio.sleep(warmup)
    # A slow arm is not in its steady state until each client has had about two answers.
    latest = loop.time() + MAX_EXTRA_WARMUP_S
    while cell.answers < STEADY_ANSWERS * clients and loop.time() < latest:
        await asyncio.sleep(0.05)
    warmed = loop.time() - started
    before = {**probe(), **load_probe()}
    started = perf_counter()
    cell.measuring = True
    await asyncio.sleep(seconds)
    # A slow arm may answer in waves (all clients at once): hold the window open for one.
    latest = loop.time() + MAX_EXTRA_WINDOW_S
    while len(cell.latencies) < clients and loop.time() < latest:
        await asyncio.sleep(0.01)
    cell.measuring = False
    elapsed = perf_counter() - started
    after = {**probe(), **load_probe()}
    await cell.stop(drain_s)
    cpu = {k: after[k] - before[k] for k in before if k in after}
    return CellResult(elapsed, cell.latencies, cell.ttfb, cell.accepted, cell.errors, cpu, warmed)


# -- many open streams (memory) --------------------------------------------------


class Holder:
    """Sink of the memory test: ``n`` streams, each sent once and kept open until done."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.opened = 0
        self.completed = 0
        self.errors: Counter[str] = Counter()
        self.clients: list[Client] = []
        self.all_open = asyncio.Event()
        self.all_done = asyncio.Event()

    def first(self, client: Client) -> None:
        self.opened += 1
        if self.opened == self.n:
            self.all_open.set()

    def done(self, client: Client, error: str | None, now: float) -> None:
        if error is None:
            self.completed += 1
        else:
            self.errors[error] += 1
        if self.completed + sum(self.errors.values()) >= self.n:
            self.all_done.set()

    def lost(self, client: Client) -> None:
        pass

    async def open(
        self, target: Target, timeout: float, stall_s: float = 15.0, parallel: int = 100
    ) -> None:
        """Send every stream's request; returns once each has its first event, or when no
        stream has opened for ``stall_s`` (a queue in the arm), or at ``timeout``."""
        gate = asyncio.Semaphore(parallel)
        loop = asyncio.get_running_loop()

        async def one() -> None:
            async with gate:
                try:
                    _, client = await loop.create_connection(
                        lambda: Client(self, target.request), "127.0.0.1", target.port
                    )
                except OSError:
                    self.errors["connect"] += 1
                    return
                self.clients.append(client)
                client.send()

        await asyncio.gather(*(one() for _ in range(self.n)))
        deadline = loop.time() + timeout
        seen, seen_at = self.opened, loop.time()
        while not self.all_open.is_set() and loop.time() < min(deadline, seen_at + stall_s):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.all_open.wait(), 0.5)
            if self.opened != seen:
                seen, seen_at = self.opened, loop.time()

    async def finish(self, timeout: float) -> None:
        """Wait for every stream to end (after the upstream released them); close them all."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_done.wait(), timeout)
        if unfinished := sum(1 for c in self.clients if c.busy):
            self.errors["timeout"] += unfinished
        for client in self.clients:
            client.busy = False
            client.abort()
