"""One build: every part that one configuration serves with, made from the settings.

``build(settings, telemetry, managed) -> Runtime`` makes the upstream clients and the
pipeline with its parts (policy, depth control, pricing, learner), each by plain
construction with its inputs passed in: llama-server's ``/props`` is asked before the
pipeline is built and its answer handed to the constructors. Start-up and a reload
(``app.reload``) both call it, so a setting means one thing whichever built it; nothing
writes an attribute on a built part afterwards (``tests/test_one_build.py``), and a
reload swaps a whole new ``Runtime`` into ``Services`` at once.

What outlives every reload is built once at start-up: here by ``start_managed`` and
``with_fleet`` (the managed llama-servers, the fleet's sync, kept as ``Lasting``), or by
the caller and passed in (``Stats``, the workers' group, the telemetry sinks: the spec
log stays open across reloads).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from app.cache import AnswerCache
from app.composition import build_policy, learning_store
from app.config import Settings
from app.depth_control import NOT_PROBED, DepthControl, NotProbed
from app.keys.registry import KeyStore
from app.keys.ring import KeyRing
from app.learning.gate_fit import GateKeeper
from app.learning.learner import Learner
from app.pipeline import Pipeline
from app.pricing import Pricing
from app.telemetry import Telemetry
from app.upstreams import Upstream, build_upstream, chain, create_client, servers
from app.upstreams.interface import Props
from app.upstreams.llama_server import capabilities, per_request_params

if TYPE_CHECKING:
    from app.local_server import ManagedLlamaServer
    from app.services import Services
    from app.state.sync import FleetSync

log = logging.getLogger("specproxy")


@dataclass(frozen=True, eq=False)
class Runtime:
    """What one configuration serves with: its settings and the pipeline over its
    upstreams. Built whole by ``build``, replaced whole by a reload, closed once."""

    settings: Settings
    pipeline: Pipeline
    stack: AsyncExitStack  # closes the pipeline, then its upstreams' clients

    @cached_property
    def keys(self) -> KeyRing:
        """The client keys this configuration accepts, hashed once (with the admin API on,
        a key is asked for even while there is none)."""
        server = self.settings.server
        return KeyRing.of(server.api_key_values, server.keys, server.admin_key is not None)

    async def close(self) -> None:
        """Stop the pipeline's background work and close its clients."""
        await self.stack.aclose()


@dataclass(frozen=True, eq=False)
class Lasting:
    """What outlives every reload, built once at start-up: the managed llama-servers
    (their URLs stand in for the config's) and the fleet's sync (``state.backend: redis``)."""

    managed: Mapping[str, ManagedLlamaServer]
    fleet: FleetSync | None = None
    keys: KeyStore = field(default_factory=KeyStore)  # made through /admin/keys

    def urls(self) -> dict[str, str]:
        """The managed llama-servers' URLs, by model name."""
        return {name: url for name, server in self.managed.items() if (url := server.base_url)}


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


def pipeline_of(
    settings: Settings,
    upstreams: dict[str, Upstream],
    telemetry: Telemetry,
    props: Props | NotProbed | None = NOT_PROBED,
) -> Pipeline:
    """The pipeline and its parts, built from the settings; ``props``: llama-server's
    ``/props`` answer, asked before (None: no answer; not probed: not a llama-server)."""
    spec = settings.speculative_decoding
    policy = build_policy(spec)
    learner = None
    if settings.learning.enabled:
        store = learning_store(settings)
        gate = None
        if spec.gate.enabled:  # the gate before the draft (docs/gate.md)
            ceiling = spec.gate.cloud_max_agreement
            gate = GateKeeper(
                store.dir,
                target=spec.target_agreement,
                cloud_max_agreement=ceiling,
                explore=spec.gate.explore,
            )
        learner = Learner(
            settings.learning,
            policy,
            threshold=spec.spill_threshold,
            store=store,
            target=spec.target_agreement,
            gate=gate,
        )
    pricing = Pricing.of(settings)
    cloud = chain(upstreams, spec.verify_model)
    cache = AnswerCache.build(settings.cache, settings.state, cloud, pricing, telemetry)
    return Pipeline(
        spec,
        upstreams,
        telemetry,
        policy=policy,
        depth=DepthControl(
            settings,
            settings.logging.spec_adjust_log_file,
            per_request_params(props) if not isinstance(props, NotProbed) else props,
        ),
        pricing=pricing,
        learner=learner,
        local_can=capabilities(props) if not isinstance(props, NotProbed) else None,
        cache=cache,
    )


