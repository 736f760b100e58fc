"""``placelab demo``: a small, real placement study with its table, plot and trace.

Every registered policy places ResNet-50 (batch 32) and an MLP (batch 256) on the catalog's
workstation (Xeon + L4 over PCIe) and on four NVLink-connected V100s; each plan is simulated
under the roofline cost model. Written to the output folder: ``results.parquet``,
``compare.png``, and the Chrome trace of the fastest plan on the four GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.compare import compare
from experiments.results import format_table, plot_compare, write_results
from hwmodels.cost import make_cost_model
from hwmodels.registry import get_cluster
from policies.base import plan
from sim.engine import simulate
from workloads.zoo import build_model

__all__ = ["DEMO_CLUSTERS", "DEMO_MODELS", "run_demo"]

DEMO_MODELS: tuple[tuple[str, int], ...] = (("resnet50", 32), ("mlp", 256))
DEMO_CLUSTERS: tuple[str, ...] = ("workstation", "quad-v100-nvlink")


def run_demo(out: Path, echo: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Run the study, write its files under ``out`` and return a JSON-ready report."""
    say = echo or (lambda _: None)
    import pandas as pd

    frames = [compare([model], DEMO_CLUSTERS, "all", batch=batch)
              for model, batch in DEMO_MODELS]
    df = pd.concat(frames, ignore_index=True)
    results = write_results(df, out / "results.parquet")
    chart = plot_compare(df, out / "compare.png")
    say(format_table(df))

    quad = df[(df["cluster"] == "quad-v100-nvlink") & (df["model"] == "resnet50")
              & df["feasible"] & df["makespan_s"].notna()]
    best = quad.loc[quad["makespan_s"].idxmin()]
    cluster = get_cluster("quad-v100-nvlink")
    cost = make_cost_model("roofline", cluster)
    result = simulate(plan(build_model("resnet50", batch=32), cluster, best["policy"], cost),
                      cluster, cost)
    trace = result.write_chrome_trace(out / f"trace-resnet50-{best['policy']}.json")
    say("")
    say(f"fastest plan for resnet50 on quad-v100-nvlink: {best['policy']} "
        f"({best['makespan_s'] * 1e3:.2f} ms)")
    say(f"results: {results}\nplot:    {chart}\ntrace:   {trace} (open in ui.perfetto.dev)")
    return {"rows": df.to_dict(orient="records"), "results": str(results),
            "plot": str(chart), "trace": str(trace), "best_policy": best["policy"]}
