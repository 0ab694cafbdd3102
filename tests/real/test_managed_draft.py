"""The managed llama-server speculating with a draft model: SmolLM2-135M drafting for itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from app.config import LaunchConfig
from app.local_server import ManagedLlamaServer
from tests.real.support import FRANCE, SERVER_ARGS
from tests.support.processes import alive

pytestmark = pytest.mark.real


def test_real_managed_server_drafts_with_the_draft_model(real_assets: tuple[Path, Path]) -> None:
    _, model = real_assets  # fails the test, not skips it, when binary or model is missing
    launch = LaunchConfig(
        model="auto",
        draft_model="auto",
        spec_n_max=4,
        port=0,
        args=[*SERVER_ARGS, "--metrics"],
        startup_timeout=60,
    )
    server = ManagedLlamaServer(launch, name="draft")
    with asyncio.Runner() as runner:
        try:
            url = runner.run(server.start())
            pid = server.pid
            assert pid is not None
            body = {"messages": FRANCE, "max_tokens": 24, "temperature": 0}
            response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
            assert response.status_code == 200, response.text
            timings = response.json()["timings"]
            assert timings["draft_n"] > 0, timings
            assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]

            status = server.status()
            assert status["draft_model"] == str(model)
            # 1:1 is under 2:1, so the pair check suggests p_min 0.8; config n_max 4 wins.
            assert status["speculative"] == {
                "type": "draft-simple",
                "n_max": 4,
                "n_min": 0,
                "p_min": 0.8,
            }
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            assert argv[argv.index("--spec-draft-p-min") + 1] == "0.8"  # pinned, not the default
            metrics = httpx.get(f"{url}/metrics", timeout=10).text
            assert "llamacpp:spec_decode_num_drafts_total" in metrics
        finally:
            runner.run(server.stop())
    assert server.status()["state"] == "stopped" and not alive(pid)
