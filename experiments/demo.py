"""``placelab demo``: a small, real placement study with its table, plot and trace.

Every registered policy places two workloads on the catalog's workstation (Xeon + L4 over
PCIe) and on four NVLink-connected V100s, and each plan is simulated under the roofline cost
model: a ResNet-50 forward pass (batch 32), and a GPT-2 small training step (Adam, 12 x 1024
tokens) whose weights, optimizer state and activations need more memory than one GPU has.
Written to the output folder: ``results.parquet``, ``compare.png``, the Chrome trace of
the fastest feasible plan of the training step on the four GPUs, and ``manifest.json``
listing those three with their SHA-256 (written last: files of a killed run have none).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.comparison import compare
from experiments.results import format_table, plot_compare, write_results
from hwmodels.cost import make_cost_model
from hwmodels.registry import get_cluster
from policies.base import plan
from sim.engine import simulate
from workloads.io import write_text_atomic
from workloads.training import training_graph
from workloads.zoo import build_model

__all__ = ["DEMO_CLUSTERS", "DEMO_WORKLOADS", "MANIFEST", "run_demo"]

DEMO_WORKLOADS: tuple[tuple[str, int, bool], ...] = (("resnet50", 32, False),
                                                     ("gpt2_small", 12, True))
DEMO_CLUSTERS: tuple[str, ...] = ("workstation", "quad-v100-nvlink")


def run_demo(out: Path, echo: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Run the study, write its files under ``out`` and return a JSON-ready report.

    The files of one run land together: they are written to a staging folder inside
    ``out``, moved into place, and listed with their SHA-256 in ``manifest.json``, written
    last (and removed first): a run killed midway leaves no manifest, so files of different
    runs are never presented as one."""
    say = echo or (lambda _: None)
    import pandas as pd

    frames = [compare([model], DEMO_CLUSTERS, "all", batch=batch, train=train,
                      optimizer="adam") for model, batch, train in DEMO_WORKLOADS]
    df = pd.concat(frames, ignore_index=True)
    quad = df[(df["cluster"] == "quad-v100-nvlink") & (df["model"] == "gpt2_small")
              & df["feasible"] & df["makespan_s"].notna()]
    best = quad.loc[quad["makespan_s"].idxmin()]
    cluster = get_cluster("quad-v100-nvlink")
    cost = make_cost_model("roofline", cluster)
    step = training_graph(build_model("gpt2_small", batch=12), "adam")
    result = simulate(plan(step, cluster, best["policy"], cost), cluster, cost)
    names = ("results.parquet", "compare.png", f"trace-gpt2-train-{best['policy']}.json")
    with _staged(out) as stage:
        write_results(df, stage / names[0])
        plot_compare(df, stage / names[1])
        result.write_chrome_trace(stage / names[2])
    results, chart, trace = (out / name for name in names)
    say(format_table(df))
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
            "out_of_memory": oom, "manifest": str(out / MANIFEST)}


#: The list of one run's files and their hashes, written once all of them are in place.
MANIFEST = "manifest.json"


@contextlib.contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A staging folder in ``out`` for one run's files; on success they replace the
    folder's, earlier traces go (their name holds the policy) and the manifest is
    written."""
    import psutil

    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    for old in out.glob(".staging-*-*"):  # left by a run killed outright (kill -9)
        pid = old.name.split("-")[1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    stage = Path(tempfile.mkdtemp(prefix=f".staging-{os.getpid()}-", dir=out))
    try:
        yield stage
        files = sorted(p.name for p in stage.iterdir())
        for old in out.glob("trace-gpt2-train-*.json"):
            if old.name not in files:
                old.unlink()
        for name in files:
            os.replace(stage / name, out / name)
        manifest = {"written": datetime.now(UTC).isoformat(timespec="seconds"),
                    "files": {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
                              for name in files}}
        write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
