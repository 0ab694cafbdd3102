"""The serving parts one configuration builds: upstream clients and the pipeline over them.

Start-up and a reload (``app.reload``) build them the same way, here, so a setting
means one thing whichever built it. A managed llama-server is not part of this: it
outlives every reload, and its URL is handed in (``base_urls``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AsyncExitStack

from app.config import Settings
from app.pipeline import Pipeline
from app.telemetry import Telemetry
from app.upstreams import ChatUpstream, build_upstream, create_client
from app.upstreams.llama_server import LlamaServer

log = logging.getLogger("specproxy")


def build_upstreams(
    settings: Settings, stack: AsyncExitStack, base_urls: Mapping[str, str]
) -> dict[str, ChatUpstream]:
    """One upstream per ``models:`` entry, each with its own client (closed by ``stack``);
    ``base_urls`` stand in for a managed server's (it is not in the config)."""
    upstreams: dict[str, ChatUpstream] = {}
    for name, config in settings.models.items():
        client = create_client(config)
        stack.push_async_callback(client.close)
        upstream = build_upstream(name, config, client)
        if name in base_urls:
            upstream.base_url = base_urls[name]
        upstreams[name] = upstream
    return upstreams


async def open_pipeline(
    settings: Settings, telemetry: Telemetry, base_urls: Mapping[str, str], stack: AsyncExitStack
) -> Pipeline:
    """A started pipeline over fresh upstreams; ``stack`` closes both, pipeline first."""
    upstreams = build_upstreams(settings, stack, base_urls)
    pipeline = Pipeline(settings, upstreams, telemetry)
    await pipeline.start()
    stack.push_async_callback(pipeline.close)
    await _probe_server_depth(pipeline)
    _log_features(pipeline)
    return pipeline


async def _probe_server_depth(pipeline: Pipeline) -> None:
    """Ask llama-server whether it takes ``speculative.n_max`` per request (adaptive K)."""
    if pipeline.depth.wants_probe and isinstance(pipeline.local, LlamaServer):
        pipeline.depth.found_server_params(await pipeline.local.per_request_params())


def _log_features(pipeline: Pipeline) -> None:
    for name, upstream in pipeline.upstreams.items():
        log.info("upstream %s: %s at %s", name, upstream.config.provider, upstream.base_url)
    if reason := pipeline.cloud.unavailable_reason:
        log.warning(
            "verification is OFF: %s: %s; doubtful drafts are served marked degraded",
            pipeline.cloud.name,
            reason,
        )
