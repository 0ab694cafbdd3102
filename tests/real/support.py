"""Helpers of the real tier: the llama-server process, SSE reading and proxies on real upstreams."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import settings_from_mapping
from tests.support.processes import alive, healthy
from tests.support.proxy import CLOUD_KEY, Proxy, deep_merge, free_port, proxy_config, run_proxy

FRANCE = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
SEED = 1234
GREEDY: dict[str, Any] = {"temperature": 0, "seed": SEED}
# Thresholds under which any draft that ends by itself is served without verification.
ACCEPT_ALL: dict[str, Any] = {
    "max_draft_tokens": 64,
    "short_draft_chars": 0,
    "uncertainty_markers": [],
    "min_mean_token_prob": 0,
    "min_token_prob": 0,
}
# Real generation on 2 cores is ~60-120 tok/s: give the local model room, never minutes.
LOCAL_TIMEOUT = {"connect": 2, "read": 30, "total": 60}
SERVER_ARGS = ["-c", "1024", "-np", "1", "-t", "2"]


@dataclass(frozen=True)
class RealLlama:
    """A real llama-server process this test session started."""

    url: str
    pid: int
    log: Path

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A chat completion straight from the server, bypassing the proxy."""
        response = httpx.post(f"{self.url}/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


def poll_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll check() every 50 ms until it holds; fail naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@contextmanager
def llama_server_process(binary: Path, model: Path, log: Path) -> Iterator[RealLlama]:
    """Run llama-server on a free loopback port until the block ends; always stop and reap it."""
    port = free_port()
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    # Output goes to a file, not a pipe: nobody drains a pipe between tests, and a full
    # pipe would stall the server mid-request.
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, *SERVER_ARGS], stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not healthy(url):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            assert proc.poll() is None, f"llama-server exited with {proc.returncode}:\n{tail}"
            assert time.monotonic() < deadline, f"llama-server not healthy in 60 s:\n{tail}"
            time.sleep(0.05)
        yield RealLlama(url, proc.pid, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def real_proxy(local_url: str, cloud_url: str, **overrides: Any) -> Iterator[Proxy]:
    """The proxy in front of the given upstreams, with timeouts fit for real generation."""
    generous = {"models": {"local": {"timeout": LOCAL_TIMEOUT}}}
    tree = proxy_config(local_url, cloud_url, **deep_merge(generous, overrides))
    settings = settings_from_mapping(tree, env={"CEREBRAS_API_KEY": CLOUD_KEY})
    with run_proxy(settings) as proxy:
        yield proxy


@dataclass
class SSE:
    """A streamed answer as the client read it."""

    headers: httpx.Headers
    lines: list[str]  # the non-blank lines, `data: [DONE]` included

    @property
    def events(self) -> list[dict[str, Any]]:
        """The JSON payloads, `[DONE]` left out."""
        return [
            json.loads(line.removeprefix("data: "))
            for line in self.lines
            if line.startswith("data: ") and line != "data: [DONE]"
        ]

    @property
    def text(self) -> str:
        return "".join(
            choice["delta"].get("content") or ""
            for event in self.events
            for choice in event.get("choices") or []
        )

    @property
    def final(self) -> dict[str, Any]:
        """The chunk that carried finish_reason (exactly one)."""
        [final] = [
            e for e in self.events if any(c.get("finish_reason") for c in e.get("choices") or [])
        ]
        return final

    @property
    def usage_chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("choices") == [] and "usage" in e]


def stream_chat(
    proxy: Proxy,
    body: dict[str, Any],
    *,
    on_first_content: Callable[[], None] | None = None,
    read_timeout: float = 15.0,
) -> SSE:
    """POST a streaming chat request to the proxy and read the whole event stream."""
    lines: list[str] = []
    seen_content = False
    with proxy.http.stream(
        "POST",
        "/v1/chat/completions",
        json={**body, "stream": True},
        timeout=httpx.Timeout(read_timeout),
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line:
                continue
            lines.append(line)
            if on_first_content and not seen_content and _has_content(line):
                seen_content = True
                on_first_content()
        return SSE(response.headers, lines)


def _has_content(line: str) -> bool:
    if not line.startswith("data: {"):
        return False
    choices = json.loads(line.removeprefix("data: ")).get("choices") or []
    return any((c.get("delta") or {}).get("content") for c in choices)


def spec(body: dict[str, Any]) -> dict[str, Any]:
    return body["speculative_decoding"]  # type: ignore[no-any-return]


def our_child(pid: int) -> bool:
    """pid is a live process whose parent is this test process."""
    return alive(pid) and parent_of(pid) == os.getpid()
