"""``server.telemetry_key``: ``/stats`` and ``/metrics`` show every key's usage, so a team
can keep them from its client keys. On a real proxy, on each edge."""

from __future__ import annotations

import pytest

from app.config import ConfigError, settings_from_mapping
from tests.keys.test_admin_api import ADMIN_KEY, TEAM_KEY, chat, openai_error
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, proxy_config

READER_KEY = "sk-telemetry-9a8b7c6d5e4f"
ENV = {"CEREBRAS_API_KEY": CLOUD_KEY, "ADMIN_KEY": ADMIN_KEY, "TEAM_KEY": TEAM_KEY}
TEAM = {"api_keys": "${TEAM_KEY}"}


def read(proxy: Proxy, path: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}" if key is not None else ""}
    response = proxy.http.get(path, headers=headers)
    if response.status_code == 403:
        openai_error(response, 403, "telemetry_key_required")
    elif response.status_code == 401:
        openai_error(response, 401, "invalid_api_key")
    return response.status_code


@pytest.mark.parametrize("path", ["/stats", "/metrics"])
def test_only_the_telemetry_and_admin_keys_read_the_figures(
    make_proxy: MakeProxy, path: str
) -> None:
    env = ENV | {"READER_KEY": READER_KEY}
    server = TEAM | {"admin_key": "${ADMIN_KEY}", "telemetry_key": "${READER_KEY}"}
    with make_proxy(env=env, api_key=TEAM_KEY, server=server) as proxy:
        assert chat(proxy, TEAM_KEY) == 200
        assert read(proxy, path, TEAM_KEY) == 403  # a client key: known, not allowed
        assert read(proxy, path, None) == 401 and read(proxy, path, "sk-guess") == 401
        assert read(proxy, path, READER_KEY) == 200 and read(proxy, path, ADMIN_KEY) == 200
        # The telemetry key reads; it is not a client key.
        assert chat(proxy, READER_KEY) == 401
        assert read(proxy, "/v1/models", READER_KEY) == 401
        stats = proxy.http.get("/stats", headers={"Authorization": f"Bearer {READER_KEY}"})
    refused = stats.json()["requests"]["refused"]
    assert refused == {"401": 4, "403": 1}  # each refusal counted by its status
    assert READER_KEY not in stats.text
    assert stats.json()["config"]["server"]["telemetry_key"] == "**********"


@pytest.mark.parametrize("unset", [{}, {"telemetry_key": "${READER_KEY}"}])
def test_without_it_every_client_key_reads_them(
    make_proxy: MakeProxy, unset: dict[str, str]
) -> None:
    """Not set, or set from a variable that is empty (as admin_key: off, not a lock)."""
    with make_proxy(env=ENV | {"READER_KEY": ""}, api_key=TEAM_KEY, server=TEAM | unset) as proxy:
        assert read(proxy, "/stats", TEAM_KEY) == 200 and read(proxy, "/metrics", TEAM_KEY) == 200
        assert read(proxy, "/stats", None) == 401


def test_it_is_a_secret_written_only_as_an_environment_variable() -> None:
    env = ENV | {"READER_KEY": READER_KEY}
    tree = proxy_config("http://l", "http://c", server={"telemetry_key": "${READER_KEY}"})
    assert READER_KEY in settings_from_mapping(tree, env=env).secrets()  # redacted from logs
    literal = proxy_config("http://l", "http://c", server={"telemetry_key": READER_KEY})
    with pytest.raises(ConfigError, match=r"server\.telemetry_key: secrets may only come"):
        settings_from_mapping(literal, env=env)
