"""Signals the proxy's processes answer themselves.

SIGHUP would end a Python process at once (its default action): requests in
flight reset, nothing drained, nothing logged. Until the configuration can be
reloaded on SIGHUP, it is logged and ignored. (With ``--workers``, uvicorn's
supervisor takes SIGHUP as "restart the workers", which drains them first.)
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
    log.warning("SIGHUP received and ignored: the configuration is not reloaded; restart to apply")
