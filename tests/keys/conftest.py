"""The key and admin API tests run on each HTTP edge (``server.edge``: ``app.edge``)."""

from __future__ import annotations

import pytest

EDGES = ("lean", "standard")


@pytest.fixture(params=EDGES)
def edge(request: pytest.FixtureRequest) -> str:
    """Each edge in turn, for every proxy these tests make."""
    edge: str = request.param
    return edge
