"""The floor of specproxy's own stack: uvicorn (uvloop + httptools) + one aiohttp call.

    python bench/overhead_parts/stack_floor.py --port P --upstream-port U

A bare ASGI app that reads the request body, posts it to the upstream over a
pooled aiohttp session and returns the upstream's bytes (streams relayed a
network read at a time). No parsing, routing, auth, validation or telemetry:
what remains between it and the raw forwarder is the stack itself, and what
lies between it and specproxy is specproxy's own work.
"""

from __future__ import annotations

import argparse
from typing import Any

import aiohttp
import uvicorn

Scope = dict[str, Any]


class Floor:
    def __init__(self, upstream: str) -> None:
        self.url = f"{upstream}/v1/chat/completions"
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        assert self.session is not None
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.url, data=body, headers=headers) as response:
            kind = response.headers.get("Content-Type", "application/json")
            start = {"type": "http.response.start", "status": response.status}
            if not kind.startswith("text/event-stream"):
                answer = await response.read()
                length = str(len(answer)).encode()
                head = [(b"content-type", kind.encode()), (b"content-length", length)]
                await send({**start, "headers": head})
                await send({"type": "http.response.body", "body": answer})
                return
            await send({**start, "headers": [(b"content-type", kind.encode())]})
            async for block in response.content.iter_any():
                await send({"type": "http.response.body", "body": block, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                connector = aiohttp.TCPConnector(limit=1100)
                self.session = aiohttp.ClientSession(connector=connector)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True)
    args = parser.parse_args()
    app = Floor(f"http://127.0.0.1:{args.upstream_port}")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
