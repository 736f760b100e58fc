"""The GPU model against a GPU measured here: the zoo's graphs run for real by the
``torch-cuda`` engine, each op timed in context, and the same ops priced by the GPU model
(fitted on NeuSight's training GPUs, never on this one) and by the catalog's roofline.

Two steps, so that the GPU is needed only for the first:

    python -m benchmarks.gpu_measured measure --out F.json   # on a machine with a GPU
    python -m benchmarks.gpu_measured compare [--data F.json] [--out REPORT]   # anywhere

``measure`` runs each graph of :data:`GRAPHS` on one GPU (FP32, as the graph says: the
engine turns PyTorch's TF32 shortcuts off), at least ``--repeats`` runs and
``--min-seconds`` in all, and keeps each op's median busy time (its launch, kernel and
the wait for it: the engine synchronises after every op, as the simulator's one stream
assumes) and each run's makespan, with the machine, driver, library versions and date.
``compare`` rebuilds the same graphs (the zoo is deterministic), prices them on the catalog
GPU the measured one is named after, and reports the error per kernel family (every op,
and the ops that ran 100 us or more, where the kernel rather than the launch dominates) and
per graph (the makespan on one stream against the sum of the predicted op times).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu_published import one_gpu
from benchmarks.machine import describe, record
from hwmodels.cost import make_cost_model
from hwmodels.gpumodel import gpu_key
from hwmodels.registry import get_device
from hwmodels.spec import Device
from workloads import Graph, build_model, training_graph
from workloads.io import write_text_atomic

#: The graphs measured: the zoo's models at sizes people train them at, forward passes and
#: SGD steps, each under a name ``compare`` rebuilds it from.
GRAPHS: dict[str, Callable[[], Graph]] = {
    "resnet50 b32": lambda: build_model("resnet50", batch=32),
    "resnet50 b32 train": lambda: training_graph(build_model("resnet50", batch=32)),
    "inception_v3 b32": lambda: build_model("inception_v3", batch=32),
    "vgg16 b32": lambda: build_model("vgg16", batch=32),
    "alexnet b128": lambda: build_model("alexnet", batch=128),
    "bert_base b8 s128": lambda: build_model("bert_base", batch=8, seq_len=128),
    "bert_base b8 s128 train": lambda: training_graph(
        build_model("bert_base", batch=8, seq_len=128)),
    "gpt2_small b8 s512": lambda: build_model("gpt2_small", batch=8, seq_len=512),
    "mlp b256": lambda: build_model("mlp", batch=256),
    "lstm b64": lambda: build_model("lstm", batch=64),
}

#: An op at least this long is timed mostly by its kernel, not its launch and wait.
KERNEL_BOUND_S = 100e-6

DATA = Path(__file__).resolve().parent / "data" / "gpu_measured"


def catalog_name(gpu_name: str) -> str:
    """The catalog device a GPU's name (as CUDA reports it) is priced as.

    >>> catalog_name("NVIDIA H200")
    'h200-sxm-141gb'
    """
    from runtime.engine import GPU_FIGURES, known_gpu

    name = known_gpu(gpu_name)
    if name is None:
        raise SystemExit(f"gpu_measured: no catalog GPU for {gpu_name!r}; expected one of "
                         f"{sorted(GPU_FIGURES)} as a word of its name")
    return name


def measure(args: argparse.Namespace) -> None:
    """Run every graph on the engine's first GPU and write the times (needs a GPU)."""
    import torch

    from runtime.engine import make_engine
    from runtime.microbench import time_ops

    engine = make_engine(args.engine, 1)
    gpu = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if gpu else None
    graphs: dict[str, Any] = {}
    document = {
        "source": "placelab benchmarks/gpu_measured.py measure",
        "date": datetime.date.today().isoformat(),
        "machine": describe(),
        "gpu": torch.cuda.get_device_name(0) if gpu else "none",
        "gpu_memory_bytes": props.total_memory if props else 0,
        "sm_count": props.multi_processor_count if props else 0,
        "engine": args.engine,
        "libraries": {"torch": torch.__version__, "cuda": str(torch.version.cuda),
                      "cudnn": str(torch.backends.cudnn.version()),
                      "python": platform.python_version()},
        "repeats": args.repeats, "min_seconds": args.min_seconds,
        "graphs": graphs,
    }
    names = args.graphs.split(",") if args.graphs else list(GRAPHS)
    unknown = [n for n in names if n not in GRAPHS]
    if unknown:
        raise SystemExit(f"gpu_measured: --graphs: expected names among {sorted(GRAPHS)}, "
                         f"got {unknown}")
    for name in names:
        start = time.perf_counter()
        run, ops = time_ops(engine, GRAPHS[name](), warmup=2, repeats=args.repeats,
                            min_seconds=args.min_seconds, seed=0)
        graphs[name] = {"makespans_s": run.makespans_s, "op_seconds": ops}
        print(f"{name}: {statistics.median(run.makespans_s) * 1e3:.2f} ms over "
              f"{len(run.makespans_s)} runs, {len(ops)} ops "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        # kept after every graph: a run cut short keeps what it measured
        write_text_atomic(args.out, json.dumps(document, indent=1, sort_keys=True) + "\n")


def predicted(graph: Graph, device: Device, cost_name: str) -> dict[str, float]:
    """Each op of ``graph`` priced alone on ``device`` by the cost model ``cost_name``."""
    cost = make_cost_model(cost_name, one_gpu(device))
    times = cost.op_times(graph, dict.fromkeys(graph.names, "gpu0"))
    return dict(zip(graph.arrays.names, times, strict=True))


def _stats(errors: list[float]) -> str:
    if not errors:
        return "-"
    e = np.abs(np.asarray(errors))
    return f"{np.median(e):.1%} / {np.quantile(e, 0.9):.1%}"


def _family_rows(rows: list[tuple[str, float, dict[str, float]]]) -> list[str]:
    """``rows``: (family, measured seconds, {cost model: predicted seconds})."""
    out = ["| kernel family | ops | GPU model: median / p90 abs error | roofline | "
           "ops >= 100 us | GPU model | roofline |", "|---|---:|---:|---:|---:|---:|---:|"]
    families: dict[str, list[tuple[float, dict[str, float]]]] = defaultdict(list)
    for family, seconds, pred in rows:
        families[family].append((seconds, pred))
        families["every op"].append((seconds, pred))
    for family in sorted(families, key=lambda f: (f == "every op", f)):
        items = families[family]
        big = [(s, p) for s, p in items if s >= KERNEL_BOUND_S]

        def err(pairs: list[tuple[float, dict[str, float]]], model: str) -> list[float]:
            return [p[model] / s - 1 for s, p in pairs]

        out.append(f"| {family} | {len(items)} | {_stats(err(items, 'gpu'))} | "
                   f"{_stats(err(items, 'roofline'))} | {len(big)} | "
                   f"{_stats(err(big, 'gpu'))} | {_stats(err(big, 'roofline'))} |")
    return out


def compare_document(document: Mapping[str, Any]) -> list[str]:
    """The report's lines for one measurement file."""
    device = get_device(catalog_name(document["gpu"]))
    graph_rows = ["| graph | ops | measured ms (min-max) | GPU model | error | roofline | error "
                  "| ops' measured time in ops >= 100 us |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
    op_rows: list[tuple[str, float, dict[str, float]]] = []
    graph_errors: dict[str, list[float]] = defaultdict(list)
    for name, measured in document["graphs"].items():
        graph = GRAPHS[name]()
        pred = {m: predicted(graph, device, m) for m in ("gpu", "roofline")}
        seconds: dict[str, float] = measured["op_seconds"]
        for op_name, s in seconds.items():
            op_rows.append((gpu_key(graph.op(op_name)), s,
                            {m: pred[m][op_name] for m in pred}))
        makespans = measured["makespans_s"]
        median = statistics.median(makespans)
        totals = {m: sum(pred[m][n] for n in seconds) for m in pred}
        for m in pred:
            graph_errors[m].append(totals[m] / median - 1)
        big = sum(s for s in seconds.values() if s >= KERNEL_BOUND_S) / sum(seconds.values())
        graph_rows.append(
            f"| {name} | {len(seconds)} | {median * 1e3:.2f} ({min(makespans) * 1e3:.2f}-"
            f"{max(makespans) * 1e3:.2f}) | {totals['gpu'] * 1e3:.2f} | "
            f"{totals['gpu'] / median - 1:+.1%} | {totals['roofline'] * 1e3:.2f} | "
            f"{totals['roofline'] / median - 1:+.1%} | {big:.0%} |")
    small = sorted(s for _, s, _ in op_rows)[: max(1, len(op_rows) // 10)]
    libs = document["libraries"]
    return [
        f"measured on: {document['gpu']} ({document['sm_count']} SMs, "
        f"{document['gpu_memory_bytes'] / 2**30:.0f} GiB), {document['machine']}, "
        f"{document['date']}; torch {libs['torch']}, CUDA {libs['cuda']}, cuDNN "
        f"{libs['cudnn']}; engine {document['engine']}, FP32",
        f"priced as: {device.name} (GPU model fitted on NeuSight's training GPUs only)", "",
        *graph_rows, "",
        f"whole graphs, median / p90 abs error: GPU model {_stats(graph_errors['gpu'])}, "
        f"roofline {_stats(graph_errors['roofline'])}", "",
        *_family_rows(op_rows), "",
        f"the shortest tenth of the ops took {statistics.median(small) * 1e6:.0f} us "
        f"(median): a launch and the wait for it, the floor under every op here", ""]


def compare(args: argparse.Namespace) -> None:
    """Price the measured graphs and print (and keep) the report."""
    files = [Path(args.data)] if args.data else sorted(DATA.glob("*.json"))
    if not files:
        raise SystemExit(f"gpu_measured: no measurement under {DATA}; run 'measure' on a "
                         f"machine with a GPU first")
    lines = [describe(), f"date: {datetime.date.today().isoformat()}",
             "command: python -m benchmarks.gpu_measured compare"
             + (f" --data {shlex.quote(args.data)}" if args.data else ""), ""]
    for path in files:
        lines += [f"#### {path.name}", "", *compare_document(json.loads(path.read_text()))]
    print(record(lines, args.out), end="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    m = sub.add_parser("measure", help="run the graphs on a GPU and keep the times")
    m.add_argument("--out", required=True)
    m.add_argument("--engine", default="torch-cuda")
    m.add_argument("--graphs", help="comma-separated names of GRAPHS (default: all)")
    m.add_argument("--repeats", type=int, default=5)
    m.add_argument("--min-seconds", type=float, default=1.0)
    c = sub.add_parser("compare", help="price the measured graphs and report the error")
    c.add_argument("--data", help="one measurement file (default: every file under "
                                  "benchmarks/data/gpu_measured)")
    c.add_argument("--out")
    args = parser.parse_args()
    measure(args) if args.step == "measure" else compare(args)


if __name__ == "__main__":
    main()
