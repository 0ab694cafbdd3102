"""A hot reload (SIGHUP) keeps the keys made through the admin API (memory backend:
they live beside the configuration, not in it) and applies a new admin key at once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.processes import main_process
from tests.support.proxy import deep_merge, proxy_config, wait_for

pytestmark = pytest.mark.process
FIRST, SECOND = "sk-admin-first-0123456789", "sk-admin-second-9876543210"
ASK = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_reload_keeps_managed_keys_and_takes_a_new_admin_key(
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIRST_ADMIN", FIRST)
    monkeypatch.setenv("SECOND_ADMIN", SECOND)
    config = proxy_config(local.url, cloud.url, server={"admin_key": "${FIRST_ADMIN}"})
    with main_process(config, tmp_path) as (proc, url):
        made = httpx.post(f"{url}/admin/keys", json={"name": "bot"}, headers=bearer(FIRST))
        assert made.status_code == 201, made.text
        key = made.json()["key"]
        chat = f"{url}/v1/chat/completions"
        assert httpx.post(chat, json=ASK, headers=bearer(key), timeout=15).status_code == 200

        changed = deep_merge(config, {"server": {"admin_key": "${SECOND_ADMIN}"}})
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(changed))
        os.kill(proc.pid, signal.SIGHUP)
        wait_for(
            lambda: httpx.get(f"{url}/stats", headers=bearer(key)).json()["config_version"] == 2,
            timeout=15,
        )
        assert httpx.post(chat, json=ASK, headers=bearer(key), timeout=15).status_code == 200
        assert httpx.get(f"{url}/admin/keys", headers=bearer(FIRST)).status_code == 401
        listed = httpx.get(f"{url}/admin/keys", headers=bearer(SECOND)).json()["data"]
        assert [k["name"] for k in listed] == ["bot"]
        stats = httpx.get(f"{url}/stats", headers=bearer(key)).json()
        assert stats["state"]["keys"] == {"backend": "memory", "managed": 1}
    assert FIRST not in (tmp_path / "proxy.log").read_text()
