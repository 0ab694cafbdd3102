"""The admin API: make, list, show, revoke and rotate client keys (docs/teams.md).

Guarded by ``server.admin_key`` (``Authorization: Bearer``, compared in constant time);
without one the API does not exist (404). A key is shown once, in the answer that made
it (``POST /admin/keys``, ``POST /admin/keys/{id}/rotate``); it is kept hashed only
(``app.keys.managed``). ``server.keys`` entries are listed too, read-only.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from app.api.auth import bearer, same_key
from app.api.body import read_json
from app.api.deps import ServicesDep, checked, services_of
from app.errors import AuthenticationFailed, InvalidRequest, ProxyError
from app.keys.managed import KeySettings, StoredKey, shown, shown_config
from app.schemas import inline_schema
from app.services import Services

ADMIN = "/admin/keys"


class AdminNotFound(ProxyError):
    """No admin API (``server.admin_key`` unset), or no key of that id."""

    status = 404
    type = "invalid_request_error"


class KeyConflict(ProxyError):
    """The change cannot be made as asked: a name taken, a key from config.yaml."""

    status = 409
    type = "invalid_request_error"


def check_admin_key(request: Request) -> None:
    """404 without ``server.admin_key``; 401 unless the request presents it as a bearer."""
    services = services_of(request)
    admin = services.settings.server.admin_key
    if admin is None or not admin.get_secret_value():
        raise AdminNotFound(
            "no admin API: set server.admin_key (as ${VAR}) to turn it on", code="not_found"
        )
    if not same_key(bearer(request), admin):
        services.refuse(401)
        raise AuthenticationFailed(
            "missing or invalid admin key: send 'Authorization: Bearer <server.admin_key>'",
            code="invalid_admin_key",
        )


router = APIRouter(dependencies=[Depends(check_admin_key)])

_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": inline_schema(KeySettings)}},
    }
}


@router.post(ADMIN, openapi_extra=_BODY, status_code=201)
async def create_key(request: Request, services: ServicesDep) -> Response:
    """A new key with the body's settings; the answer holds the key, shown only here."""
    data = await read_json(request, services.settings.server)
    if "key" in data:
        raise InvalidRequest("key: a key is made by the proxy, not given", param="key")
    settings = checked(KeySettings, data)
    name = data["name"]
    if name in _names(services):
        raise KeyConflict(f"name: a key named {name!r} exists", param="name", code="name_taken")
    stored, key = await services.key_store.create(settings)
    return JSONResponse({**shown(stored), "key": key}, status_code=201)


@router.get(ADMIN)
async def list_keys(services: ServicesDep) -> dict[str, Any]:
    """Every key by id, name and settings (never a key): server.keys', then the managed."""
    configured = [shown_config(k) for k in services.settings.server.keys]
    managed = [shown(k) for k in services.key_store.view.all()]
    return {"object": "list", "data": configured + managed}


@router.get(ADMIN + "/{key_id}")
async def get_key(key_id: str, services: ServicesDep) -> dict[str, Any]:
    """One key by id (a ``server.keys`` entry's id is its name)."""
    if (stored := services.key_store.view.get(key_id)) is not None:
        return shown(stored)
    for config in services.settings.server.keys:
        if config.name == key_id:
            return shown_config(config)
    raise _unknown(key_id)


@router.delete(ADMIN + "/{key_id}")
async def revoke_key(key_id: str, services: ServicesDep) -> dict[str, Any]:
    """Revoke a managed key: refused from now on, by every replica."""
    _not_configured(key_id, services)
    if not await services.key_store.revoke(key_id):
        raise _unknown(key_id)
    return {"id": key_id, "object": "key", "deleted": True}


@router.post(ADMIN + "/{key_id}/rotate")
async def rotate_key(key_id: str, services: ServicesDep) -> dict[str, Any]:
    """A new key for the same id (settings kept); the old key is refused from now on."""
    _not_configured(key_id, services)
    rotated: tuple[StoredKey, str] | None = await services.key_store.rotate(key_id)
    if rotated is None:
        raise _unknown(key_id)
    stored, key = rotated
    return {**shown(stored), "key": key}


def _names(services: Services) -> set[str]:
    names = {k.name for k in services.settings.server.keys}
    return names | {k.settings["name"] for k in services.key_store.view.all()}


def _not_configured(key_id: str, services: Services) -> None:
    if services.key_store.view.get(key_id) is None and any(
        k.name == key_id for k in services.settings.server.keys
    ):
        raise KeyConflict(
            f"{key_id!r} is a server.keys entry: change it in config.yaml (and reload)",
            code="key_in_config",
        )


def _unknown(key_id: str) -> AdminNotFound:
    return AdminNotFound(f"no key with id {key_id!r}", code="key_not_found")
