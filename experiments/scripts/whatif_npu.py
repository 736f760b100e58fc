"""What if our NPU had more memory bandwidth, or more memory?

Takes the hypothetical accelerator of ``experiments/hardware/whatif-npu.toml``, sweeps its
memory bandwidth and capacity, and simulates one GPT-2 small training step (Adam, bf16,
1024 tokens, batch 8) on a single such device. Writes ``whatif_npu.parquet`` and
``whatif_npu.png`` (step time against bandwidth; which capacities hold the step's peak
memory) to ``--out``.

    python experiments/scripts/whatif_npu.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from experiments.results import write_results
from hwmodels import Cluster, RooflineCost, get_device, loads
from policies import plan
from sim import simulate
from workloads import build_model, training_graph
from workloads.io import write_figure

HERE = Path(__file__).resolve().parents[1]
GIB = 2**30


def npu_spec():
    text = (HERE / "hardware" / "whatif-npu.toml").read_text()
    return loads(text, source="whatif-npu.toml", known_models=get_device).devices["whatif-npu"]


def sweep(bandwidths_tbps: list[float], capacities_gib: list[float], batch: int,
          seq_len: int = 1024) -> pd.DataFrame:
    base = npu_spec()
    step = training_graph(build_model("gpt2_small", batch=batch, dtype="bf16",
                                      seq_len=seq_len), "adam")
    rows = []
    for capacity in capacities_gib:
        for bandwidth in bandwidths_tbps:
            spec = dataclasses.replace(base, name="npu0", memory_bandwidth=bandwidth * 1e12,
                                       memory_bytes=int(capacity * GIB))
            cluster = Cluster("one-npu", (spec,))
            cost = RooflineCost(cluster)
            result = simulate(plan(step, cluster, "single_device", cost), cluster, cost)
            rows.append({"bandwidth_tbps": bandwidth, "memory_gib": capacity,
                         "step_s": result.makespan_s, "feasible": result.feasible,
                         "peak_memory_gib": result.peak_memory_bytes["npu0"] / GIB,
                         "reason": result.reason})
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, path: Path) -> Path:
    """Left: step time against bandwidth. Right: which capacities hold the step."""
    fig = Figure(figsize=(10, 4.2))
    left, right = fig.subplots(1, 2)
    # Step time does not depend on capacity (memory only decides whether the step fits).
    ok = df[df["feasible"]].groupby("bandwidth_tbps")["step_s"].first()
    left.plot(ok.index, ok.values * 1e3, marker="o")
    left.set_xscale("log", base=2)
    left.set_xlabel("memory bandwidth (TB/s)")
    left.set_ylabel("simulated training step (ms)")
    left.set_title("Step time (any capacity that fits)")
    per_capacity = df.groupby("memory_gib").agg(peak=("peak_memory_gib", "max"),
                                                fits=("feasible", "all"))
    xs = [str(c) for c in per_capacity.index]
    right.bar(xs, per_capacity.index, color=["tab:green" if f else "tab:red"
                                             for f in per_capacity["fits"]],
              label="capacity (red: too small)")
    right.axhline(per_capacity["peak"].max(), color="black", linestyle="--",
                  label="peak memory of the step")
    right.set_xlabel("memory capacity (GiB)")
    right.set_ylabel("GiB")
    right.set_title("Does the step fit?")
    right.legend(fontsize="small")
    fig.suptitle("GPT-2 small training step (Adam, bf16, 8 x 1024 tokens) on one what-if NPU")
    fig.tight_layout()
    return write_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description="What-if sweep of a hypothetical NPU.")
    parser.add_argument("--out", default="whatif-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="a small sweep (for tests)")
    args = parser.parse_args(argv)
    if args.quick:
        df = sweep([1.0, 4.0], [0.5, 64], batch=1, seq_len=256)
    else:
        df = sweep([0.5, 1.0, 2.0, 4.0, 8.0], [8, 12, 16, 24], batch=8)
    out = Path(args.out)
    write_results(df, out / "whatif_npu.parquet")
    plot(df, out / "whatif_npu.png")
    print(df.assign(step_ms=(df["step_s"] * 1e3).round(2)).drop(columns=["step_s", "reason"])
          .to_string(index=False))
    print(f"wrote {out / 'whatif_npu.parquet'} and {out / 'whatif_npu.png'}")
    return df


if __name__ == "__main__":
    main()
