"""The speculative flows up to and through the decision, on the fakes: a draft served as it
is, verified and merged (agreeing: the draft; differing: the cloud's), verified live, the
draft's budget, and what is refused before any draft.

Settings are the shipped config.yaml (policy ``combined``, threshold 0.5,
``max_draft_tokens`` 128, ``top_logprobs`` 5, ``early_abort`` on at 8 tokens,
``stream_first_token_s`` 0.25, ``hedge: auto``, agreement by similarity at 0.8); each
test names the keys it overrides.
"""

from __future__ import annotations

import logging

import pytest

from app.errors import InvalidRequest
from app.vocabulary import Outcome, Purpose
from tests.pipeline.flows import (
    ASK,
    CONFIDENT,
    DOUBTFUL,
    LONG_TEXT,
    Flow,
    cloud_fake,
    local_fake,
    streamed,
)
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED

# Whole drafts, judged whole: no early abort, no first-token budget.
WHOLE = {"early_abort": False, "stream_first_token_s": None}


# -- serve the draft (Step.SERVE_DRAFT, accepted) ---------------------------------------


def test_a_confident_draft_is_served_without_asking_the_cloud(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")
    flow = Flow(local_fake(CONFIDENT), cloud_fake())
    served = flow.ask(ASK)
    assert served.text == GOOD_DRAFT and served.model_used == "local"
    report = served.report
    assert report["accepted"] and not report["spilled_over"] and not report["degraded"]
    assert report["reasons"] == ["passed_checks"] and report["draft_tokens"] == 18
    assert served.headers["X-Draft-Accepted"] == "true"
    assert served.rec.outcome is Outcome.ACCEPTED and served.purposes == [("local", Purpose.DRAFT)]
    assert served.by_outcome == {Outcome.ACCEPTED.value: 1}
    assert flow.cloud.history == []
    draft = flow.local.history[0]
    # The draft asks for the budget and the logprobs the scorer reads; early abort streams it.
    assert draft["max_tokens"] == 128 and draft["logprobs"] is True and draft["top_logprobs"] == 5
    assert draft["stream"] is True
    assert "=== SPECULATIVE DECODING START ===" in caplog.messages
    assert "Step 1: Generating draft from local model (max 128 tokens)" in caplog.messages
    assert any(
        m.startswith("Draft accepted without verification (combined score") for m in caplog.messages
    )


def test_a_confident_draft_is_replayed_as_a_stream_with_the_proxys_fields() -> None:
    flow = Flow(local_fake(CONFIDENT), cloud_fake(), speculative_decoding=WHOLE)
    served = flow.ask(streamed(ASK))
    assert served.text == GOOD_DRAFT and served.model_used == "local"
    assert served.report["accepted"] and served.body["choices"][0]["finish_reason"] == "stop"
    assert served.events[-1] == b"data: [DONE]"
    assert served.rec.outcome is Outcome.ACCEPTED and served.rec.stream
    assert "stream" not in flow.local.history[0]  # drafted whole: no early abort asked for
    assert flow.cloud.history == []


def test_the_client_is_not_sent_logprobs_it_did_not_ask_for() -> None:
    flow = Flow(local_fake(CONFIDENT), cloud_fake())
    served = flow.ask(ASK)
    assert served.body["choices"][0]["logprobs"] is None
    asked = Flow(local_fake(CONFIDENT), cloud_fake()).ask(
        {**ASK, "logprobs": True, "top_logprobs": 2}
    )
    entries = asked.body["choices"][0]["logprobs"]["content"]
    assert len(entries) == 17 and all(len(e["top_logprobs"]) == 2 for e in entries)


# -- verify whole and merge (Step.VERIFY_WHOLE) -----------------------------------------


def test_a_doubted_draft_that_agrees_with_the_cloud_is_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_SAME), speculative_decoding=WHOLE)
    served = flow.ask(ASK)
    assert served.text == HEDGED and served.model_used == "local"
    report = served.report
    assert not report["accepted"] and not report["spilled_over"] and report["agreement"] is True
    assert report["similarity"] >= 0.8 and report["verified_tokens"] == 17
    assert report["reasons"][0] == "low_confidence"
    assert served.rec.outcome is Outcome.VERIFIED_DRAFT_USED
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.VERIFICATION)]
    # The cloud gets the client's own request, not the draft's.
    assert flow.cloud.history[0]["messages"] == ASK["messages"]
    assert "logprobs" not in flow.cloud.history[0]
    assert "Step 2: Verifying draft with Cerebras model" in caplog.messages
    assert "Spilled over: False" in caplog.messages
    assert served.stats is not None and served.stats.verified == [1, 0]


