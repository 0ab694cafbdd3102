#!/usr/bin/env python3
"""Transfer, then learning: the shipped prior on questions it was not fitted on, and the
scorer the proxy learns by serving them.

    .venv/bin/python -m bench.routing_eval --data bench/data/transfer.jsonl \
        --json bench/results/transfer.json --plot /tmp/transfer.png
    .venv/bin/python -m bench.learning_eval bench/results/transfer.json \
        [--plot docs/routing/learning_curve.png] [--json bench/results/learning_eval.json]

The item set (``bench/data/transfer.jsonl``) is of other kinds than the sets the shipped
scorers were fitted on, and split in halves: ``warm`` items are served, ``eval`` items
only score.

1. **Warm-up.** The real proxy (the config's speculative section, ``agreement: facts``,
   ``learning`` on with its shipped ``audit_rate``, a fresh ``state_dir``) serves the warm
   half once, in a seeded random order, through the real SmolLM2 llama-server, next to the
   Cerebras stand-in answering each item's reference. The proxy labels its verifications
   and audits, refits and swaps its scorer as it runs.
2. **The live scorer** (the proxy's ``scorer.json`` once it has settled) and the shipped
   prior score the evaluation half's drafts (``bench.routing_eval``'s, temperature 0: the
   drafts the proxy makes; drafts cut at the budget are left out: they always go to the
   cloud). Each is judged against the items' judges: AUROC, and the PGR at the share its
   threshold sends to the cloud, against random routing and the oracle at that share.
3. **Audits.** The drafts served without verification in the warm-up are all checked
   afterwards (agreement with the reference, the rule the audits use); that rate must lie
   in the 95% interval ``/stats`` gave from the audits alone.
4. **Learning curve.** The labels the proxy stored, in order, refitted at every 10 (all
   of them, no holdout) and scored on the evaluation half: AUROC against labels seen.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from app import create_app
from app.config import load_settings
from app.evaluation.judges import EvalItem, load_items
from app.evaluation.metrics import auroc, pgr_curve, routing_curve, wilson
from app.learning.fit import fit_scorer
from app.learning.store import LearningStore
from app.local_server import LocalServerError
from app.routing.agreement import agree
from app.routing.request_features import request_features
from app.routing.scorer import Scorer, load_scorer
from bench.host import host_facts
from bench.routing_latency import ReferenceCloud, local_model, stand_in_settings
from tests.fakes.server import serve

ROOT = Path(__file__).resolve().parent.parent
CURVE_STEP = 10


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("drafts", type=Path, help="bench.routing_eval's JSON on the same data")
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--seed", type=int, default=0, help="the warm-up's order")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/learning_eval.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs/routing/learning_curve.png")
    return parser.parse_args(argv)


def request(prompt: str) -> dict[str, Any]:
    """The body the bench sends (and whose features the live scorer reads)."""
    return {
        "model": "speculative",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
    }


def proxy_settings(config: Path, local_url: str, cloud_url: str, state_dir: Path) -> Any:
    """The config's speculative and learning sections, learning on, agreement by facts."""
    settings = load_settings(config, env={})
    spec = settings.speculative_decoding.model_dump(
        mode="json", exclude={"draft_model", "verify_model"}
    )
    learning = settings.learning.model_dump(mode="json")
    learning.update(enabled=True, state_dir=str(state_dir))
    return stand_in_settings(
        local_url, cloud_url, {**spec, "agreement": "facts"}, learning=learning
    )


class Swaps(logging.Handler):
    """The learner's log lines (every refit, kept or swapped)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def warm_up(url: str, items: list[EvalItem]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Serve the items once; each reply's route, and ``/stats`` once the learner settled."""
    rows = []
    with httpx.Client(base_url=url, timeout=180) as http:
        for number, item in enumerate(items, 1):
            response = http.post("/v1/chat/completions", json=request(item.prompt))
            response.raise_for_status()
            data = response.json()
            spec = data.get("speculative_decoding") or {}
            text = data["choices"][0]["message"]["content"] or ""
            rows.append(
                {
                    "id": item.id,
                    "unverified": bool(spec.get("accepted")) and not spec.get("verified_tokens"),
                    "agreement": spec.get("agreement"),
                    "served_correct": item.passes(text),
                    "text": text,
                }
            )
            if number % 20 == 0:
                print(f"  served {number}/{len(items)}", file=sys.stderr, flush=True)
        return rows, settled(http)


