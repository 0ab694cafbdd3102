"""Fixtures of the real tier: the llama-server binary, the SmolLM2 model, one shared server.

Missing assets fail the tests (never skip them): the tier exists to prove the real thing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real.support import RealLlama, llama_server_process


@pytest.fixture(scope="session")
def llama(
    real_assets: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealLlama]:
    """One real llama-server for the whole tier (model load and warm-up paid once)."""
    binary, model = real_assets
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with llama_server_process(binary, model, log) as server:
        yield server
