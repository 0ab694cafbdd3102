"""Prometheus metrics: the counters, the exposition, llama-server's samples re-exported, /metrics.

Unit tests read a registry holding ``StatsCollector`` over a ``Stats`` (the one
place a request is counted); the end-to-end ones run the real proxy against the
stand-ins and hold ``/metrics`` to the same figures as ``/stats``.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from app.record import RequestRecord
from app.routing.acceptance import Acceptance
from app.telemetry import Telemetry
from app.telemetry.live_metrics import upstream_gauges
from app.telemetry.llamacpp import reexported_name
from app.telemetry.metrics import CONTENT_TYPE, StatsCollector, render
from app.telemetry.stats import Stats
from app.telemetry.tallies import LATENCY_BUCKETS
from app.vocabulary import Outcome, Strategy
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy, dead_url

RECORDED = Path(__file__).parents[1] / "fixtures" / "llama_server" / "metrics.txt"
SPEC = Strategy.SPECULATIVE

GOOD_DRAFT = "Hello! I am a small local model and I am happy to help you today."
HEDGED = "I think the answer is four, but maybe it is not exactly four at all."
CLOUD_SAME = "I think the answer is four, but maybe it is not exactly four at all!"
CLOUD_OTHER = "Two plus two equals 4. This is basic arithmetic, true in every base above four."
ASK = [{"role": "user", "content": "Say hello"}]

PER_POS_TEXT = """\
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 11
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 11
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 4
"""


def records() -> list[RequestRecord]:
    """One of each path: accepted, verified and similar, spilled over, degraded, local_only."""
    return [
        RequestRecord(SPEC, outcome=Outcome.ACCEPTED, local_tokens=17, draft_s=0.05, total_s=0.06),
        RequestRecord(
            SPEC,
            outcome=Outcome.VERIFIED_DRAFT_USED,
            context_type="math",
            acceptance=Acceptance(10, 10, -1, None),
            similarity=0.95,
            local_tokens=10,
            cloud_tokens=12,
            draft_s=0.04,
            verify_s=0.3,
            total_s=0.35,
        ),
        RequestRecord(
            SPEC,
            outcome=Outcome.SPILLED_OVER,
            acceptance=Acceptance(8, 3, 3, " world"),
            similarity=0.4,
            local_tokens=8,
            cloud_tokens=30,
            draft_s=0.03,
            verify_s=1.5,
            total_s=1.6,
        ),
        RequestRecord(
            SPEC,
            outcome=Outcome.DEGRADED,
            local_tokens=40,
            upstream_errors=[("cerebras", "429"), ("local", "timeout")],
            total_s=2.0,
        ),
        RequestRecord(Strategy.LOCAL_ONLY, outcome=Outcome.PASSED_THROUGH, local_tokens=5),
    ]


def observed(recs: list[RequestRecord]) -> Stats:
    stats = Stats()
    for rec in recs:
        stats.record(rec)
    return stats


def registry(stats: Stats) -> CollectorRegistry:
    """A registry of its own (never the global one) that collects ``stats``."""
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))
    return registry


def parse(text: str) -> dict[str, list[Sample]]:
    """Samples by name; fails the test if the text does not parse."""
    out: dict[str, list[Sample]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append(sample)
    return out


def by_label(samples: dict[str, list[Sample]], name: str, label: str) -> dict[str, float]:
    """A metric's values summed by one label."""
    out: dict[str, float] = defaultdict(float)
    for sample in samples.get(name, []):
        out[sample.labels[label]] += sample.value
    return dict(out)


def one(samples: dict[str, list[Sample]], name: str) -> float:
    [sample] = samples[name]
    return sample.value


# -- StatsCollector: the counters ----------------------------------------------


