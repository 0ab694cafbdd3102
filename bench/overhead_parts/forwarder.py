"""The physical-limit reference: a raw asyncio byte forwarder (no HTTP parsing at all).

    python bench/overhead_parts/forwarder.py --port P --upstream-port U

Each accepted connection gets its own upstream connection; bytes are piped
both ways as they come, with back-pressure (a peer that cannot keep up pauses
reading on the other side). Standalone (stdlib + uvloop, which uvicorn[standard] brings).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import cast

import uvloop


def no_delay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Pipe(asyncio.Protocol):
    """One side of a forwarded connection; ``peer`` is the other side's transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: asyncio.Transport | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop: not a subclass
        no_delay(transport)

    def link(self, peer: asyncio.Transport) -> None:
        self.peer = peer
        for data in self.pending:
            peer.write(data)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.pending.append(data)
        else:
            self.peer.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()


class Client(Pipe):
    """The accepted side: opens its upstream connection, then links the two."""

    upstream_port = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self.open_upstream())

    async def open_upstream(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            up, pipe = await loop.create_connection(Pipe, "127.0.0.1", self.upstream_port)
        except OSError:
            self.transport.close()
            return
        if self.transport.is_closing():
            up.close()
            return
        pipe.link(self.transport)
        self.link(up)


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Client, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    args = parser.parse_args()
    Client.upstream_port = args.upstream_port
    uvloop.run(serve(args.port))


if __name__ == "__main__":
    main()
