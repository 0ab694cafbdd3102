"""Usage by key and team (app.telemetry.by_key, app.telemetry.key_metrics), held to hand
computations: /stats → keys, its merge over workers, and the bounded /metrics series."""

from __future__ import annotations

import orjson
import pytest

from app.keys import Caller, caller
from app.pricing import Late, Pricing
from app.record import RequestRecord, Usage
from app.telemetry.key_metrics import labelled_keys
from app.telemetry.metrics import render
from app.telemetry.stats import Stats
from app.vocabulary import Outcome, Purpose, Strategy
from tests.telemetry.test_cost import CLOUD, LOCAL, usd
from tests.telemetry.test_metrics import parse

PRICING = Pricing({"local": LOCAL, "cerebras": CLOUD}, baseline_model="cerebras")
DRAFT = Usage("local", Purpose.DRAFT, 20, 30)
SPILL = Usage("cerebras", Purpose.SPILL, 25, 80)
PASSED = Usage("cerebras", Purpose.PASS_THROUGH, 10, 5)


def keyed(
    key: str | None, team: str | None, *usage: Usage, cached: Usage | None = None
) -> RequestRecord:
    """A finished request of this key, billed as the pipeline bills it."""
    rec = RequestRecord(
        Strategy.SPECULATIVE, key=key, team=team, draft_model="local", verify_model="cerebras"
    )
    rec.usage, rec.outcome = list(usage), Outcome.SPILLED_OVER
    if cached is not None:
        rec.cache, rec.cached, rec.outcome = "hit", cached, Outcome.CACHED
    elif usage:
        rec.cache = "miss"
    rec.bill = PRICING.bill(rec)
    return rec


def traffic() -> list[RequestRecord]:
    """alice (search): an accepted draft and a spill; bob (search): a pass-through; carol
    (no team): a cache hit; one request without a key."""
    return [
        keyed("alice", "search", DRAFT),
        keyed("alice", "search", DRAFT, SPILL),
        keyed("bob", "search", PASSED),
        keyed("carol", None, cached=SPILL),
        keyed(None, None, DRAFT, SPILL),
    ]


def observed(recs: list[RequestRecord]) -> Stats:
    stats = Stats()
    for rec in recs:
        stats.record(rec)
    return stats


def test_stats_keys_add_up_each_key_and_team_by_hand() -> None:
    stats = observed(traffic())
    keys = stats.get_metrics()["keys"]
    alice, bob, carol = (keys["by_key"][name] for name in ("alice", "bob", "carol"))
    assert set(keys["by_key"]) == {"alice", "bob", "carol"}  # the unkeyed request: nowhere

    assert alice["team"] == "search" and alice["requests"] == 2
    assert alice["tokens"] == {
        "prompt": {"local": 40, "cloud": 25},
        "completion": {"local": 60, "cloud": 80},
    }
    spend = 2 * usd(LOCAL, 20, 30) + usd(CLOUD, 25, 80)
    assert alice["spend_usd"]["total"] == pytest.approx(spend)
    assert alice["spend_usd"]["cloud"] == pytest.approx(usd(CLOUD, 25, 80))
    assert alice["spend_usd"]["by_model"] == {
        "cerebras": pytest.approx(usd(CLOUD, 25, 80)),
        "local": pytest.approx(2 * usd(LOCAL, 20, 30)),
    }
    assert alice["spend_usd"]["by_purpose"] == {
        "draft": pytest.approx(2 * usd(LOCAL, 20, 30)),
        "spill": pytest.approx(usd(CLOUD, 25, 80)),
    }
    assert alice["cloud_calls"] == {"total": 1, "per_request": 0.5, "by_purpose": {"spill": 1}}
    assert (alice["cache"]["hits"], alice["cache"]["misses"]) == (0, 2)

    assert bob["tokens"]["prompt"] == {"local": 0, "cloud": 10}
    assert bob["spend_usd"]["by_purpose"] == {"pass_through": pytest.approx(usd(CLOUD, 10, 5))}
    assert bob["baseline_usd"] == pytest.approx(usd(CLOUD, 10, 5)) and bob["savings_usd"] == 0

    assert carol["team"] is None and carol["spend_usd"]["total"] == 0
    assert carol["cache"] == {
        "hits": 1,
        "misses": 0,
        "hit_rate": 1.0,
        "saved_usd": pytest.approx(usd(CLOUD, 25, 80)),
    }
    assert carol["savings_usd"] == pytest.approx(usd(CLOUD, 25, 80))

    # alice's accepted draft is estimated: calibrated on every pair the proxy saw, as
    # /stats → cost is (the unkeyed spill's pair included)
    total = stats.get_metrics()["cost"]
    unkeyed = observed(traffic()[-1:]).get_metrics()["cost"]
    for field in ("baseline_usd", "savings_usd"):
        summed = sum(k[field] for k in keys["by_key"].values()) + unkeyed[field]
        assert summed == pytest.approx(total[field]), field

    assert list(keys["by_team"]) == ["search"]
    team = keys["by_team"]["search"]
    assert team["keys"] == ["alice", "bob"] and team["requests"] == 3
    assert team["spend_usd"]["total"] == pytest.approx(spend + usd(CLOUD, 10, 5))
    assert team["spend_usd"]["cloud"] == pytest.approx(usd(CLOUD, 25, 80) + usd(CLOUD, 10, 5))
    assert team["savings_usd"] == pytest.approx(alice["savings_usd"] + bob["savings_usd"])


