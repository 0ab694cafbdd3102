"""How the managed llama-server child is spawned: its command line, port and address.

Operating-system plumbing kept apart from the supervisor in ``managed``: the command line,
choosing and checking the port, the address to connect to, and the hook that takes the
child down with the proxy.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from app.local_server.speculation import Speculation


def command_line(
    binary: Path,
    model: Path,
    host: str,
    port: int,
    speculation: Speculation | None,
    extra: list[str],
) -> list[str]:
    """llama-server's argv: model, address, speculation flags, then the config's own args."""
    command = [str(binary), "-m", str(model), "--host", host, "--port", str(port)]
    if speculation is not None:
        command += speculation.args()
    command += extra
    return command


def die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that makes the kernel SIGKILL the child when the proxy dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    # Load libc here, in the parent: importing or loading between fork and exec can
    # deadlock on a lock another thread held at fork time.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def hook() -> None:
        # Even a SIGKILLed proxy then takes its llama-server along: no orphan. SIGKILL, not
        # SIGTERM: an orphaned llama-server was seen to stay up for 50 min after a SIGTERM
        # (a bench killed by its test's timeout), and with its parent gone nothing remains
        # to stop it gracefully for.
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the proxy died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def free_port(host: str) -> int:
    """A port on ``host`` that is free now, chosen by the kernel."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on (or holds) ``port`` on ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def url_host(host: str) -> str:
    """``host`` as it goes in a URL: a wildcard made loopback, IPv6 in brackets."""
    # A wildcard bind address is not a place to connect to.
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"[{host}]" if ":" in host else host
