"""Parallel training: how ResNet-50, BERT-base and GPT-2 small scale from 1 to 32 GPUs
under data, pipeline and tensor parallelism and their hybrids, and how the simulated data
parallelism of ResNet-50 on a DGX A100 compares with NVIDIA's published measurement.

Part 1 (published): ResNet-50 training at 256 images per GPU on the catalog's DGX A100,
data-parallel over 1, 2, 4 and 8 GPUs (25 MiB buckets, ring all-reduce, links shared fairly,
communication first), in TF32 and in FP16 (the catalog's tensor-core rates). NVIDIA's
DeepLearningExamples README for ResNet-50 v1.5 in PyTorch (pytorch-21.03 NGC container,
"Training performance: NVIDIA DGX A100 (8x A100 80GB)") reports 938 -> 7,248 img/s in TF32
(7.72x on 8 GPUs) and 2,470 -> 16,621 img/s in mixed precision (6.72x). The study prints
both speedups and their difference; absolute throughput is the roofline model's, not
calibrated to those GPUs, so only the scaling is compared.

Part 2 (buckets): the same step in FP16 at 64 images per GPU on eight GPUs with gradient
buckets from 0.25 MiB to one bucket for all: how much of the all-reduce the backward pass
hides.

Part 3 (strategies): on four DGX H100 nodes (``dgx-h100-x4-ib``, 32 GPUs, NVLink inside a
node, 400 Gb/s InfiniBand across), a fixed global batch per model (strong scaling), every
strategy that applies at 1, 2, 4, 8, 16 and 32 GPUs: data parallelism (dp), tensor
parallelism (tp, at most 4: GPT-2 and BERT have 12 heads, and one node), a pipeline (pp,
1F1B, four micro-batches per stage or one sample each; GPT-2's tied embedding crosses its
stages once per step), and the hybrids dp x tp, dp x pp, dp x pp x tp;
data parallelism across nodes also with the hierarchical all-reduce. Per run: the step,
throughput, efficiency (throughput over ``n`` times one GPU's), the bytes collectives
moved and the share of the step the busiest device spent not computing (communication it
waits for, bubbles). Writes ``parallel_scaling.parquet`` and ``parallel_scaling.png``
(efficiency against GPUs per model and strategy) to ``--out``.

    python experiments/scripts/parallel_scaling.py [--out DIR] [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.results import write_results
from experiments.sweep import exit_with_parent
from hwmodels import get_cluster, make_cost_model
from policies.tensor_parallel import parallelize
from sim import simulate
from workloads import build_model

#: NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 README, DGX A100 (8x A100 80GB),
#: training throughput in img/s on 1 and 8 GPUs.
PUBLISHED = {"tf32": (938.0, 7248.0), "fp16": (2470.0, 16621.0)}
#: model -> (global batch, sequence length) for part 2.
MODELS = {"resnet50": (256, None), "bert_base": (128, 128), "gpt2_small": (32, 1024)}
QUICK_MODELS = {"bert_base": (16, 32)}
GPUS = (1, 2, 4, 8, 16, 32)


def strategies(model: str, n: int) -> list[tuple[str, int, int, int]]:
    """``(name, dp, pp, tp)`` for every strategy that fits ``n`` GPUs of this model."""
    out = [("dp", n, 1, 1)]
    if model == "resnet50":
        return out  # no tensor-parallel split in the zoo
    if n in (2, 4):
        out.append(("tp", 1, 1, n))
    if n >= 8:
        out.append(("dp x tp", n // 4, 1, 4))
    if n in (2, 4, 8):
        out.append(("pp", 1, n, 1))
    if n >= 8:
        out.append(("dp x pp", n // 4, 4, 1))
    if n >= 16:
        out.append(("dp x pp x tp", n // 16, 4, 4))
    return out


def algorithms(name: str, n: int) -> tuple[str, ...]:
    """All-reduce algorithms to run a strategy with: across nodes, also the hierarchical."""
    return ("ring", "hierarchical") if name == "dp" and n >= 16 else ("ring",)


def run(cluster_name: str, model: str, batch: int, seq_len: int | None, dtype: str,
        name: str, dp: int, pp: int, tp: int, algorithm: str = "ring",
        bucket_mib: float = 25.0) -> dict[str, Any]:
    """One strategy's simulated training step."""
    cluster = get_cluster(cluster_name)
    cost = make_cost_model("roofline", cluster)
    forward = build_model(model, batch=batch, seq_len=seq_len, dtype=dtype)
    microbatches = min(4 * pp, batch // dp) if pp > 1 else 1  # at most one sample each
    p = parallelize(forward, cluster, cost, dp=dp, pp=pp, tp=tp, microbatches=microbatches,
                    algorithm=algorithm,
                    bucket_bytes=int(bucket_mib * 2**20))
    r = simulate(p, cluster, cost, links="fair", order="plan" if pp > 1 else "priority")
    trace = r.trace
    compute = trace[trace["kind"] == "compute"]
    busy = (compute["end_s"] - compute["start_s"]).groupby(compute["device"]).sum()
    return {"cluster": cluster_name, "model": model, "dtype": dtype, "batch": batch,
            "strategy": name + (f" ({algorithm})" if algorithm != "ring" else ""),
            "gpus": dp * pp * tp, "dp": dp, "pp": pp, "tp": tp,
            "bucket_mib": bucket_mib, "step_s": r.makespan_s, "samples_per_s": batch / r.makespan_s,
            "feasible": r.feasible, "collective_gb": r.collective_bytes / 1e9,
            "not_computing": 1 - float(busy.max()) / r.makespan_s,
            "peak_memory_gb": max(r.peak_memory_bytes.values()) / 1e9}


def published_cells(quick: bool) -> list[tuple[Any, ...]]:
    per_gpu = 32 if quick else 256
    return [("dgx-a100", "resnet50", per_gpu * n, None, dtype, "dp", n, 1, 1, "ring", 25.0)
            for dtype in PUBLISHED for n in ((1, 2, 4, 8) if not quick else (1, 2))]


def bucket_cells(quick: bool) -> list[tuple[Any, ...]]:
    """ResNet-50 on eight GPUs of the DGX A100 with buckets from 1 MiB to one for all."""
    n, per_gpu = (2, 32) if quick else (8, 64)
    return [("dgx-a100", "resnet50", per_gpu * n, None, "fp16", "dp buckets", n, 1, 1,
             "ring", mib) for mib in ((1.0, 1024.0) if quick else (0.25, 1.0, 5.0, 25.0,
                                                                   100.0, 1024.0))]


def strategy_cells(quick: bool) -> list[tuple[Any, ...]]:
    models, gpus = (QUICK_MODELS, (1, 2, 4)) if quick else (MODELS, GPUS)
    return [("dgx-h100-x4-ib", model, batch, seq, "fp16", *s, algorithm, 25.0)
            for model, (batch, seq) in models.items() for n in gpus
            for s in strategies(model, n) for algorithm in algorithms(s[0], n)]


def with_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """Speedup (throughput over the same model's on one GPU, same cluster and dtype) and
    efficiency (speedup per GPU) of each run."""
    one = df[(df["gpus"] == 1) & (df["strategy"] == "dp")].set_index(
        ["cluster", "model", "dtype"])["samples_per_s"]
    base = df.set_index(["cluster", "model", "dtype"]).index.map(one).to_numpy()
    speedup = df["samples_per_s"].to_numpy() / base
    return df.assign(speedup=speedup, efficiency=speedup / df["gpus"].to_numpy())


def plot(df: pd.DataFrame, path: Path) -> None:
    import matplotlib.figure

    fig = matplotlib.figure.Figure(figsize=(11, 3.6), layout="constrained")
    part = df[df["cluster"] == "dgx-h100-x4-ib"]
    models = list(dict.fromkeys(part["model"]))
    axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
    for ax, model in zip(axes, models, strict=True):
        rows = part[part["model"] == model]
        for strategy, runs in rows.groupby("strategy", sort=False):
            runs = runs.sort_values("gpus")
            ax.plot(runs["gpus"], runs["efficiency"], marker="o", label=strategy)
        ax.set(xscale="log", xlabel="GPUs", title=model)
        ax.set_xticks(sorted(rows["gpus"].unique()),
                      labels=[str(g) for g in sorted(rows["gpus"].unique())])
        ax.legend(fontsize=7)
    axes[0].set_ylabel("scaling efficiency")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def compare_published(df: pd.DataFrame) -> pd.DataFrame:
    """Simulated against published speedup on the most GPUs of part 1."""
    rows = []
    for dtype, (one, many) in PUBLISHED.items():
        sim = df[(df["cluster"] == "dgx-a100") & (df["dtype"] == dtype)
                 & (df["strategy"] == "dp")]
        top = sim.loc[sim["gpus"].idxmax()]
        published = many / one
        rows.append({"dtype": dtype, "gpus": int(top["gpus"]),
                     "simulated_speedup": float(top["speedup"]),
                     "published_speedup_8": published,
                     "difference": float(top["speedup"]) / published - 1})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="scaling-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="small batches, few GPUs")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: every core; 1: this process)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    cells = published_cells(args.quick) + bucket_cells(args.quick) + strategy_cells(
        args.quick)
    if args.workers == 1:
        rows = [run(*cell) for cell in cells]
    else:
        with ProcessPoolExecutor(args.workers, initializer=exit_with_parent,
                                 initargs=(os.getpid(),)) as pool:
            rows = list(pool.map(run, *zip(*cells, strict=True)))
    df = with_efficiency(pd.DataFrame(rows))
    write_results(df, out / "parallel_scaling.parquet")
    plot(df, out / "parallel_scaling.png")
    shown = ["cluster", "model", "dtype", "strategy", "bucket_mib", "gpus", "dp", "pp", "tp",
             "step_s",
             "samples_per_s", "speedup", "efficiency", "collective_gb", "not_computing",
             "feasible"]
    print(df[shown].round(4).to_string(index=False))
    print(compare_published(df).round(3).to_string(index=False))
    print(f"wrote {out / 'parallel_scaling.parquet'} and {out / 'parallel_scaling.png'}")
    return df


if __name__ == "__main__":
    main()