def test_a_late_charge_goes_to_the_caller_in_force() -> None:
    stats = observed(traffic()[:1])
    audit = PRICING.charge(Usage("cerebras", Purpose.AUDIT, 26, 9))
    token = caller.set(Caller(key_id="alice", name="alice", team="search"))
    try:
        stats.charge(Late(charges=(audit,)))
    finally:
        caller.reset(token)
    stats.charge(Late(charges=(audit,)))  # no caller: the total's only
    alice = stats.get_metrics()["keys"]["by_key"]["alice"]
    assert alice["spend_usd"]["by_purpose"]["audit"] == pytest.approx(usd(CLOUD, 26, 9))
    assert alice["cloud_calls"]["by_purpose"] == {"audit": 1}
    assert stats.get_metrics()["cost"]["cloud_calls"]["by_purpose"] == {"audit": 2}


def test_a_late_charge_counts_its_tokens_too() -> None:
    # an audit's cloud call and a draft finished beside the cloud's answer: both came after
    # their request was counted, and both did work the token counts should show
    stats = observed(traffic()[:1])
    before = stats.get_metrics()["tokens"]
    audit, late = Usage("cerebras", Purpose.AUDIT, 26, 9), Usage("local", Purpose.DRAFT, 31, 14)
    charges = (PRICING.charge(audit), PRICING.charge(late))
    token = caller.set(Caller(key_id="alice", name="alice", team="search"))
    try:
        stats.charge(Late(usages=(audit, late), charges=charges, draft_model="local"))
    finally:
        caller.reset(token)
    after = stats.get_metrics()["tokens"]
    assert (after["cloud"] - before["cloud"], after["local"] - before["local"]) == (9, 14)
    tokens = stats.keys.keys["alice"].tokens
    alone = observed(traffic()[:1]).keys.keys["alice"].tokens
    added = {name: tokens[name] - alone[name] for name in tokens}
    assert added == {
        "prompt:cloud": 26,
        "completion:cloud": 9,
        "prompt:local": 31,
        "completion:local": 14,
    }


def test_late_tokens_are_split_by_the_draft_model_as_the_records_are() -> None:
    # a cloud model drafting (an openai-provider draft_model): its late draft's tokens are
    # the local side's, as the same draft's tokens would be in its request's record
    stats = observed(traffic()[:1])
    before = stats.get_metrics()["tokens"]
    late = Usage("cerebras", Purpose.DRAFT, 12, 5)
    stats.charge(Late(usages=(late,), charges=(PRICING.charge(late),), draft_model="cerebras"))
    after = stats.get_metrics()["tokens"]
    assert (after["cloud"] - before["cloud"], after["local"] - before["local"]) == (0, 5)


def test_workers_merge_to_what_one_process_would_count() -> None:
    recs = traffic()
    parts = [observed(recs[:2]), observed(recs[2:])]
    states = [orjson.loads(orjson.dumps(part.state())) for part in parts]
    merged = Stats.merged(states).get_metrics()["keys"]
    assert merged == observed(recs).get_metrics()["keys"]


def test_metrics_bound_the_key_label_and_keep_team_sums_exact() -> None:
    stats = observed(traffic())
    assert set(labelled_keys(stats.keys, 1)) == {
        ("alice", "search"),
        ("other", "search"),
        ("other", ""),
    }
    assert set(labelled_keys(stats.keys, 3)) == {
        ("alice", "search"),
        ("bob", "search"),
        ("carol", ""),
    }

    samples = parse(render(stats, None, [], max_key_labels=1)[0].decode())
    keys = stats.get_metrics()["keys"]
    requests = {
        (s.labels["key"], s.labels["team"]): s.value
        for s in samples["specproxy_key_requests_total"]
    }
    assert requests == {("alice", "search"): 2, ("other", "search"): 1, ("other", ""): 1}
    for team, summary in keys["by_team"].items():
        spent = sum(
            s.value for s in samples["specproxy_key_cost_usd_total"] if s.labels["team"] == team
        )
        assert spent == pytest.approx(summary["spend_usd"]["total"])
    tokens = {
        (s.labels["kind"], s.labels["source"]): s.value
        for s in samples["specproxy_key_tokens_total"]
        if s.labels["key"] == "alice"
    }
    assert tokens == {
        ("prompt", "local"): 40,
        ("prompt", "cloud"): 25,
        ("completion", "local"): 60,
        ("completion", "cloud"): 80,
    }
    [hit] = [s for s in samples["specproxy_key_cache_hits_total"] if s.labels["team"] == ""]
    assert hit.value == 1
    # without keys, the families are there and empty
    bare = parse(render(observed(traffic()[-1:]), None, [])[0].decode())
    assert "specproxy_key_requests_total" not in bare
