"""Results tables on disk (Parquet, or CSV on request) and the comparison chart."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from workloads.errors import PlacelabError
from workloads.io import write_bytes_atomic, write_figure

__all__ = ["format_table", "plot_compare", "read_results", "write_results"]


def write_results(df: pd.DataFrame, path: str | Path) -> Path:
    """Write ``df`` atomically: ``.csv`` as CSV, anything else as Parquet."""
    path = Path(path)
    buf = io.BytesIO()
    if path.suffix.lower() == ".csv":
        buf.write(df.to_csv(index=False).encode("utf-8"))
    else:
        df.to_parquet(buf, index=False)
    return write_bytes_atomic(path, buf.getvalue())


def read_results(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise PlacelabError(f"results file {str(path)!r}: expected an existing file, got none")
    return pd.read_csv(path) if path.suffix.lower() == ".csv" else pd.read_parquet(path)


def format_table(df: pd.DataFrame) -> str:
    """The comparison as a fixed-width text table, times in milliseconds, with the reason of
    every infeasible row below it."""
    view = pd.DataFrame({
        "model": df["model"], "step": df["step"], "cluster": df["cluster"],
        "policy": df["policy"],
        "makespan_ms": (df["makespan_s"].astype(float) * 1e3).round(3),
        **({"speedup": df["speedup_vs_single_device"].round(2)}
           if "speedup_vs_single_device" in df else {}),
        "vs_bound": df["makespan_over_bound"].astype(float).round(2),
        "feasible": df["feasible"], "devices": df["devices_used"],
        "util": df["mean_utilization"].astype(float).round(2),
        "transfer_MB": (df["transfer_bytes"] / 1e6).round(1),
        "peak_mem_GB": (df["peak_memory_bytes"] / 1e9).round(2),
        "place_ms": (df["placement_s"].astype(float) * 1e3).round(1),
    })
    if "solver_status" in df and df["solver_status"].notna().any():
        view["solver"] = [f"{s} (gap {g:.1%})" if isinstance(s, str) else ""
                          for s, g in zip(df["solver_status"], df["solver_gap"].fillna(0.0),
                                          strict=True)]
    notes = [f"  {m} {st} on {c}, {p}: {r}" for m, st, c, p, r, f in
             zip(df["model"], df["step"], df["cluster"], df["policy"], df["reason"],
                 df["feasible"], strict=True) if not f]
    text = view.to_string(index=False)
    return text + ("\ninfeasible:\n" + "\n".join(notes) if notes else "")


def plot_compare(df: pd.DataFrame, path: str | Path) -> Path:
    """One panel per (model, step, cluster): a bar per policy (simulated makespan in ms),
    the lower bound as a dashed line; red bars are infeasible (out of memory), missing bars
    policies that could not place the graph."""
    keys = ["model", "step", "cluster"] if "step" in df else ["model", "cluster"]
    groups = list(dict.fromkeys(zip(*(df[k] for k in keys), strict=True)))
    policies = sorted(dict.fromkeys(df["policy"]))
    cols = min(2, len(groups))
    rows = -(-len(groups) // cols)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0 * cols, 0.28 * len(policies) * rows + 1.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, group in zip(axes.flat, groups, strict=False):
        sub = df[(df[keys] == pd.Series(group, index=keys)).all(axis=1)].set_index("policy")
        times = [sub["makespan_s"].get(pol, float("nan")) * 1e3 for pol in policies]
        colours = ["tab:blue" if bool(sub["feasible"].get(pol, True)) else "tab:red"
                   for pol in policies]
        ax.barh(policies, times, color=colours)
        if "lower_bound_s" in sub and sub["lower_bound_s"].notna().any():
            ax.axvline(float(sub["lower_bound_s"].max()) * 1e3, color="black",
                       linestyle="--", linewidth=1, label="lower bound")
            ax.legend(fontsize="x-small", loc="lower right")
        ax.invert_yaxis()
        ax.tick_params(labelsize="small")
        ax.set_title(" / ".join(str(g) for g in group), fontsize="medium")
        ax.set_xlabel("simulated makespan (ms)", fontsize="small")
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.tight_layout()
    return write_figure(fig, path)
