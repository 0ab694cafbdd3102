"""Signals the proxy's processes answer themselves.

SIGHUP would end a Python process at once (its default action): requests in
flight reset, nothing drained, nothing logged. While the app serves, SIGHUP reloads
the configuration (``app.reload``); before that (start-up) and after (shutdown) it
is logged and ignored here. (With ``--workers``, the supervisor passes it on to
every worker: ``app.multiworker``.)
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger("specproxy")


def ignore_sighup() -> None:
    """Log and ignore SIGHUP in this process (only the main thread may set handlers)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGHUP, _hup)


def _hup(signum: int, frame: FrameType | None) -> None:
    log.warning("SIGHUP received and ignored: the proxy is starting or stopping; send it again")
