"""``--local-standin``: the llama-server stand-in drafting instead of the real model.

Not a measurement of SmolLM2: a check of the proxy's own mechanics (labels, the learner
warming, the gate, ``target_agreement``) on a trace long enough for them, on a machine
too loaded to run the real model through it. The stand-in knows a seeded half of the
set's kinds (it answers each of their items with the reference) and gets the others
wrong (a fixed sentence); every token at the same probability, so the draft's own
signals cannot tell right from wrong and only what the learner learns of the request
can. Each draft comes after ``delay`` seconds (past a stream's 0.25 s first-token
budget: such a stream is relayed from the cloud, and its draft finishes late).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from bench.value.trace import TraceRequest
from tests.fakes.by_prompt import ScriptedLlamaServer
from tests.fakes.script import Reply
from tests.fakes.server import serve

WRONG = "I am not sure, but I believe the answer is something else entirely."


def known_kinds(trace: Sequence[TraceRequest], seed: int = 0) -> set[str]:
    """A seeded half of the trace's kinds: the ones the stand-in answers right."""
    kinds = sorted({r.item.kind for r in trace})
    return set(random.Random(seed).sample(kinds, len(kinds) // 2))


@contextmanager
def standin_local(
    trace: Sequence[TraceRequest], seed: int = 0, delay: float = 0.4
) -> Iterator[str]:
    """The stand-in's URL, serving while the context is open."""
    known = known_kinds(trace, seed)
    local = ScriptedLlamaServer(default=Reply(text=WRONG, delay=delay))
    for r in trace:
        text = r.item.reference if r.item.kind in known else WRONG
        local.script[r.prompt] = Reply(text=text, delay=delay)
    with serve(local.app) as url:
        yield url