def test_collector_counts_requests_drafts_and_positions() -> None:
    value = registry(observed(records())).get_sample_value

    assert value("specproxy_num_drafts_total") == 2
    assert value("specproxy_num_draft_tokens_total") == 18
    assert value("specproxy_num_accepted_tokens_total") == 13
    per_pos = [
        value("specproxy_num_accepted_tokens_per_pos_total", {"position": str(i)})
        for i in range(11)
    ]
    assert per_pos == [2, 2, 2, 1, 1, 1, 1, 1, 1, 1, None]  # drafted positions only
    assert value("specproxy_spill_overs_total") == 1
    assert (
        value(
            "specproxy_requests_total",
            {
                "strategy": "speculative_decoding",
                "outcome": "verified_draft_used",
                "context_type": "math",
            },
        )
        == 1
    )
    assert (
        value(
            "specproxy_requests_total",
            {"strategy": "local_only", "outcome": "passed_through", "context_type": "prose"},
        )
        == 1
    )
    errors = "specproxy_upstream_errors_total"
    assert value(errors, {"upstream": "cerebras", "kind": "429"}) == 1
    assert value(errors, {"upstream": "local", "kind": "timeout"}) == 1
    assert value("specproxy_tokens_total", {"source": "local"}) == 17 + 10 + 8 + 40 + 5
    assert value("specproxy_tokens_total", {"source": "cloud"}) == 42
    assert value("specproxy_draft_latency_seconds_count") == 3
    assert value("specproxy_verify_latency_seconds_count") == 2
    assert value("specproxy_request_latency_seconds_count") == 4
    assert value("specproxy_request_latency_seconds_bucket", {"le": "1.0"}) == 2
    assert value("specproxy_draft_similarity_bucket", {"le": "0.5"}) == 1
    assert value("specproxy_draft_similarity_sum") == pytest.approx(1.35)


def test_fresh_metrics_show_zero_tokens_and_no_positions() -> None:
    value = registry(Stats()).get_sample_value
    assert value("specproxy_tokens_total", {"source": "local"}) == 0
    assert value("specproxy_num_drafts_total") == 0
    assert value("specproxy_num_accepted_tokens_per_pos_total", {"position": "0"}) is None


def test_each_stats_has_its_own_registry() -> None:
    first, second = registry(Stats()), registry(observed(records()))  # no "Duplicated timeseries"
    assert first.get_sample_value("specproxy_num_drafts_total") == 0
    assert second.get_sample_value("specproxy_num_drafts_total") == 2


acceptances = st.integers(0, 12).flatmap(
    lambda n: st.integers(0, n).map(lambda k: Acceptance(n, k, -1 if k == n else k, None))
)


@given(st.lists(st.none() | acceptances, max_size=30))
def test_acceptance_counters_match_stats(drawn: list[Acceptance | None]) -> None:
    recs = [RequestRecord(SPEC, outcome=Outcome.SPILLED_OVER, acceptance=a) for a in drawn]
    stats = Stats()
    for rec in recs:
        stats.record(rec)
    value = registry(observed(recs)).get_sample_value
    speculation = stats.get_metrics()["speculation"]

    assert value("specproxy_num_drafts_total") == speculation["num_drafts"]
    assert value("specproxy_num_draft_tokens_total") == speculation["num_draft_tokens"]
    assert value("specproxy_num_accepted_tokens_total") == speculation["num_accepted_tokens"]
    expected = speculation["num_accepted_tokens_per_pos"]
    longest = max((a.n_drafted for a in drawn if a), default=0)
    per_pos = [
        value("specproxy_num_accepted_tokens_per_pos_total", {"position": str(i)})
        for i in range(longest)
    ]
    assert per_pos == expected + [0] * (longest - len(expected))


latencies = st.floats(0, 100, allow_nan=False) | st.sampled_from(LATENCY_BUCKETS)


@given(st.lists(latencies, max_size=40))
def test_histogram_buckets_are_prometheus_clients(values: list[float]) -> None:
    """Stats' buckets render as prometheus_client's own Histogram would count them
    (``le`` inclusive, the same bucket names)."""
    stats = Stats()
    for value in values:
        stats.record(RequestRecord(SPEC, outcome=Outcome.ACCEPTED, total_s=value))
    ours = registry(stats).get_sample_value
    theirs = CollectorRegistry()
    reference = Histogram("ref", "reference", buckets=LATENCY_BUCKETS, registry=theirs)
    for value in values:
        reference.observe(value)
    name = "specproxy_request_latency_seconds"
    for bound in (*LATENCY_BUCKETS, math.inf):
        le = {"le": floatToGoString(bound)}
        assert ours(f"{name}_bucket", le) == theirs.get_sample_value("ref_bucket", le)
    assert ours(f"{name}_count") == len(values)
    assert ours(f"{name}_sum") == pytest.approx(theirs.get_sample_value("ref_sum"))


