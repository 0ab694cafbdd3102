"""D14: credentials around an upstream's URL. A ``base_url`` with userinfo or a query
(``?token=``) is refused at start with a message that does not repeat it; a ``.netrc``
entry for the cloud's host is not read; an upstream's redirect (here to a URL with
userinfo, on another server) is not followed: it is the upstream's failure, and the
speculative strategy serves the draft."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, serve
from tests.support.answers import HEDGED, spec
from tests.support.processes import ROOT
from tests.support.proxy import CLOUD_KEY, MakeProxy, chat_bodies, dead_url, proxy_config
from tests.support.tiers import process_fixture

pytestmark = pytest.mark.process  # every test here starts a server or a process

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
CLOUD = {"X-Routing-Strategy": "cerebras_only"}


@process_fixture
def elsewhere() -> Iterator[FakeCerebras]:
    """Another host a redirect points to."""
    fake = FakeCerebras(api_key=CLOUD_KEY)
    with serve(fake.app) as url:
        fake.url = url
        yield fake


@pytest.mark.parametrize(
    "base_url",
    ["https://user:pw-s3cret@api.example/v1", "https://api.example/v1?token=tk-s3cret"],
)
def test_a_base_url_with_credentials_is_refused_at_start(tmp_path: Path, base_url: str) -> None:
    config = proxy_config(dead_url(), dead_url(), models={"cerebras": {"base_url": base_url}})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "main.py", "--config", str(path), "--port", "1"],
        cwd=ROOT,
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "models.cerebras.base_url" in done.stderr and "api_key" in done.stderr
    assert "s3cret" not in done.stdout + done.stderr


def test_a_netrc_entry_for_the_cloud_is_not_read(
    make_proxy: MakeProxy, cloud: FakeCerebras, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password netrc-s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with make_proxy() as proxy:
        response = proxy.http.post("/v1/chat/completions", json=ASK, headers=CLOUD)
    assert response.status_code == 200, response.text
    sent = [r for r in cloud.requests if r.path.endswith("/chat/completions")]
    assert sent[0].headers["authorization"] == f"Bearer {CLOUD_KEY}"


def test_an_upstream_redirect_is_its_failure_and_not_followed(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    elsewhere: FakeCerebras,
) -> None:
    target = elsewhere.url.replace("http://", "http://user:redirect-s3cret@")
    moved = Reply(status=307, raw_body=b"{}", headers={"Location": f"{target}/v1/chat/completions"})
    cloud.default = moved
    local.default = Reply(HEDGED)  # doubted: the cloud is asked
    with make_proxy() as proxy:
        direct = proxy.http.post("/v1/chat/completions", json=ASK, headers=CLOUD)
        speculative = proxy.http.post("/v1/chat/completions", json=ASK)
        stats = proxy.http.get("/stats").text
    assert direct.status_code == 502, direct.text
    assert "redirect" in direct.json()["error"]["message"]
    assert speculative.status_code == 200, speculative.text
    assert spec(speculative.json())["spilled_over"] is False  # the draft, degraded
    assert chat_bodies(elsewhere) == []  # the prompt never left for the other host
    assert "s3cret" not in direct.text + speculative.text + stats


def test_an_environment_proxy_still_carries_the_cloud_calls(
    make_proxy: MakeProxy, cloud: FakeCerebras, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trust_env`` is off, but ``HTTP_PROXY`` still applies to a remote upstream: here the
    stand-in is the proxy, and the cloud's host does not resolve at all."""
    monkeypatch.setenv("HTTP_PROXY", cloud.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # the test's own calls to the proxy
    monkeypatch.delenv("no_proxy", raising=False)
    models = {"cerebras": {"base_url": "http://cloud.invalid/v1"}}
    with make_proxy(models=models) as proxy:
        response = proxy.http.post("/v1/chat/completions", json=ASK, headers=CLOUD)
    assert response.status_code == 200, response.text
    assert len(chat_bodies(cloud)) == 1