async def build(settings: Settings, telemetry: Telemetry, managed: Mapping[str, str]) -> Runtime:
    """A started ``Runtime`` over fresh upstreams; a failure closes what it had opened."""
    stack = AsyncExitStack()
    try:
        upstreams = build_upstreams(settings, stack, managed)
        props = await _probe_local(upstreams[settings.speculative_decoding.draft_model])
        pipeline = pipeline_of(settings, upstreams, telemetry, props)
        stack.push_async_callback(pipeline.cache.close)  # after the pipeline's own close
        stack.push_async_callback(pipeline.close)  # before start: a failed start closes it
        await pipeline.start()
    except BaseException:
        await stack.aclose()
        raise
    _log_features(pipeline)
    return Runtime(settings, pipeline, stack)


async def start_managed(settings: Settings, stack: AsyncExitStack) -> Lasting:
    """The managed llama-servers, started (``stack`` stops them), as the start of ``Lasting``."""
    managed: dict[str, ManagedLlamaServer] = {}
    for name, config in settings.models.items():
        if (launch := config.managed_launch()) is not None:
            from app.local_server import ManagedLlamaServer

            server = ManagedLlamaServer(launch, name)
            stack.push_async_callback(server.stop)
            await server.start()
            managed[name] = server
    return Lasting(managed)


async def with_fleet(
    lasting: Lasting, settings: Settings, services: Services, stack: AsyncExitStack
) -> Lasting:
    """``lasting`` and the fleet's sync (``state.backend: redis``; ``stack`` stops it). The
    sync reads the runtime ``services`` serves with, so that must be in place."""
    if settings.state.backend != "redis":
        return lasting
    fleet = await _join_fleet(settings, services)
    stack.push_async_callback(fleet.close)
    return Lasting(lasting.managed, fleet)


async def with_keys(lasting: Lasting, settings: Settings, stack: AsyncExitStack) -> Lasting:
    """``lasting`` and the managed keys' store (``/admin/keys``): in Redis with
    ``state.backend: redis`` (read before serving; ``stack`` stops following it), else in
    this process's memory."""
    if settings.state.backend != "redis":
        return lasting
    from app.state.health import RedisHealth
    from app.state.keys import RedisKeyStore

    keys = RedisKeyStore(settings.state, RedisHealth(settings.secrets(), "keys"))
    await keys.start()
    stack.push_async_callback(keys.close)
    return replace(lasting, keys=keys)


async def _join_fleet(settings: Settings, services: Services) -> FleetSync:
    """Start sharing this replica's state through Redis (``state.backend: redis``)."""
    from app.state.health import RedisHealth
    from app.state.sync import FleetSync

    fleet = FleetSync(
        settings.state,
        lambda: servers(services.chat.upstreams),  # a reload replaces the pipeline's
        services.stats.state,
        RedisHealth(settings.secrets(), "shared state"),
    )
    await fleet.start()
    log.info("sharing state through redis as replica %s", fleet.replica)
    return fleet


async def _probe_local(local: Upstream) -> Props | NotProbed | None:
    """What llama-server says it can do (beyond text; whether it takes
    ``speculative.n_max`` per request); a pool's servers are taken to be one build."""
    if not local.has_props:
        return NOT_PROBED  # another kind of local server: what it reads is its own business
    return await local.props()


def _log_features(pipeline: Pipeline) -> None:
    for name, upstream in pipeline.upstreams.items():
        log.info("upstream %s: %s at %s", name, upstream.config.provider, upstream.base_url)
    if reason := pipeline.cloud.unavailable_reason:
        log.warning(
            "verification is OFF: %s: %s; doubtful drafts are served marked degraded",
            pipeline.cloud.name,
            reason,
        )
