"""Executor overhead: ``runtime.execute`` against a straight-line loop that calls the same
kernels in the same order with no bookkeeping (no threads, events, memory counting or
trace), both on one logical CPU device in the same run, in interleaved blocks (the median
of three runs each, after a warm-up) whose medians are reported;
and, for reference, the NumPy
engine's ResNet-50 forward against PyTorch (eager) and onnxruntime on the same machine with
the same number of threads.

    python -m benchmarks.executor_overhead [--repeats 5] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.machine import describe, record
from policies import plan
from runtime import NumpyEngine, execute, make_inputs
from runtime.kernels import kernel_for
from runtime.microbench import median_time
from runtime.weights import owner_of, weight_arrays
from workloads import build_model
from workloads.graph import Graph


def straight_line(graph: Graph, seed: int = 0) -> Callable[[], None]:
    """The same kernels in topological order, weights and inputs ready, each tensor dropped
    after its last reader (as any hand-written loop would), nothing else."""
    import array_api_compat.numpy as xp

    inputs = make_inputs(graph, seed)
    owned = {op.name: weight_arrays(op, seed, np.float32) for op in graph if op.params}
    weights = {op.name: owned[owner_of(graph, op).name] for op in graph
               if owner_of(graph, op).params}  # a shared weight is one array, as in execute
    ops = [graph.op(n) for n in graph.topological_order()]
    last = {t: i for i, op in enumerate(ops) for t in op.inputs}
    calls = [(op, kernel_for(op) if op.kind != "input" else None,
              [t for t in dict.fromkeys(op.inputs) if last[t] == i]) for i, op in enumerate(ops)]

    def run() -> None:
        values: dict[str, object] = {}
        for op, kernel, done in calls:
            if kernel is None:
                values[op.output.name] = inputs[op.output.name]
                continue
            outs = kernel(xp, op, [values[t] for t in op.inputs], weights.get(op.name, {}))
            for t, v in zip(op.outputs, outs, strict=True):
                values[t.name] = v
            for name in done:
                del values[name]

    return run


def overhead_rows(repeats: int) -> list[str]:
    engine = NumpyEngine(devices=1)
    rows = []
    for label, graph in (("resnet50 batch 1", build_model("resnet50", batch=1)),
                         ("resnet50 batch 8", build_model("resnet50", batch=8)),
                         ("lstm batch 1", build_model("lstm", batch=1)),
                         ("mlp batch 1", build_model("mlp", batch=1))):
        p = plan(graph, engine.cluster(), "single_device")
        loop_fn = straight_line(graph)
        loops, runs = [], []
        for _ in range(repeats):  # blocks interleaved, so that drifts of a shared machine cancel
            with engine.session():
                loops.append(median_time(loop_fn, 3))
            runs.append(execute(p, engine, warmup=1, repeats=3).makespan_s)
        loop, ours = statistics.median(loops), statistics.median(runs)
        per_op = (ours - loop) / len(graph) * 1e6
        rows.append(f"| {label} | {len(graph)} | {loop * 1e3:.2f} | {ours * 1e3:.2f} | "
                    f"{per_op:.1f} | {(ours - loop) / ours:.1%} |")
        print(rows[-1], flush=True)
    return rows


def torch_resnet50(torch):
    """ResNet-50 (He et al. 2016, torchvision's layout), written here: torchvision's wheels
    do not load beside the CPU build of torch on these machines."""
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    layers, cin = [], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(2048, 1000), nn.Softmax(-1)).eval()


def reference_rows(repeats: int, threads: int) -> list[str]:
    engine = NumpyEngine(devices=1)
    rows = []
    for batch in (1, 8):
        graph = build_model("resnet50", batch=batch)
        ours = execute(plan(graph, engine.cluster(), "single_device"), engine,
                       repeats=repeats).makespan_s
        rows.append(f"| placelab NumPy engine | {batch} | {ours * 1e3:.1f} | 1.00 |")
        try:
            import torch
        except ImportError:
            rows.append(f"| torch eager | {batch} | not installed | |")
        else:
            torch.set_num_threads(threads)
            model = torch_resnet50(torch)
            x = torch.randn(batch, 3, 224, 224)
            with torch.no_grad():
                t = median_time(lambda: model(x), repeats)  # noqa: B023
            rows.append(f"| torch {torch.__version__} eager | {batch} | {t * 1e3:.1f} | "
                        f"{t / ours:.2f} |")
        if batch == 1:  # the shipped model reshapes to a batch of 1
            rows.append(_onnxruntime_row(ours, repeats, threads))
        for row in rows[-3 if batch == 1 else -2:]:
            print(row, flush=True)
    return rows


def _onnxruntime_row(ours: float, repeats: int, threads: int) -> str:
    batch = 1
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        return f"| onnxruntime | {batch} | not installed | |"
    path = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    model = onnx.load(str(path))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
    t = median_time(lambda: session.run(None, {name: x}), repeats)
    return f"| onnxruntime {ort.__version__} (light_resnet50.onnx) | {batch} | " \
           f"{t * 1e3:.1f} | {t / ours:.2f} |"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args(argv)
    threads = NumpyEngine(devices=1).threads
    lines = [describe(), f"date: {datetime.date.today().isoformat()}",
             f"command: python -m benchmarks.executor_overhead --repeats {args.repeats}", "",
             "### Executor against a straight-line loop of the same kernels (one device)", "",
             "| graph | ops | loop ms | executor ms | overhead us/op | overhead share |",
             "|---|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    lines += overhead_rows(args.repeats)
    head = ["", f"### ResNet-50 forward, {threads} threads each", "",
            "| runtime | batch | ms | time / placelab's |", "|---|---:|---:|---:|"]
    print("\n".join(head), flush=True)
    lines += head + reference_rows(args.repeats, threads)
    return record(lines, args.out)


if __name__ == "__main__":
    main()
