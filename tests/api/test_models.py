"""/v1/models: a UI can pick every strategy by model id, and the SDK can look each one up."""

from __future__ import annotations

import openai
import pytest

from tests.fakes import FakeCerebras, FakeLlamaServer
from tests.support.proxy import MakeProxy, Proxy, chat_bodies

ASK = [{"role": "user", "content": "Say hello"}]


def test_every_strategy_is_listed_and_each_id_can_be_retrieved(proxy: Proxy) -> None:
    listed = proxy.openai.models.list().data
    assert [(m.id, m.to_dict()["strategy"]) for m in listed] == [
        ("speculative", "speculative_decoding"),
        ("local", "local_only"),
        ("cerebras", "cerebras_only"),
        ("auto", "speculative_decoding"),  # any other name: routing.strategy
    ]
    for model in listed:
        assert proxy.openai.models.retrieve(model.id).to_dict() == model.to_dict()


def test_an_unknown_model_id_is_a_404_in_openais_shape(proxy: Proxy) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        proxy.openai.models.retrieve("gpt-17")
    assert info.value.body == {
        "message": "The model 'gpt-17' does not exist; GET /v1/models lists them",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_the_speculative_model_id_routes_to_the_speculative_strategy(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras
) -> None:
    with make_proxy(routing={"strategy": "cerebras_only"}) as proxy:
        raw = proxy.openai.chat.completions.with_raw_response.create(
            model="speculative", messages=ASK
        )
    assert raw.headers["x-routing-strategy"] == "speculative_decoding"
    assert "speculative_decoding" in raw.parse().to_dict()
    assert chat_bodies(local)[0]["logprobs"] is True  # drafted, as the strategy does


def test_a_configured_name_is_listed_and_routes(
    make_proxy: MakeProxy, local: FakeLlamaServer
) -> None:
    with make_proxy(speculative_decoding={"model_name": "specproxy-auto"}) as proxy:
        assert proxy.openai.models.list().data[0].id == "specproxy-auto"
        raw = proxy.openai.chat.completions.with_raw_response.create(
            model="specproxy-auto", messages=ASK
        )
    assert raw.headers["x-routing-strategy"] == "speculative_decoding"


def test_with_speculation_off_it_is_not_listed(make_proxy: MakeProxy) -> None:
    with make_proxy(speculative_decoding={"enabled": False}) as proxy:
        listed = proxy.openai.models.list().data
    # ``auto`` picks the default strategy, and speculation off means the local model
    assert [(m.id, m.to_dict()["strategy"]) for m in listed] == [
        ("local", "local_only"),
        ("cerebras", "cerebras_only"),
        ("auto", "local_only"),
    ]


def test_auto_names_the_configured_strategy(make_proxy: MakeProxy) -> None:
    with make_proxy(routing={"strategy": "local_only"}) as proxy:
        auto = proxy.openai.models.retrieve("auto").to_dict()
    assert auto["strategy"] == "local_only"
