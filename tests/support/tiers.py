"""The test tiers: ``process`` (the test starts a server or a process) and ``slow``.

A fixture that starts a server or a process is declared with ``process_fixture`` instead of
``pytest.fixture``, and tests/conftest.py marks every test using it (directly or through
another fixture) ``process``; a module whose tests start servers themselves says
``pytestmark = pytest.mark.process``. The conftest watches every test that is not marked:
one that listens on a socket or starts a process fails, naming what it started, so
``pytest -m "not process"`` runs only tests that do neither (docs/testing.md).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PROCESS = "process"
SLOW = "slow"
# Programs a library starts on its own behalf, not the test: matplotlib lists the fonts
# with fc-list when its font cache is missing (a fresh clone), ctypes.util.find_library
# asks ldconfig or a compiler, platform asks file and uname.
INCIDENTAL_PROGRAMS = frozenset({"fc-list", "ldconfig", "gcc", "cc", "file", "uname"})
_STARTS = "_specproxy_starts_processes"


def process_fixture(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``pytest.fixture`` for a fixture that starts a server or a process: the tests that
    use it are marked ``process``. Used bare or with ``pytest.fixture``'s options."""

    def declare(fn: Callable[..., Any]) -> Any:
        setattr(fn, _STARTS, True)
        return pytest.fixture(**options)(fn)

    return declare if function is None else declare(function)


def uses_a_process_fixture(item: pytest.Item) -> bool:
    """Whether any fixture the test uses, through any other, was declared ``process_fixture``."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # not a python test function: nothing to look through
        return False
    return any(
        getattr(definition.func, _STARTS, False)
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def _program(args: Any, kwargs: dict[str, Any]) -> str:
    """The program a ``Popen`` call runs, as its file name."""
    if kwargs.get("executable"):
        return Path(str(kwargs["executable"])).name
    first = args if isinstance(args, str | bytes | Path) else (list(args) or [""])[0]
    text = first.decode() if isinstance(first, bytes) else str(first)
    word = text.split()[0] if kwargs.get("shell") and text.split() else text
    return Path(word).name


@contextmanager
def watching() -> Iterator[list[str]]:
    """Within the block, every socket that starts listening and every process started (but
    ``INCIDENTAL_PROGRAMS``) is written to the list yielded; they are not stopped."""
    started: list[str] = []
    listen, popen_init = socket.socket.listen, subprocess.Popen.__init__

    def watched_listen(sock: socket.socket, *args: Any) -> None:
        started.append(f"a server listening on {sock.getsockname()}")
        listen(sock, *args)

    def watched_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        program = _program(args, kwargs)
        if program not in INCIDENTAL_PROGRAMS:
            started.append(f"the process {program}")
        popen_init(self, args, *rest, **kwargs)

    socket.socket.listen = watched_listen  # type: ignore[method-assign]
    subprocess.Popen.__init__ = watched_init  # type: ignore[assignment,method-assign]
    try:
        yield started
    finally:
        socket.socket.listen = listen  # type: ignore[method-assign]
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]


def mark_tiers(items: list[pytest.Item]) -> None:
    """A test using a fixture that starts a server or a process is a ``process`` test; a test
    of the real tier (the real llama-server and model) is ``process`` and ``slow``."""
    for item in items:
        real = item.get_closest_marker("real") is not None
        if item.get_closest_marker(PROCESS) is None and (real or uses_a_process_fixture(item)):
            item.add_marker(PROCESS)
        if real and item.get_closest_marker(SLOW) is None:
            item.add_marker(SLOW)


def watched_phase(item: pytest.Item) -> Generator[None, object, object]:
    """One phase (setup, call, teardown) of a test, as a hook wrapper's body: a test not
    marked ``process`` fails if it started a server or a process (its own failure, if it
    had one, is kept as the context)."""
    if item.get_closest_marker(PROCESS) is not None:
        return (yield)
    with watching() as started:
        try:
            return (yield)
        finally:
            if started:
                pytest.fail(unmarked(started), pytrace=False)


def unmarked(started: list[str]) -> str:
    """The failure of a test that started something without the ``process`` marker."""
    shown = "; ".join(dict.fromkeys(started))
    return (
        f"this test started {shown} without the `process` marker: declare the fixture that "
        "starts it with tests.support.tiers.process_fixture, or mark the test or its module "
        "with pytest.mark.process (docs/testing.md, the tiers)"
    )
