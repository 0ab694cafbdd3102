"""ManagedLlamaServer: the life cycle on a stand-in server (fast), then on the real one (real)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.config import ConfigError, LaunchConfig, settings_from_mapping
from app.local_server import LocalServerError, ManagedLlamaServer, managed
from app.local_server.managed import Speculation, plan_speculation
from app.local_server.pair_check import PairVerdict
from tests.support.local_server import STAND_IN, StandIn, write_gguf
from tests.support.processes import alive

ROOT = Path(__file__).resolve().parents[2]


async def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll check() until it holds; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)


def our_llama_servers() -> set[int]:
    """Live llama-server children of this test process."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            pid, rest = stat.read_text().split(" (", 1)
            comm, fields = rest.rsplit(") ", 1)
            state, ppid = fields.split()[:2]
            if comm == "llama-server" and state != "Z" and int(ppid) == os.getpid():
                found.add(int(pid))
    return found


def await_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.02)


# --- fast: a stand-in server takes llama-server's place -------------------------------


@pytest.mark.process
def test_start_polls_through_loading_then_stop_reaps(stand_in: StandIn) -> None:
    async def scenario() -> None:
        server = ManagedLlamaServer(stand_in.config("--loading", "3"))
        url = await server.start()
        assert url == server.base_url and url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/served")).json() == {"503": 3}
        status = server.status()
        assert status["state"] == "running" and status["pid"] == stand_in.pids()[0]
        assert status["model"] == str(stand_in.model) and status["restarts"] == 0
        await server.stop()
        await server.stop()  # idempotent
        assert server.status()["state"] == "stopped" and server.pid is None

    asyncio.run(scenario())
    assert not alive(stand_in.pids()[0])


def test_stop_before_start_is_harmless(stand_in: StandIn) -> None:
    server = ManagedLlamaServer(stand_in.config())
    asyncio.run(server.stop())
    assert server.status()["state"] == "stopped"


@pytest.mark.process
def test_exit_during_start_reports_the_last_lines(stand_in: StandIn) -> None:
    server = ManagedLlamaServer(stand_in.config("--exit", "2"))
    with pytest.raises(LocalServerError, match=r"(?s)exited with code 2.*failed to load model"):
        asyncio.run(server.start())
    assert server.status()["state"] == "failed"


@pytest.mark.process
def test_startup_timeout_stops_the_child(stand_in: StandIn) -> None:
    server = ManagedLlamaServer(stand_in.config("--loading", "1000000", startup_timeout=0.5))
    with pytest.raises(LocalServerError, match=r"not healthy after 0.5 s.*startup_timeout"):
        asyncio.run(server.start())
    [pid] = stand_in.pids()
    assert not alive(pid)


def test_missing_model_fails_before_spawning(stand_in: StandIn, tmp_path: Path) -> None:
    server = ManagedLlamaServer(stand_in.config(model=str(tmp_path / "nope.gguf")))
    with pytest.raises(LocalServerError, match=r"launch.model .*no such file"):
        asyncio.run(server.start())
    assert stand_in.pids() == []


@pytest.mark.process
def test_a_busy_port_is_refused(stand_in: StandIn) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = ManagedLlamaServer(stand_in.config(port=port))
        with pytest.raises(LocalServerError, match=f"port {port} .*already in use"):
            asyncio.run(server.start())


@pytest.mark.process
def test_supervisor_restarts_a_killed_child(stand_in: StandIn) -> None:
    async def scenario() -> None:
        server = ManagedLlamaServer(stand_in.config())
        url = await server.start()
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: server.state == "running" and server.pid not in (None, first))
        status = server.status()
        assert status["restarts"] == 1 and status["last_exit_code"] == -signal.SIGKILL
        assert status["base_url"] == url  # same port, so clients need not know
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/health")).status_code == 200
        await server.stop()

    asyncio.run(scenario())
    assert [alive(pid) for pid in stand_in.pids()] == [False, False]


