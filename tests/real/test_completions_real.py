"""``POST /v1/completions`` through the proxy to a real llama-server, as chat (the prompt one
user message): the openai SDK's ``completions.create``, streamed and not, with logprobs."""

from __future__ import annotations

import pytest

from tests.fakes import FakeCerebras
from tests.real.support import ACCEPT_ALL, GREEDY, RealLlama, real_proxy

pytestmark = pytest.mark.real

PROMPT = "What is the capital of France? Answer in one sentence."


@pytest.mark.parametrize("model", ["local", "auto"])
def test_real_completion_equals_the_chat_answer(
    llama: RealLlama, cloud: FakeCerebras, model: str
) -> None:
    direct = llama.chat({"messages": [{"role": "user", "content": PROMPT}], **GREEDY})
    expected = direct["choices"][0]["message"]["content"]
    with real_proxy(llama.url, cloud.url, speculative_decoding=ACCEPT_ALL) as proxy:
        whole = proxy.openai.completions.create(
            model=model, prompt=PROMPT, logprobs=2, max_tokens=64, **GREEDY
        )
        streamed = list(
            proxy.openai.completions.create(
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
