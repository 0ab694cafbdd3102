#!/usr/bin/env python3
"""Seed 000's scenario on real models: many speculative requests, then the log analysis.

    .venv/bin/python -m bench.seed_scenario [--requests 60] [--out DIR]

The proxy (python main.py) drafts on its managed llama-server (SmolLM2-135M) and
verifies on a second real llama-server standing in for the cloud (the cloud is
not reachable here; any OpenAI-compatible server can verify). Requests sample at
temperature 0.8 with no seed, so draft and verifier diverge the way two models
would, but only partly. Prompts cover seed 001's context types. Writes DIR/spec.jsonl, the
analyzer's report (DIR/report.txt) and plot (DIR/acceptance.png), and prints them.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from app.local_server import ensure_model, find_llama_server

ROOT = Path(__file__).resolve().parent.parent

PROMPTS = {
    "code": [
        "Write a Python function that reverses a string.",
        "Write a JavaScript function that sums an array.",
    ],
    "math": ["What is 17 * 23? Show the steps.", "Solve 2x + 6 = 14 for x."],
    "json": [
        "Return a JSON object with keys name and age for a cat.",
        "Give a JSON list of three colours.",
    ],
    "list": ["List three rivers in Europe.", "List four steps to make tea."],
    "prose": ["Tell me about the history of the lighthouse.", "Describe a rainy morning."],
}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not become healthy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="specproxy-scenario-"))
    out.mkdir(parents=True, exist_ok=True)
    binary, model = find_llama_server("auto"), ensure_model("auto")

    verifier_port, proxy_port = free_port(), free_port()
    verifier = subprocess.Popen(
        [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(verifier_port),
            "-c",
            "2048",
            "-np",
            "1",
            "-t",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    config = {
        "models": {
            "local": {
                "provider": "llama_server",
                "model": "local",
                "launch": {"port": 0, "args": ["-c", "2048", "-np", "1", "-t", "1"]},
            },
            "cerebras": {
                "provider": "openai",
                "model": "verifier",
                "base_url": f"http://127.0.0.1:{verifier_port}/v1",
            },
        },
        "logging": {"spec_log_file": str(out / "spec.jsonl"), "level": "WARNING"},
    }
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    proxy = subprocess.Popen(
        [
            sys.executable,
            "main.py",
            "--config",
            str(out / "config.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            str(proxy_port),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{proxy_port}"
    try:
        wait_healthy(f"http://127.0.0.1:{verifier_port}")
        wait_healthy(url)
        prompts = [(kind, p) for kind, ps in PROMPTS.items() for p in ps]
        started = time.monotonic()
        with httpx.Client(base_url=url, timeout=120) as client:
            for i in range(args.requests):
                _, prompt = prompts[i % len(prompts)]
                body = {
                    "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": 80,
                    "temperature": 0.8,
                    "stream": i % 2 == 1,
                }
                client.post("/v1/chat/completions", json=body).raise_for_status()
            stats = client.get("/stats").json()
        elapsed = time.monotonic() - started
    finally:
        for process in (proxy, verifier):
            process.send_signal(signal.SIGTERM)
            process.wait(20)

    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.tools.spec_log_analyze",
            str(out / "spec.jsonl"),
            "--plot",
            str(out / "acceptance.png"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    (out / "report.txt").write_text(report.stdout)
    print(f"$ .venv/bin/python -m bench.seed_scenario --requests {args.requests}")
    print(
        f"{args.requests} requests in {elapsed:.1f} s; outcomes {stats['requests']['by_outcome']}"
    )
    print(f"/stats speculation: {stats['speculation']}")
    print(report.stdout)
    print(f"files in {out}")
    return report.returncode


if __name__ == "__main__":
    sys.exit(main())
