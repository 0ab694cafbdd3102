"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` against a real llama-server:
the count is the server's own template and tokenizer over the translated prompt, and an
answer comes back as a Message through the official anthropic SDK."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message

from tests.fakes import FakeCerebras
from tests.real.support import RealLlama, real_proxy

pytestmark = pytest.mark.real
ASK = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0, "top_k": 1}  # (the anthropic SDK 2.x takes them as extra_body)
TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_count_tokens_is_the_real_tokenizers_count(llama: RealLlama, cloud: FakeCerebras) -> None:
    chat = {
        "messages": [{"role": "system", "content": "Be brief."}, *ASK],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "The weather in a city",
                    "parameters": TOOL["input_schema"],
                },
            }
        ],
    }
    prompt = httpx.post(f"{llama.url}/apply-template", json=chat, timeout=30).json()["prompt"]
    tokens = httpx.post(f"{llama.url}/tokenize", json={"content": prompt}, timeout=30).json()
    with real_proxy(llama.url, cloud.url) as proxy:
        client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0)
        counted = client.messages.count_tokens(
            model="claude-sonnet-4-6", system="Be brief.", messages=ASK, tools=[TOOL]
        )
    assert counted.input_tokens == len(tokens["tokens"]) > 10


def local_answers(proxy_url: str, messages: Any, max_tokens: int) -> tuple[Message, Message]:
    """The local model's answer through the anthropic SDK, whole and streamed."""
    client = anthropic.Anthropic(
        base_url=proxy_url,
        api_key="unused",
        max_retries=0,
        default_headers={"X-Routing-Strategy": "local_only"},
    )
    model = "claude-sonnet-4-6"
    message = client.messages.create(
        model=model, max_tokens=max_tokens, messages=messages, extra_body=GREEDY
    )
    with client.messages.stream(
        model=model, max_tokens=max_tokens, messages=messages, extra_body=GREEDY
    ) as events:
        return message, events.get_final_message()


def test_a_real_answer_as_a_message(llama: RealLlama, cloud: FakeCerebras) -> None:
    with real_proxy(llama.url, cloud.url) as proxy:
        message, streamed = local_answers(proxy.url, ASK, 24)
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert streamed.content[0].text == message.content[0].text  # type: ignore[union-attr]


def test_an_assistant_prefill_is_continued_not_repeated(
    llama: RealLlama, cloud: FakeCerebras
) -> None:
    """Anthropic's prefill: the reply is what follows the final assistant message (which
    llama-server's own answer repeats first), whole and streamed alike."""
    prefill = "The capital of France is"
    asked = [*ASK, {"role": "assistant", "content": prefill}]
    direct = {"messages": asked, "max_tokens": 8, **GREEDY}
    raw = httpx.post(f"{llama.url}/v1/chat/completions", json=direct, timeout=60).json()
    with real_proxy(llama.url, cloud.url) as proxy:
        message, streamed = local_answers(proxy.url, asked, 8)
    said = raw["choices"][0]["message"]["content"]
    assert said.startswith(prefill)  # llama-server's answer repeats it
    text = message.content[0].text  # type: ignore[union-attr]
    assert text and prefill + text == said
    assert streamed.content[0].text == text  # type: ignore[union-attr]