@pytest.mark.process
def test_supervisor_gives_up_after_max_restarts(stand_in: StandIn) -> None:
    async def scenario() -> float:
        server = ManagedLlamaServer(
            stand_in.config("--fail-if-exists", str(stand_in.flag), max_restarts=2)
        )
        await server.start()
        stand_in.flag.touch()
        began = time.monotonic()
        os.kill(server.pid or 0, signal.SIGKILL)
        await wait_until(lambda: server.state == "failed")
        elapsed = time.monotonic() - began
        assert server.status()["restarts"] == 2 and server.pid is None
        assert server.status()["last_exit_code"] == -signal.SIGKILL
        await server.stop()
        return elapsed

    elapsed = asyncio.run(scenario())
    assert elapsed >= 0.05 + 0.1  # backed off 0.05 s, then doubled
    assert len(stand_in.pids()) == 3 and not any(alive(pid) for pid in stand_in.pids())


@pytest.mark.process
def test_stop_kills_a_child_that_ignores_sigterm(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(managed, "_STOP_GRACE_S", 0.3)

    async def scenario() -> float:
        server = ManagedLlamaServer(stand_in.config("--ignore-sigterm"))
        await server.start()
        began = time.monotonic()
        await server.stop()
        return time.monotonic() - began

    assert asyncio.run(scenario()) >= 0.3
    assert not alive(stand_in.pids()[0])


@pytest.mark.process
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_with_a_sigkilled_proxy(stand_in: StandIn) -> None:
    proxy_code = textwrap.dedent(
        """
        import asyncio, sys
        from app.config import LaunchConfig
        from app.local_server import ManagedLlamaServer

        async def main():
            server = ManagedLlamaServer(LaunchConfig.model_validate_json(sys.argv[1]))
            await server.start()
            print(server.pid, flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    config = stand_in.config().model_dump_json()
    proxy = subprocess.Popen(
        [sys.executable, "-c", proxy_code, config], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proxy.stdout is not None
        child = int(proxy.stdout.readline())
        assert alive(child)
        proxy.kill()
        proxy.wait()
        await_gone(child)
    finally:
        proxy.kill()
        proxy.wait()
        if proxy.stdout:
            proxy.stdout.close()


# --- real: the llama-server binary and the SmolLM2 model --------------------------------


def real_config(**overrides: Any) -> LaunchConfig:
    fields: dict[str, Any] = {
        "port": 0,
        "args": ["-c", "1024", "-t", "2", "--metrics"],
        "startup_timeout": 60,
        "restart_backoff_initial": 0.2,
    }
    return LaunchConfig(**(fields | overrides))


def chat(base_url: str) -> dict[str, Any]:
    body = {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for the module, so the server and its supervisor outlive a test."""
    with asyncio.Runner() as loop_runner:
        yield loop_runner


@pytest.fixture(scope="module")
def real_server(runner: asyncio.Runner) -> Iterator[ManagedLlamaServer]:
    server = ManagedLlamaServer(real_config(), name="real")
    runner.run(server.start())
    pids = [server.pid]
    try:
        yield server
        pids.append(server.pid)
    finally:
        runner.run(server.stop())
    for pid in pids:
        if pid is not None:
            await_gone(pid)


@pytest.mark.real
def test_real_server_is_healthy_and_answers(real_server: ManagedLlamaServer) -> None:
    assert real_server.base_url is not None
    health = httpx.get(f"{real_server.base_url}/health", timeout=5)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    answer = chat(real_server.base_url)
    assert isinstance(answer["choices"][0]["message"]["content"], str)
    assert answer["usage"]["completion_tokens"] > 0
    status = real_server.status()
    assert status["state"] == "running" and status["binary"].endswith("llama-server")
    assert status["model"].endswith(".gguf")


@pytest.mark.real
def test_real_server_restarts_after_kill_9(
    real_server: ManagedLlamaServer, runner: asyncio.Runner
) -> None:
    first = real_server.pid
    restarts = real_server.status()["restarts"]
    assert first is not None
    os.kill(first, signal.SIGKILL)
    runner.run(
        wait_until(
            lambda: real_server.state == "running" and real_server.pid not in (None, first), 60
        )
    )
    assert real_server.status()["restarts"] == restarts + 1
    assert not alive(first)
    assert real_server.base_url is not None
    assert chat(real_server.base_url)["usage"]["completion_tokens"] > 0


@pytest.mark.real
def test_real_stop_leaves_no_process(runner: asyncio.Runner) -> None:
    server = ManagedLlamaServer(real_config())
    runner.run(server.start())
    pid = server.pid
    assert pid is not None and alive(pid)
    runner.run(server.stop())
    assert server.status()["state"] == "stopped" and server.pid is None
    assert not alive(pid)


@pytest.mark.real
def test_real_bad_model_fails_with_the_servers_words(
    runner: asyncio.Runner, tmp_path: Path
) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    before = our_llama_servers()
    server = ManagedLlamaServer(real_config(model=str(bad)))
    with pytest.raises(LocalServerError, match=r"(?s)exited with code \d+ during start-up.*gguf"):
        runner.run(server.start())
    assert our_llama_servers() <= before
    with pytest.raises(LocalServerError, match="no such file"):
        runner.run(ManagedLlamaServer(real_config(model=str(tmp_path / "no.gguf"))).start())


@pytest.mark.real
def test_real_startup_timeout(runner: asyncio.Runner) -> None:
    before = our_llama_servers()
    server = ManagedLlamaServer(real_config(startup_timeout=0.01))
    with pytest.raises(LocalServerError, match=r"not healthy after 0.01 s"):
        runner.run(server.start())
    assert our_llama_servers() <= before


# --- a draft model: the pair check at start, the speculative flags -----------------------


def verdict(n_max: int = 8, p_min: float = 0.75) -> PairVerdict:
    return PairVerdict(True, (), ("size ratio 4.0:1 is in the sweet spot",), 4.0, n_max, p_min)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({}, (8, 0, 0.75)),  # all from the pair check
        ({"spec_n_max": 4, "spec_n_min": 1, "spec_p_min": 0.5}, (4, 1, 0.5)),  # config wins
        ({"spec_p_min": 0.0}, (8, 0, 0.0)),  # 0 is a value, not "unset"
        ({"spec_n_min": 12}, (12, 12, 0.75)),  # a suggestion never goes under n_min
    ],
)
def test_plan_takes_config_values_else_the_suggestion(
    keys: dict[str, Any], expected: tuple[int, int, float]
) -> None:
    plan = plan_speculation(LaunchConfig(draft_model="d.gguf", **keys), Path("d.gguf"), verdict())
    assert (plan.n_max, plan.n_min, plan.p_min) == expected


