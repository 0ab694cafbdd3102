"""What the proxy is worth on a trace: quality, cloud spend and latency, arm by arm (issue 31).

    .venv/bin/python -m bench.value [--set eval|tune|transfer | --data FILE] [--limit N]
        [--seed 0] [--max-tokens 128] [--arms cloud_only,local_only,seed,before,shipped]
        [--targets 0.9,0.95,0.98] [--config config.yaml] [--json bench/results/value.json]

**The trace.** The items of one of the project's sets (``--set``: routing_eval, routing_tune
or transfer, each on its own; ``--data`` any file of the same format; ``--limit N`` the first
N items taken one kind at a time), each asked once, and besides them a third more requests
that repeat an item already asked: which one follows a Zipf law over a seeded popularity
order (a few items come back often), and a repeat is sent as it was, or in other case
(outside quotes), other spacing, or other final punctuation. Half the requests, seeded, are
streamed. One user message, temperature 0, ``max_tokens`` as given, ``cache_prompt: false``
(llama-server's prompt cache would favour whichever arm asks second). The same seed gives
the same trace.

**The upstreams.** A real llama-server (the config's ``launch`` section: the shipped
SmolLM2-135M-Instruct, on a free loopback port, always stopped) drafts for every arm. The
cloud is a stand-in paced like Cerebras (the first chunk 0.2 s after the request, then
2,000 tokens/s; a whole answer when all of it would have been generated) that answers each
prompt with its item's reference and **bills what it sent**: each call's prompt in full
once the call has reached it, and the completion tokens it sent (a stream stopped early
bills the chunks that went out; a whole answer whose caller hung up before it was ready
bills none), counted per API key, one key per arm, priced at the config's verifier prices.
That bill is the ground truth for spend; the stand-in's tokens are its own (the fakes'
word-piece tokenizer), the same for every arm.

**The arms.** Five proxies (this process, each on a loopback port, each with its own
state) take the trace side by side, request by request, in an order rotated per request:

* ``cloud_only``: the shipped config with ``routing.strategy: cerebras_only``;
* ``local_only``: the shipped config with ``routing.strategy: local_only``;
* ``seed``: the seed's flow (policy seed, ``max_draft_tokens`` 10, ``min_confidence`` 0.8,
  no early abort, no hedge, no first-token budget, no learning);
* ``before``: the config as it was before issue 31 (``config.yaml`` at 06ca9f8, copied
  below as ``BEFORE_ISSUE_31`` so it stays comparable);
* ``shipped``: ``config.yaml`` as it is now, every section of it (the cache of verified
  answers on: issue 31's);
* ``target_T`` (``--targets``): the shipped arm with ``speculative_decoding.target_agreement``
  T, once per target.

and two are computed from the per-request answers of ``local_only`` and ``cloud_only``,
with no proxy run:

* ``random``: each request to the cloud at random (seeded) at the ``shipped`` arm's measured
  cloud-served share, else the local answer;
* ``oracle``: serves locally exactly the local answers the judges call right; every other
  request takes the cloud's answer, called once per item and cached after (a hit counted
  as costing nothing and taking no time).

(``--arms`` runs fewer proxies: ``oracle`` needs ``local_only`` and ``cloud_only``,
``random`` also ``shipped``, and the ratios need ``cloud_only``.)

**Per arm**: quality (the item's judge, ``app.evaluation``, on the served text), cloud spend
against cloud-only (the stand-in's bill), the share of the oracle's saving it recovers,
cloud calls per request (the stand-in's count), the cloud-served share (the answer's
``model_used``), the share answered from a cache (``X-Cache: hit``), the share in each
lane of the gate (``speculative_decoding.lane``), TTFT p50/p90 of the streamed requests,
the mean latency of the whole (non-streamed) answers, and the proxy's own savings figure
(``/stats`` → ``cost`` → ``savings_pct``) next to the bill's; under it, the cloud calls per
request by purpose as each proxy counted them (``/stats`` → ``cost.cloud_calls``: audits
among them) and how its baseline was estimated, then issue 31's Done-when checks of the
shipped arm on this trace (PASS or FAIL with the numbers), and with ``--targets`` a table
of the targets: served locally, the audited agreement of the locally served answers and
its lower bound (``/stats`` → ``quality``), the judges' count, quality and spend. Prints
the command, the machine and the setup first; ``--json`` writes the figures, the checks,
the trace and every request's row.

The modules: ``trace`` (the trace), ``cloud`` (the stand-in and its bill), ``arms`` (the
configs and the offline arms), ``run`` (asking), ``report`` (the figures and tables),
``cli`` (the command).
"""

from bench.value.arms import (
    BEFORE_ISSUE_31,
    DEFAULTS_THEN,
    OFFLINE_ARMS,
    PROXY_ARMS,
    SEED,
    arm_tree,
    oracle_rows,
    random_rows,
    target_arm,
)
from bench.value.checks import done_when, done_when_text
from bench.value.cloud import FIRST_TOKEN_S, TOKENS_PER_S, Bill, BillingCloud, settle
from bench.value.report import (
    calls_markdown,
    evaluate,
    markdown,
    summarise,
    targets_markdown,
)
from bench.value.run import ask, run
from bench.value.trace import SETS, TraceRequest, build_trace, vary

__all__ = [
    "BEFORE_ISSUE_31",
    "DEFAULTS_THEN",
    "FIRST_TOKEN_S",
    "OFFLINE_ARMS",
    "PROXY_ARMS",
    "SEED",
    "SETS",
    "TOKENS_PER_S",
    "Bill",
    "BillingCloud",
    "TraceRequest",
    "arm_tree",
    "ask",
    "build_trace",
    "calls_markdown",
    "done_when",
    "done_when_text",
    "evaluate",
    "markdown",
    "oracle_rows",
    "random_rows",
    "run",
    "settle",
    "summarise",
    "target_arm",
    "targets_markdown",
    "vary",
]
