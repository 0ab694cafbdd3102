"""setup(): what happens before the draft, every choice as a table, the rules as properties.

``setup`` reads plain data (the request's facts, the speculative knobs, the policy's
view of the request and the cloud's state), so each choice is one row here: the
budget, the hedge (none, whole, stream), the first-token budget, and whether the draft
may be stopped early.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import SpeculativeConfig
from app.routing.gate import Lane
from app.routing.setup import (
    FirstTokenBudget,
    HedgeMode,
    Knobs,
    RequestFacts,
    Setup,
    setup,
)
from app.vocabulary import CloudState

FREE = CloudState()
NO_KEY = CloudState(has_key=False)
OPEN = CloudState(circuit_open=True)
LOW = CloudState(budget_low=True)
PLAIN = RequestFacts()
NO_KNOBS = Knobs()
STREAM = RequestFacts(stream=True)
BUDGETED = Knobs(
    hedge="auto",
    stream_first_token_s=0.5,
    stream_trust_s=2.0,
    stream_trust_score=0.2,
    abort_check_tokens=8,
    early_abort=True,
)
WAIT = FirstTokenBudget(0.5, 2.0, 0.2, 8)  # BUDGETED's budget
AT_ONCE = FirstTokenBudget(0.0, 0.0)  # a likely spill: as soon as the cloud's stream flows


def ready(
    request: RequestFacts = PLAIN,
    knobs: Knobs = NO_KNOBS,
    *,
    depth: int = 128,
    likely_spill: bool = False,
    wants_labels: bool = False,
    cloud: CloudState = FREE,
    lane: Lane = Lane.UNCERTAIN,
    unheld: bool = False,
) -> Setup:
    return setup(
        request,
        knobs,
        depth_budget=depth,
        likely_spill=likely_spill,
        wants_labels=wants_labels,
        cloud=cloud,
        lane=lane,
        unheld=unheld,
    )


CASES = {
    # the budget: adaptive depth's, capped by the client's own limit
    "depth's budget": (ready(), Setup(128, may_abort=True)),
    "client limit under the budget": (
        ready(RequestFacts(token_limit=40)),
        Setup(40, may_abort=True),
    ),
    "client limit over the budget": (
        ready(RequestFacts(token_limit=4000)),
        Setup(128, may_abort=True),
    ),
    "n > 1 is refused": (ready(RequestFacts(n=2)), Setup(128, refused=True)),
    # hedging a request that is not streamed
    "hedge off": (ready(knobs=Knobs(hedge="off"), likely_spill=True), Setup(128, may_abort=True)),
    "hedge auto, no likely spill": (
        ready(knobs=Knobs(hedge="auto")),
        Setup(128, may_abort=True),
    ),
    "hedge auto, likely spill: the whole answer": (
        ready(knobs=Knobs(hedge="auto"), likely_spill=True),
        Setup(128, HedgeMode.WHOLE, may_abort=True),
    ),
    "hedge streams, likely spill: a whole request is not hedged": (
        ready(knobs=Knobs(hedge="streams"), likely_spill=True),
        Setup(128, may_abort=True),
    ),
    "hedge streams, stream: hedged with the cloud's stream": (
        ready(STREAM, replace(BUDGETED, hedge="streams")),
        Setup(128, HedgeMode.STREAM, WAIT, may_abort=True, streams_draft=True),
    ),
    "hedge always: the whole answer": (
        ready(knobs=Knobs(hedge="always")),
        Setup(128, HedgeMode.WHOLE, may_abort=True),
    ),
    # a stream under a first-token budget
    "stream, budget: hedged with the cloud's stream": (
        ready(STREAM, BUDGETED),
        Setup(128, HedgeMode.STREAM, WAIT, may_abort=True, streams_draft=True),
    ),
    "stream, budget, likely spill: it goes once the cloud's stream flows": (
        ready(STREAM, BUDGETED, likely_spill=True),
        Setup(128, HedgeMode.STREAM, AT_ONCE, may_abort=True, streams_draft=True),
    ),
    "stream, budget, hedge off: the stream opens at the deadline": (
        ready(STREAM, replace(BUDGETED, hedge="off")),
        Setup(128, HedgeMode.OFF, WAIT, may_abort=True, streams_draft=True),
    ),
    "not streamed: no first-token budget": (
        ready(PLAIN, BUDGETED),
        Setup(128, may_abort=True, streams_draft=True),
    ),
    "stream, no budget set": (
        ready(STREAM, replace(BUDGETED, stream_first_token_s=None)),
        Setup(128, may_abort=True, streams_draft=True),
    ),
    # the gate's lanes
    "cloud lane: no draft, no hedge, no first-token budget": (
        ready(STREAM, BUDGETED, likely_spill=True, lane=Lane.CLOUD),
        Setup(128, lane=Lane.CLOUD),
    ),
    "cloud lane, circuit open: the draft after all": (
        ready(STREAM, BUDGETED, cloud=OPEN, lane=Lane.CLOUD),
        Setup(128),
    ),
    "local lane, stream: no hedge, no first-token budget": (
        ready(STREAM, BUDGETED, likely_spill=True, lane=Lane.LOCAL),
        Setup(128, may_abort=True, streams_draft=True, lane=Lane.LOCAL),
    ),
    "local lane, hedge always: still no hedge": (
        ready(knobs=Knobs(hedge="always"), likely_spill=True, lane=Lane.LOCAL),
        Setup(128, may_abort=True, lane=Lane.LOCAL),
    ),
    "uncertain lane: as without a gate": (
        ready(STREAM, BUDGETED, lane=Lane.UNCERTAIN),
        ready(STREAM, BUDGETED),
    ),
    # no threshold holds the target: the cloud answers, the draft beside it for a label
    "unheld, stream: no hedge of the draft's, no first-token wait": (
        ready(STREAM, BUDGETED, likely_spill=True, wants_labels=True, unheld=True),
        Setup(128, unheld=True),
    ),
    "unheld, circuit open: the draft after all": (
        ready(PLAIN, BUDGETED, cloud=OPEN, unheld=True),
        Setup(128),
    ),
    "unheld, the local lane: held by the gate's bound, the draft first, may be stopped": (
        ready(PLAIN, BUDGETED, lane=Lane.LOCAL, wants_labels=True, unheld=True),
        Setup(128, may_abort=True, streams_draft=True, lane=Lane.LOCAL),
    ),
    "unheld, the gate's cloud lane: the lane's": (
        ready(PLAIN, BUDGETED, lane=Lane.CLOUD, unheld=True),
        Setup(128, lane=Lane.CLOUD),
    ),
    # stopping the draft early
    "tools: the draft comes whole": (
        ready(RequestFacts(has_tools=True), BUDGETED),
        Setup(128),
    ),
    "a cold learner: drafts run whole": (
        ready(PLAIN, BUDGETED, wants_labels=True),
        Setup(128),
    ),
    # nothing that needs the cloud when it could not take over
    "no key": (ready(STREAM, BUDGETED, likely_spill=True, cloud=NO_KEY), Setup(128)),
    "circuit open": (ready(STREAM, BUDGETED, cloud=OPEN), Setup(128)),
    "cloud budget low": (
        ready(RequestFacts(token_limit=64), Knobs(hedge="always"), cloud=LOW),
        Setup(64),
    ),
}


@pytest.mark.parametrize(("got", "expected"), CASES.values(), ids=CASES.keys())
def test_setup_for_each_choice(got: Setup, expected: Setup) -> None:
    assert got == expected


def test_knobs_read_the_configured_names() -> None:
    spec = SpeculativeConfig(
        policy="combined",
        hedge="auto",
        stream_first_token_s=0.5,
        stream_trust_s=2.0,
        stream_trust_score=0.2,
        abort_check_tokens=8,
        early_abort=True,
    )
    assert Knobs.of(spec) == BUDGETED


# -- properties ---------------------------------------------------------------------------

REQUESTS = st.builds(
    RequestFacts,
    n=st.integers(1, 3),
    stream=st.booleans(),
    token_limit=st.none() | st.integers(1, 4096),
    has_tools=st.booleans(),
)
KNOBS = st.builds(
    Knobs,
    hedge=st.sampled_from(["off", "streams", "auto", "always"]),
    stream_first_token_s=st.none() | st.floats(0, 5),
    stream_trust_s=st.floats(0, 10),
    stream_trust_score=st.none() | st.floats(0, 1),
    abort_check_tokens=st.integers(1, 64),
    early_abort=st.booleans(),
)
CLOUDS = st.builds(CloudState, st.booleans(), st.booleans(), st.booleans())


@given(REQUESTS, KNOBS, st.integers(1, 512), st.booleans(), st.booleans(), CLOUDS)
def test_setup_rules(
    request: RequestFacts,
    knobs: Knobs,
    depth: int,
    likely_spill: bool,
    wants_labels: bool,
    cloud: CloudState,
) -> None:
    got = setup(
        request,
        knobs,
        depth_budget=depth,
        likely_spill=likely_spill,
        wants_labels=wants_labels,
        cloud=cloud,
    )
    # the budget never exceeds adaptive depth's nor the client's own limit
    assert 1 <= got.budget <= depth
    assert request.token_limit is None or got.budget <= request.token_limit
    assert got.refused == (request.n > 1)
    needs_cloud = got.hedge is not HedgeMode.OFF or got.first_token is not None or got.may_abort
    if needs_cloud:  # nothing that relies on the cloud taking over when it cannot
        assert cloud.blocked is None and not got.refused
    # a first-token budget only for a stream, and then any hedge is the cloud's stream
    if got.first_token is not None:
        assert request.stream and knobs.stream_first_token_s is not None
        assert got.hedge is not HedgeMode.WHOLE
    if got.hedge is HedgeMode.STREAM:
        assert got.first_token is not None
    if knobs.hedge == "off":
        assert got.hedge is HedgeMode.OFF
    # tool drafts and a cold learner's drafts are never stopped early
    if request.has_tools or wants_labels:
        assert not got.may_abort
    assert got.streams_draft == (knobs.early_abort and got.may_abort)


@given(
    REQUESTS,
    KNOBS,
    st.booleans(),
    st.booleans(),
    CLOUDS,
    st.sampled_from(list(Lane)),
    st.booleans(),
)
def test_the_lanes_rules(
    request: RequestFacts,
    knobs: Knobs,
    likely_spill: bool,
    wants_labels: bool,
    cloud: CloudState,
    lane: Lane,
    unheld: bool,
) -> None:
    got = ready(
        request,
        knobs,
        likely_spill=likely_spill,
        wants_labels=wants_labels,
        cloud=cloud,
        lane=lane,
        unheld=unheld,
    )
    if got.refused:
        return
    # unheld only when the caller says so, in the uncertain lane (the gate's two others
    # are held by its own bounds), and the cloud could answer; then nothing of the draft's
    # own is set up (it is made beside the cloud's answer)
    assert got.unheld == (unheld and lane is Lane.UNCERTAIN and cloud.blocked is None)
    if got.unheld:
        assert got == Setup(got.budget, unheld=True)
        return
    # the lane holds only when the cloud could answer; else the draft, as without a gate
    assert got.lane is (lane if cloud.blocked is None else Lane.UNCERTAIN)
    if got.lane is not Lane.UNCERTAIN:  # cloud or local: nothing hedged, no first-token wait
        assert got.hedge is HedgeMode.OFF and got.first_token is None
    if got.lane is Lane.CLOUD:  # nothing of the draft is set up
        assert got == Setup(got.budget, lane=Lane.CLOUD)
    if got.lane is Lane.LOCAL:  # served, not labelled: stopped early if it must be
        assert got.may_abort == (not request.has_tools)
    # hedge: streams never hedges a whole request
    if knobs.hedge == "streams" and not request.stream:
        assert got.hedge is HedgeMode.OFF
