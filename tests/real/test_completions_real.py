"""``POST /v1/completions`` through the proxy to a real llama-server: as chat (the prompt one
user message) when speculating, raw (its own ``/v1/completions``) in ``local_only``; the
openai SDK's ``completions.create``, streamed and not, with logprobs."""

from __future__ import annotations

import httpx
import pytest

from tests.fakes import FakeCerebras
from tests.real.support import ACCEPT_ALL, GREEDY, RealLlama, real_proxy

pytestmark = pytest.mark.real

PROMPT = "What is the capital of France? Answer in one sentence."


@pytest.mark.parametrize("model", ["auto"])
def test_real_completion_equals_the_chat_answer(
    llama: RealLlama, cloud: FakeCerebras, model: str
) -> None:
    direct = llama.chat({"messages": [{"role": "user", "content": PROMPT}], **GREEDY})
    expected = direct["choices"][0]["message"]["content"]
    with real_proxy(llama.url, cloud.url, speculative_decoding=ACCEPT_ALL) as proxy:
        client = proxy.openai.with_options(timeout=60)  # real generation on a busy machine
        whole = client.completions.create(
            model=model, prompt=PROMPT, logprobs=2, max_tokens=64, **GREEDY
        )
        streamed = list(
            client.completions.create(
                model=model, prompt=PROMPT, stream=True, max_tokens=64, **GREEDY
            )
        )
    assert expected and whole.choices[0].text == expected
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "stop"
    logprobs = whole.choices[0].logprobs
    assert logprobs is not None and logprobs.token_logprobs
    assert all(lp is not None and lp <= 0 for lp in logprobs.token_logprobs)
    assert all(len(top) <= 2 for top in logprobs.top_logprobs or [])
    assert "".join(c.choices[0].text for c in streamed if c.choices) == expected
    assert cloud.requests == []  # ACCEPT_ALL: the draft is served in the speculative strategy


def test_real_local_only_completion_is_the_servers_own(
    llama: RealLlama, cloud: FakeCerebras
) -> None:
    """``local_only`` passes the raw prompt to llama-server's ``/v1/completions``: the same
    text as asking it directly, its logprobs put in the legacy shape, counted in /stats."""
    ask = {"prompt": "The capital of France is", "max_tokens": 16, **GREEDY}
    direct = httpx.post(f"{llama.url}/v1/completions", json=ask, timeout=60).json()
    expected = direct["choices"][0]["text"]
    with real_proxy(llama.url, cloud.url) as proxy:
        client = proxy.openai.with_options(timeout=60)
        whole = client.completions.create(model="local", logprobs=2, **ask)
        streamed = list(client.completions.create(model="local", stream=True, **ask))
        stats = proxy.stats()
    assert expected and whole.choices[0].text == expected
    assert whole.object == "text_completion"
    logprobs = whole.choices[0].logprobs
    assert logprobs is not None and "".join(logprobs.tokens or []) == expected
    assert all(len(top) <= 2 for top in logprobs.top_logprobs or [])
    assert "".join(c.choices[0].text for c in streamed if c.choices) == expected
    assert stats["requests"]["by_strategy"] == {"local_only": 2}
    assert stats["tokens"]["local"] == 2 * direct["usage"]["completion_tokens"]
    assert cloud.requests == []
