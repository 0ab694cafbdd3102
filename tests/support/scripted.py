"""Fixtures a test package's conftest imports to have its stand-ins answer by prompt
(``tests.fakes.by_prompt``) instead of in arrival order."""

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
