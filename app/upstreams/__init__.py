"""Upstream chat servers: one interface (``ChatUpstream``), one class per provider, and
groups of them that answer as one (``UpstreamGroup``: a pool, a chain)."""

from __future__ import annotations

from collections.abc import Sequence

import aiohttp

from app.config import ModelConfig
from app.upstreams.base import ChatUpstream, Completion, PassedAnswer, create_client
from app.upstreams.cerebras import Cerebras
from app.upstreams.group import UpstreamGroup
from app.upstreams.llama_server import LlamaServer

_PROVIDERS: dict[str, type[ChatUpstream]] = {
    "llama_server": LlamaServer,
    "cerebras": Cerebras,
    "openai": ChatUpstream,
}

# What the pipeline calls: one upstream, or a group answering as one.
Upstream = ChatUpstream | UpstreamGroup


def build_upstream(name: str, config: ModelConfig, client: aiohttp.ClientSession) -> Upstream:
    """The upstream object for one ``models:`` entry (a pool with several ``base_urls``)."""
    servers = [_PROVIDERS[c.provider](name, c, client) for c in config.servers()]
    return servers[0] if len(servers) == 1 else UpstreamGroup(name, servers, balance=True)


def chain(upstreams: dict[str, Upstream], names: Sequence[str]) -> Upstream:
    """The verifiers named, as one upstream: the first healthy one answers (``verify_model``)."""
    if len(names) == 1:
        return upstreams[names[0]]
    members = [m for n in names for m in _members(upstreams[n])]
    return UpstreamGroup(names[0], members, balance=False)


def servers(upstreams: dict[str, Upstream]) -> dict[str, ChatUpstream]:
    """Every server behind the entries, each under its own key: its entry's name, or in a
    pool ``name@base_url`` (each has its own breaker and rate budget)."""
    out: dict[str, ChatUpstream] = {}
    for name, upstream in upstreams.items():
        if isinstance(upstream, UpstreamGroup):
            out.update({f"{name}@{m.base_url}": m for m in upstream.members})
        else:
            out[name] = upstream
    return out


def _members(upstream: Upstream) -> list[ChatUpstream]:
    return upstream.members if isinstance(upstream, UpstreamGroup) else [upstream]


__all__ = [
    "ChatUpstream",
    "Completion",
    "PassedAnswer",
    "Upstream",
    "UpstreamGroup",
    "build_upstream",
    "chain",
    "create_client",
    "servers",
]
