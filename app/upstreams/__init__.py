"""Upstream chat servers: one interface (``ChatUpstream``), one class per provider."""

from __future__ import annotations

import aiohttp

from app.config import ModelConfig
from app.upstreams.base import ChatUpstream, Completion, create_client
from app.upstreams.cerebras import Cerebras
from app.upstreams.llama_server import LlamaServer

_PROVIDERS: dict[str, type[ChatUpstream]] = {
    "llama_server": LlamaServer,
    "cerebras": Cerebras,
    "openai": ChatUpstream,
}


def build_upstream(name: str, config: ModelConfig, client: aiohttp.ClientSession) -> ChatUpstream:
    """The upstream object for one ``models:`` entry."""
    return _PROVIDERS[config.provider](name, config, client)


__all__ = ["ChatUpstream", "Completion", "build_upstream", "create_client"]
