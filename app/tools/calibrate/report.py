"""A calibrate run as plain data (``--json``) and as text for a person.

Pure: the figures in, a dict or a string out; ``cli`` prints them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from app.routing.signals import OUT_OF_TIME
from app.tools import pct
from app.tools.calibrate.core import PROG, Calibration, Samples
from app.tools.calibrate.yaml_edit import KEY, SECTION, format_threshold


def report(
    *,
    paths: Sequence[str],
    samples: Samples,
    target: float,
    result: Calibration,
    old_threshold: float,
    old_source: str,
    config: str,
    written: bool,
) -> dict[str, Any]:
    """Every figure of a run as plain JSON data (shares in 0..1)."""
    lines = Counter(samples.contexts)
    cloud = Counter(
        ctx for ctx, s in zip(samples.contexts, samples.scores, strict=True) if s > result.threshold
    )
    return {
        "files": list(paths),
        "lines": samples.lines,
        "used": len(samples.scores),
        "skipped_no_features": samples.skipped,
        "target_cloud_rate": target,
        "achieved_cloud_rate": result.achieved,
        "forced_share": result.forced_share,
        "forced": dict(sorted(samples.stop_reasons.items())),
        "unreachable": result.unreachable,
        "old_threshold": old_threshold,
        "old_threshold_source": old_source,
        "new_threshold": result.threshold,
        "by_context_type": {
            ctx: {"lines": n, "cloud_rate": cloud[ctx] / n} for ctx, n in sorted(lines.items())
        },
        "config": config,
        "written": written,
    }


def render_text(data: dict[str, Any]) -> str:
    """The report for a person."""
    forced = ", ".join(f"{n} {stop}" for stop, n in data["forced"].items()) or "none"
    out = [
        f"{PROG}: spill_threshold for a {pct(data['target_cloud_rate'])} cloud rate",
        f"  logs:             {', '.join(data['files'])}",
        f"  lines read:       {data['lines']}",
        f"  used:             {data['used']}",
        f"  skipped:          {data['skipped_no_features']} (no features: logged by an older "
        "version)",
        f"  target:           {pct(data['target_cloud_rate'])}",
        f"  achieved:         {pct(data['achieved_cloud_rate'])} of {data['used']} drafts",
        f"  forced to cloud:  {pct(data['forced_share'])} ({forced}: cut or aborted drafts)",
        f"  threshold:        {format_threshold(data['old_threshold'])} "
        f"({data['old_threshold_source']}) -> {format_threshold(data['new_threshold'])}",
        "",
        f"  {'context type':<16}{'lines':>8}{'cloud':>10}",
    ]
    out += [
        f"  {ctx:<16}{row['lines']:>8}{pct(row['cloud_rate']):>10}"
        for ctx, row in data["by_context_type"].items()
    ]
    out.append("")
    value = format_threshold(data["new_threshold"])
    if data["written"]:
        out.append(f"wrote {SECTION}.{KEY}: {value} to {data['config']}")
    else:
        out.append(f"dry run: {data['config']} left as it was ({KEY} would be {value})")
    return "\n".join(out) + "\n"


def unreachable_warning(data: dict[str, Any]) -> str:
    """Why the target cannot be met and what would help."""
    forced = data["forced"]
    hints = []
    if forced.get("n_max"):
        hints.append(
            "raise speculative_decoding.max_draft_tokens so fewer drafts are cut at the budget"
        )
    if forced.get("p_min"):
        hints.append(
            "abort fewer drafts early (raise abort_min_score, lower "
            "abort_min_token_prob, or set early_abort: false)"
        )
    if forced.get(OUT_OF_TIME):
        hints.append("give streamed drafts longer (raise stream_first_token_s)")
    hint = ", or ".join(hints)
    return (
        f"target cloud rate {pct(data['target_cloud_rate'])} is unreachable: "
        f"{pct(data['forced_share'])} of the logged drafts were cut or aborted "
        f"({', '.join(f'{n} {stop}' for stop, n in forced.items())}) and go to the cloud "
        f"whatever the threshold; {KEY} left as it was; {hint}"
    )
