"""A long soak of the proxy under mixed traffic, with faults: is it flat? (not in CI)

    nice -n 10 .venv/bin/python bench/soak.py                # 30 minutes
    nice -n 10 .venv/bin/python bench/soak.py --minutes 2    # a short run while developing

Starts a real redis-server (``state.backend: redis``), the stand-ins (tests/fakes,
answering by prompt, in a process of their own: ``bench/soak_parts/standins.py``) and
``python main.py`` on free loopback ports, then sends the mix of ``soak_parts/scenarios.py``
(streams and not, tool calls, a draft stream that breaks, a cloud that fails, a client that
hangs up mid-stream, a cloud stream that breaks) from one paced closed loop per kind
(``soak_parts/traffic.py``, on the overhead bench's load generator). Meanwhile: SIGHUP every
``--sighup-every`` s (the config file's local timeout toggled, so each reload builds a new
runtime), and redis-server killed halfway and started again ``--redis-down-s`` later.
Every 10 s: the proxy's RSS and open fds (/proc), asyncio tasks and counters (/stats).
At the end, the load stops and the proxy settles; ``soak_parts/analysis.py`` says whether it
is flat. Writes ``samples.json``, ``soak.png`` and the processes' logs to ``--out``.
Exit status 0 when flat and the only failed answers are the injected ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.overhead_parts.procs import Child, free_port, http_ok, start, wait_until  # noqa: E402
from bench.soak_parts import probe  # noqa: E402
from bench.soak_parts.analysis import Sample, analyze  # noqa: E402
from bench.soak_parts.plot import plot  # noqa: E402
from bench.soak_parts.scenarios import mix  # noqa: E402
from bench.soak_parts.traffic import Traffic  # noqa: E402
from tests.support.proxy import CLOUD_KEY, proxy_config  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

NICE = 10
# The 5-minute window of /stats (per-second buckets) fills up first: RSS is compared from then.
WARMUP_MINUTES = 5.0
SAMPLE_EVERY_S = 10.0
PRIME_S = 10.0  # of load before the idle baseline (lazy start-up work done)
SETTLE_S = 60.0
STORE_MAX_BYTES = 2_000_000
NEVER_OPEN = {"failures": 1_000_000, "cooldown_s": 60}  # the mix stays the same throughout


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument(
        "--warmup-minutes", type=float, help="RSS compared from here (default: 5, or a sixth)"
    )
    parser.add_argument("--clients", type=int, default=1, help="connections per kind")
    parser.add_argument("--pause", type=float, default=0.2, help="s between a client's requests")
    parser.add_argument("--sighup-every", type=float, default=60.0)
    parser.add_argument("--redis-down-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/specproxy-soak"))
    parser.add_argument(
        "--only", help="send only the kinds whose name contains this (e.g. 'cut')", default=""
    )
    parser.add_argument(
        "--shipped-features",
        action="store_true",
        help="learning (with its audits and gate) and the answer cache on, as shipped",
    )
    return parser.parse_args(argv)


def config(
    local: str, cloud: str, redis_url_var: str, out: Path, reload: int, *, shipped: bool = False
) -> dict[str, Any]:
    """The stand-ins' proxy config in the shipped flow, sharing state through Redis;
    ``shipped``: learning and the cache on too."""
    features: dict[str, Any] = {}
    if shipped:
        features = {
            "learning": {"enabled": True, "state_dir": str(out / "learning")},
            "cache": {"enabled": True},
        }
    tree = proxy_config(
        local,
        cloud,
        models={
            "local": {
                "embeddings": True,
                "circuit_breaker": NEVER_OPEN,
                "timeout": {"connect": 1, "read": 5, "total": 10 + reload % 2},
            },
            "cerebras": {"circuit_breaker": NEVER_OPEN},
        },
        state={"backend": "redis", "redis_url": f"${{{redis_url_var}}}"},
        # small, so the Responses door's store reaches its bound early and evicts from then on
        responses={"store_max_bytes": STORE_MAX_BYTES},
        logging={
            "spec_log_file": str(out / "spec.jsonl"),
            "spec_log_max_bytes": 20_000_000,
            "spec_log_backups": 1,
        },
        **features,
    )
    del tree["speculative_decoding"]  # the shipped flow: early abort, hedged streams, ...
    return tree


class Soak:
    """The run: the load, the sampling and the faults on their clocks."""

    proxy: Child  # started once the first config is written

    def __init__(self, args: argparse.Namespace, port: int, redis: RedisServer) -> None:
        self.args, self.port, self.redis = args, port, redis
        self.samples: list[Sample] = []
        self.events: dict[str, list[float]] = {"sighup": [], "redis down": [], "redis up": []}
        self.reloads = 0
        self.config_path = args.out / "config.yaml"
        self.started = 0.0
        self.ports: dict[int, str] = {port: "proxy", redis.port: "redis"}

    def write_config(self) -> None:
        local, cloud = (self.args.urls["local"], self.args.urls["cloud"])
        tree = config(
            local,
            cloud,
            "REDIS_URL",
            self.args.out,
            self.reloads,
            shipped=self.args.shipped_features,
        )
        self.config_path.write_text(yaml.safe_dump(tree))

    def now(self) -> float:
        return time.monotonic() - self.started

    async def run(self) -> dict[str, Any]:
        kinds = [kind for kind in mix() if self.args.only in kind.name]
        prime = Traffic(kinds, self.port, self.args.pause, 1)
        await prime.start()
        await asyncio.sleep(PRIME_S)
        await prime.stop()
        before = await asyncio.to_thread(probe.settle, self.proxy, self.port, None, SETTLE_S)
        fds_before = probe.fd_table(self.proxy.pids(), self.ports)
        print(f"idle before: {before}\n  fds: {fds_before}", flush=True)
        traffic = Traffic(kinds, self.port, self.args.pause, self.args.clients)
        self.started = time.monotonic()
        await traffic.start()
        length = self.args.minutes * 60
        jobs = [self.sighups(length), self.redis_restart(length / 2)]
        tasks = [asyncio.create_task(job) for job in jobs]
        while (t := self.now()) < length:
            await asyncio.sleep(min(SAMPLE_EVERY_S - t % SAMPLE_EVERY_S, length - t))
            traffic.unstick()
            sample, _ = await probe.sample(self.proxy, self.port, self.now())
            self.samples.append(sample)
            print(f"{sample}  client: {traffic.counts()}", flush=True)
        await asyncio.gather(*tasks)
        await traffic.stop()
        after = await asyncio.to_thread(probe.settle, self.proxy, self.port, before, SETTLE_S)
        _, stats = await probe.sample(self.proxy, self.port, self.now())
        fds_after = probe.fd_table(self.proxy.pids(), self.ports)
        print(f"idle after: {after}\n  fds: {fds_after}", flush=True)
        return {
            "before": before,
            "after": after,
            "fds": {"before": fds_before, "after": fds_after},
            "client": traffic.counts(),
            "stats": stats,
            "reloads": self.reloads,
        }

    async def sighups(self, length: float) -> None:
        every = self.args.sighup_every
        while self.now() + every < length:
            await asyncio.sleep(every - self.now() % every)
            self.reloads += 1
            self.write_config()
            os.kill(self.proxy.pid, signal.SIGHUP)
            self.events["sighup"].append(self.now())

    async def redis_restart(self, at: float) -> None:
        await asyncio.sleep(at)
        self.events["redis down"].append(self.now())
        await asyncio.to_thread(self.redis.stop)
        await asyncio.sleep(self.args.redis_down_s)
        await asyncio.to_thread(self.redis.start)
        self.events["redis up"].append(self.now())


def report(args: argparse.Namespace, soak: Soak, result: dict[str, Any], load: str) -> bool:
    warmup = 60 * (
        args.warmup_minutes
        if args.warmup_minutes is not None
        else min(WARMUP_MINUTES, args.minutes / 6)
    )
    verdict = analyze(soak.samples, result["before"], result["after"], warmup)
    stats, client = result["stats"], result["client"]
    reloaded = stats["config_version"] == 1 + soak.reloads
    summary = {
        "minutes": args.minutes,
        "warmup_s": warmup,
        "verdict": asdict(verdict),
        "client": client,
        "reloads": soak.reloads,
        "config_version": stats["config_version"],
        "proxy": {
            "requests": stats["requests"],
            "upstream_errors": stats["upstream_errors"],
            "state": stats.get("state"),
        },
        "events": soak.events,
        "fds": result["fds"],
        "load": load,
    }
    data = {
        "summary": summary,
        "samples": [asdict(s) for s in soak.samples],
        "before": asdict(result["before"]),
        "after": asdict(result["after"]),
    }
    (args.out / "samples.json").write_text(json.dumps(data, indent=1))
    title = (
        f"specproxy soak: {args.minutes:g} min, {client['answers']:,} answers, "
        f"{'flat' if verdict.flat else 'NOT flat'} (RSS {verdict.rss_growth_mb:+.1f} MB "
        f"after warm-up; fds {verdict.fds_idle[0]}->{verdict.fds_idle[1]}, "
        f"tasks {verdict.tasks_idle[0]}->{verdict.tasks_idle[1]})"
    )
    plot(soak.samples, verdict, warmup, soak.events, args.out / "soak.png", title)
    print(json.dumps(summary, indent=1))
    print(f"wrote {args.out / 'samples.json'} and {args.out / 'soak.png'}")
    return verdict.flat and not client["errors"] and reloaded


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (niceness := os.nice(0)) < NICE:
        os.nice(NICE - niceness)  # the machine is shared; the children inherit it
    args.out.mkdir(parents=True, exist_ok=True)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    python = sys.executable
    with ExitStack() as stack:
        redis = RedisServer(args.out)
        redis.start()
        stack.callback(redis.stop)
        ready = args.out / "standins.json"
        ready.unlink(missing_ok=True)
        command = [python, "-m", "bench.soak_parts.standins", "--ready", str(ready)]
        standins = start("standins", command, core=None, logdir=args.out, cwd=ROOT)
        stack.callback(standins.stop)
        wait_until(standins, ready.exists, 30, "its ready file")
        args.urls = json.loads(ready.read_text())
        port = free_port()
        soak = Soak(args, port, redis)
        for name in ("local", "cloud"):
            soak.ports[int(args.urls[name].rsplit(":", 1)[1])] = name
        soak.write_config()
        env = {**os.environ, "CEREBRAS_API_KEY": CLOUD_KEY, "REDIS_URL": redis.url}
        command = [python, "main.py", "--config", str(soak.config_path)]
        command += ["--host", "127.0.0.1", "--port", str(port)]
        soak.proxy = start("proxy", command, core=None, logdir=args.out, env=env, cwd=ROOT)
        stack.callback(soak.proxy.stop)
        wait_until(soak.proxy, http_ok(port, "/health"), 60, "/health")
        result = asyncio.run(soak.run())
        load_after = Path("/proc/loadavg").read_text().split()[:3]
        load = f"load average {' '.join(load_before)} before, {' '.join(load_after)} at the end"
        ok = report(args, soak, result, load)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
