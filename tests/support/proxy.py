"""The real proxy app on a free loopback port, and the config tree pointing it at stand-ins."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from app import create_app
from app.config import Settings
from app.edge import Edge
from tests.fakes import FakeCerebras, FakeLlamaServer, serve

CLOUD_KEY = "csk-test-0123456789abcdef"


def free_port() -> int:
    """A loopback port nothing listens on (for now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dead_url() -> str:
    """A loopback URL with nothing listening (connection refused)."""
    return f"http://127.0.0.1:{free_port()}"


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll until ``condition`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` laid on top, nested mappings merged key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            deep_merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


# The seed's flow (seed 004) with drafts of up to 32 tokens (the seed's own budget is 10): the
# seed policy's rules judge a whole draft, a verified one is served at the seed's similarity
# 0.8, no early abort, no hedge, no first-token budget. The schema's defaults are the shipped
# config's (combined policy, early abort, hedge auto, a 0.25 s first-token budget), so the
# stand-in tests, written against this flow, say it; a test sets what it changes.
SEED_FLOW: dict[str, Any] = {
    "max_draft_tokens": 32,
    "min_confidence": 0.8,
    "policy": "seed",
    "early_abort": False,
    "abort_min_score": None,
    "abort_check_tokens": 16,
    "hedge": "off",
    "stream_first_token_s": None,
    "stream_trust_score": None,
    "agreement": "similarity",
}


def proxy_config(local_url: str, cloud_url: str, **overrides: Any) -> dict[str, Any]:
    """A config tree pointing at the given upstreams, in the seed's flow (``SEED_FLOW``)."""
    base = {
        "models": {
            "local": {
                "provider": "llama_server",
                "base_url": local_url,
                "model": "smollm2",
                "timeout": {"connect": 1, "read": 5, "total": 10},
            },
            "cerebras": {
                "provider": "cerebras",
                "base_url": f"{cloud_url}/v1",
                "model": "gpt-oss-120b",
                "api_key": "${CEREBRAS_API_KEY}",
                "timeout": {"connect": 1, "read": 5, "total": 10},
                "max_retries": 0,
            },
        },
        "speculative_decoding": dict(SEED_FLOW),
        "learning": {"enabled": False},  # shipped on: audits would add cloud calls
        # The stand-ins answer from a queue, one reply per request: a repeated request must
        # reach them. The cache's own tests (tests/cache) turn it on.
        "cache": {"enabled": False},
    }
    return deep_merge(base, overrides)


def chat_bodies(fake: FakeLlamaServer | FakeCerebras) -> list[dict[str, Any]]:
    """The JSON bodies of the chat requests a fake received, in order."""
    return [r.json for r in fake.requests if r.path.endswith("/chat/completions")]


@dataclass
class Proxy:
    """A running proxy and clients for it."""

    url: str
    settings: Settings
    openai: openai.OpenAI
    http: httpx.Client

    def stats(self) -> dict[str, Any]:
        return self.http.get("/stats").json()  # type: ignore[no-any-return]


MakeProxy = Callable[..., AbstractContextManager[Proxy]]


@contextmanager
def run_proxy(
    settings: Settings,
    api_key: str = "unused",
    startup_timeout: float = 10.0,
    *,
    stock_uvicorn: bool = False,
) -> Iterator[Proxy]:
    """Serve the real proxy app on a free port; yields clients bound to it. A proxy that
    launches its own llama-server needs ``startup_timeout`` to cover that start.

    It is served as ``main.py`` serves it: uvicorn with the options of the edge
    ``server.edge`` names (``app.edge``); ``stock_uvicorn``: with uvicorn's own protocol
    and no options at all, as any other ASGI server would serve it."""
    edge = Edge.named(settings.server.edge)
    options = {} if stock_uvicorn else edge.uvicorn_options(settings.server.limits)
    with serve(create_app(settings), startup_timeout=startup_timeout, **options) as url:
        headers = {"Authorization": f"Bearer {api_key}"}
        with (
            httpx.Client(base_url=url, headers=headers, timeout=15) as http,
            openai.OpenAI(
                base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=15
            ) as client,
        ):
            yield Proxy(url, settings, client, http)