def test_several_workers_render_as_one_that_saw_everything() -> None:
    """/metrics over merged states (JSON, as peers send them) equals one process's."""
    recs = records()
    states = [orjson.loads(orjson.dumps(observed(part).state())) for part in (recs[:2], recs[2:])]
    merged = parse(render(Stats.merged(states), None, [])[0].decode())
    whole = parse(render(observed(recs), None, [])[0].decode())
    assert set(merged) == set(whole)
    for name, samples in whole.items():
        expected = {tuple(sorted(s.labels.items())): s.value for s in samples}
        got = {tuple(sorted(s.labels.items())): s.value for s in merged[name]}
        assert got == pytest.approx(expected), name


def test_a_failing_spec_log_leaves_the_one_count() -> None:
    """Telemetry counts a request in Stats only, and a sink that fails loses nothing there."""

    class Broken:
        with_content = False

        def write(self, rec: RequestRecord) -> None:
            raise OSError("disk full")

    stats = Stats()
    telemetry = Telemetry(stats, spec_log=Broken())  # type: ignore[arg-type]
    for rec in records():
        telemetry.record(rec)
    value = registry(stats).get_sample_value
    assert stats.get_metrics()["requests"]["total"] == 5
    assert value("specproxy_num_drafts_total") == 2
    assert value("specproxy_request_latency_seconds_count") == 4


# -- render: the exposition ----------------------------------------------------


def test_render_is_prometheus_text_that_parses() -> None:
    body, content_type = render(observed(records()), None, [])
    assert content_type == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    samples = parse(body.decode())
    assert one(samples, "specproxy_num_drafts_total") == 2
    assert by_label(samples, "specproxy_requests_total", "outcome") == {
        "accepted_without_verification": 1,
        "verified_draft_used": 1,
        "spilled_over": 1,
        "degraded": 1,
        "passed_through": 1,
    }
    assert not any(name.startswith("specproxy_llamacpp_") for name in samples)
    assert not any(name.startswith("llamacpp:") for name in samples)
    assert not any(name.endswith("_created") for name in samples)  # no extra series per child


def upstream_status(state: str, queued: int, requests_left: int | None) -> dict[str, Any]:
    return {
        "circuit": {"state": state, "opened_total": int(state != "closed")},
        "rate_limit": {"remaining_tokens_minute": None, "remaining_requests_day": requests_left},
        "queued": queued,
    }


def test_live_gauges_of_several_workers_sum_the_load_and_label_the_rest() -> None:
    workers = [
        ("11", {"cerebras": upstream_status("open", 2, 90)}),
        ("12", {"cerebras": upstream_status("closed", 1, 80)}),
    ]
    families = {f.name: f.samples for f in upstream_gauges(workers, in_flight=5)}
    open_by_worker = {
        s.labels["worker"]: s.value
        for s in families["specproxy_circuit_state"]
        if s.labels["state"] == "open"
    }
    assert open_by_worker == {"11": 1.0, "12": 0.0}
    budget = {s.labels["worker"]: s.value for s in families["specproxy_ratelimit_remaining"]}
    assert budget == {"11": 90, "12": 80}
    [queued] = families["specproxy_upstream_queued"]
    assert queued.labels == {"upstream": "cerebras"} and queued.value == 3
    [running] = families["specproxy_requests_in_flight"]
    assert running.value == 5


def test_live_gauges_of_one_process_carry_no_worker_label() -> None:
    worker = {
        "pid": 11,
        "in_flight": 1,
        "upstreams": {"local": upstream_status("closed", 0, None)},
        "adaptive_depth": {},
        "learning": {"enabled": False},
    }
    body, _ = render(Stats(), None, [worker])
    families = {f.name: f.samples for f in text_string_to_metric_families(body.decode())}
    assert families["specproxy_circuit_state"] and families["specproxy_requests_in_flight"]
    for samples in families.values():
        assert all("worker" not in sample.labels for sample in samples)


