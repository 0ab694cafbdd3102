"""The dashboard in a real browser: headless Chromium (Debian's, driven by playwright)
loads ``/dashboard`` from a proxy that has served scripted traffic.

The numbers the page shows must be ``/stats``'s, every chart must have drawn, and the
console must stay clean. The screenshot goes to the test's directory, and to
``$SPECPROXY_SCREENSHOT`` when set (how docs/dashboard.png is made:
``SPECPROXY_SCREENSHOT=docs/dashboard.png .venv/bin/python -m pytest tests/dashboard``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from tests.fakes import FakeCerebras, FakeLlamaServer, Reply
from tests.support.answers import CLOUD_OTHER, GOOD_DRAFT, HEDGED
from tests.support.proxy import CLOUD_KEY, MakeProxy, Proxy

CHROMIUM = "/usr/bin/chromium"
ASK = [{"role": "user", "content": "Say hello"}]
PRICES = {
    "local": {"price": {"input_per_mtok": 0.05, "output_per_mtok": 0.1}},
    "cerebras": {"price": {"input_per_mtok": 0.35, "output_per_mtok": 0.75}},
}
PROXY_KEY = "sk-dashboard-5e6f7a8b"

# Each canvas: how many points its chart holds, and whether any pixel was painted.
CHARTS_DRAWN = """() => [...document.querySelectorAll("canvas")].map((canvas) => {
  const chart = Chart.getChart(canvas);
  const points = chart ? chart.data.datasets.reduce((n, d) => n + d.data.length, 0) : 0;
  const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = false;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i]) { painted = true; break; }
  return { id: canvas.id, points, painted };
})"""
CELLS = """(id) => [...document.querySelectorAll(`#${id} tbody tr`)]
  .map((row) => [...row.cells].map((cell) => cell.textContent))"""
SHOWN = """() => Object.fromEntries([...document.querySelectorAll("[data-stat]")]
  .map((el) => [el.dataset.stat, el.dataset.value]))"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert shutil.which(CHROMIUM), "no Chromium: scripts/bootstrap.sh dev installs it"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def serve_traffic(proxy: Proxy, local: FakeLlamaServer, cloud: FakeCerebras) -> None:
    """Accepted, verified, spilled, streamed and passed-through requests."""
    local.enqueue(*[Reply(GOOD_DRAFT)] * 3, *[Reply(HEDGED)] * 3)
    cloud.enqueue(Reply(HEDGED.replace(".", "!")), *[Reply(CLOUD_OTHER)] * 4)
    for _ in range(5):
        proxy.openai.chat.completions.create(model="auto", messages=ASK)
    stream = proxy.openai.chat.completions.create(model="auto", messages=ASK, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    proxy.openai.chat.completions.create(
        model="auto", messages=ASK, extra_headers={"X-Routing-Strategy": "cerebras_only"}
    )


def open_page(browser: Browser, url: str, errors: list[str]) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 1100})

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{url}/dashboard?every=0.3")
    return page


def polled(page: Page, times: str) -> None:
    """Wait until the page has shown /stats (``times``: a pattern of the poll count); the
    page's CSP forbids eval, so no ``wait_for_function``."""
    expect(page.locator("body")).to_have_attribute("data-polls", re.compile(f"^(?:{times})$"))


def redrawn_narrower(page: Page, width: int) -> list[int]:
    """The canvases' widths once Chart.js has resized them to fit ``width`` (it does so
    from a ResizeObserver, after layout), or as they are after two seconds."""
    widths: list[int] = []
    for _ in range(20):
        widths = page.evaluate(
            "() => [...document.querySelectorAll('canvas')].map((c) => c.clientWidth)"
        )
        if all(w < width for w in widths):
            break
        page.wait_for_timeout(100)
    return widths


def same(shown: str, value: Any) -> bool:
    """Whether the page's ``data-value`` is this /stats value (numbers as numbers)."""
    if value is None:
        return shown == ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(shown) == value
    return shown == str(value)


def lookup(stats: dict[str, Any], path: str) -> Any:
    value: Any = stats
    for part in path.split("."):
        value = None if value is None else value.get(part)
    return value


