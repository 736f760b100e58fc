"""Gantt charts of a Trace: one row per lane (device stream, copy engine, link channel)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from workloads.io import write_figure

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["plot_gantt"]

_COLOURS = {"compute": "tab:blue", "transfer": "tab:orange"}


def plot_gantt(trace: pd.DataFrame, path: str | Path, *, title: str = "") -> Path:
    """Draw ``trace`` as a Gantt chart (PNG or SVG by suffix), written atomically.

    Compute ops are blue, transfers orange; a transfer is drawn on every lane it holds.
    """
    lanes: dict[str, list[tuple[float, float]]] = {}
    kinds: dict[str, str] = {}
    for stream, kind, start, end in zip(trace["stream"], trace["kind"], trace["start_s"],
                                        trace["end_s"], strict=True):
        for lane in stream.split(","):
            lanes.setdefault(lane, []).append((start * 1e3, (end - start) * 1e3))
            kinds[lane] = kind
    order = sorted(lanes, key=lambda lane: (kinds[lane] != "compute", lane))
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 0.35 * len(order) + 1.5))
    ax = fig.add_subplot()
    for row, lane in enumerate(order):
        ax.broken_barh(lanes[lane], (row - 0.4, 0.8), facecolors=_COLOURS[kinds[lane]],
                       edgecolor="black", linewidth=0.2)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([_literal(lane) for lane in order], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(_literal(title) or "Simulated schedule (blue: compute, orange: transfer)")
    fig.tight_layout()
    return write_figure(fig, path)


def _literal(text: str) -> str:
    """Text shown as written: matplotlib would read ``$...$`` in a name as mathtext."""
    return text.replace("$", r"\$")
