#!/usr/bin/env python3
"""The seed's three-request check against a running proxy.

    python test_speculative_decoding.py [--base-url http://localhost:8000] [--api-key KEY]

Sends a simple request (likely served from the draft), a complex explanation
and a code request (likely verified), and prints what the proxy did for each.
Exits non-zero if any request fails.
"""

from __future__ import annotations

import argparse
import sys
import time

import httpx

CASES = [
    ("Test 1: simple request (likely uses draft only)", "Say hello", 50),
    (
        "Test 2: complex explanation (will verify with Cerebras)",
        "Write a detailed explanation of machine learning",
        500,
    ),
    (
        "Test 3: code generation (will verify with Cerebras)",
        "Write a Python function that checks whether a string is a palindrome.",
        300,
    ),
]


def run_case(client: httpx.Client, title: str, prompt: str, max_tokens: int) -> bool:
    """Send one request and print the routing outcome; True when it succeeded."""
    print(f"\n{title}\n  prompt: {prompt!r}")
    started = time.perf_counter()
    response = client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens},
    )
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        print(f"  FAILED: HTTP {response.status_code}: {response.text[:300]}")
        return False
    body = response.json()
    spec = body.get("speculative_decoding") or {}
    answer = body["choices"][0]["message"]["content"] or ""
    print(f"  model_used:      {body.get('model_used')}")
    for key in (
        "draft_tokens",
        "verified_tokens",
        "accepted",
        "spilled_over",
        "similarity",
        "degraded",
        "reasons",
    ):
        print(f"  {key + ':':<16} {spec.get(key)}")
    print(f"  latency:         {elapsed * 1000:.0f} ms")
    print(f"  answer:          {answer[:160]!r}{'...' if len(answer) > 160 else ''}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://localhost:8000")
    parser.add_argument("--api-key", help="a key from server.api_keys, if auth is on")
    args = parser.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        with httpx.Client(base_url=args.base_url, headers=headers, timeout=120) as client:
            results = [run_case(client, *case) for case in CASES]
            stats = client.get("/stats").json()
    except httpx.HTTPError as exc:
        print(
            f"\ncannot talk to the proxy at {args.base_url}: {exc} (is `python main.py` running?)"
        )
        return 1
    print(
        f"\n/stats: outcomes {stats['requests']['by_outcome']}, "
        f"spill-over rate {stats['spill_over_rate']}"
    )
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
