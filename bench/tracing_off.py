"""What tracing (``telemetry.otel``) costs a request when it is off: its hooks, timed.

    .venv/bin/python -m bench.tracing_off [--loops N]

With tracing off the request path runs five kinds of statement the feature added, and
nothing else (``app.telemetry.trace_context``): the door's check of ``Services.tracing``,
the ``Call``'s read of the ``current`` trace (a ``ContextVar``, its field's default), a
read of ``outgoing`` per upstream call, and a check of ``Call.trace`` per event the
speculator adds and twice in the pipeline. Each is timed here in a loop on the real
objects (best of 7 runs of ``--loops``), then summed for a speculative request that
verified its draft (3 upstream calls, 12 stamped events: more than most), so the
figure is an upper bound of what the feature adds with tracing off. The whole request
path's A/B against main (``bench/overhead.py --baseline``) cannot resolve a few
microseconds: its cells move by tens (docs/teams.md, Tracing).
"""

from __future__ import annotations

import argparse
import timeit

from app.call import Call
from app.record import RequestRecord
from app.services import Services
from app.telemetry.stats import Stats
from app.telemetry.trace_context import current, outgoing
from app.vocabulary import Strategy

UPSTREAM_CALLS, EVENTS, PIPELINE_CHECKS = 3, 12, 2


def best_ns(statement: str, names: dict[str, object], loops: int) -> float:
    """The statement's cost in nanoseconds, less the loop's own (``pass``)."""
    timer = timeit.Timer(statement, globals=names)
    empty = timeit.Timer("pass", globals=names)
    took = min(timer.repeat(7, loops)) - min(empty.repeat(7, loops))
    return max(took, 0.0) / loops * 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loops", type=int, default=1_000_000)
    args = p.parse_args()
    services = Services(Stats())
    call = Call({"messages": []}, None, RequestRecord(Strategy.SPECULATIVE))
    names = {"services": services, "call": call, "current": current, "outgoing": outgoing}
    hooks = {
        "door: services.tracing is None": (
            "if services.tracing is not None: pass",
            1,
        ),
        "Call: current.get() (its trace field)": ("current.get()", 1),
        "upstream call: outgoing.get()": (
            "if (traceparent := outgoing.get()) is not None: pass",
            UPSTREAM_CALLS,
        ),
        "event / pipeline: call.trace is None": (
            "if call.trace is not None: pass",
            EVENTS + PIPELINE_CHECKS,
        ),
    }
    print(f"$ .venv/bin/python -m bench.tracing_off --loops {args.loops}")
    total = 0.0
    for label, (statement, times) in hooks.items():
        ns = best_ns(statement, names, args.loops)
        total += ns * times
        print(f"{label:<44} {ns:6.1f} ns x {times:>2} = {ns * times:7.1f} ns")
    print(f"{'per speculative request, tracing off':<44} {total / 1000:.2f} µs")


if __name__ == "__main__":
    main()
