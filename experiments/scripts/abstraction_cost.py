"""What does abstraction cost? (the question of *When they go high, we go low*, answered on
the machine at hand.)

The same graphs — a ResNet-50 forward pass and an MLP training step (SGD) — run through
(1) placelab's executor, (2) a straight-line loop calling the same kernels with nothing
else, (3) PyTorch eager, the graph interpreted op by op with torch's functional ops (and
autograd and an in-place SGD update for the step), (4) TorchScript, the same interpreter
traced by ``torch.jit.trace`` (forward only), and (5) onnxruntime on the onnx package's
ResNet-50 (forward, batch 1 only), all with the same number of threads. For each: time per
step and the overhead per op against the straight-line loop. Then the simulator's
prediction of the one-device step as the launch overhead per op varies: where the
prediction meets each runtime's measured step is the per-op overhead that runtime
effectively pays. Writes ``abstraction_cost.parquet`` and
``abstraction_cost.png`` to ``--out``; what is not installed is skipped, saying why.

    python experiments/scripts/abstraction_cost.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from experiments.results import write_results
from hwmodels import Cluster, Device, RooflineCost
from policies import Plan, plan
from runtime import NumpyEngine, execute, make_inputs
from runtime.microbench import median_time
from runtime.resident import STAGED, parameters, place_resident, resident_key
from runtime.training import bind
from sim import simulate
from workloads import Graph, build_model, training_graph
from workloads.io import write_figure

LAUNCH_US = (0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def straight_line(p: Plan, engine: NumpyEngine) -> Callable[[], None]:
    """The plan's ops in order, each the call the executor makes, nothing else."""
    graph = p.graph
    host = make_inputs(graph) | parameters(graph, 0, {})
    resident, _ = place_resident(p, engine, 0, {})
    ops = [graph.op(n) for n in graph.topological_order()]
    last = {t: i for i, op in enumerate(ops) for t in op.inputs}
    calls = [(op, None if op.kind in STAGED else bind(graph, op),
              resident.get((resident_key(graph, op), "cpu0"), {}),
              [t for t in dict.fromkeys(op.inputs) if last[t] == i])
             for i, op in enumerate(ops)]

    def run() -> None:
        values: dict[str, Any] = {}
        for op, call, res, done in calls:
            if call is None:
                values[op.output.name] = host[op.output.name]
                continue
            outs = call(engine.xp, [values[t] for t in op.inputs], res)
            values.update(zip((t.name for t in op.outputs), outs, strict=True))
            for t in done:  # dropped after its last reader, as any hand-written loop does
                del values[t]
    return run


def torch_runs(graph: Graph, train: bool, repeats: int, threads: int
               ) -> dict[str, float | str]:
    """PyTorch eager (and TorchScript for a forward pass) over the same graph."""
    try:
        import torch
    except ImportError:
        return {"PyTorch eager": "torch is not installed"}
    from runtime.weights import weight_arrays

    torch.set_num_threads(threads)
    inputs = {k: torch.tensor(v) for k, v in make_inputs(graph).items()}
    weights = {op.name: {k: torch.tensor(v, requires_grad=train)
                         for k, v in weight_arrays(op, 0, np.float32).items()}
               for op in graph if op.params}
    forward = graph if not train else _forward_of(graph)

    def eager() -> None:
        out = _interpret(torch, forward, inputs, weights)
        if train:
            loss = torch.nn.functional.nll_loss(torch.log(out), inputs["labels"])
            loss.backward()
            with torch.no_grad():
                for slots in weights.values():
                    for w in slots.values():
                        if w.grad is not None:  # buffers (batch-norm statistics) have none
                            w -= 0.01 * w.grad
                            w.grad = None

    out: dict[str, float | str] = {"PyTorch eager": median_time(eager, repeats)}
    if train:
        out["TorchScript"] = "traced forward only: a training step is not traced here"
        return out

    class Net(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return _interpret(torch, forward, {**inputs, "input": x}, weights)

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript still runs
        traced = torch.jit.trace(Net(), inputs["input"])
        out["TorchScript"] = median_time(lambda: traced(inputs["input"]), repeats)
    return out


def _forward_of(step: Graph) -> Graph:
    """The forward ops of a training step (with their weights back on the ops)."""
    from dataclasses import replace

    keep = [op for op in step if op.kind not in ("backward", "parameter", "cross_entropy")
            and not op.kind.endswith("_update") and op.name != "labels"]
    ops = [replace(op, inputs=tuple(t for t in op.inputs if not t.endswith(".weights")))
           for op in keep]
    return Graph(step.name, ops)


def _interpret(torch: Any, graph: Graph, inputs: dict[str, Any],
               weights: dict[str, dict[str, Any]]) -> Any:
    f = torch.nn.functional
    values: dict[str, Any] = {}
    for name in graph.topological_order():
        op, a = graph.op(name), graph.op(name).attrs
        w = weights.get(a.get("shares", name), {})
        x = [values[t] for t in op.inputs]
        k = op.kind
        if k == "input":
            y = inputs[op.output.name]
        elif k == "linear":
            y = x[0] @ w["weight"] + (w["bias"] if a.get("bias") else 0)
        elif k == "conv2d":
            y = f.conv2d(x[0], w["weight"], w.get("bias"), a["stride"], a["padding"], 1,
                         a["groups"])
        elif k == "batchnorm":
            y = f.batch_norm(x[0], w["mean"], w["var"], w["scale"], w["shift"], False, 0.0,
                             a["eps"])
        elif k in ("max_pool2d", "avg_pool2d"):
            pool = f.max_pool2d if k == "max_pool2d" else f.avg_pool2d
            y = pool(x[0], a["kernel"], a["stride"], a["padding"])
        elif k == "global_avg_pool":
            y = x[0].mean(dim=(2, 3), keepdim=True)
        elif k in ("flatten", "reshape"):
            y = x[0].reshape(op.output.shape)
        elif k == "add":
            y = x[0] + x[1]
        elif k == "softmax":
            y = f.softmax(x[0], dim=-1)
        else:
            y = {"relu": torch.relu, "tanh": torch.tanh}[k](x[0])
        values[op.output.name] = y
    return values[graph.outputs[-1]]


def onnxruntime_run(repeats: int, threads: int) -> float | str:
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        return "onnx or onnxruntime is not installed"
    path = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options)
    name = session.get_inputs()[0].name
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    return median_time(lambda: session.run(None, {name: x}), repeats)


