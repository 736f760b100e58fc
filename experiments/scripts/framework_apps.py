"""The classic framework-comparison applications on a CPU, one GPU, and four GPUs.

LeNet, AlexNet, a stacked autoencoder and an LSTM language model — the applications that
comparisons of deep-learning frameworks report — each as one SGD training step, simulated
on a Xeon 8380 alone (the workstation without its GPU), one V100 (the four-V100 box without
three of them), and the four NVLink V100s with the fastest plan any policy finds. One table,
as such comparisons report them: step time per platform and the speedup of four GPUs over
one. Writes ``framework_apps.parquet`` (every cell) and ``framework_apps.png`` to ``--out``.

    python experiments/scripts/framework_apps.py [--out DIR] [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from experiments.results import write_results
from experiments.runspec import RunSpec
from experiments.sweep import Experiment
from hwmodels import get_cluster
from workloads.io import write_figure

#: (model, batch): the applications and the batch sizes their comparisons use.
APPS = (("lenet5", 64), ("alexnet", 128), ("stacked_autoencoder", 256), ("lstm", 64))
#: Policies tried on four GPUs (the fastest feasible plan is reported).
MULTI = ("single_device", "heft", "etf", "m_etf", "m_sct", "m_topo", "metis", "pipeline")


def platforms() -> dict[str, tuple]:
    """Platform label -> (cluster, policies tried on it)."""
    quad = get_cluster("quad-v100-nvlink")
    cpu = get_cluster("workstation").without("gpu0", name="xeon-8380-alone")
    one = quad.without("gpu1", "gpu2", "gpu3", name="one-v100")
    return {"CPU (Xeon 8380)": (cpu, ("single_device",)),
            "1 GPU (V100)": (one, ("single_device",)),
            "4 GPUs (V100, NVLink)": (quad, MULTI)}


def cells(apps: tuple[tuple[str, int], ...]) -> list[RunSpec]:
    return [RunSpec.make(model, cluster, policy, batch=batch, train=True, links="fair",
                         variant=label)
            for model, batch in apps for label, (cluster, policies) in platforms().items()
            for policy in policies]


def table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per application: step time on each platform (the best feasible plan)."""
    ok = df[df["feasible"].fillna(False).astype(bool)]
    best = ok.loc[ok.groupby(["model", "variant"])["makespan_s"].idxmin()]
    wide = best.pivot(index="model", columns="variant", values="makespan_s") * 1e3
    wide = wide[list(platforms())].rename(columns=lambda c: f"{c} ms")
    multi = best[best["variant"] == "4 GPUs (V100, NVLink)"].set_index("model")
    wide["4-GPU plan"] = multi["policy"]
    wide["4 GPUs / 1 GPU speedup"] = (wide["1 GPU (V100) ms"]
                                      / wide["4 GPUs (V100, NVLink) ms"])
    return wide.loc[[m for m in dict.fromkeys(df["model"]) if m in wide.index]]


def plot(wide: pd.DataFrame, path: Path) -> Path:
    fig = Figure(figsize=(7.5, 3.8))
    ax = fig.subplots()
    columns = [c for c in wide.columns if c.endswith(" ms")]
    width = 0.8 / len(columns)
    for k, column in enumerate(columns):
        ax.bar([i + k * width for i in range(len(wide))], wide[column], width,
               label=column.removesuffix(" ms"))
    ax.set_xticks([i + width for i in range(len(wide))], wide.index)
    ax.set_yscale("log")
    ax.set_ylabel("simulated training step (ms)")
    ax.legend(fontsize="small")
    ax.set_title("One SGD training step per application and platform", fontsize="medium")
    fig.tight_layout()
    return write_figure(fig, path)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="framework-apps-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="small batches (for tests)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    apps = tuple((m, 8) for m, _ in APPS) if args.quick else APPS
    df = Experiment(cells(apps)).run(workers=args.workers)
    out = Path(args.out)
    write_results(df, out / "framework_apps.parquet")
    wide = table(df)
    plot(wide, out / "framework_apps.png")
    print(wide.round(3).to_string())
    print(f"wrote {out / 'framework_apps.parquet'} and {out / 'framework_apps.png'}")
    return df


if __name__ == "__main__":
    main()