def test_a_doubted_draft_that_differs_is_replaced_by_the_clouds_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_OTHER), speculative_decoding=WHOLE)
    served = flow.ask(ASK)
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    report = served.report
    assert report["spilled_over"] and report["agreement"] is False
    assert report["reasons"] == ["low_confidence", "polarity_differs"]  # agreement: facts, shipped
    assert (
        served.headers["X-Spilled-Over"] == "true" and served.headers["X-Model-Used"] == "cerebras"
    )
    assert served.rec.outcome is Outcome.SPILLED_OVER
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.SPILL)]
    assert served.rec.cloud_tokens == 18 and served.rec.local_tokens == 18
    assert "Spilled over: True" in caplog.messages
    assert served.stats is not None and served.stats.verified == [1, 1]


def test_a_streamed_whole_draft_is_merged_and_the_clouds_answer_replayed() -> None:
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_OTHER), speculative_decoding=WHOLE)
    served = flow.ask(streamed(ASK))
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    assert served.report["spilled_over"] and served.report["agreement"] is False
    assert "stream" not in flow.cloud.history[0]  # a whole answer, to merge with
    assert served.rec.outcome is Outcome.SPILLED_OVER and served.events[-1] == b"data: [DONE]"


def test_a_streamed_whole_draft_that_agrees_is_replayed() -> None:
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_SAME), speculative_decoding=WHOLE)
    served = flow.ask(streamed(ASK))
    assert served.text == HEDGED and served.model_used == "local"
    assert served.rec.outcome is Outcome.VERIFIED_DRAFT_USED


# -- verify live (Step.VERIFY_LIVE) -------------------------------------------------------


