"""The tiers: a test that starts a server or a process without the ``process`` marker fails,
naming what it started, so ``pytest -m "not process"`` runs only tests that start neither."""

from __future__ import annotations

import socket
import subprocess
from types import SimpleNamespace

import pytest

from tests.support.tiers import PROCESS, watched_phase, watching

# These tests listen on a socket and start `true` themselves, to see the watch at work.
pytestmark = pytest.mark.process


def test_the_watch_sees_a_server_and_a_process_but_not_a_librarys_helper() -> None:
    with watching() as started:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            address = sock.getsockname()
        subprocess.run(["true"], check=True)
        subprocess.run("uname -s", shell=True, check=True, capture_output=True)  # platform's
    assert started == [f"a server listening on {address}", "the process true"]


def item(*markers: str) -> SimpleNamespace:
    """As much of a pytest item as ``watched_phase`` reads: its markers."""
    return SimpleNamespace(get_closest_marker=lambda name: name if name in markers else None)


def test_an_unmarked_test_that_starts_a_process_fails_naming_it() -> None:
    phase = watched_phase(item())
    next(phase)
    subprocess.run(["true"], check=True)
    with pytest.raises(pytest.fail.Exception, match="started the process true without the"):
        phase.send(None)


def test_a_marked_test_may_start_what_it_likes() -> None:
    phase = watched_phase(item(PROCESS))
    next(phase)
    subprocess.run(["true"], check=True)
    with pytest.raises(StopIteration):
        phase.send(None)


def test_an_unmarked_test_that_starts_nothing_passes() -> None:
    phase = watched_phase(item())
    next(phase)
    with pytest.raises(StopIteration):
        phase.send(None)
