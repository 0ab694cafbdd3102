"""State replicas share (``state.backend: redis``): pure rules in ``fleet``, I/O in ``sync``."""

from __future__ import annotations

import importlib
from typing import Any

from app.config import StateConfig


def redis_client(config: StateConfig, *, asyncio: bool, retries: int = 0) -> Any:
    """A Redis client for ``state.redis_url`` whose calls give up after ``timeout_s`` and
    never retry (the next sync, or the learner's next look, is the retry): ``asyncio``
    for the fleet's sync on the event loop, blocking for the learner's thread. The
    ``redis`` package is the ``redis`` extra's, imported only here. ``retries``: on a
    broken connection, try again at once that many times (the keys' store: a connection
    left from before Redis restarted fails once, and its next one is fresh)."""
    package = "redis.asyncio" if asyncio else "redis"
    client: Any = importlib.import_module(package).Redis
    retry: Any = importlib.import_module(f"{package}.retry").Retry
    no_backoff: Any = importlib.import_module("redis.backoff").NoBackoff
    assert config.redis_url is not None
    return client.from_url(
        config.redis_url.get_secret_value(),
        socket_timeout=config.timeout_s,
        socket_connect_timeout=config.timeout_s,
        retry=retry(no_backoff(), retries),
    )
