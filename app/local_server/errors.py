"""Errors of the managed llama-server.

LocalServerError    the binary or model cannot be found or fetched, or the
                    server would not start; the message says what to do next
"""

from __future__ import annotations


class LocalServerError(Exception):
    """The local llama-server cannot be provided; the message says what to do next."""