def test_a_streamed_draft_cut_at_its_budget_has_the_clouds_stream_relayed_live(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "specproxy.pipeline")
    spec = {**WHOLE, "max_draft_tokens": 8}
    flow = Flow(local_fake(LONG_TEXT), cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    served = flow.ask(streamed(ASK))
    assert served.text == CLOUD_OTHER and served.model_used == "cerebras"
    report = served.report
    assert report["spilled_over"] and report["draft_tokens"] == 8
    assert report["reasons"] == ["incomplete", "draft_truncated"]
    assert flow.cloud.history[0]["stream"] is True
    assert len(served.chunks) > 3  # passed on as it came, not in one replayed write
    assert served.rec.outcome is Outcome.SPILLED_OVER
    assert served.purposes == [("local", Purpose.DRAFT), ("cerebras", Purpose.SPILL)]
    assert "Spilled over: True (streaming the verified answer live)" in caplog.messages


def test_a_stream_that_breaks_while_relayed_live_is_continued_by_the_local_model() -> None:
    from tests.support.fake_upstream import BrokenStream

    spec = {**WHOLE, "max_draft_tokens": 8}
    broken = BrokenStream(CLOUD_OTHER, after=3)
    flow = Flow(
        local_fake(LONG_TEXT, " equals four."), cloud_fake(broken), speculative_decoding=spec
    )
    served = flow.ask(streamed(ASK))
    assert served.text == "Two plus two equals four."
    prefill = flow.local.history[-1]["messages"][-1]
    assert prefill == {"role": "assistant", "content": "Two plus two"}  # llama-server's prefill
    assert served.rec.outcome is Outcome.SPILLED_OVER and served.rec.continued_by == "local"
    assert ("cerebras", "stream") in served.rec.upstream_errors
    assert "continued_by:local" in served.report["reasons"]
    assert {u.model for u in served.rec.usage} >= {"local", "cerebras"}


def test_a_stream_that_breaks_with_no_one_to_continue_it_ends_with_an_error_event() -> None:
    from tests.support.fake_upstream import BrokenStream

    spec = {**WHOLE, "max_draft_tokens": 8}
    broken = BrokenStream(CLOUD_OTHER, after=3)
    local = local_fake(LONG_TEXT)
    flow = Flow(local, cloud_fake(broken), speculative_decoding=spec)
    local.enqueue(local.error("unavailable"))  # the continuation's call fails too
    served = flow.ask(streamed(ASK))
    assert served.text == "Two plus two"
    assert b'"error"' in served.events[-2] and served.events[-1] == b"data: [DONE]"
    assert served.rec.outcome is Outcome.ERROR
    assert ("cerebras", "stream") in served.rec.upstream_errors
    assert ("local", "unavailable") in served.rec.upstream_errors
    assert served.by_outcome == {Outcome.ERROR.value: 1}


# -- the budget (before the draft) --------------------------------------------------------


def test_the_draft_budget_is_max_draft_tokens_and_a_draft_that_fills_it_is_verified() -> None:
    spec = {**WHOLE, "max_draft_tokens": 16}
    flow = Flow(local_fake(LONG_TEXT), cloud_fake(CLOUD_OTHER), speculative_decoding=spec)
    served = flow.ask(ASK)
    assert flow.local.history[0]["max_tokens"] == 16
    assert served.rec.draft is not None and served.rec.draft.truncated
    assert served.report["draft_tokens"] == 16 and served.report["reasons"][0] == "incomplete"
    assert served.text == CLOUD_OTHER and served.rec.outcome is Outcome.SPILLED_OVER


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_the_clients_smaller_token_limit_is_the_drafts_budget(key: str) -> None:
    flow = Flow(local_fake(CONFIDENT), cloud_fake(CLOUD_OTHER), speculative_decoding=WHOLE)
    served = flow.ask({**ASK, key: 6})
    draft = flow.local.history[0]
    assert draft["max_tokens"] == 6 and "max_completion_tokens" not in draft
    # Stopped at the client's own limit, the draft is as whole as the cloud's answer would
    # be: judged like any other, and this confident one is served as it is.
    assert served.report["accepted"] and served.rec.outcome is Outcome.ACCEPTED
    assert served.body["choices"][0]["finish_reason"] == "length"
    assert served.report["draft_tokens"] == 6 and flow.cloud.history == []


def test_a_doubted_draft_stopped_at_the_clients_limit_is_verified_and_merged() -> None:
    flow = Flow(local_fake(DOUBTFUL), cloud_fake(CLOUD_SAME), speculative_decoding=WHOLE)
    served = flow.ask({**ASK, "max_tokens": 6})
    # not "incomplete": judged whole, verified with the client's limit, and its agreement
    # is known (the learner's label), where a draft cut short of the limit has none
    assert served.report["reasons"][0] == "low_confidence" and served.report["agreement"] is True
    assert flow.cloud.history[0]["max_tokens"] == 6
    assert served.rec.outcome is Outcome.VERIFIED_DRAFT_USED
    assert served.text == "I think the answer is four" and served.model_used == "local"


def test_a_client_limit_above_the_budget_leaves_the_budget() -> None:
    spec = {**WHOLE, "max_draft_tokens": 40}
    flow = Flow(local_fake(CONFIDENT), cloud_fake(), speculative_decoding=spec)
    served = flow.ask({**ASK, "max_tokens": 500})
    assert flow.local.history[0]["max_tokens"] == 40 and served.report["accepted"]


# -- refused before the draft ---------------------------------------------------------------


def test_more_than_one_choice_is_refused_before_any_upstream_is_asked() -> None:
    flow = Flow(local_fake(), cloud_fake())
    error, stats = flow.fails({**ASK, "n": 2}, InvalidRequest)
    assert isinstance(error, InvalidRequest) and error.param == "n"
    assert "local_only" in str(error)
    assert flow.local.history == [] and flow.cloud.history == []
    assert stats.get_metrics()["requests"]["by_outcome"] == {Outcome.CLIENT_ERROR.value: 1}
