"""What if our NPU had more memory bandwidth, more memory, or a faster link to a second one?

Takes the hypothetical accelerator of ``experiments/hardware/whatif-npu.toml``, sweeps its
memory bandwidth and capacity, and simulates one GPT-2 small training step (Adam, bf16,
1024 tokens, batch 8) on a single such device; then splits the same step over two NPUs of
12 GiB (too small for it alone) and sweeps the bandwidth of the link between them. Writes
``whatif_npu.parquet``, ``whatif_npu_links.parquet`` and ``whatif_npu.png`` (step time
against bandwidth; which capacities hold the step's peak memory; the split step against
link bandwidth) to ``--out``.

    python experiments/scripts/whatif_npu.py [--out DIR] [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from experiments.results import write_results
from experiments.runspec import RunSpec
from experiments.sweep import Experiment
from hwmodels import Cluster, Link, RooflineCost, get_device, loads
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


def link_sweep(links_gbps: list[float], capacity_gib: float, batch: int,
               seq_len: int = 1024, workers: int | None = None) -> pd.DataFrame:
    """Two NPUs of ``capacity_gib`` each, joined by one link of each bandwidth: the step
    split by memory-aware policies (links shared max-min fairly), through the sweep
    machinery."""
    base = dataclasses.replace(npu_spec(), memory_bytes=int(capacity_gib * GIB))
    specs = []
    for gbps in links_gbps:
        cluster = Cluster(f"two-npus-{gbps:g}", (base.instance("npu0"), base.instance("npu1")),
                          (Link("npu0", "npu1", gbps * 1e9, 2e-6),))
        specs += [RunSpec.make("gpt2_small", cluster, policy, batch=batch, seq_len=seq_len,
                               dtype="bf16", train=True, optimizer="adam", links="fair",
                               variant=f"{gbps:g}")
                  for policy in ("pipeline", "m_etf", "m_sct", "metis", "heft")]
    df = Experiment(specs).run(workers=workers)
    return df.assign(link_gbps=df["variant"].astype(float))


def plot(df: pd.DataFrame, links: pd.DataFrame, path: Path) -> Path:
    """Left: step time against bandwidth. Middle: which capacities hold the step. Right:
    the step split over two smaller NPUs, against the bandwidth of the link between them."""
    fig = Figure(figsize=(15, 4.2))
    left, right, third = fig.subplots(1, 3)
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
    for k, (policy, rows) in enumerate(links.groupby("policy", sort=False)):
        rows = rows.sort_values("link_gbps")
        fits = rows["feasible"].fillna(False).astype(bool)
        third.plot(rows["link_gbps"], rows["makespan_s"].astype(float) * 1e3, marker="o",
                   color=f"C{k}", label=policy)
        third.plot(rows[~fits]["link_gbps"], rows[~fits]["makespan_s"].astype(float) * 1e3,
                   "x", color="tab:red", markersize=8)
    third.set_xscale("log", base=2)
    third.set_xlabel("link bandwidth between two NPUs (GB/s)")
    third.set_ylabel("simulated training step (ms)")
    third.set_title("Split over two NPUs (red x: over capacity)")
    third.legend(fontsize="small")
    fig.suptitle("GPT-2 small training step (Adam, bf16, 8 x 1024 tokens) on one what-if NPU")
    fig.tight_layout()
    return write_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description="What-if sweep of a hypothetical NPU.")
    parser.add_argument("--out", default="whatif-out", help="output folder")
    parser.add_argument("--quick", action="store_true", help="a small sweep (for tests)")
    parser.add_argument("--workers", type=int, default=None,
                        help="local worker processes for the link sweep")
    args = parser.parse_args(argv)
    if args.quick:
        df = sweep([1.0, 4.0], [0.5, 64], batch=1, seq_len=256)
        links = link_sweep([8, 64], 2, batch=1, seq_len=256, workers=args.workers)
    else:
        df = sweep([0.5, 1.0, 2.0, 4.0, 8.0], [8, 12, 16, 24], batch=8)
        links = link_sweep([8, 16, 32, 64, 128, 256, 512], 12, batch=8,
                           workers=args.workers)
    out = Path(args.out)
    write_results(df, out / "whatif_npu.parquet")
    write_results(links, out / "whatif_npu_links.parquet")
    plot(df, links, out / "whatif_npu.png")
    print(df.assign(step_ms=(df["step_s"] * 1e3).round(2)).drop(columns=["step_s", "reason"])
          .to_string(index=False))
    print(links.assign(step_ms=(links["makespan_s"].astype(float) * 1e3).round(2)).pivot(
        index="link_gbps", columns="policy", values="step_ms").to_string())
    print(f"wrote {out / 'whatif_npu.parquet'}, {out / 'whatif_npu_links.parquet'} and "
          f"{out / 'whatif_npu.png'}")
    return df


if __name__ == "__main__":
    main()
