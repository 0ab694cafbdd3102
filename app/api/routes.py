"""HTTP routes: translate HTTP to a pipeline call and back, nothing more."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from app.api.deps import (
    Authorized,
    ChatCallDep,
    ServicesDep,
    TelemetryReader,
    chat_call,
    limits_of,
    served,
    strategy_of,
)
from app.config import Settings
from app.errors import ModelNotFound
from app.learning.threshold import target_block
from app.schemas import request_json_schema
from app.telemetry.metrics import render as render_metrics
from app.vocabulary import Strategy

router = APIRouter()

# The body is read and checked by ``chat_call`` (size cap, timeout, the first problem
# named), not by FastAPI; this documents it.
_CHAT_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": request_json_schema()}},
    }
}


@router.post("/v1/chat/completions", openapi_extra=_CHAT_BODY)
async def chat_completions(request: Request, call: ChatCallDep) -> Response:
    """OpenAI chat completions, routed by the configured or requested strategy."""
    return await served(request, call)


async def chat_lane(request: Request) -> Response:
    """``chat_completions`` for the lean edge's chat lane, which solves no dependencies."""
    return await served(request, await chat_call(request))


AUTO = "auto"


@router.get("/v1/models", dependencies=[Authorized])
async def list_models(services: ServicesDep) -> dict[str, Any]:
    """The model ids a request may name: the speculative strategy's, the configured
    models by their names in config.yaml, and ``auto``, each with the strategy it picks."""
    return {"object": "list", "data": _models(services.settings)}


@router.get("/v1/models/{model_id:path}", dependencies=[Authorized])
async def retrieve_model(model_id: str, services: ServicesDep) -> dict[str, Any]:
    """One entry of ``/v1/models``; an unknown id is a 404."""
    for entry in _models(services.settings):
        if entry["id"] == model_id:
            return entry
    raise ModelNotFound(model_id)


def _models(settings: Settings) -> list[dict[str, Any]]:
    spec = settings.speculative_decoding
    roles = {name: Strategy.CEREBRAS_ONLY for name in spec.verify_model}
    roles[spec.draft_model] = Strategy.LOCAL_ONLY
    entries: list[dict[str, Any]] = [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": cfg.provider,
            "upstream_model": cfg.model,
            "strategy": roles.get(name, settings.routing.strategy).value,
        }
        | ({"embeddings": True} if cfg.embeddings else {})  # POST /v1/embeddings answers
        for name, cfg in settings.models.items()
    ]
    if spec.enabled:
        entries.insert(0, _own(spec.model_name, Strategy.SPECULATIVE))
    if AUTO not in {entry["id"] for entry in entries}:
        # any name not listed picks routing.strategy; ``auto`` is the one the README uses
        entries.append(_own(AUTO, strategy_of(settings, AUTO)))
    return entries


def _own(model_id: str, strategy: Strategy) -> dict[str, Any]:
    """An id of the proxy's own, for a strategy rather than a configured model."""
    return {
        "id": model_id,
        "object": "model",
        "created": 0,
        "owned_by": "specproxy",
        "strategy": strategy.value,
    }


@router.get("/health")
async def health() -> dict[str, str]:
    """Cheap liveness: the proxy answers."""
    return {"status": "ok"}


@router.get("/stats", dependencies=[TelemetryReader])
async def stats(request: Request, services: ServicesDep) -> dict[str, Any]:
    """Configuration (secrets masked) and its version, feature status and counters since
    start (a reload keeps them)."""
    local_ok = await services.chat.local.healthy()
    snapshot = await services.snapshot()
    # Read after the awaits, as this worker's version in the snapshot was: a reload
    # between them must not pair the new version with the old settings.
    settings, pipeline = services.settings, services.chat
    features: dict[str, Any] = {
        "strategy": settings.routing.strategy.value,
        "speculative_decoding": settings.speculative_decoding.enabled,
        "upstreams": {
            name: {
                "provider": up.config.provider,
                "base_url": up.base_url,
                "api_key_set": up.config.api_key is not None,
                "unavailable_reason": up.unavailable_reason,
                "last_ok_at": up.last_ok_at,
                "last_error": up.last_error,
                **up.status(),
                **({"reachable": local_ok} if name == pipeline.local.name else {}),
            }
            for name, up in pipeline.upstreams.items()
        },
        "verification": pipeline.cloud.unavailable_reason is None,
    }
    counters, learning = snapshot.stats(settings.telemetry.alerts), snapshot.learning()
    counters["quality"]["audits"] = learning.get("audits")  # None: learning (and audits) off
    counters["quality"]["target"] = target_block(learning)  # None: learning off
    counters["cache"] |= snapshot.cache()  # the store's entries and bytes (app.cache)
    return {
        **snapshot.config(),
        **counters,
        "adaptive_depth": snapshot.depth(),
        "learning": learning,
        "features": features,
        "local_servers": snapshot.local_servers,
        "runtime": snapshot.runtime(),
        **services.shared_state(),
        "limits": limits_of(request).status(),  # this process's (app.keys.admission)
        "config": settings.model_dump(mode="json"),
    }


@router.get("/metrics", dependencies=[TelemetryReader])
async def metrics(services: ServicesDep) -> Response:
    """Prometheus text: the proxy's metrics, plus llama-server's own when it serves them."""
    local = services.chat.local
    local_text = None
    if services.settings.telemetry.scrape_local_metrics:
        local_text = await local.metrics_text()  # None unless it serves its own
    snapshot = await services.snapshot()
    body, content_type = render_metrics(
        snapshot.totals(),
        local_text,
        snapshot.workers,
        by_worker=snapshot.grouped,
        max_key_labels=services.settings.telemetry.max_key_labels,
    )
    return Response(body, media_type=content_type)
