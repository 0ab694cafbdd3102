"""D7: a client that leaves mid-upload is counted (refused 499) and logged once at INFO,
without a traceback."""

from __future__ import annotations

import logging
import socket
from urllib.parse import urlsplit

import pytest

from tests.support.proxy import Proxy, wait_for


def test_a_client_leaving_mid_upload_is_counted_and_logged_once(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    url = urlsplit(proxy.url)
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            b'{"messages": ['
        )
    wait_for(lambda: proxy.stats()["requests"]["refused"].get("499") == 1)
    left = [r for r in caplog.records if "client left while sending" in r.getMessage()]
    assert [r.levelno for r in left] == [logging.INFO]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not any(r.exc_info for r in caplog.records)
