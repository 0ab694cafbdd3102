"""Upstream chat servers: one protocol (``Upstream``, in ``interface.py``), one class per
provider (``ChatUpstream`` and its subclasses), and groups of them that answer as one
(``UpstreamGroup``: a pool, a chain)."""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp

from app.config import ModelConfig
from app.upstreams.base import ChatUpstream, create_client
from app.upstreams.cerebras import Cerebras
from app.upstreams.group import UpstreamGroup
from app.upstreams.interface import CloudState, Completion, OpenStream, PassedAnswer, Upstream
from app.upstreams.llama_server import LlamaServer

_PROVIDERS: dict[str, type[ChatUpstream]] = {
    "llama_server": LlamaServer,
    "cerebras": Cerebras,
    "openai": ChatUpstream,
}


def build_upstream(name: str, config: ModelConfig, client: aiohttp.ClientSession) -> Upstream:
    """The upstream object for one ``models:`` entry (a pool with several ``base_urls``)."""
    servers = [_PROVIDERS[c.provider](name, c, client) for c in config.servers()]
    return servers[0] if len(servers) == 1 else UpstreamGroup(name, servers, balance=True)


def chain(upstreams: dict[str, Upstream], names: Sequence[str]) -> Upstream:
    """The verifiers named, as one upstream: the first healthy one answers (``verify_model``)."""
    if len(names) == 1:
        return upstreams[names[0]]
    members = [m for n in names for m in upstreams[n].members]
    return UpstreamGroup(names[0], members, balance=False)


def servers(upstreams: dict[str, Upstream]) -> dict[str, ChatUpstream]:
    """Every server behind the entries, each under its own key: its entry's name, or in a
    pool ``name@base_url`` (each has its own breaker and rate budget)."""
    out: dict[str, ChatUpstream] = {}
    for name, upstream in upstreams.items():
        pooled = len(upstream.members) > 1
        for m in upstream.members:
            if isinstance(m, ChatUpstream):
                out[f"{name}@{m.base_url}" if pooled else name] = m
    return out


__all__ = [
    "ChatUpstream",
    "CloudState",
    "Completion",
    "OpenStream",
    "PassedAnswer",
    "Upstream",
    "UpstreamGroup",
    "build_upstream",
    "chain",
    "create_client",
    "servers",
]
