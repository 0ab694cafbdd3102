"""The arms: what the load generator talks to, each its own process on the arm core.

``direct`` is the upstream itself; ``forwarder`` a raw byte pipe; ``stack_floor``
uvicorn + aiohttp passing bytes through (specproxy's stack, bare); ``local_only``
and ``speculative`` specproxy (``main.py``) with a generated config; ``litellm``
LiteLLM's proxy from its own venv, created on request.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.overhead_parts.loadgen import MODEL
from bench.overhead_parts.procs import (
    BenchError,
    Child,
    free_port,
    http_call,
    http_ok,
    port_open,
    start,
    wait_until,
)

PARTS = Path(__file__).resolve().parent
REPO = PARTS.parents[1]
ALL_ARMS = ("direct", "forwarder", "stack_floor", "local_only", "speculative", "litellm")
# Asked for by name only. ``local_only_granian`` needs `pip install granian` (issue 20: kept
# only if it measures better); the edge arms (issue 30) are local_only on one whole edge
# (``server.edge``), or on the lean edge less one part (``app.edge.Edge``'s fields).
EDGE_PARTS = ("chat_lane", "event_stream", "protocol", "settled_heap")
EDGE_ARMS = (
    "local_only_lean",
    "local_only_standard",
    "lean_via_parts",  # the control of the lean_without_ arms: the same start, all parts
    *(f"lean_without_{part}" for part in EDGE_PARTS),
)
# ``local_only_baseline``: local_only from another tree (``--baseline``), for an A/B.
OPTIONAL_ARMS = ("local_only_granian", "local_only_baseline", *EDGE_ARMS, "responses", "messages")
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"  # the ``responses`` arm: local_only through that door
MESSAGES_PATH = "/v1/messages"  # the ``messages`` arm: local_only behind Anthropic's door
DOOR_PATHS = {"responses": RESPONSES_PATH, "messages": MESSAGES_PATH}


def path_of(name: str) -> str:
    """The path an arm is sent its requests on."""
    return DOOR_PATHS.get(name, CHAT_PATH)


START_TIMEOUT_S = 30.0
LITELLM_START_TIMEOUT_S = 120.0
LITELLM_INSTALL_TIMEOUT_S = 1500.0


@dataclass
class Layout:
    """Where children run and log; the cores they are pinned to (None: not pinned)."""

    logdir: Path
    load_core: int | None
    arm_core: int | None
    delay_ms: float
    logprobs: str = "always"  # the upstream's JSON answers: logprobs "always", or when "asked"
    baseline: Path | None = None  # the tree local_only_baseline runs main.py from


@dataclass
class Arm:
    """A running arm: the port the load goes to, and the process whose CPU/RSS are its cost."""

    name: str
    port: int
    child: Child
    auth: str | None = None
    version: str | None = None


def start_upstream(layout: Layout) -> Arm:
    port = free_port()
    argv = [sys.executable, str(PARTS / "upstream.py"), "--port", str(port)]
    child = start(
        "upstream",
        [*argv, "--delay-ms", str(layout.delay_ms), "--logprobs", layout.logprobs],
        core=layout.load_core,
        logdir=layout.logdir,
    )
    wait_until(child, port_open(port), START_TIMEOUT_S, "listening port")
    return Arm("direct", port, child)


def start_script(layout: Layout, name: str, upstream_port: int) -> Arm:
    """``forwarder`` or ``stack_floor``: a standalone script in overhead_parts/."""
    port = free_port()
    argv = [sys.executable, str(PARTS / f"{name}.py"), "--port", str(port)]
    child = start(
        name,
        [*argv, "--upstream-port", str(upstream_port)],
        core=layout.arm_core,
        logdir=layout.logdir,
    )
    wait_until(child, port_open(port), START_TIMEOUT_S, "listening port")
    return Arm(name, port, child)


def specproxy_config(
    upstream_port: int, strategy: str, edge: str | None = None
) -> dict[str, object]:
    """specproxy's config (keys as in app/config.py): both models on the bench's upstream;
    ``edge``: its ``server.edge`` (None: the default)."""
    up = f"http://127.0.0.1:{upstream_port}"
    return {
        "server": {"host": "127.0.0.1"} | ({"edge": edge} if edge else {}),
        "routing": {"strategy": strategy},
        "models": {
            "local": {
                "provider": "llama_server",
                "model": "local",
                "base_url": up,
                "max_connections": 1100,  # 1,000 open streams are not queued by the pool
            },
            "cerebras": {
                "provider": "cerebras",
                "base_url": f"{up}/v1",
                "api_key": "${BENCH_CEREBRAS_KEY}",
                "model": "m",
            },
        },
        "speculative_decoding": {
            "enabled": True,
            "draft_model": "local",
            "verify_model": "cerebras",
            "max_draft_tokens": 64,
            # The flow every earlier run measured (the schema's defaults until they became the
            # shipped file's): one whole draft judged by the seed's rules, nothing alongside.
            "policy": "seed",
            "early_abort": False,
            "hedge": "off",
            "stream_first_token_s": None,
        },
        "logging": {"level": "WARNING"},
    }


def start_specproxy(layout: Layout, name: str, upstream_port: int) -> Arm:
    strategy = "speculative_decoding" if name == "speculative" else "local_only"
    edge = name.removeprefix("local_only_") if name in EDGE_ARMS[:2] else None
    config = layout.logdir / f"{name}.yaml"
    tree = specproxy_config(upstream_port, strategy, edge)
    config.write_text(yaml.safe_dump(tree, sort_keys=False))
    port = free_port()
    argv = [sys.executable, "main.py", "--config", str(config), "--port", str(port)]
    argv += ["--log-level", "WARNING"]
    cwd = REPO
    if name == "local_only_baseline":
        if layout.baseline is None:
            raise BenchError("local_only_baseline: give --baseline DIR (a tree with main.py)")
        cwd = layout.baseline  # its main.py imports its own app/ (the script's directory)
    if name.startswith(("lean_without_", "lean_via_parts")):
        argv = [sys.executable, "-m", "bench.overhead_parts.edge_parts", "--config", str(config)]
        argv += ["--port", str(port)]
        if name.startswith("lean_without_"):
            argv += ["--without", name.removeprefix("lean_without_")]
    env = {**os.environ, "BENCH_CEREBRAS_KEY": "csk-bench-not-a-real-key"}
    if name == "local_only_granian":
        granian = Path(sys.executable).with_name("granian")
        if not granian.exists():
            raise BenchError("local_only_granian: granian is not installed (pip install granian)")
        argv = [str(granian), "--interface", "asgi", "--factory", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--workers", "1", "--loop", "uvloop"]
        argv += ["--log-level", "warning", "bench.overhead_parts.granian_app:app"]
        env["SPECPROXY_BENCH_CONFIG"] = str(config)
    child = start(
        name,
        argv,
        core=layout.arm_core,
        logdir=layout.logdir,
        env=env,
        cwd=cwd,
    )
    wait_until(child, http_ok(port, "/health"), START_TIMEOUT_S, "200 from /health")
    return Arm(name, port, child)


# -- LiteLLM -----------------------------------------------------------------------


def litellm_venv(spec: str, logdir: Path) -> Path:
    """The venv holding LiteLLM: ``auto`` creates <repo>/.bench-venvs/litellm if needed."""
    venv = REPO / ".bench-venvs" / "litellm" if spec == "auto" else Path(spec).resolve()
    if (venv / "bin" / "litellm").exists():
        return venv
    if spec != "auto":
        raise BenchError(f"{venv}/bin/litellm does not exist")
    print(f"installing litellm[proxy] into {venv} (once; a few minutes) ...", flush=True)
    log = logdir / "litellm-install.log"
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "litellm[proxy]"],
    ]
    with log.open("wb") as out:
        for step in steps:
            try:
                done = subprocess.run(
                    step, stdout=out, stderr=subprocess.STDOUT, timeout=LITELLM_INSTALL_TIMEOUT_S
                )
            except subprocess.TimeoutExpired as exc:
                raise BenchError(f"'{' '.join(step[:3])} ...' timed out") from exc
            if done.returncode != 0:
                tail = log.read_text(errors="replace").splitlines()[-5:]
                raise BenchError(f"'{' '.join(step[:3])} ...' failed: {' | '.join(tail)}")
    return venv


def litellm_version(venv: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('litellm'))"
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=60
    )
    return out.stdout.strip() or "unknown"


def start_litellm(layout: Layout, spec: str, upstream_port: int) -> Arm:
    venv = litellm_venv(spec, layout.logdir)
    version = litellm_version(venv)
    key = f"sk-bench-{secrets.token_hex(8)}"
    config = {
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": "openai/local",
                    "api_base": f"http://127.0.0.1:{upstream_port}/v1",
                    "api_key": "none",
                },
            }
        ],
        "litellm_settings": {"telemetry": False, "set_verbose": False},
        "general_settings": {"master_key": key},
    }
    path = layout.logdir / "litellm.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL")
    }
    env |= {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "NO_DOCS": "True",
        # Like specproxy's max_connections: 1,000 open streams are not queued by the pool.
        "AIOHTTP_CONNECTOR_LIMIT": "1100",
        "AIOHTTP_CONNECTOR_LIMIT_PER_HOST": "1100",
    }
    argv = [str(venv / "bin" / "litellm"), "--config", str(path), "--host", "127.0.0.1"]
    child = start(
        "litellm",
        [*argv, "--port", str(port), "--num_workers", "1"],
        core=layout.arm_core,
        logdir=layout.logdir,
        env=env,
    )
    ready = http_ok(port, "/health/readiness")
    wait_until(child, ready, LITELLM_START_TIMEOUT_S, "200 from /health/readiness")
    return Arm("litellm", port, child, auth=key, version=version)


# -- checks ------------------------------------------------------------------------


def check_answer(arm: Arm, body: bytes) -> dict[str, str]:
    """One request through the arm before any load; the speculative arm must accept its draft."""
    headers = {"Content-Type": "application/json"}
    if arm.auth:
        headers["Authorization"] = f"Bearer {arm.auth}"
    path = path_of(arm.name)
    answered = {RESPONSES_PATH: b'"output"', MESSAGES_PATH: b'"content"'}.get(path, b'"choices"')
    status, got, data = http_call(arm.port, "POST", path, body, headers, timeout=30.0)
    if status != 200 or answered not in data:
        raise BenchError(f"{arm.name}: answered {status}: {data[:300]!r}\n{arm.child.tail()}")
    if arm.name == "speculative":
        accepted, used = got.get("x-draft-accepted"), got.get("x-model-used")
        if accepted != "true" or used != "local":
            raise BenchError(
                f"speculative: the draft was not accepted without verification "
                f"(X-Draft-Accepted: {accepted}, X-Model-Used: {used}); the upstream's answer "
                f"no longer passes the proxy's checks: {data[:400]!r}"
            )
    return got


def describe(arm: Arm) -> str:
    what = {
        "direct": "the upstream itself",
        "forwarder": "raw asyncio byte forwarder",
        "stack_floor": "uvicorn + one aiohttp call, nothing else (specproxy's stack, bare)",
        "local_only": "specproxy, routing.strategy local_only",
        "local_only_granian": "specproxy under Granian (uvloop, 1 worker), local_only",
        "local_only_baseline": "specproxy from --baseline's tree, local_only",
        "local_only_lean": "specproxy, local_only, server.edge lean",
        "responses": "specproxy, local_only, through POST /v1/responses",
        "local_only_standard": "specproxy, local_only, server.edge standard",
        "lean_via_parts": "specproxy, local_only, lean edge, started as the lean_without_ arms",
        **{
            f"lean_without_{part}": f"specproxy, local_only, lean edge less {part}"
            for part in EDGE_PARTS
        },
        "speculative": "specproxy, routing.strategy speculative_decoding (draft accepted)",
        "messages": "specproxy, local_only, asked through POST /v1/messages (Anthropic)",
        "litellm": f"LiteLLM {arm.version} proxy, 1 worker, master key, no database",
    }[arm.name]
    return f"{what} (port {arm.port})"
