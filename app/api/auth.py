"""Who may call: a client key (``Authorization: Bearer``, or a door's own header), the
telemetry key for ``/stats`` and ``/metrics``, each compared by its hash (``app.keys``);
a refusal is counted, then raised as the client's 401 or 403."""

from __future__ import annotations

import hmac

from fastapi import Request
from pydantic import SecretStr

from app.errors import AuthenticationFailed, KeyForbidden
from app.keys import caller, key_hash
from app.services import Services


def check_api_key(
    request: Request,
    services: Services,
    presented: str | None = None,
    send: str = "'Authorization: Bearer <key>'",
) -> None:
    """401 unless the request names an accepted key (``server.api_keys``, ``server.keys``):
    ``presented`` (a door's own header), else ``Authorization: Bearer <key>``; the refusal
    tells how to ``send`` it. Sets the request's ``caller`` (``app.keys``)."""
    keys = services.keys
    if keys.empty:
        return
    who = keys.find(bearer(request) if presented is None else presented)
    if who is None:
        services.refuse(401)
        raise AuthenticationFailed(
            f"missing or invalid API key: send {send} with a key from server.api_keys, "
            "server.keys or the admin API",
            code="invalid_api_key",
        )
    caller.set(who)


def bearer(request: Request) -> str:
    """The key the request presents as ``Authorization: Bearer <key>`` ("" if none)."""
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    return presented.strip() if scheme.lower() == "bearer" else ""


def same_key(presented: str, key: SecretStr | None) -> bool:
    """Whether ``presented`` is ``key``, compared as hashes in constant time (the time says
    nothing of either's length)."""
    if key is None or not (wanted := key.get_secret_value()):
        return False
    return hmac.compare_digest(key_hash(presented), key_hash(wanted))


def check_telemetry_key(request: Request, services: Services) -> None:
    """``/stats`` and ``/metrics``, which show every key's usage: with
    ``server.telemetry_key`` set, it or the admin key (a client key is a 403); else any
    client key (``check_api_key``)."""
    server = services.settings.server
    if server.telemetry_key is None or not server.telemetry_key.get_secret_value():
        check_api_key(request, services)  # unset (or its variable empty, as admin_key's)
        return
    presented = bearer(request)
    if same_key(presented, server.telemetry_key) or same_key(presented, server.admin_key):
        return
    if presented and services.keys.find(presented) is not None:
        services.refuse(403)
        raise KeyForbidden(
            "this key may not read /stats or /metrics: they need server.telemetry_key",
            code="telemetry_key_required",
        )
    services.refuse(401)
    raise AuthenticationFailed(
        "missing or invalid telemetry key: send 'Authorization: Bearer <server.telemetry_key>'",
        code="invalid_api_key",
    )
