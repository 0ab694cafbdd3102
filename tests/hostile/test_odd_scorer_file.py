"""D17: a stored scorer with an odd ``fitted_on`` or ``version`` (null, a string,
``1e400``), in ``learning.state_dir/scorer.json`` or the fleet's in Redis, does not stop
the proxy from starting: it is skipped with a log line and the prior serves."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.support.proxy import CLOUD_KEY, MakeProxy
from tests.support.redis_server import redis_server

SHIPPED = Path(__file__).resolve().parents[2] / "app/routing/scorers/confidence.json"
SCORED = {"policy": "confidence"}
ODD = [
    '"fitted_on": "a string"',
    '"fitted_on": 1e400',
    '"fitted_on": {"labels": null}',
    '"fitted_on": {"labels": "many"}',
    '"fitted_on": {"labels": 1e400}',
    '"fitted_on": {"labels": 3, "auroc_holdout": "x"}',
    '"fitted_on": {}, "version": 1e400',
    '"fitted_on": {}, "version": "two"',
]


def odd_scorer(odd: str) -> str:
    """The shipped scorer as the learner stores it, with ``odd`` in place of its
    ``fitted_on`` (written as text: ``1e400`` is not a number json.dumps writes)."""
    data = json.loads(SHIPPED.read_text())
    data.pop("fitted_on", None)
    data.pop("version", None)
    return json.dumps(data)[:-1] + ", " + odd + "}"


@pytest.mark.parametrize("odd", ODD)
def test_an_odd_scorer_file_is_skipped_and_the_proxy_starts(
    make_proxy: MakeProxy, tmp_path: Path, odd: str, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "scorer.json").write_text(odd_scorer(odd))
    learning = {"enabled": True, "state_dir": str(state), "audit_rate": 0.0}
    with (
        caplog.at_level(logging.WARNING),
        make_proxy(learning=learning, speculative_decoding=SCORED) as proxy,
    ):
        learner = proxy.stats()["learning"]
        response = proxy.http.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
        )
    assert learner["scorer"]["version"] == 0  # the prior serves
    assert response.status_code == 200, response.text
    assert "scorer.json is unreadable" in caplog.text


def test_an_odd_scorer_in_redis_is_skipped_and_the_proxy_starts(
    make_proxy: MakeProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with redis_server(tmp_path) as redis:
        with redis.client() as client:
            client.set("d17:scorer", odd_scorer('"fitted_on": {"labels": 1e400}, "version": 3'))
        state = {"backend": "redis", "redis_url": "${REDIS_URL}", "key_prefix": "d17"}
        learning = {"enabled": True, "state_dir": str(tmp_path / "state"), "audit_rate": 0.0}
        env = {"CEREBRAS_API_KEY": CLOUD_KEY, "REDIS_URL": redis.url}
        with (
            caplog.at_level(logging.WARNING),
            make_proxy(
                learning=learning, state=state, env=env, speculative_decoding=SCORED
            ) as proxy,
        ):
            learner = proxy.stats()["learning"]
    assert learner["scorer"]["version"] == 0
    assert "d17:scorer) is unreadable" in caplog.text
