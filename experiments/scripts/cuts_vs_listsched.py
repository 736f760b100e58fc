"""Graph cuts against list scheduling on a heterogeneous box, with the communication share.

The catalog's ``hetero-box`` joins an EPYC host, two L4 GPUs and a hypothetical NPU over
PCIe 4.0. Graph-cut policies (METIS, Kernighan-Lin, spectral bisection, Stone's min-cut)
minimise the bytes crossing devices, weighting parts by device speed; list schedulers
(HEFT, CPOP, ETF, m-ETF, m-SCT) place op by op on the device that finishes it first. Each
places an SGD training step of each model; each plan is simulated with links shared
max-min fairly. The table gives the step time, the bytes moved and the communication share
(time transfers spent moving over that plus compute time). Writes
``cuts_vs_listsched.parquet`` and ``cuts_vs_listsched.png`` to ``--out``.

    python experiments/scripts/cuts_vs_listsched.py [--out DIR] [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from experiments.results import write_results
from experiments.runspec import RunSpec
from experiments.sweep import Experiment
from workloads.io import write_figure

CUTS = ("metis", "kernighan_lin", "spectral", "stone_mincut")
LIST = ("heft", "cpop", "etf", "m_etf", "m_sct")
MODELS = (("resnet50", 16), ("inception_v3", 8), ("gpt2_small", 2))
QUICK = (("lenet5", 32), ("mlp", 64))


def cells(models: tuple[tuple[str, int], ...]) -> list[RunSpec]:
    return [RunSpec.make(model, "hetero-box", policy, batch=batch, train=True, links="fair")
            for model, batch in models for policy in (*CUTS, *LIST)]


def table(df: pd.DataFrame) -> pd.DataFrame:
    view = df.assign(
        family=["graph cut" if p in CUTS else "list scheduling" for p in df["policy"]],
        step_ms=df["makespan_s"].astype(float) * 1e3,
        moved_MB=df["transfer_bytes"] / 1e6,
        comm_share=df["transfer_s"].astype(float)
        / (df["transfer_s"].astype(float) + df["compute_s"].astype(float)),
    )
    return view[["model", "family", "policy", "step_ms", "moved_MB", "comm_share",
                 "devices_used", "feasible"]]


def plot(view: pd.DataFrame, path: Path) -> Path:
    models = list(dict.fromkeys(view["model"]))
    fig = Figure(figsize=(5.0 * len(models), 3.8))
    axes = fig.subplots(1, len(models), squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        rows = view[view["model"] == model]
        colours = ["tab:purple" if f == "graph cut" else "tab:blue" for f in rows["family"]]
        ax.barh(rows["policy"], rows["step_ms"], color=colours)
        for y, (ms, share) in enumerate(zip(rows["step_ms"], rows["comm_share"],
                                            strict=True)):
            if pd.notna(ms):
                ax.annotate(f"{share:.0%} comm", (ms, y), fontsize="x-small",
                            xytext=(2, -3), textcoords="offset points")
        ax.invert_yaxis()
        ax.set_title(f"{model} training step on hetero-box", fontsize="medium")
        ax.set_xlabel("simulated step (ms); purple: graph cuts")
    fig.tight_layout()
    return write_figure(fig, path)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="cuts-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="two small models (for tests)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    df = Experiment(cells(QUICK if args.quick else MODELS)).run(workers=args.workers)
    out = Path(args.out)
    write_results(df, out / "cuts_vs_listsched.parquet")
    view = table(df)
    plot(view, out / "cuts_vs_listsched.png")
    print(view.round(3).to_string(index=False))
    print(f"wrote {out / 'cuts_vs_listsched.parquet'} and {out / 'cuts_vs_listsched.png'}")
    return df


if __name__ == "__main__":
    main()
