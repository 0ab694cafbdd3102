"""The dashboard's usage by key in a real browser (headless Chromium, as test_dashboard):
the table lists each key /stats → keys knows, and the key filter narrows it to one key,
or to one team with its total, and keeps the choice across polls."""

from __future__ import annotations

import openai
from playwright.sync_api import Browser, expect

from tests.dashboard.test_dashboard import CELLS, PRICES, browser, open_page, polled
from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import GOOD_DRAFT
from tests.support.proxy import CLOUD_KEY, MakeProxy

__all__ = ["browser"]  # the module's Chromium fixture

ALICE, BOB = "sk-alice-dashboard-71c2", "sk-bob-dashboard-94e5"
KEYS = {
    "keys": [
        {"name": "alice", "key": "${ALICE_KEY}", "team": "search"},
        {"name": "bob", "key": "${BOB_KEY}", "team": "ops"},
    ]
}
ENV = {"CEREBRAS_API_KEY": CLOUD_KEY, "ALICE_KEY": ALICE, "BOB_KEY": BOB}
ASK = [{"role": "user", "content": "Say hello"}]
OPTIONS = "() => [...document.querySelectorAll('#key-filter option')].map((o) => o.value)"


def test_the_key_filter_narrows_usage_to_a_key_or_a_team(
    make_proxy: MakeProxy, local: FakeLlamaServer, cloud: FakeCerebras, browser: Browser
) -> None:
    errors: list[str] = []
    local.enqueue(*[Reply(GOOD_DRAFT)] * 3)
    with make_proxy(env=ENV, api_key=ALICE, server=KEYS, models=PRICES) as proxy:
        bob = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=BOB, max_retries=0, timeout=15)
        for client in (proxy.openai, proxy.openai, bob):
            client.chat.completions.create(model="auto", messages=ASK)
        keys = proxy.stats()["keys"]["by_key"]
        page = open_page(browser, proxy.url, errors)
        page.locator("#key-form").wait_for(state="visible")
        page.fill("#key", ALICE)
        page.click("#key-form button")
        polled(page, r"\d+")
        everyone = page.evaluate(CELLS, "keys")
        options = page.evaluate(OPTIONS)
        page.select_option("#key-filter", "key:bob")
        only_bob = page.evaluate(CELLS, "keys")
        page.select_option("#key-filter", "team:search")
        search = page.evaluate(CELLS, "keys")
        polls = page.locator("body").get_attribute("data-polls")
        expect(page.locator("body")).not_to_have_attribute("data-polls", polls or "")
        after_a_poll = page.evaluate(CELLS, "keys")
        kept = page.locator("#key-filter").input_value()

    assert all("401" in e for e in errors), errors  # the browser's note of the first 401
    assert options == ["", "team:ops", "team:search", "key:alice", "key:bob"]
    assert [row[:3] for row in everyone] == [["alice", "search", "2"], ["bob", "ops", "1"]]
    for row, name in zip(everyone, ("alice", "bob"), strict=True):
        tokens = keys[name]["tokens"]
        assert row[6] == str(sum(n for kind in tokens.values() for n in kind.values()))
        assert row[3].startswith("$") and row[7] == "0"
    assert only_bob == [everyone[1]]
    assert [row[:3] for row in search] == [["alice", "search", "2"], ["team total", "search", "2"]]
    assert search[1][3:] == search[0][3:]  # alice is the whole team
    assert after_a_poll == search and kept == "team:search"
