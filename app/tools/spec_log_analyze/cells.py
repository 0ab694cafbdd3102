"""How each figure is written in the text report: numbers, percents and dollars, seed
000's ``Label: value`` lines and its position-wise table (``render`` lays them out)."""

from __future__ import annotations

from typing import Any

POSITION_COLUMNS = (
    "Pos",
    "Drafted",
    "Accepted",
    "Rate %",
    "Avg Entropy",
    "Avg Prob",
    "Rate/Round %",
)
POSITION_WIDTHS = (6, 10, 11, 11, 13, 10)


def position_cells(row: dict[str, Any]) -> list[str]:
    """One row of the position-wise table as cells: seed 000's columns plus ``Rate/Round %``."""
    return [
        str(row["pos"]),
        str(row["drafted"]),
        str(row["accepted"]),
        num(row["rate"], 100),
        num(row["avg_entropy"], digits=4),
        num(row["avg_prob"], digits=4),
        num(row["rate_per_round"], 100),
    ]


def padded(cells: tuple[str, ...] | list[str], widths: tuple[int, ...]) -> str:
    """Cells padded to their widths, the last one as it is."""
    return (
        "".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)) + cells[-1]
    )


POSITION_HEADER = padded(POSITION_COLUMNS, POSITION_WIDTHS)


def position_row(row: dict[str, Any]) -> str:
    """One row of the position-wise table, in seed 000's columns plus ``Rate/Round %``."""
    return padded(position_cells(row), POSITION_WIDTHS)


def stat_line(label: str, value: float | None, *, percent: bool = False) -> str:
    """``  Label:   value``, the number ending at column 30 as in seed 000."""
    text, suffix = shown(value, percent)
    width = max(len(text) + 1, 27 - len(label))
    return f"  {label}:{text:>{width}}{suffix}"


def shown(value: float | None, percent: bool) -> tuple[str, str]:
    """A figure's digits and its suffix: ``("55.56", "%")``, ``("2.67", "")``, ``n/a``."""
    if value is None:
        return "n/a", ""
    if percent:
        return f"{100 * value:.2f}", "%"
    if isinstance(value, int):
        return str(value), ""
    return f"{value:.2f}", ""


def label_line(label: str, value: str) -> str:
    """``  Label:   value``, the values of a block starting in one column."""
    return f"  {label + ':':<24}{value}"


def usd(value: float | None) -> str:
    """US dollars to the micro-dollar: a token costs about a tenth of one."""
    if value is None:
        return "-"
    value = round(value, 6) + 0.0  # no "-0.000000"
    return f"-${-value:.6f}" if value < 0 else f"${value:.6f}"


def pct(value: float | None, scale: float) -> str:
    """A share as a percent (``n/a`` when unknown)."""
    return "n/a" if value is None else f"{value * scale:.2f}%"


def num(value: float | None, scale: float = 1, digits: int = 2) -> str:
    """A number to ``digits`` places (``-`` when unknown)."""
    return "-" if value is None else f"{value * scale:.{digits}f}"


def share(part: float, whole: float) -> float | None:
    """``part`` of ``whole`` (None of nothing)."""
    return part / whole if whole else None
