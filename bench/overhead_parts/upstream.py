"""The bench's upstream: a raw asyncio HTTP/1.1 server that answers chat completions at once.

    python bench/overhead_parts/upstream.py --port P [--delay-ms 20]

Keep-alive, Content-Length request bodies. It reads nothing of the body but two
byte markers, so every arm gets the same answer for the same request:

- ``"stream": true`` (with or without the space): an SSE answer, 64 ``data:``
  events (role, 61 content, finish, usage) and ``[DONE]``, written in one go.
- ``[bench:delay]`` in the body: the JSON answer after ``--delay-ms`` (``call_later``).
- ``[bench:hold]`` with ``"stream": true``: the role and first content events at
  once, the rest when the bench posts ``/release`` (or never, if the client goes).
- otherwise the JSON answer at once: a chat.completion whose 12 tokens,
  logprobs and ``finish_reason: stop`` make specproxy accept it as a draft. With
  ``--logprobs asked`` only a request with ``"logprobs": true`` gets the logprobs (as
  llama-server answers; ~5.7 KB of them); others get the same answer without.

Control: ``GET /health``, ``GET /held`` (streams held), ``POST /release`` (finish the
held streams; later hold requests are answered whole), ``POST /hold`` (hold again).
Standalone (stdlib + uvloop, which uvicorn[standard] brings): it runs as its own
process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from typing import Any, cast

import uvloop

CONTENT = " Paris is the capital and the largest city of France, on the Seine."
TOKENS = [
    " Paris",
    " is",
    " the",
    " capital",
    " and",
    " the",
    " largest",
    " city",
    " of",
    " France,",
    " on the",
    " Seine.",
]
assert "".join(TOKENS) == CONTENT and len(TOKENS) == 12
HEAD = {"id": "chatcmpl-bench", "created": 1700000000, "model": "local"}
SSE_CONTENT_CHUNKS = 61
HOLD_AT_ONCE = 2  # role + first content event: some proxies hold back a role-only chunk


def token_entry(i: int, token: str) -> dict[str, Any]:
    """One logprobs entry in llama-server's shape (id, token, bytes, logprob, top 5)."""
    raw = list(token.encode())
    top = [{"id": 1000 + i, "token": token, "bytes": raw, "logprob": -0.05}]
    for k in range(4):
        alt = f" alt{k}"
        top.append(
            {
                "id": 5000 + 10 * i + k,
                "token": alt,
                "bytes": list(alt.encode()),
                "logprob": -4.0 - k,
            }
        )
    return {"id": 1000 + i, "token": token, "bytes": raw, "logprob": -0.05, "top_logprobs": top}


def completion_body(*, logprobs: bool = True) -> bytes:
    """The chat.completion every JSON request gets (specproxy accepts it as a draft)."""
    body = {
        **HEAD,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": CONTENT},
                "logprobs": {"content": [token_entry(i, t) for i, t in enumerate(TOKENS)]}
                if logprobs
                else None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32},
    }
    return json.dumps(body, separators=(",", ":")).encode()


def sse_events() -> list[bytes]:
    """The 64 events of a streamed answer, then ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {**HEAD, "object": "chat.completion.chunk", "choices": [choice]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": TOKENS[i % 12]}) for i in range(SSE_CONTENT_CHUNKS)]
    chunks.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 20, "completion_tokens": SSE_CONTENT_CHUNKS, "total_tokens": 81}
    chunks.append({**HEAD, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    events = [b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in chunks]
    return [*events, b"data: [DONE]\n\n"]


def http_chunks(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)


def response(status: str, content_type: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
    return head % (status.encode(), content_type, len(body)) + body


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)
JSON_RESPONSE = response("200 OK", b"application/json", completion_body())
JSON_PLAIN = response("200 OK", b"application/json", completion_body(logprobs=False))
EVENTS = sse_events()
SSE_RESPONSE = STREAM_HEAD + http_chunks(EVENTS) + b"0\r\n\r\n"
HOLD_START = STREAM_HEAD + http_chunks(EVENTS[:HOLD_AT_ONCE])
HOLD_REST = http_chunks(EVENTS[HOLD_AT_ONCE:]) + b"0\r\n\r\n"
NOT_FOUND = response("404 Not Found", b"application/json", b'{"error":"not found"}')
UNSUPPORTED = response("411 Length Required", b"application/json", b'{"error":"chunked"}')
CHAT_PATHS = (b"/v1/chat/completions", b"/chat/completions")


def json_reply(payload: dict[str, Any]) -> bytes:
    return response("200 OK", b"application/json", json.dumps(payload).encode())


class Upstream(asyncio.Protocol):
    """One client connection; requests are answered in order."""

    held: set[asyncio.Transport] = set()  # noqa: RUF012 (shared by every connection)
    holding = True  # off after /release: late hold requests are answered whole
    delay_s = 0.02
    logprobs_asked = False  # --logprobs asked: logprobs only to a request that asks

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop: not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        Upstream.held.discard(self.transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while request := self.next_request():
            self.answer(*request)

    def next_request(self) -> tuple[bytes, bytes, bytes] | None:
        """(method, path, body) of the next whole request in the buffer, if any."""
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self.buf[:end]).lower()
        if b"transfer-encoding: chunked" in head:
            del self.buf[:]
            self.write(UNSUPPORTED)
            return None
        length = 0
        at = head.find(b"content-length:")
        if at >= 0:
            stop = head.find(b"\r\n", at)
            length = int(head[at + 15 : stop if stop >= 0 else len(head)])
        if len(self.buf) < end + 4 + length:
            return None
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        method, path = head.split(b" ", 2)[:2]
        return method, path, body

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def answer(self, method: bytes, path: bytes, body: bytes) -> None:
        if path in CHAT_PATHS and method == b"post":
            self.chat(body)
        elif path == b"/health":
            self.write(json_reply({"status": "ok"}))
        elif path == b"/held":
            self.write(json_reply({"held": len(Upstream.held)}))
        elif path == b"/release" and method == b"post":
            self.write(json_reply({"released": release()}))
        elif path == b"/hold" and method == b"post":
            Upstream.holding = True
            self.write(json_reply({"holding": True}))
        else:
            self.write(NOT_FOUND)

    def chat(self, body: bytes) -> None:
        stream = b'"stream":true' in body or b'"stream": true' in body
        if stream and b"[bench:hold]" in body and Upstream.holding:
            self.write(HOLD_START)
            Upstream.held.add(self.transport)  # type: ignore[arg-type]
        elif stream:
            self.write(SSE_RESPONSE)
        else:
            asked = b'"logprobs":true' in body or b'"logprobs": true' in body
            answer = JSON_PLAIN if Upstream.logprobs_asked and not asked else JSON_RESPONSE
            if b"[bench:delay]" in body:
                asyncio.get_running_loop().call_later(self.delay_s, self.write, answer)
            else:
                self.write(answer)


def release() -> int:
    """Finish every held stream; returns how many there were."""
    held = list(Upstream.held)
    Upstream.held.clear()
    Upstream.holding = False
    for transport in held:
        if not transport.is_closing():
            transport.write(HOLD_REST)
    return len(held)


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--logprobs", choices=("always", "asked"), default="always")
    args = parser.parse_args()
    Upstream.delay_s = args.delay_ms / 1000
    Upstream.logprobs_asked = args.logprobs == "asked"
    uvloop.run(serve(args.port))


if __name__ == "__main__":
    main()