def test_recorded_llama_server_metrics_are_reexported_with_their_types() -> None:
    recorded = RECORDED.read_text()
    body, _ = render(Stats(), recorded, [])
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    samples = parse(body.decode())

    originals = [(f, s) for f in text_string_to_metric_families(recorded) for s in f.samples]
    assert len(originals) == 15
    for family, original in originals:
        name = reexported_name(original.name)
        assert name.startswith("specproxy_llamacpp_") and ":" not in name
        assert [(s.labels, s.value) for s in samples[name]] == [({}, original.value)]
        assert families[reexported_name(family.name)].type == family.type
    assert families["specproxy_llamacpp_prompt_tokens"].type == "counter"
    assert families["specproxy_llamacpp_requests_processing"].type == "gauge"
    assert one(samples, "specproxy_llamacpp_prompt_tokens_total") == 56
    assert one(samples, "specproxy_llamacpp_spec_decode_num_drafts_total") == 0
    assert one(samples, "specproxy_llamacpp_predicted_tokens_seconds") == pytest.approx(94.2821)
    assert families["specproxy_llamacpp_requests_processing"].documentation == (
        "llama-server: Number of requests processing"
    )
    assert one(samples, "specproxy_num_drafts_total") == 0  # the proxy's own are still there


def test_reexport_keeps_labels_like_position() -> None:
    body, _ = render(Stats(), PER_POS_TEXT, [])
    samples = parse(body.decode())
    assert one(samples, "specproxy_llamacpp_spec_decode_num_drafts_total") == 11
    assert by_label(
        samples, "specproxy_llamacpp_spec_decode_num_accepted_tokens_per_pos_total", "position"
    ) == {"0": 11, "1": 9, "2": 4}


@pytest.mark.parametrize(
    "text",
    [
        "this is not prometheus text",
        'llamacpp:x{position="0} 1',
        "# TYPE llamacpp:x counter\nllamacpp:x_total not-a-number",
        "llamacpp:ok 1\nllamacpp:broken{=1} 2",
        "\x00\x01",
        "",
    ],
    ids=["words", "open-quote", "bad-value", "bad-label-after-good", "binary", "empty"],
)
def test_malformed_local_text_is_ignored(text: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="specproxy.metrics")
    body, _ = render(observed(records()), text, [])
    samples = parse(body.decode())
    assert not any(name.startswith("specproxy_llamacpp_") for name in samples)
    assert one(samples, "specproxy_num_drafts_total") == 2
    if text:
        assert "ignoring llama-server /metrics that does not parse" in caplog.text


# -- GET /metrics end to end ---------------------------------------------------


def scrape(proxy: Proxy) -> dict[str, list[Sample]]:
    response = proxy.http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    return parse(response.text)


