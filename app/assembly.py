"""The serving parts one configuration builds: upstream clients and the pipeline over them.

Start-up and a reload (``app.reload``) build them the same way, here, so a setting
means one thing whichever built it. A managed llama-server is not part of this: it
outlives every reload, and its URL is handed in (``managed``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AsyncExitStack

from app.config import Settings
from app.pipeline import Pipeline
from app.telemetry import Telemetry
from app.upstreams import Upstream, build_upstream, create_client
from app.upstreams.llama_server import capabilities, per_request_params

log = logging.getLogger("specproxy")


def build_upstreams(
    settings: Settings, stack: AsyncExitStack, managed: Mapping[str, str]
) -> dict[str, Upstream]:
    """One upstream per ``models:`` entry (a pool for ``base_urls``), each with its own
    client (closed by ``stack``); the ``managed`` servers' URLs stand in for theirs (a
    managed server's is not in the config)."""
    upstreams: dict[str, Upstream] = {}
    for name, config in settings.models.items():
        client = create_client(config)
        stack.push_async_callback(client.close)
        if name in managed:  # managed: one server, not a pool
            config = config.model_copy(update={"base_url": managed[name]})
        upstreams[name] = build_upstream(name, config, client)
    return upstreams


async def open_pipeline(
    settings: Settings, telemetry: Telemetry, managed: Mapping[str, str], stack: AsyncExitStack
) -> Pipeline:
    """A started pipeline over fresh upstreams; ``stack`` closes both, pipeline first."""
    upstreams = build_upstreams(settings, stack, managed)
    pipeline = Pipeline(settings, upstreams, telemetry)
    stack.push_async_callback(pipeline.close)  # before start: a failed start closes it too
    await pipeline.start()
    await _probe_local(pipeline)
    _log_features(pipeline)
    return pipeline


async def _probe_local(pipeline: Pipeline) -> None:
    """Ask llama-server what it can do beyond text, and whether it takes
    ``speculative.n_max`` per request (adaptive K)."""
    local = pipeline.local  # a pool's servers are taken to be one build: its first is asked
    if not local.has_props:
        return  # another kind of local server: what it reads is its own business
    props = await local.props()
    pipeline.local_can = capabilities(props)
    if pipeline.depth.wants_probe:
        pipeline.depth.found_server_params(per_request_params(props))


def _log_features(pipeline: Pipeline) -> None:
    for name, upstream in pipeline.upstreams.items():
        log.info("upstream %s: %s at %s", name, upstream.config.provider, upstream.base_url)
    if reason := pipeline.cloud.unavailable_reason:
        log.warning(
            "verification is OFF: %s: %s; doubtful drafts are served marked degraded",
            pipeline.cloud.name,
            reason,
        )
