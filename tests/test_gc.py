"""On the lean edge, once the app has started, its long-lived objects are frozen out of
the collector's passes and the young generation is collected at ``GC_YOUNG_THRESHOLD``,
not Python's 700; the standard edge leaves the collector as Python sets it."""

from __future__ import annotations

import gc

import pytest

from app.edge.heap import GC_YOUNG_THRESHOLD
from tests.support.proxy import MakeProxy


@pytest.fixture
def python_defaults() -> None:
    """The collector as a fresh interpreter has it (an earlier test may have settled it)."""
    gc.unfreeze()
    gc.set_threshold(700)


@pytest.mark.parametrize("edge", ["lean"])
def test_the_started_app_is_frozen_and_collected_less_often(
    make_proxy: MakeProxy, python_defaults: None
) -> None:
    with make_proxy() as proxy:
        assert proxy.http.get("/health").status_code == 200
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD > 700


@pytest.mark.parametrize("edge", ["standard"])
def test_the_standard_edge_leaves_the_collector_alone(
    make_proxy: MakeProxy, python_defaults: None
) -> None:
    with make_proxy() as proxy:
        assert proxy.http.get("/health").status_code == 200
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold()[0] == 700
