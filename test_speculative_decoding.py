#!/usr/bin/env python3
"""The seed's three-request check against a running proxy.

    python test_speculative_decoding.py [--base-url http://localhost:8000] [--api-key KEY]

Sends a simple request (likely served from the draft), a complex explanation
and a code request (likely verified), and prints what the proxy did for each.
Exits non-zero if any request fails.

Standard library only: it runs with what `bash scripts/run.sh` installed (no dev extra).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

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
TIMEOUT_S = 120


class Proxy:
    """The proxy at ``base_url``: HTTP errors come back as (status, body); a proxy that cannot
    be reached raises ``OSError`` or ``http.client.HTTPException``."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = headers

    def request(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """GET ``path`` (POST with a JSON ``body``); the status and the body read whole."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
            # each run shows the speculative path, not the cache's answer of the last run
            headers["Cache-Control"] = "no-cache"
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:  # a status >= 400: an answer, not a failure
            with error:
                return error.code, error.read()


def run_case(proxy: Proxy, title: str, prompt: str, max_tokens: int) -> bool:
    """Send one request and print the routing outcome; True when it succeeded."""
    print(f"\n{title}\n  prompt: {prompt!r}")
    started = time.perf_counter()
    status, raw = proxy.request(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens},
    )
    elapsed = time.perf_counter() - started
    if status != 200:
        print(f"  FAILED: HTTP {status}: {raw.decode(errors='replace')[:300]}")
        return False
    body = json.loads(raw)
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
    proxy = Proxy(args.base_url, headers)
    try:
        results = [run_case(proxy, *case) for case in CASES]
        stats = json.loads(proxy.request("/stats")[1])
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        print(
            f"\ncannot talk to the proxy at {args.base_url}: {reason} "
            "(is `python main.py` running?)"
        )
        return 1
    print(
        f"\n/stats: outcomes {stats['requests']['by_outcome']}, "
        f"spill-over rate {stats['spill_over_rate']}"
    )
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
