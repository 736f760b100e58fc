"""Sweep speed: a 1,000-cell simulated sweep on a local process pool against the same
sweep run serially in one process, same run (each starting with no graph built).

The grid: 2 zoo models (mlp, lenet5) x forward and an SGD training step x 5 catalog
clusters x 10 policies x 5 seeds (a seed is given to the seeded policies; every cell is
distinct). Both runs go through ``experiments.Experiment`` without a results folder; each
worker builds the graphs it needs once. The tables must agree but for wall-clock columns.

    python -m benchmarks.sweep_speed [--workers 2] [--seeds 5] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import time

import pandas as pd

from benchmarks.machine import describe, record
from experiments import runspec
from experiments.runspec import WALL_COLUMNS, RunSpec, run_one
from experiments.sweep import Experiment

MODELS = ("mlp", "lenet5")
CLUSTERS = ("workstation", "quad-v100-nvlink", "dgx1-v100", "hetero-box", "dgx-h100-x2-ib")
POLICIES = ("single_device", "round_robin", "random", "heft", "cpop", "etf", "m_etf",
            "m_topo", "m_sct", "metis")


def grid(seeds: int) -> list[RunSpec]:
    return [RunSpec.make(model, cluster, policy, batch=16, train=train, seed=seed)
            for model in MODELS for train in (False, True) for cluster in CLUSTERS
            for policy in POLICIES for seed in range(seeds)]


def cold() -> None:
    """Forget the graphs and clusters this process has built."""
    runspec._graph.cache_clear()
    runspec._cluster.cache_clear()


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", help="also write the markdown table here")
    args = parser.parse_args(argv)
    specs = grid(args.seeds)
    run_one(specs[-1])  # imports paid before either run
    cold()
    start = time.perf_counter()
    serial = Experiment(specs).run(workers=1, progress=False)
    serial_s = time.perf_counter() - start
    cold()  # forked workers would otherwise inherit the graphs the serial run built
    start = time.perf_counter()
    pooled = Experiment(specs).run(workers=args.workers, progress=False)
    pooled_s = time.perf_counter() - start
    pd.testing.assert_frame_equal(serial.drop(columns=list(WALL_COLUMNS)),
                                  pooled.drop(columns=list(WALL_COLUMNS)))
    n = len(specs)
    lines = [
        describe(), f"date: {datetime.date.today().isoformat()}",
        f"command: python -m benchmarks.sweep_speed --workers {args.workers} "
        f"--seeds {args.seeds}", "",
        "| run | cells | wall s | cells/s | speedup |", "|---|---:|---:|---:|---:|",
        f"| serial, one process | {n:,} | {serial_s:.1f} | {n / serial_s:.1f} | 1.00x |",
        f"| process pool, {args.workers} workers | {n:,} | {pooled_s:.1f} | "
        f"{n / pooled_s:.1f} | {serial_s / pooled_s:.2f}x |", "",
        f"feasible cells: {int(serial['feasible'].sum())} of {n}; failed cells: "
        f"{int((serial['error'] != '').sum())}; tables equal but for wall-clock columns: yes",
    ]
    text = record(lines, args.out)
    print(text, end="")
    return text


if __name__ == "__main__":
    main()
