"""Results tables on disk (Parquet, or CSV on request) and the comparison chart."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from workloads.errors import PlacelabError
from workloads.io import write_bytes_atomic

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
    """The comparison as a fixed-width text table, times in milliseconds."""
    view = pd.DataFrame({
        "model": df["model"], "step": df["step"], "cluster": df["cluster"],
        "policy": df["policy"],
        "makespan_ms": (df["makespan_s"] * 1e3).round(3),
        "speedup": df["speedup_vs_single_device"].round(2),
        "vs_bound": df["makespan_over_bound"].round(2),
        "feasible": df["feasible"], "devices": df["devices_used"],
        "util": df["mean_utilization"].round(2),
        "transfer_MB": (df["transfer_bytes"] / 1e6).round(1),
        "peak_mem_GB": (df["peak_memory_bytes"] / 1e9).round(2),
        "place_ms": (df["placement_s"] * 1e3).round(1),
    })
    return view.to_string(index=False)


def plot_compare(df: pd.DataFrame, path: str | Path) -> Path:
    """Grouped bars: makespan per policy for each (model, cluster); infeasible hatched."""
    groups = list(dict.fromkeys(zip(df["model"], df["cluster"], strict=True)))
    policies = list(dict.fromkeys(df["policy"]))
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(groups) * max(1, len(policies)) / 3),
                                    4.2))
    for j, policy in enumerate(policies):
        sub = df[df["policy"] == policy].set_index(["model", "cluster"])
        xs = [i + (j - (len(policies) - 1) / 2) * width for i in range(len(groups))]
        ys = [sub["makespan_s"].get(g, float("nan")) * 1e3 for g in groups]
        ok = [bool(sub["feasible"].get(g, True)) for g in groups]
        bars = ax.bar(xs, ys, width, label=policy)
        for bar, feasible in zip(bars, ok, strict=True):
            if not feasible:
                bar.set_hatch("//")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{m}\n{c}" for m, c in groups])
    ax.set_ylabel("simulated makespan (ms, log scale)")
    ax.set_yscale("log")
    ax.set_title("Placement policies compared (hatched: out of memory)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    suffix = Path(path).suffix.lower().lstrip(".") or "png"
    fig.savefig(buf, format=suffix, dpi=120)
    plt.close(fig)
    return write_bytes_atomic(path, buf.getvalue())
