"""Run any ASGI app on a real loopback port for the length of a `with` block."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import uvicorn
from starlette.types import ASGIApp


@contextmanager
def serve(
    app: ASGIApp,
    *,
    lifespan: Literal["auto", "on", "off"] = "on",
    startup_timeout: float = 10.0,
    **options: Any,
) -> Iterator[str]:
    """Serve `app` with uvicorn on a free 127.0.0.1 port in a thread; yield its base URL.
    ``options``: more of ``uvicorn.Config``'s arguments (``http=``...)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan=lifespan,
        ws="none",  # nothing here speaks websockets; importing them only adds warnings
        timeout_graceful_shutdown=1,  # cancels handlers still sleeping on a scripted delay
        **options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"uvicorn:{port}", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {port}; see its log above")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=startup_timeout)
        sock.close()
