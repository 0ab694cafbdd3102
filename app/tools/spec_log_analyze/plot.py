"""The ``--plot`` picture: acceptance, entropy and probability by draft position, as a PNG.

Apart from ``render`` because it alone needs matplotlib (the ``plot`` extra), imported only
when a plot is drawn (``--plot``, or the plots of ``--html``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


def plot(report: dict[str, Any], out: str | Path) -> None:
    """Draw acceptance by position, and mean entropy / probability by position, into a PNG."""
    figure(report).savefig(out, dpi=DPI)


def figure(report: dict[str, Any]) -> Figure:
    """The plot's figure (``ImportError`` without matplotlib)."""
    # Lazy: only plots pay for matplotlib; Figure + the Agg canvas leave pyplot's state alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    rows = report["positions"]
    pos = [r["pos"] for r in rows]
    fig = Figure(figsize=(9, 7), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    fig.suptitle(f"Speculation log: {report['overall']['rounds']} verified rounds")

    top.bar(
        pos,
        [_or_nan(r["rate"], 100) for r in rows],
        color="tab:blue",
        alpha=0.6,
        label="Rate % (accepted / drafted at the position)",
    )
    top.plot(
        pos,
        [_or_nan(r["rate_per_round"], 100) for r in rows],
        color="tab:red",
        marker="o",
        label="Rate/Round % (accepted / rounds)",
    )
    top.set_title("Acceptance rate by draft position")
    top.set_ylabel("acceptance (%)")
    top.set_ylim(0, 105)
    top.legend(loc="upper right", fontsize="small")

    bottom.plot(
        pos,
        [_or_nan(r["avg_entropy"]) for r in rows],
        color="tab:purple",
        marker=".",
        label="avg entropy",
    )
    bottom.set_ylabel("avg top-k entropy (nats)", color="tab:purple")
    bottom.set_ylim(bottom=0)
    prob_axis = bottom.twinx()
    prob_axis.plot(
        pos, [_or_nan(r["avg_prob"]) for r in rows], color="tab:green", marker=".", label="avg p"
    )
    prob_axis.set_ylabel("avg token probability", color="tab:green")
    prob_axis.set_ylim(0, 1.05)
    bottom.set_title("Draft confidence by position")
    bottom.set_xlabel("draft position")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = bottom.get_legend_handles_labels()[0] + prob_axis.get_legend_handles_labels()[0]
    bottom.legend(handles=handles, loc="lower right", fontsize="small")
    if not rows:
        top.text(0.5, 0.5, "no verified rounds", ha="center", va="center", transform=top.transAxes)
    return fig


def _or_nan(value: float | None, scale: float = 1) -> float:
    return float("nan") if value is None else value * scale
