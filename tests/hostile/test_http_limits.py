"""D5: HTTP-layer limits on the real server (``python main.py``), on each edge: slow
bodies time out (408) and a connection cap answers 503 instead of running out of file
descriptors. On the lean edge silent sockets and slowloris heads are let go (408) and
header floods refused (431) before they are buffered; the standard edge (uvicorn's own
protocol) has neither limit, as docs/configuration.md says under ``server.edge``: it
holds a silent socket and serves a large head, and only the connection cap bounds them."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.processes import main_process
from tests.support.proxy import dead_url, proxy_config

pytestmark = pytest.mark.process  # every test here starts a server or a process

LIMITS = {
    "head_timeout_s": 0.5,
    "body_timeout_s": 0.5,
    "max_header_bytes": 4096,
    "max_headers": 20,
    "max_connections": 40,
}


@contextmanager
def proxy_with(tmp_path: Path, edge: str, **limits: Any) -> Iterator[tuple[str, int]]:
    server = {"edge": edge, "limits": {**LIMITS, **limits}}
    config = proxy_config(dead_url(), dead_url(), server=server)
    with main_process(config, tmp_path) as (_, url):
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        yield url, parts.port


def answer_to(port: int, sent: bytes, timeout: float = 10) -> bytes:
    """What the server answers (until it closes) to ``sent`` and then silence."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        if sent:
            sock.sendall(sent)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got


@pytest.fixture
def proxy(tmp_path: Path, edge: str) -> Iterator[tuple[str, int]]:
    with proxy_with(tmp_path, edge) as running:
        yield running


lean_only = pytest.mark.parametrize("edge", ["lean"])  # its protocol's limits
standard_only = pytest.mark.parametrize("edge", ["standard"])


@lean_only
def test_a_silent_socket_is_let_go_with_408(proxy: tuple[str, int]) -> None:
    assert answer_to(proxy[1], b"").startswith(b"HTTP/1.1 408 ")


@lean_only
def test_slowloris_heads_are_let_go_and_the_server_keeps_answering(
    proxy: tuple[str, int],
) -> None:
    url, port = proxy
    with ExitStack() as stack:
        socks = [
            stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            for _ in range(20)
        ]
        for sock in socks:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        for sock in socks:
            assert sock.recv(65536).startswith(b"HTTP/1.1 408 ")
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200


@lean_only
def test_a_header_flood_is_refused_with_431(proxy: tuple[str, int]) -> None:
    _, port = proxy
    # The first 10 KB of a header meant to be huge: refused as soon as the head passes
    # the limit (not buffered to its end; a client still sending would see a reset).
    huge = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000
    assert answer_to(port, huge).startswith(b"HTTP/1.1 431 ")
    many = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-H: 1\r\n" * 50 + b"\r\n"
    assert answer_to(port, many).startswith(b"HTTP/1.1 431 ")


@pytest.mark.slow
def test_a_slow_body_is_a_408_and_counted(proxy: tuple[str, int]) -> None:
    url, port = proxy
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n"
    )
    got = answer_to(port, head + b'{"messages"')
    assert got.startswith(b"HTTP/1.1 408 ")
    assert b"request body not complete within 0.5 s" in got
    stats = httpx.get(f"{url}/stats", timeout=5).json()
    assert stats["requests"]["refused"] == {"408": 1}


def test_over_the_connection_cap_new_requests_get_503(tmp_path: Path, edge: str) -> None:
    with proxy_with(tmp_path, edge, head_timeout_s=30, max_connections=10) as (url, port):
        with ExitStack() as stack:
            for _ in range(10):
                stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            assert httpx.get(f"{url}/health", timeout=5).status_code == 503
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200


@standard_only
def test_the_standard_edge_holds_silent_and_slow_heads_and_keeps_answering(
    proxy: tuple[str, int],
) -> None:
    """No head timeout on uvicorn's own protocol: nothing is answered, four times
    ``head_timeout_s`` on; other clients are served meanwhile (the cap bounds the held)."""
    url, port = proxy
    with ExitStack() as stack:
        socks = [
            stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=2))
            for _ in range(20)
        ]
        for sock in socks[1:]:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        time.sleep(4 * LIMITS["head_timeout_s"])
        for sock in socks:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # nothing came, and it is not closed
                sock.recv(65536)
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200


@standard_only
def test_the_standard_edge_serves_a_head_over_the_lean_limits(proxy: tuple[str, int]) -> None:
    """No head size or header count limit on uvicorn's own protocol: served, not 431."""
    _, port = proxy
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
    assert answer_to(port, big + b"a" * 10_000 + b"\r\n\r\n").startswith(b"HTTP/1.1 200 ")
    many = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"X-H: 1\r\n" * 50
    assert answer_to(port, many + b"\r\n").startswith(b"HTTP/1.1 200 ")
