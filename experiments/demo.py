"""``placelab demo``: a small, real placement study with its table, plot and trace.

Every registered policy places two workloads on the catalog's workstation (Xeon + L4 over
PCIe) and on four NVLink-connected V100s, and each plan is simulated under the roofline cost
model: a ResNet-50 forward pass (batch 32), and a GPT-2 small training step (Adam, 12 x 1024
tokens) whose weights, optimizer state and activations need more memory than one GPU has.
Written to the output folder: ``results.parquet``, ``compare.png``, and the Chrome trace of
the fastest feasible plan of the training step on the four GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.comparison import compare
from experiments.results import format_table, plot_compare, write_results
from hwmodels.cost import make_cost_model
from hwmodels.registry import get_cluster
from policies.base import plan
from sim.engine import simulate
from workloads.training import training_graph
from workloads.zoo import build_model

__all__ = ["DEMO_CLUSTERS", "DEMO_WORKLOADS", "run_demo"]

DEMO_WORKLOADS: tuple[tuple[str, int, bool], ...] = (("resnet50", 32, False),
                                                     ("gpt2_small", 12, True))
DEMO_CLUSTERS: tuple[str, ...] = ("workstation", "quad-v100-nvlink")


def run_demo(out: Path, echo: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Run the study, write its files under ``out`` and return a JSON-ready report."""
    say = echo or (lambda _: None)
    import pandas as pd

    frames = [compare([model], DEMO_CLUSTERS, "all", batch=batch, train=train,
                      optimizer="adam") for model, batch, train in DEMO_WORKLOADS]
    df = pd.concat(frames, ignore_index=True)
    results = write_results(df, out / "results.parquet")
    chart = plot_compare(df, out / "compare.png")
    say(format_table(df))

    quad = df[(df["cluster"] == "quad-v100-nvlink") & (df["model"] == "gpt2_small")
              & df["feasible"] & df["makespan_s"].notna()]
    best = quad.loc[quad["makespan_s"].idxmin()]
    cluster = get_cluster("quad-v100-nvlink")
    cost = make_cost_model("roofline", cluster)
    step = training_graph(build_model("gpt2_small", batch=12), "adam")
    result = simulate(plan(step, cluster, best["policy"], cost), cluster, cost)
    trace = result.write_chrome_trace(out / f"trace-gpt2-train-{best['policy']}.json")
    oom = sorted(df[(df["model"] == "gpt2_small") & ~df["feasible"]
                    & df["makespan_s"].notna()]["policy"].unique())
    say("")
    say(f"GPT-2 small training step on quad-v100-nvlink: fastest feasible plan "
        f"{best['policy']} ({best['makespan_s'] * 1e3:.1f} ms, "
        f"{best['makespan_over_bound']:.2f}x the lower bound)")
    say(f"out of memory there or on the workstation: {', '.join(oom) or 'none'}")
    say(f"results: {results}\nplot:    {chart}\ntrace:   {trace} (open in ui.perfetto.dev)")
    return {"rows": df.to_dict(orient="records"), "results": str(results),
            "plot": str(chart), "trace": str(trace), "best_policy": best["policy"],
            "out_of_memory": oom}
