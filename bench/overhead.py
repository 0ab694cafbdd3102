"""What the proxy adds over a raw upstream: latency, throughput, CPU and memory.

    cd /work/main && .venv/bin/python -m bench.overhead            # full run, ~10 minutes
    .venv/bin/python -m bench.overhead --quick --litellm off       # ~40 s

One upstream written here (raw asyncio HTTP/1.1, keep-alive) answers chat
completions at once with the same body for every arm: a 12-token answer with
logprobs that specproxy accepts as a draft (a marker in the prompt picks the
delay and hold behaviours, ``"stream": true`` the SSE answer). Each arm is its
own process, pinned to the arm core; the upstream and this load generator
share the other (``--cores``):

- ``direct``: the load goes to the upstream itself (the baseline),
- ``forwarder``: a raw asyncio byte pipe (the physical limit of a Python proxy),
- ``stack_floor``: uvicorn + one aiohttp call passing bytes through: the least
  any proxy built on specproxy's stack can cost,
- ``local_only`` / ``speculative``: specproxy (``main.py``) with a generated
  config; the latter serves the draft accepted without verification (checked
  on its first answer: ``X-Draft-Accepted: true``, else the bench stops),
- ``local_only_lean`` / ``local_only_standard`` (by name only): ``local_only`` on one
  HTTP edge (``server.edge``); ``lean_without_<part>`` (by name only): on the lean edge
  less one hand-built part (``app.edge.Edge``'s fields), served by
  ``bench/overhead_parts/edge_parts.py``: what each part is worth,
- ``messages`` (by name only): ``local_only`` asked through Anthropic's Messages door
  (``POST /v1/messages``): what the translation both ways costs over chat,
- ``litellm``: LiteLLM's proxy, one worker, master key, no database, from
  ``.bench-venvs/litellm`` (created on first use; ``--litellm off`` skips it,
  ``--litellm PATH`` uses that venv; a failure skips the arm, with the reason).

Every request names model ``bench``: no model of specproxy's config, so its
configured strategy decides; LiteLLM serves it under that name. Both proxies
may hold 1,100 upstream connections (1,000 open streams are not queued).

The load is closed-loop: one keep-alive connection per client, the next
request sent as the answer ends. Cells (``--warmup`` unmeasured, then
``--seconds`` measured; both stretch for a slow arm until each client has had
two answers, and until the window holds one answer per client) are
interleaved: for each round, for each variant and concurrency, every arm in
turn; samples are pooled over rounds. Variants: ``json`` (instant, every
``--concurrency``), ``sse`` (a 64-event stream), ``delay`` (``--delay-ms``).
Per cell: p50/p99 latency and their excess over ``direct``, req/s, the arm's
CPU per request (utime+stime from /proc; ``direct``: the upstream's own), its
CPU use and the load core's (an arm far below 100% while the load core is at
100% was held back by the load side), CPU the cores spent on anything else
(other processes: the machine may be shared), and errors by kind. Memory: the
arm's RSS idle and with ``--streams`` open streams (each with its first event
in), then all released and checked to end cleanly. Then the issue's targets,
PASS or FAIL. Everything also goes to ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.overhead_parts import arms as arms_mod
from bench.overhead_parts import loadgen, procs, report, targets
from bench.overhead_parts import machine as machine_mod
from bench.overhead_parts.arms import (
    ALL_ARMS,
    EDGE_ARMS,
    OPTIONAL_ARMS,
    REPO,
    Arm,
    Layout,
)
from bench.overhead_parts.loadgen import CellResult, Holder, Target
from bench.overhead_parts.procs import BenchError, Child

MESSAGES_MAX_TOKENS = 256  # the messages arm's budget (the answer is 12 tokens)
MARKERS = {"json": "", "sse": "", "delay": "[bench:delay]", "hold": "[bench:hold]"}
MEMORY_ARMS = ("forwarder", "stack_floor", "local_only", "local_only_granian", *EDGE_ARMS[:2])
MEMORY_ARMS += ("litellm",)
NO_HOLD = "its stream is replayed from a whole (non-streamed) draft: nothing stays open upstream"
HOLD_TIMEOUT_S = 60.0  # to open them all, and again to finish them, plus per stream:
HOLD_S_PER_STREAM = 0.1


@dataclass(frozen=True)
class Defaults:
    concurrency: str
    sse_concurrency: str
    delay_concurrency: str
    rounds: int
    seconds: float
    warmup: float
    streams: int


FULL = Defaults("1,16,64,256", "1,64", "64", 3, 2.0, 1.0, 1000)
QUICK = Defaults("1,64", "1,64", "64", 1, 1.0, 0.3, 100)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arms", default=",".join(ALL_ARMS), help="comma-separated, in this order")
    p.add_argument("--concurrency", help=f"JSON variant levels (default {FULL.concurrency})")
    p.add_argument("--sse-concurrency", help=f"SSE levels (default {FULL.sse_concurrency})")
    p.add_argument("--delay-concurrency", help=f"delay levels (default {FULL.delay_concurrency})")
    p.add_argument("--rounds", type=int, help=f"default {FULL.rounds}")
    p.add_argument("--seconds", type=float, help=f"measured seconds per cell ({FULL.seconds:g})")
    p.add_argument("--warmup", type=float, help=f"unmeasured seconds per cell ({FULL.warmup:g})")
    p.add_argument("--streams", type=int, help=f"open streams in the memory test ({FULL.streams})")
    p.add_argument("--delay-ms", type=float, default=20.0, help="the delay variant's wait")
    p.add_argument(
        "--upstream-logprobs",
        choices=("always", "asked"),
        default="always",
        help="the upstream's JSON answers carry logprobs always (the default, as every run "
        "so far) or, as llama-server does, only when the request asks (the speculative arm)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        help="a tree of an earlier commit (git archive REV | tar -x -C DIR): the "
        "local_only_baseline arm runs its main.py, for an interleaved A/B",
    )
    p.add_argument("--quick", action="store_true", help="1 round, 1 s cells, c=1,64, 100 streams")
    p.add_argument("--litellm", default="auto", help="auto (default), off, or a venv path")
    p.add_argument("--cores", default="auto", help="LOAD:ARM cores, 'none', or auto (0:1)")
    p.add_argument("--drain", type=float, default=30.0, help="seconds for in-flight to finish")
    p.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "overhead.json")
    args = p.parse_args(argv)
    base = QUICK if args.quick else FULL
    for key, value in vars(base).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("concurrency", "sse_concurrency", "delay_concurrency"):
        setattr(args, key, [int(x) for x in getattr(args, key).split(",") if x.strip()])
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := set(args.arms) - set(ALL_ARMS) - set(OPTIONAL_ARMS):
        known = ", ".join(ALL_ARMS + OPTIONAL_ARMS)
        p.error(f"unknown arms {sorted(unknown)}; choose from {known}")
    if args.litellm == "off" and "litellm" in args.arms:
        args.arms.remove("litellm")
    return args


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Bench:
    """The processes of one run and the measurements made against them."""

    def __init__(self, args: argparse.Namespace, layout: Layout, runner: asyncio.Runner) -> None:
        self.args = args
        self.layout = layout
        self.runner = runner
        self.children: list[Child] = []
        self.arms: dict[str, Arm] = {}
        self.skipped: dict[str, str] = {}
        self.upstream: Arm | None = None

    # -- processes -------------------------------------------------------------

    def start(self) -> None:
        self.upstream = arms_mod.start_upstream(self.layout)
        self.children.append(self.upstream.child)
        for name in self.args.arms:
            try:
                arm = self.start_arm(name)
                arms_mod.check_answer(arm, self.target(arm, "json").body)
            except Exception as exc:  # LiteLLM, whatever went wrong, is skipped, not fatal
                if name != "litellm":
                    raise
                self.skipped[name] = (str(exc) or type(exc).__name__).splitlines()[0]
                progress(f"litellm: not run: {exc}")
                if name in self.arms:
                    self.arms.pop(name).child.stop()
                continue
            version = f" {arm.version}" if arm.version else ""
            progress(f"{name}{version}: pid {arm.child.pid}, port {arm.port}, answers")

    def start_arm(self, name: str) -> Arm:
        assert self.upstream is not None
        up = self.upstream.port
        if name == "direct":
            arm = self.upstream
        elif name in ("forwarder", "stack_floor"):
            arm = arms_mod.start_script(self.layout, name, up)
        elif name == "litellm":
            arm = arms_mod.start_litellm(self.layout, self.args.litellm, up)
        else:
            arm = arms_mod.start_specproxy(self.layout, name, up)
        if arm.child not in self.children:
            self.children.append(arm.child)
        self.arms[name] = arm
        return arm

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()

    # -- load ------------------------------------------------------------------

    def target(self, arm: Arm, variant: str) -> Target:
        stream = variant in ("sse", "hold")
        path, extra = arms_mod.path_of(arm.name), None
        if arm.name == "messages":  # Anthropic's door: max_tokens is required there
            extra = {"max_tokens": MESSAGES_MAX_TOKENS}
        request = loadgen.build_request(
            arm.port,
            path,
            stream=stream,
            marker=MARKERS[variant],
            auth=arm.auth,
            extra=extra,
        )
        return Target(arm.port, request)

    def cell(self, arm: Arm, variant: str, clients: int, seconds: float) -> CellResult:
        assert self.upstream is not None
        arm_pids, up_pids = arm.child.pids(), self.upstream.child.pids()

        load_core, arm_core = self.layout.load_core, self.layout.arm_core
        cores = [c for c in (load_core, arm_core) if c is not None]

        def probe() -> dict[str, float]:
            busy = procs.core_busy_seconds(cores)
            sample = {"arm": procs.cpu_seconds(arm_pids), "upstream": procs.cpu_seconds(up_pids)}
            if load_core is not None and arm_core is not None:
                sample |= {"load_core": busy[load_core], "arm_core": busy[arm_core]}
            return sample

        run = loadgen.run_cell(
            self.target(arm, variant), clients, self.args.warmup, seconds, probe, self.args.drain
        )
        return self.runner.run(run)

    def warm_up(self) -> None:
        for arm in self.arms.values():
            for variant in ("json", "sse"):
                result = self.cell(arm, variant, 16, self.args.warmup)
                if result.errors:
                    progress(f"warm-up {arm.name} {variant}: errors {dict(result.errors)}")

    def rounds(self) -> list[dict[str, Any]]:
        a = self.args
        plan = [("json", c) for c in a.concurrency] + [("sse", c) for c in a.sse_concurrency]
        plan += [("delay", c) for c in a.delay_concurrency]
        pools: dict[tuple[str, str, int], report.Pool] = {}
        names = list(self.arms)
        for r in range(a.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
            for variant, clients in plan:
                for name in order:
                    result = self.cell(self.arms[name], variant, clients, a.seconds)
                    key = (name, variant, clients)
                    pools.setdefault(key, report.Pool(*key)).cells.append(result)
                    progress(report.cell_line(r, key, result))
        rows = [pools[k].summary() for k in sorted(pools, key=plan_order(plan, names))]
        report.add_overheads(rows)
        return rows

    # -- memory ----------------------------------------------------------------

    def memory(self) -> list[dict[str, Any]]:
        rows = []
        for name in MEMORY_ARMS:
            if name in self.arms:
                rows.append(self.runner.run(self.hold_streams(self.arms[name])))
                m = rows[-1]
                progress(
                    f"memory {name}: {m['opened']}/{m['streams']} open "
                    f"in {m['seconds_to_open']} s, "
                    f"{report.fmt(m['kb_per_stream'], 1)} KB/stream, {m['completed']} finished, "
                    f"errors {m['error_kinds'] or 0}"
                )
            elif name in self.skipped:
                rows.append({"arm": name, "not_run": self.skipped[name]})
        if "speculative" in self.arms:
            rows.append({"arm": "speculative", "not_run": NO_HOLD})
        return rows

    async def hold_streams(self, arm: Arm) -> dict[str, Any]:
        assert self.upstream is not None
        n = self.args.streams
        idle = procs.rss_kb(arm.child.pids())
        holder = Holder(n)
        await asyncio.to_thread(procs.http_call, self.upstream.port, "POST", "/hold")
        started = time.perf_counter()
        await holder.open(self.target(arm, "hold"), HOLD_TIMEOUT_S + n * HOLD_S_PER_STREAM)
        open_s, opened = time.perf_counter() - started, holder.opened
        open_kb = procs.rss_kb(arm.child.pids())
        status, _, released = await asyncio.to_thread(
            procs.http_call, self.upstream.port, "POST", "/release"
        )
        await holder.finish(HOLD_TIMEOUT_S + n * HOLD_S_PER_STREAM)
        return {
            "arm": arm.name,
            "streams": n,
            "opened": opened,  # when the RSS was read
            "released_by_upstream": json.loads(released)["released"] if status == 200 else None,
            "seconds_to_open": round(open_s, 3),
            "rss_idle_kb": idle,
            "rss_open_kb": open_kb,
            "kb_per_stream": (open_kb - idle) / opened if opened else None,
            "completed": holder.completed,
            "errors": sum(holder.errors.values()),
            "error_kinds": dict(holder.errors),
        }


def plan_order(plan: list[tuple[str, int]], names: list[str]) -> Any:
    def key(k: tuple[str, str, int]) -> tuple[int, int]:
        return plan.index((k[1], k[2])), names.index(k[0])

    return key


def print_header(args: argparse.Namespace, machine: dict[str, Any]) -> str:
    command = shlex.join(
        [os.path.relpath(sys.executable, REPO), "-m", "bench.overhead", *sys.argv[1:]]
    )
    print(f"$ {command}\n")
    for key, value in machine.items():
        print(f"- {key}: {value}")
    a = args
    print(
        f"- cells: {a.rounds} round(s) x {a.seconds:g} s measured after {a.warmup:g} s warm-up; "
        f"json c={a.concurrency}, sse c={a.sse_concurrency}, delay {a.delay_ms:g} ms "
        f"c={a.delay_concurrency}; memory {a.streams} streams; "
        f"upstream logprobs {a.upstream_logprobs}",
        flush=True,
    )
    return command


def run(args: argparse.Namespace, layout: Layout, machine: dict[str, Any]) -> dict[str, Any]:
    with asyncio.Runner(loop_factory=machine_mod.new_loop) as runner:
        bench = Bench(args, layout, runner)
        try:
            bench.start()
            bench.warm_up()
            memory = bench.memory() if args.streams > 0 else []
            rows = bench.rounds()
            for m in memory:
                if m["arm"] in bench.arms:
                    m["rss_end_kb"] = procs.rss_kb(bench.arms[m["arm"]].child.pids())
        finally:
            bench.stop()
    if "litellm" in bench.arms:
        machine["litellm"] = bench.arms["litellm"].version
    return {
        "arms": {name: arms_mod.describe(arm) for name, arm in bench.arms.items()}
        | {name: f"not run: {why}" for name, why in bench.skipped.items()},
        "results": rows,
        "memory": memory,
        "targets": targets.judge(rows, memory),
        "skipped": bench.skipped,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine_mod.raise_fd_limit(4 * args.streams + 1024)
    cores = machine_mod.resolve_cores(args.cores)
    if cores[0] is not None:
        os.sched_setaffinity(0, {cores[0]})
    machine = machine_mod.machine_facts(cores)
    command = print_header(args, machine)
    logdir = Path(tempfile.mkdtemp(prefix="specproxy-overhead-"))
    layout = Layout(
        logdir, cores[0], cores[1], args.delay_ms, args.upstream_logprobs, args.baseline
    )
    machine_mod.interruptible()
    try:
        result = run(args, layout, machine)
    except BenchError as exc:
        print(f"\nbench failed: {exc}\n(child logs kept in {logdir})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\ninterrupted; every child stopped (logs in {logdir})", file=sys.stderr)
        return 130
    shutil.rmtree(logdir, ignore_errors=True)
    result = {"command": command, "machine": machine, "settings": vars(args), **result}
    report.print_report(result, result.pop("skipped"))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report.finite(result), indent=1, allow_nan=False) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