def test_speculation_args_pin_every_parameter() -> None:
    plan = Speculation(Path("/m/d.gguf"), "draft-simple", 6, 1, 0.8)
    assert plan.args() == [
        *("-md", "/m/d.gguf", "--spec-type", "draft-simple"),
        *("--spec-draft-n-max", "6", "--spec-draft-n-min", "1", "--spec-draft-p-min", "0.8"),
    ]
    assert plan.status() == {"type": "draft-simple", "n_max": 6, "n_min": 1, "p_min": 0.8}


def command_line(pid: int) -> list[str]:
    """The stand-in's own arguments (after the interpreter and the script)."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    return argv[argv.index(str(STAND_IN)) + 1 :]


def launched(config: LaunchConfig) -> tuple[list[str], dict[str, Any]]:
    """Start a managed server: its real command line and its status; then stop it."""

    async def scenario() -> tuple[list[str], dict[str, Any]]:
        server = ManagedLlamaServer(config)
        await server.start()
        try:
            assert server.pid is not None
            return command_line(server.pid), server.status()
        finally:
            await server.stop()

    return asyncio.run(scenario())


@pytest.mark.process
def test_a_compatible_draft_adds_the_speculative_flags(
    stand_in: StandIn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = write_gguf(tmp_path / "target.gguf", params=4000)
    draft = write_gguf(tmp_path / "draft.gguf", params=1000)  # 4:1: n_max 8, p_min 0.75
    config = stand_in.config(model=str(target), draft_model=str(draft), spec_n_max=5)

    with caplog.at_level("INFO", logger="specproxy.llama_server"):
        argv, status = launched(config)
    spec = argv[argv.index("-md") :][:10]
    assert spec == [
        *("-md", str(draft.resolve()), "--spec-type", "draft-simple"),
        *("--spec-draft-n-max", "5", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.75"),
    ]
    assert argv.index("-md") < argv.index("--pid-file")  # launch.args come last
    assert status["draft_model"] == str(draft.resolve())
    assert status["speculative"] == {"type": "draft-simple", "n_max": 5, "n_min": 0, "p_min": 0.75}
    assert "size ratio 4.0:1 is in the sweet spot" in caplog.text


@pytest.mark.process
def test_no_draft_model_means_no_speculative_flags(stand_in: StandIn) -> None:
    argv, status = launched(stand_in.config())
    assert not any(a == "-md" or a.startswith("--spec") for a in argv)
    assert status["draft_model"] is None and status["speculative"] is None


def test_an_incompatible_draft_is_refused_with_every_reason_before_spawning(
    stand_in: StandIn, tmp_path: Path
) -> None:
    target = write_gguf(tmp_path / "target.gguf", params=4000)
    draft = write_gguf(tmp_path / "draft.gguf", params=1000, vocab_type="llama", bos=0)
    server = ManagedLlamaServer(stand_in.config(model=str(target), draft_model=str(draft)))
    with pytest.raises(LocalServerError) as caught:
        asyncio.run(server.start())
    message = str(caught.value)
    assert message.startswith(
        f"local: launch.draft_model {draft.resolve()} cannot draft for "
        f"launch.model {target.resolve()}: vocabulary type differs: 'gpt2' vs 'llama'; "
        "BOS token id differs: 1 vs 0"
    )
    assert "specproxy check-pair" in message
    assert stand_in.pids() == [] and server.status()["state"] == "failed"


def test_a_missing_draft_model_names_its_key(stand_in: StandIn, tmp_path: Path) -> None:
    target = write_gguf(tmp_path / "target.gguf")
    config = stand_in.config(model=str(target), draft_model=str(tmp_path / "nope.gguf"))
    with pytest.raises(LocalServerError, match=r"^launch\.draft_model .*nope\.gguf.*no such file"):
        asyncio.run(ManagedLlamaServer(config).start())
    assert stand_in.pids() == []


@pytest.mark.parametrize(
    ("arg", "key"),
    [
        ("-md", "draft_model"),
        ("--model-draft", "draft_model"),
        ("--spec-draft-model", "draft_model"),
        ("--spec-type", "spec_type"),
        ("--spec-draft-n-max", "spec_n_max"),
        ("--draft-max", "spec_n_max"),
        ("--spec-draft-n-min", "spec_n_min"),
        ("--spec-draft-p-min=0.5", "spec_p_min"),
        ("--draft-p-min", "spec_p_min"),
    ],
)
def test_args_may_not_repeat_what_the_draft_keys_set(arg: str, key: str) -> None:
    with pytest.raises(ValidationError, match=f"args has {arg} .*use launch\\.{key} instead"):
        LaunchConfig(draft_model="auto", args=[arg, "4"])
    LaunchConfig(args=[arg, "4"])  # without draft_model, args are the user's own business


def test_draft_tuning_flags_without_a_key_stay_allowed() -> None:
    launch = LaunchConfig(draft_model="auto", args=["-ngld", "99", "--spec-draft-threads", "2"])
    assert launch.args[-1] == "2"


def test_spec_n_min_over_n_max_is_refused_in_the_config_file() -> None:
    tree = {
        "models": {
            "local": {
                "provider": "llama_server",
                "model": "l",
                "launch": {"draft_model": "auto", "spec_n_max": 2, "spec_n_min": 3},
            },
            "cerebras": {"provider": "cerebras", "base_url": "https://c.example", "model": "m"},
        }
    }
    with pytest.raises(ConfigError, match=r"models\.local\.launch: .*spec_n_min 3 is over"):
        settings_from_mapping(tree, env={})
    tree["models"]["local"]["launch"] = {"draft_model": "auto", "args": ["--spec-type", "x"]}
    with pytest.raises(ConfigError, match=r"models\.local\.launch: .*use launch\.spec_type"):
        settings_from_mapping(tree, env={})
    tree["models"]["local"]["launch"] = {"spec_p_min": 0.5}  # no draft model: nothing to pin
    with pytest.raises(ConfigError, match=r"models\.local\.launch: .*need a draft_model"):
        settings_from_mapping(tree, env={})
