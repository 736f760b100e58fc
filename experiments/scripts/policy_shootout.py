"""Policy shoot-out: the zoo's training steps on the catalog clusters, every policy.

Every registered policy places an Adam training step of each model on each catalog
cluster; each plan is simulated (links shared max-min fairly). The table gives, per policy,
how far its plans are from the lower bound (geometric mean of makespan / bound over the
cells it placed within memory), how often it was best, and how often it could not place
the step or ran out of memory. Runs through the sweep machinery (one cell per model,
cluster and policy, on a local process pool). Writes ``policy_shootout.parquet`` (every
cell), ``policy_shootout.png`` (the comparison chart) to ``--out``.

    python experiments/scripts/policy_shootout.py [--out DIR] [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.results import plot_compare, write_results
from experiments.runspec import RunSpec
from experiments.sweep import Experiment
from hwmodels import list_clusters
from policies import POLICIES

#: (model, batch): the training steps of the full study.
MODELS = (("resnet50", 32), ("inception_v3", 16), ("gpt2_small", 8), ("bert_base", 8))
QUICK = (("lenet5", 32), ("mlp", 64))


def cells(models: tuple[tuple[str, int], ...], clusters: list[str]) -> list[RunSpec]:
    return [RunSpec.make(model, cluster, policy, batch=batch, train=True, optimizer="adam",
                         links="fair")
            for model, batch in models for cluster in clusters for policy in POLICIES.names()
            if POLICIES.get(policy).in_all]


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per policy: geometric-mean makespan / bound over its feasible cells, wins, failures."""
    ok = df[df["feasible"].fillna(False).astype(bool)].copy()
    best = ok.groupby(["model", "cluster"])["makespan_s"].transform("min")
    ok["best"] = np.isclose(ok["makespan_s"], best, rtol=1e-9)
    placed = df["makespan_s"].notna()
    table = pd.DataFrame({
        "vs_bound_geomean": ok.groupby("policy")["makespan_over_bound"].apply(
            lambda s: float(np.exp(np.log(s.astype(float)).mean()))),
        "best_in": ok.groupby("policy")["best"].sum(),
        "feasible": ok.groupby("policy").size(),
        "out_of_memory": df[placed & ~df["feasible"].fillna(False).astype(bool)].groupby(
            "policy").size(),
        "not_placed": df[~placed].groupby("policy").size(),
    }).fillna(0)
    for column in ("best_in", "feasible", "out_of_memory", "not_placed"):
        table[column] = table[column].astype(int)
    return table.sort_values(["feasible", "vs_bound_geomean"], ascending=[False, True])


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="shootout-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="two small models (for tests)")
    parser.add_argument("--workers", type=int, default=None,
                        help="local worker processes (default: every core)")
    args = parser.parse_args(argv)
    models = QUICK if args.quick else MODELS
    clusters = ["workstation", "quad-v100-nvlink"] if args.quick else list_clusters()
    df = Experiment(cells(models, clusters)).run(workers=args.workers)
    out = Path(args.out)
    write_results(df, out / "policy_shootout.parquet")
    plot_compare(df, out / "policy_shootout.png")
    print(summary(df).round(3).to_string())
    print(f"wrote {out / 'policy_shootout.parquet'} and {out / 'policy_shootout.png'}")
    return df


if __name__ == "__main__":
    main()