class LaunchCost(RooflineCost):
    """The catalog CPU's roofline with another launch overhead per op."""

    def __init__(self, cluster: Cluster, launch_s: float) -> None:
        super().__init__(cluster)
        self.launch = {d.name: dataclasses.replace(d, launch_overhead_s=launch_s)
                       for d in cluster.devices}

    def spec(self, device: str) -> Device:
        return self.launch[device]


def predictions(p: Plan, engine: NumpyEngine) -> list[dict[str, float]]:
    """The simulated one-device step as the catalog CPU's launch overhead varies."""
    cluster = engine.cluster()
    return [{"launch_us": us, "predicted_s": simulate(p, cluster, LaunchCost(
        cluster, us * 1e-6)).makespan_s} for us in LAUNCH_US]


def study(quick: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    engine = NumpyEngine(devices=1)
    repeats = 3 if quick else 7
    cases = {"resnet50 forward": (build_model("resnet50", batch=1), False),
             "mlp training step": (training_graph(build_model("mlp", batch=8),
                                                  hyperparameters={"lr": 0.01}), True)}
    if quick:
        cases = {"lenet5 forward": (build_model("lenet5", batch=8), False),
                 "mlp training step": cases["mlp training step"]}
    rows, curves = [], []
    for label, (graph, train) in cases.items():
        p = plan(graph, engine.cluster(), "single_device")
        with engine.session():
            loop = median_time(straight_line(p, engine), repeats)
        runs: dict[str, float | str] = {
            "placelab executor": execute(p, engine, warmup=1, repeats=repeats).makespan_s,
            "straight-line loop": loop, **torch_runs(graph, train, repeats, engine.threads)}
        if label.startswith("resnet50"):
            runs["onnxruntime"] = onnxruntime_run(repeats, engine.threads)
        ops = sum(op.kind not in STAGED for op in graph)
        for runtime, value in runs.items():
            if isinstance(value, float):
                rows.append({"graph": label, "runtime": runtime, "ops": ops, "step_s": value,
                             "overhead_us_per_op": (value - loop) / ops * 1e6,
                             "skipped": None})
            else:
                rows.append({"graph": label, "runtime": runtime, "ops": ops, "step_s": None,
                             "overhead_us_per_op": None, "skipped": value})
        curves += [{"graph": label, **c} for c in predictions(p, engine)]
    return pd.DataFrame(rows), pd.DataFrame(curves)


def figure(table: pd.DataFrame, curves: pd.DataFrame, path: Path) -> None:
    graphs = list(dict.fromkeys(table["graph"]))
    fig = Figure(figsize=(5 * len(graphs), 4))
    for i, graph in enumerate(graphs):
        ax = fig.add_subplot(1, len(graphs), i + 1)
        c = curves[curves["graph"] == graph]
        ax.plot(c["launch_us"], c["predicted_s"] * 1e3, "k-o", label="simulated (catalog CPU)")
        measured = table[(table["graph"] == graph) & table["step_s"].notna()]
        for k, r in enumerate(measured.itertuples()):
            ax.axhline(r.step_s * 1e3, linestyle="--", linewidth=1.0, color=f"C{k + 1}",
                       label=f"{r.runtime} (measured)")
        ax.set(title=graph, xlabel="launch overhead per op (us)", ylabel="step (ms)")
        ax.legend(fontsize=7)
    write_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--quick", action="store_true", help="LeNet-5 instead of ResNet-50")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table, curves = study(args.quick)
    write_results(table, out / "abstraction_cost.parquet")
    figure(table, curves, out / "abstraction_cost.png")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
