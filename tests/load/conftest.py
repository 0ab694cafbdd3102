"""Fixtures of the load and fuzz tests: stand-ins that answer by prompt (see
``tests.fakes.by_prompt``) and room for many sockets."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from tests.support.scripted import cerebras_class, llama_server_class

__all__ = ["cerebras_class", "llama_server_class"]


OPEN_FILES_NEEDED = 4096  # ~1,500 sockets at the peak of a load test, with room to spare


@pytest.fixture
def open_files() -> Iterator[None]:
    """Room for the load tests' sockets: the soft descriptor limit raised (and restored)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= OPEN_FILES_NEEDED:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < OPEN_FILES_NEEDED:
        pytest.skip(f"needs {OPEN_FILES_NEEDED} open files; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES_NEEDED, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
