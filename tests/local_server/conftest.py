"""Fixtures of the managed-server tests: the stand-in llama-server binary."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.local_server import StandIn
from tests.support.processes import alive


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    helper = StandIn(tmp_path)
    yield helper
    for pid in helper.pids():  # a failing test must not leave stand-ins behind
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
