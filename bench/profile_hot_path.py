"""Where a proxied request's CPU goes: py-spy on specproxy under the overhead bench's load.

    .venv/bin/python -m bench.profile_hot_path                      # this checkout
    .venv/bin/python -m bench.profile_hot_path --repo /tmp/before --name before

``--repo`` runs another checkout's ``main.py`` (e.g. ``git worktree add
/tmp/before 951754c``, the proxy as it was before the hot path was tuned) with
this venv. The proxy (``local_only``, pinned to the arm core) answers the
bench's instant upstream; the bench's closed-loop load drives it at
``--concurrency`` while ``py-spy record --gil`` samples it (Python at work only). The
summary printed is each frame's share of the samples, inclusive and self;
it is also written to ``docs/profiles/<name>.md``, and the collapsed stacks to
``docs/profiles/<name>.stacks.gz`` (gunzip; speedscope.app or flamegraph.pl
read them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench.overhead_parts import arms, loadgen, procs
from bench.overhead_parts.arms import CHAT_PATH, REPO, Layout

PROFILES = REPO / "docs" / "profiles"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose main.py runs")
    parser.add_argument("--name", default="after", help="docs/profiles/<name>.{md,stacks.gz}")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--stream", action="store_true", help="the 64-event SSE answer")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy not found: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    PROFILES.mkdir(parents=True, exist_ok=True)
    pinned = procs.can_pin()
    with tempfile.TemporaryDirectory(prefix="specproxy-profile-") as tmp:
        out = Path(tmp) / "stacks.txt"
        layout = Layout(Path(tmp), 0 if pinned else None, 1 if pinned else None, 0.0)
        upstream = arms.start_upstream(layout)
        proxy = None
        try:
            proxy, port = start_proxy(layout, args.repo.resolve(), upstream.port)
            target = loadgen.Target(
                port,
                loadgen.build_request(port, CHAT_PATH, stream=args.stream, marker="", auth=None),
            )
            load_line = asyncio.run(profile(target, proxy.pid, spy, out, args))
        finally:
            for child in (proxy, upstream.child):
                if child is not None:
                    child.stop()
        stacks = PROFILES / f"{args.name}.stacks.gz"
        stacks.write_bytes(gzip.compress(out.read_bytes()))
        report = (
            f"repo {args.repo.resolve().name} at {git_head(args.repo)}, local_only"
            f"{' (SSE)' if args.stream else ''}, "
            f"c={args.concurrency}, {args.seconds:g} s, pinned={pinned}, "
            f"{load_line}\n\n{summary(out, args.top)}\n"
        )
    (PROFILES / f"{args.name}.md").write_text(report)
    print(report)
    print(f"written: docs/profiles/{args.name}.md, {stacks.relative_to(REPO)}")
    return 0


def start_proxy(layout: Layout, repo: Path, upstream_port: int) -> tuple[procs.Child, int]:
    config = layout.logdir / "local_only.yaml"
    config.write_text(yaml.safe_dump(arms.specproxy_config(upstream_port, "local_only")))
    port = procs.free_port()
    child = procs.start(
        "proxy",
        [sys.executable, "main.py", "--config", str(config), "--port", str(port)],
        core=layout.arm_core,
        logdir=layout.logdir,
        env={**os.environ, "BENCH_CEREBRAS_KEY": "csk-profile-not-a-real-key"},
        cwd=repo,
    )
    procs.wait_until(child, procs.http_ok(port, "/health"), 30.0, "200 from /health")
    return child, port


async def profile(
    target: loadgen.Target, pid: int, spy: str, out: Path, args: argparse.Namespace
) -> str:
    """Load for warm-up + the sampled window; py-spy records the window only."""
    load = asyncio.create_task(
        loadgen.run_cell(target, args.concurrency, 2.0, args.seconds + 2, lambda: {}, 10.0)
    )
    await asyncio.sleep(3.0)  # warm-up, and the window under way
    record = [
        spy,
        "record",
        "--gil",
        "-p",
        str(pid),
        "-d",
        str(int(args.seconds)),
        "-r",
        str(args.rate),
    ]
    proc = await asyncio.create_subprocess_exec(
        *record, "-f", "raw", "-o", str(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, err = await proc.communicate()
    result = await load
    if proc.returncode != 0:
        raise procs.BenchError(f"py-spy failed: {err.decode(errors='replace')}")
    return f"load {result.requests / result.seconds:.0f} req/s, errors {dict(result.errors)}"


def frame_name(frame: str) -> str:
    """``chat (app/pipeline.py:120)`` -> ``chat (pipeline.py)``."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else name


def summary(stacks: Path, top: int) -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [frame_name(f) for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    lines = [f"{total} samples", "", "| inclusive | frame |", "|---:|---|"]
    lines += [f"| {100 * n / total:.1f}% | `{f}` |" for f, n in inclusive.most_common(top)]
    lines += ["", "| self | frame |", "|---:|---|"]
    lines += [f"| {100 * n / total:.1f}% | `{f}` |" for f, n in own.most_common(top // 2)]
    return "\n".join(lines)


def git_head(repo: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