def settled(http: httpx.Client, quiet_s: float = 4.0, limit_s: float = 120.0) -> dict[str, Any]:
    """``/stats`` once every label is stored and no refit has come for ``quiet_s``."""
    deadline = time.monotonic() + limit_s
    last: tuple[Any, ...] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        stats = http.get("/stats").json()
        learning = stats["learning"]
        now = (learning["labels"]["stored"], learning["refits"], learning["scorer"]["version"])
        if now != last:
            last, since = now, time.monotonic()
        elif (
            learning["labels"]["stored"] >= learning["labels"]["total"]
            and time.monotonic() - since >= quiet_s
        ):
            return stats  # type: ignore[no-any-return]
        time.sleep(0.5)
    return http.get("/stats").json()  # type: ignore[no-any-return]


def judged(scores: Sequence[float], draft_ok: Sequence[bool], threshold: float) -> dict[str, Any]:
    """AUROC, and PGR at the share ``threshold`` sends, with random's and the oracle's."""
    wrong = [not ok for ok in draft_ok]
    share = sum(s > threshold for s in scores) / len(scores)
    pgr = pgr_curve(routing_curve(scores, draft_ok)).value_at(share)
    oracle = min(1.0, share / (sum(wrong) / len(wrong))) if any(wrong) else 1.0
    advantage = oracle - share
    return {
        "auroc": auroc(scores, wrong),
        "share": share,
        "pgr": pgr,
        "random_pgr": share,
        "oracle_pgr": oracle,
        "of_oracle_advantage": (pgr - share) / advantage if advantage > 0 else None,
    }


def evaluate(
    records: list[dict[str, Any]], prior: Scorer, live: Scorer | None, threshold: float | None
) -> dict[str, Any]:
    """The prior and the live scorer on the evaluation half's uncut drafts."""
    ok = [bool(r["correct"]) for r in records]
    prior_scores = [prior.score(r["features"]) for r in records]
    report = {
        "drafts": len(records),
        "right": sum(ok),
        "prior": judged(prior_scores, ok, prior.threshold),
    }
    if live is not None:
        report["live"] = judged(live_scores(live, records), ok, threshold or live.threshold)
    return report


def live_scores(scorer: Scorer, records: list[dict[str, Any]]) -> list[float]:
    """A learned scorer's scores: the draft's features, the request's shape and n-grams."""
    out = []
    for r in records:
        read = request_features(request(r["prompt"]))
        out.append(scorer.score({**r["features"], **read.shape}, read.ngrams))
    return out


def learning_curve(
    labels: list[Any], records: list[dict[str, Any]], prior: Scorer, strength: float
) -> list[tuple[int, float]]:
    """(labels seen, AUROC on the evaluation half) for a fit on the first n labels, as the
    learner fits (from the prior, held to it by ``strength``)."""
    wrong = [not r["correct"] for r in records]
    points = []
    for n in range(CURVE_STEP, len(labels) + 1, CURVE_STEP):
        seen = labels[:n]
        if len({lab.agreed for lab in seen}) < 2:
            continue
        fitted = fit_scorer(seen, prior=prior if strength else None, l2=strength or 1.0)
        value = auroc(live_scores(fitted, records), wrong)
        if value is not None:
            points.append((n, value))
    return points


