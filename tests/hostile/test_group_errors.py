"""D25: when every member of a pool or a chain fails, the error names the failure of a
member that was asked (not a member skipped for its open circuit) and every other
member's failure with it."""

from __future__ import annotations

from collections.abc import Iterator

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply, serve
from tests.support.proxy import CLOUD_KEY, MakeProxy, dead_url
from tests.support.tiers import process_fixture

ASK = {"messages": [{"role": "user", "content": "Say hello"}]}
LOCAL = {"X-Routing-Strategy": "local_only"}
BACKUP_KEY = "sk-backup-0d1e2f3a"


@process_fixture
def backup() -> Iterator[FakeCerebras]:
    fake = FakeCerebras(api_key=BACKUP_KEY)
    with serve(fake.app) as url:
        fake.url = url
        yield fake


def test_a_pools_open_circuit_does_not_hide_the_other_members_error(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.default = Reply(status=200, raw_body=b"not json at all")  # a protocol error
    pool = {
        "local": {
            "base_url": None,
            "base_urls": [dead_url(), local.url],
            "circuit_breaker": {"failures": 1, "cooldown_s": 60},
        }
    }
    with make_proxy(models=pool) as proxy:
        first = proxy.http.post("/v1/chat/completions", json=ASK, headers=LOCAL)
        second = proxy.http.post("/v1/chat/completions", json=ASK, headers=LOCAL)
    assert first.status_code == 502, first.text  # both asked: the protocol error leads
    message = second.json()["error"]["message"]
    assert second.status_code == 502, second.text  # not the dead member's 503
    assert "circuit open" in message  # the skipped member is named too
    assert "not valid JSON" in message or "JSON" in message


def test_a_chain_that_fails_throughout_names_every_member(
    make_proxy: MakeProxy, cloud: FakeCerebras, backup: FakeCerebras
) -> None:
    cloud.default = Reply(status=500, error={"error": {"message": "first is down"}})
    backup.default = Reply(status=500, error={"error": {"message": "second is down"}})
    models = {
        "backup": {
            "provider": "openai",
            "base_url": f"{backup.url}/v1",
            "model": "gpt-oss-120b",
            "api_key": "${BACKUP_KEY}",
            "max_retries": 0,
        }
    }
    with make_proxy(
        models=models,
        speculative_decoding={"verify_model": ["cerebras", "backup"]},
        env={"CEREBRAS_API_KEY": CLOUD_KEY, "BACKUP_KEY": BACKUP_KEY},
    ) as proxy:
        answer = proxy.http.post(
            "/v1/chat/completions", json=ASK, headers={"X-Routing-Strategy": "cerebras_only"}
        )
    message = answer.json()["error"]["message"]
    assert "first is down" in message and "second is down" in message, message
