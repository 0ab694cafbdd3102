"""Shared fixtures: stand-in upstreams and the real proxy, each on its own loopback port;
and the tiers: the ``process`` marker given and checked (``tests.support.tiers``).

The plain helpers they use (``proxy_config``, ``run_proxy``, ``free_port``...)
live in ``tests.support``; test modules import them from there.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.config import settings_from_mapping
from app.local_server import LocalServerError, ensure_model, find_llama_server
from tests.fakes import FakeCerebras, FakeLlamaServer, serve
from tests.support.proxy import (
    CLOUD_KEY,
    MakeProxy,
    Proxy,
    deep_merge,
    proxy_config,
    run_proxy,
)
from tests.support.tiers import mark_tiers, process_fixture, watched_phase


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tiers(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from watched_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from watched_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from watched_phase(item))


@process_fixture(scope="session")
def real_assets() -> tuple[Path, Path]:
    """The llama-server binary and the pinned model, found as the proxy finds them; the real
    tier fails (never skips) without them."""
    try:
        return find_llama_server("auto"), ensure_model("auto")
    except LocalServerError as exc:
        pytest.fail(f"the real tier needs llama-server and the SmolLM2 model: {exc}")


@pytest.fixture
def llama_server_class() -> type[FakeLlamaServer]:
    """The stand-in class ``local`` serves; a package's conftest may swap in a subclass."""
    return FakeLlamaServer


@pytest.fixture
def cerebras_class() -> type[FakeCerebras]:
    """The stand-in class ``cloud`` serves; a package's conftest may swap in a subclass."""
    return FakeCerebras


@process_fixture
def local(llama_server_class: type[FakeLlamaServer]) -> Iterator[FakeLlamaServer]:
    fake = llama_server_class()
    with serve(fake.app) as url:
        fake.url = url
        yield fake


@process_fixture
def cloud(cerebras_class: type[FakeCerebras]) -> Iterator[FakeCerebras]:
    fake = cerebras_class(api_key=CLOUD_KEY)
    with serve(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture
def edge() -> str | None:
    """The ``server.edge`` proxies are made with (None: the schema's default); tests/api
    and tests/hostile override it to run on each edge."""
    return None


@process_fixture
def make_proxy(local: FakeLlamaServer, cloud: FakeCerebras, edge: str | None) -> MakeProxy:
    """``with make_proxy(local_url=..., env=..., **config_overrides) as proxy``, on the
    ``edge`` fixture's edge (``stock_uvicorn=True``: served by uvicorn's own protocol,
    see ``run_proxy``)."""

    @contextmanager
    def make(
        *,
        local_url: str | None = None,
        cloud_url: str | None = None,
        env: dict[str, str] | None = None,
        api_key: str = "unused",
        stock_uvicorn: bool = False,
        **overrides: Any,
    ) -> Iterator[Proxy]:
        tree = proxy_config(local_url or local.url, cloud_url or cloud.url, **overrides)
        if edge is not None:
            tree = deep_merge({"server": {"edge": edge}}, tree)
        settings = settings_from_mapping(
            tree, env={"CEREBRAS_API_KEY": CLOUD_KEY} if env is None else env
        )
        with run_proxy(settings, api_key, stock_uvicorn=stock_uvicorn) as proxy:
            yield proxy

    return make


@process_fixture
def proxy(make_proxy: MakeProxy) -> Iterator[Proxy]:
    with make_proxy() as running:
        yield running
