"""The soak's load: one closed loop per kind of request (``scenarios.mix()``), paced.

Built on the overhead bench's load generator (``bench/overhead_parts/loadgen.py``): each
connection is its ``Client`` (keep-alive, precomputed request bytes, its own HTTP/1.1
parser); ``Lane`` is its ``Cell`` with three changes: a pause between an answer and the
next request (so the soak is a steady mixed load, not a saturating one), a client that
hangs up mid-stream on purpose (the "cut" kind), and answers sorted into good, failed
as injected (a cut, an error event from a broken cloud stream) and errors (anything else).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from time import perf_counter

from bench.overhead_parts.loadgen import Cell, Client, Target, build_request
from bench.soak_parts.scenarios import Kind

ERROR_EVENT = b'data: {"error"'
STUCK_S = 60.0  # an answer not finished this long after its request is an error


class SoakClient(Client):
    """A ``Client`` that notices error events in a stream, and may cut its stream."""

    def __init__(self, lane: Lane, request: bytes) -> None:
        super().__init__(lane, request)
        self.lane = lane
        self.error_event = False
        self.was_cut = False
        self.tail = b""

    def send(self) -> None:
        self.error_event = self.was_cut = False
        self.tail = b""
        super().send()

    def data_received(self, data: bytes) -> None:
        if not self.error_event:
            seen = self.tail + data
            self.error_event = ERROR_EVENT in seen
            self.tail = seen[-len(ERROR_EVENT) :]
        super().data_received(data)

    def cut(self) -> None:
        self.was_cut = True
        self.abort()


class Lane(Cell):
    """The closed loop of one kind: ``clients`` connections, each pausing ``pause`` s."""

    def __init__(self, kind: Kind, port: int, pause: float) -> None:
        request = build_request(
            port,
            kind.path,
            stream=kind.stream,
            marker=kind.marker,
            auth=None,
            extra=kind.body_extra(),
        )
        super().__init__(Target(port, request))
        self.kind = kind
        self.pause = pause
        self.good = 0
        self.injected: Counter[str] = Counter()

    def first(self, client: Client) -> None:
        if self.kind.inject == "cut" and isinstance(client, SoakClient):
            client.cut()

    def done(self, client: Client, error: str | None, now: float) -> None:
        self.in_flight -= 1
        self.answers += 1
        self.sort(client, error)
        if not self.running:
            if self.in_flight == 0:
                self.idle.set()
        elif client.transport is None or client.must_close:
            client.close()  # lost() opens a fresh connection in its place
        else:
            asyncio.get_running_loop().call_later(self.pause, self.resend, client)

    def sort(self, client: Client, error: str | None) -> None:
        assert isinstance(client, SoakClient)
        if error is None and client.error_event:
            error = "error_event"
        if client.was_cut and error == "reset":
            self.injected["cut"] += 1
        elif self.kind.inject == "broken" and error == "error_event":
            self.injected["broken"] += 1
        elif error is not None:
            self.errors[error] += 1
        else:
            self.good += 1

    def resend(self, client: Client) -> None:
        if self.running and client.transport is not None:
            self.in_flight += 1
            client.send()

    async def connect(self, wait: float = 0.0) -> None:
        """``Cell.connect`` with a ``SoakClient``."""
        if wait:
            await asyncio.sleep(wait)
        if not self.running:
            return
        loop = asyncio.get_running_loop()
        try:
            _, client = await loop.create_connection(
                lambda: SoakClient(self, self.target.request), "127.0.0.1", self.target.port
            )
        except OSError:
            self.errors["connect"] += 1
            self.spawn(1.0)
            return
        self.clients.add(client)
        if self.running:
            self.in_flight += 1
            client.send()

    def unstick(self) -> None:
        """Count and drop every answer still unfinished ``STUCK_S`` after its request."""
        now = perf_counter()
        for client in list(self.clients):
            if client.busy and now - client.t0 > STUCK_S:
                client.busy = False
                self.in_flight -= 1
                self.errors["stuck"] += 1
                client.abort()


class Traffic:
    """Every kind's lane, started and stopped together, with their summed counts."""

    def __init__(self, kinds: list[Kind], port: int, pause: float, clients: int) -> None:
        self.lanes = [Lane(kind, port, pause) for kind in kinds]
        self.clients = clients

    async def start(self) -> None:
        await asyncio.gather(*(lane.connect() for lane in self.lanes for _ in range(self.clients)))

    async def stop(self, drain_s: float = 30.0) -> None:
        await asyncio.gather(*(lane.stop(drain_s) for lane in self.lanes))

    def unstick(self) -> None:
        for lane in self.lanes:
            lane.unstick()

    def counts(self) -> dict[str, object]:
        """answers, good, injected (by failure), errors (by kind of request: by error)."""
        injected: Counter[str] = Counter()
        for lane in self.lanes:
            injected.update(lane.injected)
        errors = {
            f"{lane.kind.name}{' (stream)' if lane.kind.stream else ''}": dict(lane.errors)
            for lane in self.lanes
            if lane.errors
        }
        return {
            "answers": sum(lane.answers for lane in self.lanes),
            "good": sum(lane.good for lane in self.lanes),
            "injected": dict(injected),
            "errors": errors,
        }
