"""What finding a request's key costs, with 0 to 1000 managed keys beside the configured.

    .venv/bin/python -m bench.keys_lookup

Times ``KeyView.joined`` (the ring a request reads: configured and managed keys as
one) and ``KeyRing.find`` (the presented key hashed, looked up, compared in constant
time): nanoseconds and microseconds per call, best of five runs.
"""

from __future__ import annotations

import timeit
from typing import Any

from pydantic import SecretStr

from app.config.keys import VirtualKeyConfig
from app.keys.managed import KeySettings, made
from app.keys.registry import KeyView
from app.keys.ring import KeyRing


def per_call(run: Any, number: int) -> float:
    return min(timeit.repeat(run, number=number, repeat=5)) / number


def main() -> None:
    base = KeyRing.of([b"sk-plain"], [VirtualKeyConfig(name="team", key=SecretStr("sk-team"))])
    for n in (0, 1, 100, 1000):
        view = KeyView()
        for i in range(n):
            view.set(made(KeySettings.model_validate({"name": f"k{i}"}), 1.0)[0])
        joined = per_call(lambda view=view: view.joined(base), 100_000)
        ring = view.joined(base)
        hit = per_call(lambda ring=ring: ring.find("sk-team"), 20_000)
        miss = per_call(lambda ring=ring: ring.find("sk-sp-guess"), 20_000)
        print(
            f"{n:>5} managed keys: joined {joined * 1e9:4.0f} ns, "
            f"find {hit * 1e6:.2f} us (a key), {miss * 1e6:.2f} us (no key)"
        )


if __name__ == "__main__":
    main()
