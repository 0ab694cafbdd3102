"""Once the app has started, its long-lived objects are frozen out of the collector's
passes and the young generation is collected at ``GC_YOUNG_THRESHOLD``, not Python's 700."""

from __future__ import annotations

import gc

from app import GC_YOUNG_THRESHOLD
from tests.support.proxy import Proxy


def test_the_started_app_is_frozen_and_collected_less_often(proxy: Proxy) -> None:
    assert proxy.http.get("/health").status_code == 200
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD > 700
