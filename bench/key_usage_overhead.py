"""CPU per finished request of counting it by key (``/stats`` → ``keys``: app.telemetry.by_key).

    .venv/bin/python -m bench.key_usage_overhead [--records N] [--rounds R]

``Stats.record`` over the same realistic, billed records as ``bench.telemetry_overhead``
(a draft, a verification on two in three), once without a key and once spread over 20
keys in 4 teams; process CPU time per record, each arm run ``--rounds`` times,
interleaved (the machine is shared: figures wander).
"""

from __future__ import annotations

import argparse
import time

from app.config import Price
from app.pricing import Pricing
from app.record import RequestRecord, Usage
from app.telemetry.stats import Stats
from app.vocabulary import Purpose
from bench.telemetry_overhead import record

PRICING = Pricing(
    {
        "local": Price(input_per_mtok=0.1, output_per_mtok=0.2),
        "cerebras": Price(input_per_mtok=0.6, output_per_mtok=1.2),
    },
    "cerebras",
)


def records(n: int, keyed: bool) -> list[RequestRecord]:
    """Billed records; ``keyed``: from 20 keys in 4 teams."""
    out = []
    for i in range(n):
        rec = record(i)
        rec.usage = [Usage("local", Purpose.DRAFT, 24, 10)]
        if i % 3:
            rec.usage.append(Usage("cerebras", Purpose.VERIFICATION, 30, 40))
        rec.bill = PRICING.bill(rec)
        if keyed:
            rec.key, rec.team = f"key{i % 20}", f"team{i % 4}"
        out.append(rec)
    return out


def cpu_us(recs: list[RequestRecord]) -> float:
    stats = Stats()
    started = time.process_time()
    for rec in recs:
        stats.record(rec)
    return (time.process_time() - started) / len(recs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    arms = {"without a key": records(args.records, False), "by key": records(args.records, True)}
    figures: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, recs in arms.items():
            figures[name].append(cpu_us(recs))
    print(f"Stats.record, {args.records} records, CPU µs per record over {args.rounds} rounds")
    for name, values in figures.items():
        print(f"  {name:14} " + "  ".join(f"{v:.2f}" for v in values))


if __name__ == "__main__":
    main()