def test_the_dashboard_shows_stats_and_draws_every_chart(
    make_proxy: MakeProxy,
    local: FakeLlamaServer,
    cloud: FakeCerebras,
    browser: Browser,
    tmp_path: Path,
) -> None:
    errors: list[str] = []
    with make_proxy(models=PRICES) as proxy:
        serve_traffic(proxy, local, cloud)
        page = open_page(browser, proxy.url, errors)
        polled(page, r"[3-9]|\d\d+")
        shown, stats = page.evaluate(SHOWN), proxy.stats()
        drawn = page.evaluate(CHARTS_DRAWN)
        shot = page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        purposes, upstreams = (page.evaluate(CELLS, table) for table in ("purposes", "upstreams"))
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: nothing runs off
        phone_width = page.evaluate("() => document.documentElement.scrollWidth")
        chart_widths = redrawn_narrower(page, 390)

    assert errors == []
    # Traffic stopped before the page opened: what it shows is what /stats says now.
    assert len(shown) >= 15
    for path, value in shown.items():
        assert same(value, lookup(stats, path)), (path, value)
    assert stats["cost"]["savings_usd"] > 0 and shown["cost.savings_usd"] != ""
    assert shown["quality.served_locally"] == "4"  # three accepted, one verified and kept
    assert [c["id"] for c in drawn] == [
        "chart-outcomes",
        "chart-spill",
        "chart-spend",
        "chart-positions",
        "chart-latency",
        "chart-contexts",
    ]
    assert all(c["points"] > 0 and c["painted"] for c in drawn), drawn
    assert {row[0] for row in purposes} == set(stats["cost"]["spend_usd"]["by_purpose"])
    assert [row[:2] for row in upstreams] == [
        ["local", "closed"],
        ["cerebras", "closed"],
    ]
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    assert phone_width <= 390
    assert all(width < 390 for width in chart_widths), chart_widths  # the charts follow
    if target := os.environ.get("SPECPROXY_SCREENSHOT"):
        Path(target).write_bytes(shot)


def test_the_dashboard_asks_for_a_key_and_keeps_it_in_memory_only(
    make_proxy: MakeProxy, browser: Browser
) -> None:
    errors: list[str] = []
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": PROXY_KEY}
    with make_proxy(env=env, api_key=PROXY_KEY, server={"api_keys": "${PROXY_KEYS}"}) as proxy:
        page = open_page(browser, proxy.url, errors)
        form = page.locator("#key-form")
        form.wait_for(state="visible")
        assert page.locator("[data-stat='requests.total']").inner_text() == "–"
        page.fill("#key", PROXY_KEY)
        page.click("#key-form button")
        polled(page, r"\d+")
        assert form.is_hidden()
        assert page.locator("[data-stat='requests.total']").inner_text() == "0"
        stored = page.evaluate(
            "() => JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie,"
            " location.href, document.getElementById('key').value])"
        )
    assert PROXY_KEY not in stored
    # The only console error allowed: the browser's own note of the first 401.
    assert all("401" in e for e in errors), errors


def test_under_a_telemetry_key_a_client_key_is_told_it_may_not_read(
    make_proxy: MakeProxy, browser: Browser
) -> None:
    errors: list[str] = []
    reader = "sk-telemetry-1c2d3e4f5a6b"
    env = {"CEREBRAS_API_KEY": CLOUD_KEY, "PROXY_KEYS": PROXY_KEY, "READER": reader}
    server = {"api_keys": "${PROXY_KEYS}", "telemetry_key": "${READER}"}
    with make_proxy(env=env, api_key=PROXY_KEY, server=server) as proxy:
        page = open_page(browser, proxy.url, errors)
        page.locator("#key-form").wait_for(state="visible")
        page.fill("#key", PROXY_KEY)  # a client key: the proxy knows it, /stats is not its
        page.click("#key-form button")
        expect(page.locator("#status")).to_contain_text("needs the telemetry key")
        page.fill("#key", reader)
        page.click("#key-form button")
        polled(page, r"\d+")
        assert page.locator("#key-form").is_hidden()
    assert all("401" in e or "403" in e for e in errors), errors
