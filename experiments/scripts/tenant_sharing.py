"""Tenants: throughput against fairness for each way of sharing devices among jobs.

2, 4 and 8 jobs — training steps and inference of different zoo models, drawn from a
seeded Poisson stream — arrive on a DGX A100 (eight GPUs on NVSwitch) and on a small
shared box (one L4 beside a Xeon host, the catalog's ``workstation``). Each job is placed
by HEFT, either as if the cluster were empty or around the load of the jobs already
there (tenant-aware placement, :func:`experiments.tenants.estimate_load`), then the mix is
simulated under every sharing policy of :mod:`sim.sharing`. Per run: throughput (jobs
finished per second of makespan), Jain's index over the jobs' slowdowns (each job's time
from arrival to completion over its time alone on the cluster), the mean slowdown and how
many jobs failed for lack of memory. Writes ``tenant_sharing.parquet`` and
``tenant_sharing.png`` (fairness on x, throughput on y; filled markers: tenant-aware) to
``--out``.

    python experiments/scripts/tenant_sharing.py [--out DIR] [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.results import write_results
from experiments.sweep import exit_with_parent
from experiments.tenants import JobEntry, Stream, Workload, build_jobs, stream_jobs
from hwmodels import get_cluster, make_cost_model
from sim import simulate_jobs

SHARING = ("exclusive", "fifo", "weighted_fair", "priority", "priority:preempt=false",
           "partition")
MIX = (Workload(model="resnet50", batch=32, train=True),
       Workload(model="bert_base", batch=8, seq_len=128),
       Workload(model="mlp", batch=256, train=True, optimizer="adam"),
       Workload(model="vgg16", batch=16),
       Workload(model="lstm", batch=32, train=True),
       Workload(model="gpt2_small", batch=2, seq_len=256))
QUICK_MIX = (Workload(model="mlp", batch=64, train=True), Workload(model="lenet5", batch=32))
#: Arrivals per second: about one job per solo step of the mix on each cluster, so jobs
#: overlap.
RATE = {"dgx-a100": 60.0, "workstation": 4.0}


def jobs(cluster: str, n: int, seed: int, mix: tuple[Workload, ...]) -> list[JobEntry]:
    """``n`` jobs of the stream, with weights 1 or 2 and priorities 0-2 drawn alike (the
    quick mix's small jobs arrive 1000 times as often, to overlap too)."""
    rate = RATE[cluster] * (1000 if mix == QUICK_MIX else 1)
    drawn = stream_jobs(Stream(rate_per_s=rate, count=n, seed=seed, mix=list(mix)),
                        prefix="j")
    rng = np.random.default_rng(seed + 1000)
    return [j.model_copy(update={"weight": float(rng.choice([1.0, 2.0])),
                                 "priority": int(rng.integers(3))}) for j in drawn]


def runs(cluster_name: str, n: int, seed: int, mix: tuple[Workload, ...]) -> list[dict]:
    cluster = get_cluster(cluster_name)
    cost = make_cost_model("roofline", cluster)
    entries = jobs(cluster_name, n, seed, mix)
    rows = []
    for aware in (False, True):
        built = build_jobs(entries, cluster, cost, policy="heft", links="fair", aware=aware)
        for sharing in SHARING:
            r = simulate_jobs(built, cluster, cost, sharing=sharing, links="fair")
            done = r.jobs["feasible"]
            rows.append({"cluster": cluster_name, "jobs": n, "seed": seed, "aware": aware,
                         "sharing": sharing, "makespan_s": r.makespan_s,
                         "throughput_per_s": float(done.sum() / r.makespan_s),
                         "fairness": r.fairness,
                         "mean_slowdown": float(r.jobs.loc[done, "slowdown"].mean()),
                         "failed": int((~done).sum())})
    return rows


def plot(df: pd.DataFrame, path: Path) -> Path:
    from matplotlib.figure import Figure

    from workloads.io import write_figure

    clusters = list(dict.fromkeys(df["cluster"]))
    fig = Figure(figsize=(5.5 * len(clusters), 4.5))
    markers = dict(zip(SHARING, "osD^v*", strict=True))
    colors = dict(zip(SHARING, [f"C{i}" for i in range(len(SHARING))], strict=True))
    mean = df.groupby(["cluster", "jobs", "aware", "sharing"], sort=False)[
        ["fairness", "throughput_per_s"]].mean().reset_index()
    for k, name in enumerate(clusters):
        ax = fig.add_subplot(1, len(clusters), k + 1)
        for row in mean[mean["cluster"] == name].itertuples():
            ax.scatter(row.fairness, row.throughput_per_s, marker=markers[row.sharing],
                       s=20 + 12 * row.jobs, edgecolors=colors[row.sharing],
                       facecolors=colors[row.sharing] if row.aware else "none")
        for sharing in SHARING:
            ax.scatter([], [], marker=markers[sharing], color=colors[sharing], label=sharing)
        ax.set(title=f"{name} (size: jobs; filled: tenant-aware)",
               xlabel="Jain's index over slowdowns", ylabel="jobs finished per second")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return write_figure(fig, path)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tenants-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="two small jobs (for tests)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: every core; 1: this process)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    mix, sizes, seeds = (QUICK_MIX, (2,), (0,)) if args.quick else (MIX, (2, 4, 8), (0, 1, 2))
    cells = [(cluster, n, seed, mix) for cluster in RATE for n in sizes for seed in seeds]
    if args.workers == 1:
        done = [runs(*cell) for cell in cells]
    else:
        with ProcessPoolExecutor(args.workers, initializer=exit_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            done = list(pool.map(runs, *zip(*cells, strict=True)))
    df = pd.DataFrame([row for rows in done for row in rows])
    write_results(df, out / "tenant_sharing.parquet")
    plot(df, out / "tenant_sharing.png")
    summary = df.groupby(["cluster", "aware", "sharing"], sort=False)[
        ["throughput_per_s", "fairness", "mean_slowdown", "failed"]].mean()
    print(summary.round(3).to_string())
    print(f"wrote {out / 'tenant_sharing.parquet'} and {out / 'tenant_sharing.png'}")
    return df


if __name__ == "__main__":
    main()
