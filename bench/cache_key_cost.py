"""What the cache's look-up costs on the request path, before any upstream is asked.

    .venv/bin/python -m bench.cache_key_cost

Times ``keys_of`` (the canonical form, scoped and hashed, exact and near) on a one-line
question and on a 20-message, 20 KB conversation, and the fact guard (``near_match``) on
its last question: microseconds per call, best of five runs.
"""

from __future__ import annotations

import timeit
from typing import Any

from app.cache.guard import near_match
from app.cache.key import keys_of

SHORT: dict[str, Any] = {
    "model": "speculative",
    "messages": [{"role": "user", "content": "What is the capital of France? One sentence."}],
    "temperature": 0,
    "max_tokens": 50,
}
TURN = "Some earlier turn of a chat with a few sentences in it. " * 18
LONG: dict[str, Any] = {
    "model": "speculative",
    "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": TURN} for i in range(20)
    ],
    "temperature": 0.2,
}


def per_call_us(run: Any, number: int) -> float:
    return 1e6 * min(timeit.repeat(run, number=number, repeat=5)) / number


def main() -> None:
    for name, body in (("1 message", SHORT), ("20 messages, 20 KB", LONG)):
        us = per_call_us(lambda body=body: keys_of(body, "scope", near=True), 200)
        print(f"keys_of, {name}: {us:.0f} us")
    keys = keys_of(LONG, "scope", near=True)
    assert keys is not None
    question = keys.question
    us = per_call_us(lambda: near_match(question, question.upper()), 200)
    print(f"near_match, its last question ({len(question)} chars): {us:.0f} us")


if __name__ == "__main__":
    main()
