"""D3: one cloud answer that says the budget is spent, with no reset time, never switches
verification off for good: a probe goes out while the budget is low, and fresh headers
end the drought."""

from __future__ import annotations

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.cerebras import DEFAULT_RATE_LIMITS
from tests.support.answers import CLOUD_OTHER, HEDGED, spec
from tests.support.proxy import MakeProxy, Proxy, chat_bodies, wait_for

ASK = [{"role": "user", "content": "Say hello"}]
SPENT = {"x-ratelimit-remaining-requests-day": "0"}  # and no reset header at all


def ask(proxy: Proxy) -> dict:
    return proxy.http.post("/v1/chat/completions", json={"messages": ASK}).json()


def test_a_spent_budget_without_reset_stops_verifying_until_the_probe(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.default = Reply(HEDGED)  # every draft is doubted
    cloud.default = Reply(CLOUD_OTHER)
    cloud.rate_limits = dict(SPENT)
    reserve = {"probe_every_s": 30}
    with make_proxy(models={"cerebras": {"rate_limit_reserve": reserve}}) as proxy:
        assert spec(ask(proxy))["spilled_over"] is True  # verified; the headers say spent
        second = ask(proxy)
        status = proxy.stats()["features"]["upstreams"]["cerebras"]["rate_limit"]
    assert "cloud_budget_low" in spec(second)["reasons"]
    assert len(chat_bodies(cloud)) == 1  # no call within the probe interval
    assert 0 < status["next_probe_s"] <= 30


def test_a_probe_brings_fresh_headers_and_verification_back(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.default = Reply(HEDGED)
    cloud.default = Reply(CLOUD_OTHER)
    cloud.rate_limits = dict(SPENT)
    reserve = {"probe_every_s": 0.05}
    with make_proxy(models={"cerebras": {"rate_limit_reserve": reserve}}) as proxy:
        ask(proxy)
        cloud.rate_limits = dict(DEFAULT_RATE_LIMITS)  # the day rolled over
        # Doubtful drafts are served cloud_budget_low until the probe is due, then verified.
        wait_for(lambda: spec(ask(proxy))["spilled_over"], timeout=5)
        assert spec(ask(proxy))["spilled_over"] is True  # fresh headers: budget back
