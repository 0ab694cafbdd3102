"""Stand-ins that answer by prompt: two kinds of question, one the draft gets right."""

from __future__ import annotations

import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer


@pytest.fixture
def llama_server_class() -> type[FakeLlamaServer]:
    return ScriptedLlamaServer


@pytest.fixture
def cerebras_class() -> type[FakeCerebras]:
    return ScriptedCerebras
