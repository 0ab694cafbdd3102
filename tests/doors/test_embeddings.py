"""The embeddings door, pure: the request checked, the upstream chosen, base64 as OpenAI's."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.doors import embeddings as door
from app.errors import InvalidRequest, UpstreamProtocolError

vectors = st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=64)


@given(vectors)
def test_base64_is_little_endian_float32_and_round_trips(vector: list[float]) -> None:
    encoded = door.base64_of(vector)
    assert door.floats_of(encoded) == vector  # float32 values survive exactly
    assert struct.pack(f"<{len(vector)}f", *vector) == __import__("base64").b64decode(encoded)


@given(
    inputs=st.one_of(
        st.text(min_size=1).map(lambda t: [t]), st.lists(st.text(min_size=1), min_size=1)
    ),
    encoding=st.sampled_from([None, "float", "base64"]),
    vector=vectors.filter(bool),
)
def test_an_answer_survives_the_trip(
    inputs: list[str], encoding: str | None, vector: list[float]
) -> None:
    request = door.parse({"input": inputs, "encoding_format": encoding})
    body = door.upstream_body(request, "smollm2")
    assert body == {"input": inputs, "model": "smollm2", "encoding_format": "float"}
    upstream = {
        "data": [
            {"embedding": vector, "index": i, "object": "embedding"} for i in range(len(inputs))
        ],
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
    answer = door.answer("embed", upstream, request, "embed")
    assert [d["index"] for d in answer["data"]] == list(range(len(inputs)))
    for item in answer["data"]:
        got = item["embedding"]
        assert (door.floats_of(got) if encoding == "base64" else got) == vector
    assert answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert answer["object"] == "list" and answer["model"] == "embed"


def test_dimensions_are_passed_on() -> None:
    body = door.upstream_body(door.parse({"input": "x", "dimensions": 8}), "m")
    assert body["dimensions"] == 8


def test_count_of_inputs() -> None:
    assert door.parse({"input": "x"}).count == 1
    assert door.parse({"input": [1, 2, 3]}).count == 1
    assert door.parse({"input": [[1], [2]]}).count == 2
    assert door.parse({"input": ["a", "b", "c"]}).count == 3


def test_no_embeddings_model_is_a_404_saying_how_to_configure_one() -> None:
    with pytest.raises(door.NoEmbeddingsModel) as caught:
        door.choose([], "text-embedding-3-small")
    error = caught.value
    assert error.status == 404 and error.code == "model_not_found"
    assert "embeddings: true" in error.message


def test_the_model_names_the_upstream_or_is_ignored() -> None:
    assert door.choose(["embed"], "text-embedding-3-small") == "embed"
    assert door.choose(["a", "b"], "b") == "b"
    with pytest.raises(door.NoEmbeddingsModel, match="name one of: a, b"):
        door.choose(["a", "b"], "c")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["a", ""]}, "input"),
        ({"input": 5}, "input"),
        ({"input": "a", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "a", "dimensions": 0}, "dimensions"),
        ({"input": "a", "dimensions": "8"}, "dimensions"),
    ],
)
def test_malformed_requests_are_the_clients_400(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        door.parse(body)
    assert caught.value.param == param


@pytest.mark.parametrize(
    "upstream", [None, {}, {"data": "x"}, {"data": [{"embedding": ["a"]}]}, {"data": [1]}]
)
def test_an_unreadable_answer_is_the_upstreams_fault(upstream: object) -> None:
    with pytest.raises(UpstreamProtocolError):
        door.answer("embed", upstream, door.parse({"input": "x"}), "embed")
