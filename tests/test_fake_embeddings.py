"""The stand-in llama-server's ``/v1/embeddings`` answers in the shape the real one was
recorded in (``tests/fixtures/llama_server/embeddings*.json``, its README says how)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes import FakeLlamaServer, serve
from tests.test_fakes_match_reality import FIXTURES, shape

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeLlamaServer, httpx.Client]]:
    server = FakeLlamaServer()
    with serve(server.app) as url, httpx.Client(base_url=url) as client:
        yield server, client


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def test_vectors_have_the_recorded_shape(fake: tuple[FakeLlamaServer, httpx.Client]) -> None:
    server, client = fake
    server.embeddings = True
    answer = client.post("/v1/embeddings", json={"input": ["hello world", "the sea"]})
    real = recorded("embeddings.json")
    assert answer.status_code == 200
    assert shape(answer.json()) == shape(real)
    assert [d["index"] for d in answer.json()["data"]] == [d["index"] for d in real["data"]]


@pytest.mark.parametrize(
    ("embeddings", "body", "name", "status"),
    [
        (False, {"input": "hello"}, "error_embeddings_not_supported.json", 501),
        (True, {"input": ""}, "error_embeddings_empty.json", 400),
    ],
)
def test_errors_are_the_recorded_ones(
    fake: tuple[FakeLlamaServer, httpx.Client], embeddings: bool, body: dict, name: str, status: int
) -> None:
    server, client = fake
    server.embeddings = embeddings
    answer = client.post("/v1/embeddings", json=body)
    assert answer.status_code == status
    assert answer.json() == recorded(name)
