"""Figures of results beyond the policy comparison: memory over time per device, and curves
of makespan against a swept quantity (a device field in a what-if, batch size, devices)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from workloads.io import write_figure

if TYPE_CHECKING:
    import pandas as pd

    from sim.result import SimResult

__all__ = ["plot_curves", "plot_memory"]


def plot_memory(result: SimResult, path: str | Path, *, title: str = "") -> Path:
    """Memory in use over time on each device of a simulated run, with each device's
    capacity as a dashed line of its colour (PNG or SVG by suffix).

    >>> from policies import plan
    >>> from hwmodels import get_cluster, RooflineCost
    >>> from sim import simulate
    >>> from workloads import build_model
    >>> import tempfile, pathlib
    >>> c = get_cluster("workstation")
    >>> r = simulate(plan(build_model("mlp"), c, "heft"), c, RooflineCost(c))
    >>> plot_memory(r, pathlib.Path(tempfile.mkdtemp()) / "m.png").suffix
    '.png'
    """
    from matplotlib.figure import Figure

    frame = result.memory_frame()
    fig = Figure(figsize=(7.0, 3.6))
    ax = fig.subplots()
    for k, device in enumerate(result.devices):
        rows = frame[frame["device"] == device]
        if rows.empty:
            continue
        colour = f"C{k % 10}"
        ax.step(rows["time_s"] * 1e3, rows["bytes"] / 2**30, where="post", color=colour,
                label=device)
        ax.axhline(result.memory_capacity_bytes[device] / 2**30, color=colour,
                   linestyle="--", linewidth=0.8)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("memory in use (GiB)")
    state = "feasible" if result.feasible else "over capacity"
    ax.set_title(title or f"memory over time ({state})", fontsize="medium")
    ax.legend(fontsize="x-small", loc="upper right")
    fig.tight_layout()
    return write_figure(fig, path)


def plot_curves(df: pd.DataFrame, x: str, path: str | Path, *, by: str = "policy",
                y: str = "makespan_s", xlabel: str = "", title: str = "",
                logx: bool = False) -> Path:
    """``y`` (seconds, drawn in ms) against ``x``, one line per value of ``by``; infeasible
    points are drawn as red crosses, points with no plan are absent.

    >>> import pandas as pd, tempfile, pathlib
    >>> df = pd.DataFrame({"x": [1, 2, 1, 2], "policy": ["a", "a", "b", "b"],
    ...                    "makespan_s": [2.0, 1.0, 3.0, None],
    ...                    "feasible": [True, True, False, False]})
    >>> plot_curves(df, "x", pathlib.Path(tempfile.mkdtemp()) / "c.svg").suffix
    '.svg'
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    for k, (name, rows) in enumerate(df.groupby(by, sort=False)):
        rows = rows.sort_values(x)
        ax.plot(rows[x], rows[y].astype(float) * 1e3, marker="o", markersize=3,
                color=f"C{k % 10}", label=str(name))
        bad = rows[~rows["feasible"].fillna(False).astype(bool)]
        ax.plot(bad[x], bad[y].astype(float) * 1e3, "x", color="tab:red", markersize=7)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(f"{y.removesuffix('_s')} (ms)")
    if title:
        ax.set_title(title, fontsize="medium")
    ax.legend(fontsize="x-small", ncols=2)
    fig.tight_layout()
    return write_figure(fig, path)