def plot(points: list[tuple[int, float]], prior: float | None, live: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot([n for n, _ in points], [a for _, a in points], marker="o", label="fit on first n")
    if prior is not None:
        ax.axhline(prior, color="grey", linestyle="--", label=f"shipped prior ({prior:.2f})")
    if live is not None:
        ax.scatter([live[0]], [live[1]], color="red", zorder=3, label="the proxy's live scorer")
    ax.axhline(0.8, color="green", linestyle=":", label="target 0.80")
    ax.set_xlabel("labels seen (verifications and audits)")
    ax.set_ylabel("AUROC on the evaluation half")
    ax.set_ylim(0.4, 1.0)
    ax.legend(loc="lower right")
    ax.set_title("transfer set: learning from the proxy's own labels")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.learning_eval", *sys.argv[1:]])
    document = json.loads(args.drafts.read_text(encoding="utf-8"))
    data = Path(document["setup"]["data"])
    items = load_items(data.read_text(encoding="utf-8").splitlines())
    warm = [i for i in items if i.split == "warm"]
    random.Random(args.seed).shuffle(warm)
    prompts = {i.id: i.prompt for i in items}
    split = {i.id: i.split for i in items}
    records = [
        {**r, "prompt": prompts[r["id"]]}
        for r in document["records"]
        if split.get(r["id"]) == "eval" and not r["truncated"]
    ]
    settings = load_settings(args.config, env={})
    local = settings.models[settings.speculative_decoding.draft_model]
    if local.launch is None:
        print("error: the draft model needs a launch section", file=sys.stderr)
        return 2
    prior = load_scorer(settings.speculative_decoding.policy.value)
    swaps = Swaps()
    learner_log = logging.getLogger("specproxy.learning")
    learner_log.addHandler(swaps)
    learner_log.setLevel(logging.INFO)

    cloud = ReferenceCloud({i.prompt: i.reference for i in items})
    started = time.perf_counter()
    try:
        with (
            local_model(local.launch) as local_url,
            tempfile.TemporaryDirectory() as state,
            serve(cloud.app) as cloud_url,
        ):
            proxy = create_app(proxy_settings(args.config, local_url, cloud_url, Path(state)))
            with serve(proxy) as url:
                rows, stats = warm_up(url, warm)
            store = LearningStore(state, max_labels=10**6)
            found = store.read_scorer()
            labels = store.read()
            store.close()
    except LocalServerError as exc:
        print(f"error: cannot run the local model: {exc}", file=sys.stderr)
        return 1
    runtime = time.perf_counter() - started
    live, version = found if found else (None, 0)
    threshold = settings.speculative_decoding.spill_threshold
    report = evaluate(records, prior, live, threshold)
    curve = learning_curve(labels, records, prior, settings.learning.prior_strength)
    by_id = {i.id: i for i in items}
    unverified = [r for r in rows if r["unverified"]]
    agreed = sum(
        agree(r["text"], by_id[r["id"]].reference, prompt=by_id[r["id"]].prompt).agrees
        for r in unverified
    )
    audits = stats["learning"]["audits"]
    report.update(
        warm={
            "served": len(rows),
            "quality": sum(r["served_correct"] for r in rows) / len(rows),
            "unverified": len(unverified),
            "labels": stats["learning"]["labels"],
            "refits": stats["learning"]["refits"],
            "scorer": stats["learning"]["scorer"],
            "swaps": swaps.lines,
        },
        audits={
            "n": audits["n"],
            "agree_rate": audits["agree_rate"],
            "ci95": audits["ci95"],
            "cloud_tokens": audits["cloud_tokens"],
            "all_checked": agreed / len(unverified) if unverified else None,
            "all_checked_ci95": wilson(agreed, len(unverified)),
        },
        curve=curve,
        live_version=version,
    )
    ci = audits["ci95"]
    truth_rate = report["audits"]["all_checked"]
    report["audits"]["within"] = (
        ci is not None and truth_rate is not None and ci[0] <= truth_rate <= ci[1]
    )
    live_point = None
    if live is not None:
        seen = int(live.fitted_on.get("labels", 0) + live.fitted_on.get("holdout", 0))
        live_point = (seen, report["live"]["auroc"])
    plot(curve, report["prior"]["auroc"], live_point, args.plot)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"$ {command}")
    print(f"machine: {host_facts()}")
    print(
        f"setup: {data.name}, warm-up {len(warm)} items served (seed {args.seed}), evaluation "
        f"{report['drafts']} uncut drafts ({report['right']} right); runtime {runtime:.0f} s"
    )
    print(markdown(report))
    print(f"wrote {args.json} and {args.plot}")
    return 0


def markdown(report: dict[str, Any]) -> str:
    def row(name: str, r: dict[str, Any]) -> str:
        share = f"{r['of_oracle_advantage']:.2f}" if r["of_oracle_advantage"] is not None else "n/a"
        return (
            f"| {name} | {r['auroc']:.3f} | {r['share']:.1%} | {r['pgr']:.3f} | "
            f"{r['random_pgr']:.3f} | {r['oracle_pgr']:.3f} | {share} |"
        )

    warm, audits = report["warm"], report["audits"]
    lines = [
        "",
        "| scorer | AUROC | cloud share | PGR | random | oracle | of oracle's advantage |",
        "|---|---:|---:|---:|---:|---:|---:|",
        row("shipped prior (cold)", report["prior"]),
    ]
    if "live" in report:
        lines.append(row(f"live, v{report['live_version']} (warm)", report["live"]))
    lines += [
        "",
        f"warm-up: {warm['served']} served, quality {warm['quality']:.1%}, "
        f"{warm['labels']['total']} labels ({warm['labels']['agreed']} agreed), "
        f"{warm['refits']} refits, scorer v{warm['scorer']['version']} trained on "
        f"{warm['scorer']['trained_on']} (holdout AUROC {warm['scorer']['auroc_holdout']})",
        *(f"  learner: {line}" for line in warm["swaps"]),
        f"audits: {audits['n']}, agree rate {audits['agree_rate']} (95% CI {audits['ci95']}); "
        f"all {warm['unverified']} unverified drafts checked: {audits['all_checked']} "
        f"-> {'inside' if audits['within'] else 'OUTSIDE'} the audits' interval",
        "learning curve (labels, AUROC): " + ", ".join(f"{n}: {a:.3f}" for n, a in report["curve"]),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