def test_metrics_equal_stats_after_speculative_requests(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(GOOD_DRAFT), Reply(HEDGED), Reply(HEDGED), Reply(HEDGED))
    cloud.enqueue(Reply(CLOUD_SAME), Reply(CLOUD_OTHER), Reply(CLOUD_OTHER))
    for _ in range(3):
        proxy.openai.chat.completions.create(model="auto", messages=ASK)
    stream = proxy.openai.chat.completions.create(model="auto", messages=ASK, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == CLOUD_OTHER

    samples, stats = scrape(proxy), proxy.stats()
    speculation, requests = stats["speculation"], stats["requests"]
    assert requests["by_outcome"] == {
        "accepted_without_verification": 1,
        "verified_draft_used": 1,
        "spilled_over": 2,
    }
    assert speculation["num_drafts"] == 3 and speculation["num_accepted_tokens"] > 0

    assert one(samples, "specproxy_num_drafts_total") == speculation["num_drafts"]
    assert one(samples, "specproxy_num_draft_tokens_total") == speculation["num_draft_tokens"]
    assert one(samples, "specproxy_num_accepted_tokens_total") == speculation["num_accepted_tokens"]
    per_pos = by_label(samples, "specproxy_num_accepted_tokens_per_pos_total", "position")
    expected = speculation["num_accepted_tokens_per_pos"]
    assert [per_pos[str(i)] for i in range(len(expected))] == expected
    assert all(v == 0 for p, v in per_pos.items() if int(p) >= len(expected))

    assert by_label(samples, "specproxy_requests_total", "outcome") == requests["by_outcome"]
    assert by_label(samples, "specproxy_requests_total", "strategy") == requests["by_strategy"]
    assert one(samples, "specproxy_spill_overs_total") == requests["by_outcome"]["spilled_over"]
    assert by_label(samples, "specproxy_tokens_total", "source") == {
        "local": stats["tokens"]["local"],
        "cloud": stats["tokens"]["cloud"],
    }
    latency = stats["latency_ms"]
    for phase, name in (("draft", "draft"), ("verify", "verify"), ("total", "request")):
        assert one(samples, f"specproxy_{name}_latency_seconds_count") == latency[phase]["n"]
    assert one(samples, "specproxy_draft_similarity_count") == 3
    # llama-server's own, scraped from the stand-in serving the recorded text
    assert one(samples, "specproxy_llamacpp_prompt_tokens_total") == 56
    assert [r.path for r in local.requests].count("/metrics") == 1


def test_metrics_count_upstream_errors(
    proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    local.enqueue(Reply(HEDGED), Reply(HEDGED))
    cloud.enqueue(Reply(status=500))
    proxy.openai.chat.completions.create(model="auto", messages=ASK)
    samples, stats = scrape(proxy), proxy.stats()
    assert stats["upstream_errors"] == {"cerebras:500": 1}
    assert by_label(samples, "specproxy_upstream_errors_total", "kind") == {"500": 1}
    assert by_label(samples, "specproxy_upstream_errors_total", "upstream") == {"cerebras": 1}
    assert by_label(samples, "specproxy_requests_total", "outcome") == {"degraded": 1}


def test_local_without_metrics_endpoint_is_skipped(proxy: Proxy, local: FakeLlamaServer) -> None:
    local.metrics_text = None  # as if started without --metrics: 501
    samples = scrape(proxy)
    assert not any(name.startswith("specproxy_llamacpp_") for name in samples)
    assert "/metrics" in [r.path for r in local.requests]


def test_malformed_local_metrics_are_ignored_end_to_end(
    proxy: Proxy, local: FakeLlamaServer
) -> None:
    local.metrics_text = 'llamacpp:x{position="0} 1\n'
    samples = scrape(proxy)
    assert not any(name.startswith("specproxy_llamacpp_") for name in samples)
    assert "specproxy_num_drafts_total" in samples


def test_dead_local_still_serves_metrics(make_proxy: MakeProxy) -> None:
    with make_proxy(local_url=dead_url()) as proxy:
        samples = scrape(proxy)
    assert "specproxy_requests_total" not in samples  # no request yet, no child
    assert not any(name.startswith("specproxy_llamacpp_") for name in samples)


def test_scrape_can_be_turned_off(make_proxy: MakeProxy, local: FakeLlamaServer) -> None:
    with make_proxy(telemetry={"scrape_local_metrics": False}) as proxy:
        samples = scrape(proxy)
    assert not any(name.startswith("specproxy_llamacpp_") for name in samples)
    assert "/metrics" not in [r.path for r in local.requests]


def test_local_base_url_ending_in_v1_is_scraped_at_the_root(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    with make_proxy(local_url=f"{local.url}/v1") as proxy:
        samples = scrape(proxy)
    assert one(samples, "specproxy_llamacpp_tokens_predicted_total") == 40


def test_metrics_need_the_key_when_api_keys_are_set(make_proxy: MakeProxy) -> None:
    key = "sk-proxy-metrics-1234"
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": key}
    with make_proxy(env=env, api_key=key, server={"api_keys": "${PROXY_KEYS}"}) as proxy:
        assert proxy.http.get("/metrics", headers={"Authorization": ""}).status_code == 401
        wrong = proxy.http.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "invalid_api_key"
        assert "specproxy_num_drafts_total" in scrape(proxy)
        anonymous = httpx.get(f"{proxy.url}/metrics")
        assert anonymous.status_code == 401
        assert proxy.stats()["requests"]["refused"] == {"401": 3}
