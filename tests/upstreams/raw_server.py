"""A raw TCP upstream on loopback that answers every request with fixed bytes, then hangs up.

For the failures a well-behaved HTTP server cannot produce: a connection closed before
any answer, a garbled status line, a body cut short.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# Answers that promise more body than they send, then hang up.
CUT_SHORT = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"choices"'
STREAM_CUT_SHORT = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\n"
    b'data: {"choices":[]}\n\n'
)


@dataclass
class RawUpstream:
    """Where the raw upstream listens, and how many requests it has read."""

    url: str
    requests: int = 0


@contextmanager
def raw_upstream(answer: bytes) -> Iterator[RawUpstream]:
    """Serve ``answer`` verbatim to each request (b"": none at all), then hang up."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            _read_request(self.request)
            upstream.requests += 1
            if answer:
                self.request.sendall(answer)

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, name="raw-upstream", daemon=True)
        thread.start()
        upstream = RawUpstream(f"http://127.0.0.1:{server.server_address[1]}")
        try:
            yield upstream
        finally:
            server.shutdown()
            thread.join()


def _read_request(sock: socket.socket) -> None:
    """Read one request (head, then a Content-Length body) so closing cannot reset it."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            return
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        more = sock.recv(65536)
        if not more:
            return
        body += more
