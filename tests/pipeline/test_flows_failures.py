"""When an upstream cannot answer, on the fakes: the local model down (the cloud instead,
or both failed), the cloud down (circuit open, no key, budget low, a failing call) so the
draft is served degraded or the local model continues, a draft that breaks the request's
contract refused, and a chain of two verifiers falling over to the second.

Settings are the shipped config.yaml (policy ``combined``, ``max_draft_tokens`` 128,
``early_abort`` on, ``stream_first_token_s`` 0.25, ``hedge: streams``, ``verify_model``
cerebras); each test names the keys it overrides.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from app.errors import AllUpstreamsFailed, NoValidAnswer, UpstreamRejected
from app.vocabulary import Outcome, Purpose
from tests.fakes import Reply
from tests.pipeline.flows import (
    ASK,
    CODE_ASK,
    CONFIDENT,
    DOUBTFUL,
    LONG_TEXT,
    Flow,
    cloud_fake,
    guarded,
    local_fake,
    release_when,
    streamed,
)
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, HEDGED
from tests.support.fake_upstream import FakeUpstream

WHOLE = {"early_abort": False, "stream_first_token_s": None}
# A draft cut at 8 tokens: never served while anything better can be had.
CUT = {**WHOLE, "max_draft_tokens": 8}
LONG_START = "Machine learning fits models to data so they"  # LONG_TEXT, cut at 8 tokens
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
WEATHER = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")


# -- the local model down (Step.CLOUD_INSTEAD, Step.FAIL) ----------------------------------


def test_a_local_model_that_fails_has_the_cloud_answer_instead(
    caplog: pytest.LogCaptureFixture,
) -> None:
    info(caplog)
    local = local_fake()
    local.enqueue(local.error("unavailable"))
    flow = Flow(local, cloud_fake(CLOUD_OTHER))
    served = flow.ask(ASK)
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    assert served.report["reasons"] == ["local_unavailable"] and served.report["spilled_over"]
    assert served.rec.outcome is Outcome.LOCAL_DOWN_CLOUD_USED
    assert served.rec.upstream_errors == [("local", "unavailable")]
    assert served.purposes == [("cerebras", Purpose.SPILL)]
    assert flow.cloud.history[0]["messages"] == ASK["messages"]
    assert (
        "Draft failed (local: cannot connect (ClientConnectorError)); going straight to Cerebras"
        in caplog.messages
    )
    assert served.by_outcome == {Outcome.LOCAL_DOWN_CLOUD_USED.value: 1}


def test_a_local_model_that_fails_a_stream_has_the_clouds_stream_relayed() -> None:
    local = local_fake()
    local.enqueue(local.error("timeout"))
    flow = Flow(local, cloud_fake(CLOUD_OTHER), speculative_decoding=WHOLE)
    served = flow.ask(streamed(ASK))
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    assert served.report["reasons"] == ["local_unavailable"]
    assert flow.cloud.history[0]["stream"] is True
    assert served.rec.outcome is Outcome.LOCAL_DOWN_CLOUD_USED
    assert served.events[-1] == b"data: [DONE]"


def test_a_local_model_that_fails_with_a_hedge_under_way_is_answered_by_the_hedge() -> None:
    local = local_fake()
    local.enqueue(local.error("unavailable"))
    # code hedges under hedge: auto
    flow = Flow(local, cloud_fake(CLOUD_OTHER), speculative_decoding={"hedge": "auto"})
    served = flow.ask(CODE_ASK)
    assert served.text == CLOUD_OTHER and served.report["reasons"] == [
        "local_unavailable",
        "hedged",
    ]
    assert len(flow.cloud.history) == 1 and served.purposes == [("cerebras", Purpose.HEDGE)]
    assert served.rec.outcome is Outcome.LOCAL_DOWN_CLOUD_USED


def test_both_failing_is_an_error_naming_both() -> None:
    local, cloud = local_fake(), cloud_fake()
    local.enqueue(local.error("unavailable"))
    cloud.enqueue(cloud.error("timeout"))
    error, stats = Flow(local, cloud).fails(ASK, AllUpstreamsFailed)
    assert isinstance(error, AllUpstreamsFailed) and error.status == 502
    assert [f.upstream for f in error.failures] == ["local", "cerebras"]
    metrics = stats.get_metrics()
    assert metrics["requests"]["by_outcome"] == {Outcome.ERROR.value: 1}
    assert metrics["upstream_errors"] == {"local:unavailable": 1, "cerebras:timeout": 1}


def test_a_hedge_that_failed_before_the_local_model_did_is_the_fail_step() -> None:
    gate = asyncio.Event()
    local = local_fake(wait_for=gate)
    local.enqueue(local.error("unavailable"))
    cloud = cloud_fake()
    cloud.enqueue(cloud.error("503"))
    flow = Flow(local, cloud, speculative_decoding={"hedge": "auto"})  # code hedges

    async def chat() -> BaseException:
        # The draft fails only once the hedge has: nothing is left to ask.
        failed = asyncio.ensure_future(release_when(gate, lambda: cloud.last_error is not None))
        with pytest.raises(AllUpstreamsFailed) as caught:
            await flow.chat(CODE_ASK)
        await failed
        await flow.settled()
        return caught.value

    error = asyncio.run(guarded(chat()))
    assert isinstance(error, AllUpstreamsFailed)
    assert [f.upstream for f in error.failures] == ["local", "cerebras"]
    assert len(cloud.history) == 1  # the hedge only: no second call
    assert flow.telemetry.records[0].outcome is Outcome.ERROR


def test_a_request_the_local_model_finds_invalid_is_the_clients_error() -> None:
    local = local_fake()
    local.enqueue(local.error("400"))
    flow = Flow(local, cloud_fake(), speculative_decoding=WHOLE)
    error, stats = flow.fails(ASK, UpstreamRejected)
    assert isinstance(error, UpstreamRejected) and error.status == 400
    assert flow.cloud.history == []  # the cloud would refuse it too
    assert stats.get_metrics()["requests"]["by_outcome"] == {Outcome.CLIENT_ERROR.value: 1}


# -- the cloud down: the draft served degraded (Step.SERVE_DRAFT, degraded) ---------------


@pytest.mark.parametrize(
    ("down", "reason", "log"),
    [
        ("open_circuit", "verifier_unavailable", "Verification is off: cerebras: circuit open"),
        ("remove_key", "verifier_unavailable", "Verification is off: cerebras: no API key"),
        ("low_budget", "cloud_budget_low", "Not verifying: cerebras rate limit nearly spent"),
    ],
)
def test_a_doubted_draft_is_served_degraded_while_the_cloud_cannot_verify(
    down: str, reason: str, log: str, caplog: pytest.LogCaptureFixture
) -> None:
    info(caplog)
    cloud = cloud_fake()
    getattr(cloud, down)()
    flow = Flow(local_fake(DOUBTFUL), cloud, speculative_decoding=WHOLE)
    served = flow.ask(ASK)
    assert served.text == HEDGED and served.model_used == "local"
    report = served.report
    assert report["degraded"] and not report["accepted"] and not report["spilled_over"]
    assert report["reasons"] == ["low_confidence", reason]
    assert served.headers["X-Degraded"] == "true"
    assert served.rec.outcome is Outcome.DEGRADED and cloud.history == []
    assert any(m.startswith(log) for m in caplog.messages)
    assert f"Serving the local answer, degraded (low_confidence, {reason})" in caplog.messages


def test_a_cloud_budget_too_low_for_the_prompt_leaves_a_whole_draft_degraded() -> None:
    cloud = cloud_fake()
    cloud.low_budget(below=1)  # enough for a call of no tokens, not for this prompt's
    flow = Flow(local_fake(DOUBTFUL), cloud, speculative_decoding=WHOLE)
    served = flow.ask(ASK)
    assert served.rec.prompt_tokens >= 1  # the draft's usage counts the prompt
    assert served.report["reasons"] == ["low_confidence", "cloud_budget_low"]
    assert cloud.history == [] and served.report["degraded"]


def test_a_cloud_budget_too_low_for_the_prompt_is_not_asked_after_an_early_abort() -> None:
    cloud = cloud_fake(CLOUD_OTHER)
    cloud.low_budget(below=1)  # as above: the draft may still stream and abort (need 0)
    flow = Flow(local_fake(DOUBTFUL, DOUBTFUL), cloud)
    served = flow.ask(ASK)
    assert served.rec.draft is not None and served.rec.draft.aborted
    assert cloud.history == []
    assert served.report["reasons"] == ["early_abort", "cloud_budget_low", "local_continuation"]


def test_a_verification_that_fails_has_the_whole_draft_served_degraded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    info(caplog)
    cloud = cloud_fake()
    cloud.enqueue(cloud.error("timeout"))
    flow = Flow(local_fake(DOUBTFUL), cloud, speculative_decoding=WHOLE)
    served = flow.ask(ASK)
    assert served.text == HEDGED and served.report["degraded"]
    assert served.report["reasons"] == ["low_confidence", "verifier_failed"]
    assert served.rec.upstream_errors == [("cerebras", "timeout")]
    assert served.rec.outcome is Outcome.DEGRADED and len(cloud.history) == 1
    assert "Verification failed (cerebras: no answer within 1 s)" in caplog.messages


def test_a_stream_whose_verification_is_off_is_served_degraded() -> None:
    cloud = cloud_fake()
    cloud.open_circuit()
    flow = Flow(local_fake(DOUBTFUL), cloud)
    served = flow.ask(streamed(ASK))
    assert served.text == HEDGED and served.report["degraded"]
    assert served.report["reasons"][-1] == "verifier_unavailable"
    assert served.events[-1] == b"data: [DONE]" and cloud.history == []


# -- continuation (Step.CONTINUE_LOCALLY) -----------------------------------------------------


def test_a_cut_draft_with_no_verifier_is_continued_locally(
    caplog: pytest.LogCaptureFixture,
) -> None:
    info(caplog)
    cloud = cloud_fake()
    cloud.open_circuit()
    flow = Flow(local_fake(LONG_TEXT, LONG_TEXT), cloud, speculative_decoding=CUT)
    served = flow.ask(ASK)
    assert served.text == LONG_TEXT and served.model_used == "local"
    report = served.report
    assert report["degraded"] and report["reasons"] == [
        "incomplete",
        "verifier_unavailable",
        "local_continuation",
    ]
    assert served.rec.outcome is Outcome.DEGRADED
    assert served.purposes == [("local", Purpose.DRAFT), ("local", Purpose.DRAFT)]
    draft, continued = flow.local.history
    assert draft["max_tokens"] == 8
    # The continuation is the client's own request: no draft budget, no logprobs.
    assert "max_tokens" not in continued and "logprobs" not in continued
    assert continued["messages"] == ASK["messages"]
    assert "Continuing on the local model to the client's budget (degraded)" in caplog.messages


def test_a_streamed_cut_draft_whose_verification_fails_is_continued_as_a_stream() -> None:
    cloud = cloud_fake()
    cloud.enqueue(cloud.error("unavailable"))
    flow = Flow(local_fake(LONG_TEXT, LONG_TEXT), cloud, speculative_decoding=CUT)
    served = flow.ask(streamed(ASK))
    assert served.text == LONG_TEXT and served.model_used == "local"
    assert served.report["reasons"] == ["incomplete", "verifier_failed", "local_continuation"]
    assert flow.cloud.history[0]["stream"] is True and flow.local.history[1]["stream"] is True
    assert served.rec.outcome is Outcome.DEGRADED and served.events[-1] == b"data: [DONE]"


def test_a_continuation_that_fails_leaves_the_cut_draft_as_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    info(caplog)
    cloud = cloud_fake()
    cloud.open_circuit()
    local = local_fake(LONG_TEXT)
    local.enqueue(local.error("timeout"))
    flow = Flow(local, cloud, speculative_decoding=CUT)
    served = flow.ask(ASK)
    assert served.text == LONG_START and served.model_used == "local"
    assert served.report["reasons"] == [
        "incomplete",
        "verifier_unavailable",
        "truncated_draft_served",
    ]
    assert served.body["choices"][0]["finish_reason"] == "length"
    assert served.rec.outcome is Outcome.DEGRADED and len(local.history) == 2
    assert served.rec.upstream_errors == [("local", "timeout")]
    assert (
        "Local continuation failed too (local: no answer within 1 s); serving the truncated draft"
        in caplog.messages
    )


def test_a_draft_that_fills_the_clients_own_limit_is_served_without_continuing() -> None:
    cloud = cloud_fake()
    cloud.open_circuit()
    flow = Flow(local_fake(LONG_TEXT), cloud, speculative_decoding=WHOLE)
    served = flow.ask({**ASK, "max_tokens": 8})
    assert served.text == LONG_START and served.report["degraded"]
    assert served.report["reasons"] == ["low_confidence", "verifier_unavailable"]  # judged whole
    assert len(flow.local.history) == 1  # all the client asked for: nothing to continue


# -- refuse (Step.REFUSE) and a broken contract -----------------------------------------------


def tools_ask(choice: Any = "required") -> dict[str, Any]:
    return {**ASK, "tools": TOOLS, "tool_choice": choice}


def test_a_draft_that_breaks_the_tool_contract_with_no_cloud_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cloud = cloud_fake()
    cloud.remove_key()
    flow = Flow(local_fake(CONFIDENT), cloud)  # text, where a tool call is required
    error, stats = flow.fails(tools_ask(), NoValidAnswer)
    assert isinstance(error, NoValidAnswer) and error.status == 503
    assert error.code == "no_valid_answer"
    assert "tool_call_required" in str(error) and "no API key" in str(error)
    assert cloud.history == []
    rec = flow.telemetry.records[0]
    assert rec.outcome is Outcome.ERROR and "tool_call_required" in rec.decision_reasons
    assert stats.get_metrics()["requests"]["by_outcome"] == {Outcome.ERROR.value: 1}
    assert any(
        m.startswith("No valid answer: the draft breaks the request (tool_call_required)")
        for m in caplog.messages
    )


def test_a_broken_tool_call_is_refused_when_the_verification_fails() -> None:
    bad = {"name": "get_wether", "arguments": '{"city": "Paris"}'}
    cloud = cloud_fake()
    cloud.enqueue(cloud.error("timeout"))
    flow = Flow(local_fake(Reply("", tool_calls=[bad])), cloud)
    error, _ = flow.fails(tools_ask("auto"), NoValidAnswer)
    assert "tool_call_unknown_function" in str(error) and "it failed" in str(error)
    assert len(cloud.history) == 1


def test_a_broken_tool_call_is_replaced_by_the_clouds_valid_one() -> None:
    bad = {"name": "get_wether", "arguments": '{"city": "Paris"}'}
    flow = Flow(
        local_fake(Reply("", tool_calls=[bad])), cloud_fake(Reply("", tool_calls=[WEATHER]))
    )
    served = flow.ask(tools_ask("auto"))
    assert served.model_used == "cerebras" and served.report["spilled_over"]
    call = served.body["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call == WEATHER
    assert "tool_call_unknown_function" in served.report["reasons"]
    assert served.rec.tool_calls == 1


def test_a_streamed_draft_breaking_the_contract_has_the_clouds_calls_relayed_live() -> None:
    flow = Flow(
        local_fake(CONFIDENT),
        cloud_fake(Reply("", tool_calls=[WEATHER])),
        speculative_decoding={"stream_first_token_s": None},
    )
    served = flow.ask(streamed(tools_ask()))
    assert served.model_used == "cerebras" and served.report["spilled_over"]
    assert [(c["name"], c["arguments"]) for c in served.tool_calls] == [
        ("get_weather", '{"city": "Paris"}')
    ]
    assert "tool_call_required" in served.report["reasons"]
    assert flow.cloud.history[0]["stream"] is True


# -- a chain of two verifiers -------------------------------------------------------------


def chain(first: FakeUpstream, second: FakeUpstream, local: FakeUpstream, **spec: Any) -> Flow:
    """``verify_model: [cerebras, backup]``."""
    backup = {
        "provider": "cerebras",
        "base_url": "http://backup.fake/v1",
        "api_key": "${CEREBRAS_API_KEY}",
        "model": "gpt-oss-120b",
    }
    return Flow(
        local,
        first,
        second,
        models={"backup": backup},
        speculative_decoding={"verify_model": ["cerebras", "backup"], **spec},
    )


def test_a_verifier_that_fails_falls_over_to_the_next_in_the_chain() -> None:
    first = cloud_fake()
    first.enqueue(first.error("unavailable"))
    second = cloud_fake(CLOUD_OTHER, name="backup")
    flow = chain(first, second, local_fake(DOUBTFUL), **WHOLE)
    served = flow.ask(ASK)
    assert served.text == CLOUD_OTHER and served.model_used == "backup"
    assert served.report["reasons"] == [
        "low_confidence",
        "polarity_differs",  # agreement: facts, shipped
        "fell_over_to:backup",
    ]
    assert served.rec.upstream_errors == [("cerebras", "unavailable")]
    assert served.purposes == [("local", Purpose.DRAFT), ("backup", Purpose.SPILL)]
    assert len(first.history) == len(second.history) == 1


def test_a_live_stream_falls_over_to_the_next_verifier_before_its_first_chunk() -> None:
    first = cloud_fake()
    first.enqueue(first.error("503"))
    second = cloud_fake(CLOUD_OTHER, name="backup")
    flow = chain(first, second, local_fake(LONG_TEXT), **CUT)
    served = flow.ask(streamed(ASK))
    assert served.text == CLOUD_OTHER and served.model_used == "backup"
    assert served.report["reasons"][-1] == "fell_over_to:backup"
    assert served.headers["X-Model-Used"] == "backup"
    assert served.rec.upstream_errors == [("cerebras", "503")]
    assert served.purposes == [("local", Purpose.DRAFT), ("backup", Purpose.SPILL)]


def test_a_verifier_whose_circuit_is_open_is_passed_over_for_the_next() -> None:
    first = cloud_fake()
    first.open_circuit()
    second = cloud_fake(CLOUD_SAME, name="backup")
    flow = chain(first, second, local_fake(DOUBTFUL), **WHOLE)
    served = flow.ask(ASK)
    assert served.text == HEDGED and served.rec.outcome is Outcome.VERIFIED_DRAFT_USED
    assert first.history == [] and len(second.history) == 1
    assert served.purposes == [("local", Purpose.DRAFT), ("backup", Purpose.VERIFICATION)]


def test_a_chain_that_fails_whole_leaves_the_draft_degraded() -> None:
    first, second = cloud_fake(), cloud_fake(name="backup")
    first.enqueue(first.error("timeout"))
    second.enqueue(second.error("unavailable"))
    flow = chain(first, second, local_fake(DOUBTFUL), **WHOLE)
    served = flow.ask(ASK)
    assert served.text == HEDGED and served.report["reasons"][-1] == "verifier_failed"
    assert served.rec.upstream_errors == [("cerebras", "timeout"), ("backup", "unavailable")]
