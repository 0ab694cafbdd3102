"""Logging set-up: every record carries the request id, and no secret is ever printed."""

from __future__ import annotations

import logging
import re
import sys
from contextvars import ContextVar

request_id: ContextVar[str] = ContextVar("request_id", default="-")

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
# A bearer credential, whoever's it is: an upstream may echo a key the proxy never knew.
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")


class RequestContext(logging.Filter):
    """Stamps the current request id on each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class Redact(logging.Filter):
    """Replaces configured secrets, and any ``Bearer <token>``, in the final message with
    ``***``."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = message
        for secret in self.secrets:
            cleaned = cleaned.replace(secret, "***")
        cleaned = _BEARER.sub(r"\1***", cleaned)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def configure_logging(level: str, secrets: list[str]) -> None:
    """One stderr handler on the root logger with both filters; idempotent."""
    root = logging.getLogger()
    old = [h for h in root.handlers if getattr(h, "_specproxy", False)]
    handler = logging.StreamHandler(sys.stderr)
    handler._specproxy = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RequestContext())
    handler.addFilter(Redact(secrets))
    root.addHandler(handler)  # first: a line logged meanwhile (a reload) is still redacted
    for stale in old:
        root.removeHandler(stale)
    root.setLevel(level)
