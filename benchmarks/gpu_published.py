"""How far to trust placelab's GPU op times: predictions against published measurements.

The GPU model (``hwmodels.gpumodel``, fitted by ``hwmodels.gpufit``) is fitted on
NeuSight's kernel latencies of its training GPUs only (P4, P100, T4, V100-PCIe,
A100-PCIe-40GB; NeuSight's own training split), then checked on what it never saw:

1. **kernels** — per kernel family, median and p90 |error| on NeuSight's held-out GPUs (L4,
   H100, A100-80GB-PCIe), on the training GPUs' unseen shapes, and on DeepBench's GEMMs and
   convolutions (FP32 and FP16, six GPUs, three of them of architectures or boards the fit
   never saw);
2. **end to end** — every NeuSight label on one GPU (forward, and forward + backward against
   a step without the optimizer update), the zoo's graph priced op by op;
3. **four GPUs** — NeuSight's Megatron-LM iterations on 4xH100 and 4xA100-SXM4-40GB under
   dp4, tp4 and pp4, through ``policies.tensor_parallel.parallelize`` and the simulator;
4. **ResNet-50 on the DGX A100** — one GPU's training throughput in TF32 and mixed
   precision against NVIDIA's published figures.

Each against the catalog's roofline (``roofline`` cost model, what every GPU study used
before) and beside NeuSight's own reported error where its artifact gives one.

    python -m benchmarks.gpu_published [--fit] [--quick] [--out F]

``--fit`` refits the model from ``benchmarks/data`` and rewrites
``hwmodels/catalog/gpu_predictor.toml`` first (deterministic: the same file each time).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from benchmarks.machine import describe, record
from hwmodels.cost import make_cost_model
from hwmodels.gpufit import (
    GPU_PREDICTOR_FILE,
    GpuCost,
    Measured,
    fit_gpu_predictor,
    load_gpu_predictor,
    measured_kernels,
    write_gpu_predictor,
)
from hwmodels.gpumodel import MIN_FIT_SECONDS
from hwmodels.published import (
    HELDOUT_GPUS,
    TRAINING_GPUS,
    DeepBenchMeasurement,
    ModelMeasurement,
    data_dir,
    deepbench,
    neusight_kernels,
    neusight_models,
)
from hwmodels.registry import get_cluster, get_device
from hwmodels.spec import Cluster, Device
from policies.tensor_parallel import parallelize
from sim import simulate
from workloads import build_model
from workloads.builder import GraphBuilder
from workloads.errors import OutOfMemory, PlacelabError
from workloads.graph import Graph
from workloads.op import Op
from workloads.training import training_graph

#: NeuSight's model names -> the zoo's.
ZOO = {"bert_large": "bert_large", "gpt2_large": "gpt2_large", "gpt3_xl": "gpt3_xl_neusight",
       "gpt3_27": "gpt3_2.7b", "opt_13": "opt_1.3b"}
#: NeuSight's own end-to-end errors (%), from its artifact's summary tables
#: (github.com/sitar-lab/NeuSight, scripts/asplos/summary/nvidia_inf.csv, nvidia_train.csv,
#: distributed.csv; its README says these are the paper's figures 7-9 and tables 7-8):
#: (gpu, model, mode, batch, parallel) -> error.
_GPU = {"H100": "h100-sxm5-80gb", "L4": "l4", "A100-80": "a100-pcie-80gb",
        "A100-SXM": "a100-sxm4-40gb"}
#: (gpu, model, mode, batch) -> error, as "GPU model mode batch error" rows.
_REPORTED = """
H100 bert_large inf 8 23.4
H100 bert_large inf 16 13.2
H100 gpt2_large inf 4 3.1
H100 gpt2_large inf 8 6.8
H100 gpt3_xl inf 2 6.2
H100 gpt3_xl inf 8 3.9
H100 opt_13 inf 2 2.0
H100 opt_13 inf 8 4.3
H100 gpt3_27 inf 2 0.7
H100 gpt3_27 inf 8 0.4
L4 bert_large inf 8 14.6
L4 bert_large inf 16 20.4
L4 gpt2_large inf 4 11.0
L4 gpt2_large inf 8 10.3
L4 gpt3_xl inf 2 10.3
L4 opt_13 inf 2 28.2
L4 gpt3_27 inf 2 7.7
H100 bert_large train 2 14.0
H100 bert_large train 8 17.6
H100 gpt2_large train 1 16.4
H100 gpt2_large train 4 1.7
H100 gpt3_xl train 1 1.2
H100 opt_13 train 1 1.5
H100 opt_13 train 2 0.1
H100 gpt3_27 train 1 1.6
L4 bert_large train 2 3.3
L4 bert_large train 8 15.6
L4 gpt2_large train 1 2.8
A100-80 bert_large train 2 0.1
A100-80 bert_large train 8 0.4
A100-80 gpt2_large train 1 5.2
A100-80 gpt2_large train 4 9.9
A100-80 gpt3_xl train 1 27.9
A100-80 opt_13 train 1 9.5
A100-80 opt_13 train 2 4.0
A100-80 gpt3_27 train 1 2.2
"""
#: (gpu, model, global batch, strategy) -> error, as rows.
_DISTRIBUTED = """
A100-SXM gpt2_large 4 dp4 12.9
A100-SXM gpt2_large 4 tp4 8.4
A100-SXM gpt2_large 4 pp4 10.3
H100 gpt2_large 4 dp4 9.9
H100 gpt2_large 4 tp4 8.0
H100 gpt2_large 4 pp4 2.0
H100 gpt2_large 16 dp4 1.2
H100 gpt2_large 16 tp4 13.1
H100 gpt2_large 16 pp4 10.7
H100 gpt3_xl 4 tp4 3.7
H100 gpt3_xl 4 pp4 4.6
"""
NEUSIGHT_REPORTED = {(_GPU[g], m, mode, int(b)): float(e) for g, m, mode, b, e in
                     (row.split() for row in _REPORTED.strip().splitlines())}
NEUSIGHT_DISTRIBUTED = {(_GPU[g], m, int(b), s): float(e) for g, m, b, s, e in
                        (row.split() for row in _DISTRIBUTED.strip().splitlines())}
#: 4-GPU clusters of the labels' GPUs (NVLink; NeuSight does not record the interconnect).
FOUR_GPU = {"h100-sxm5-80gb": "hgx-h100-4gpu", "a100-sxm4-40gb": "hgx-a100-40gb-4gpu"}
#: NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 README, DGX A100 (8x A100 80GB),
#: one GPU's training throughput (img/s) at batch 256: TF32 and mixed precision.
RESNET50_PUBLISHED = {"tf32": 938.0, "fp16": 2470.0}


def one_gpu(device: Device) -> Cluster:
    """A cluster of ``device`` alone (to price a graph on it)."""
    return Cluster(f"one-{device.name}", (device.instance("gpu0"),))


def graph_seconds(graph: Graph, device: Device, cost_name: str, *,
                  updates: bool = True) -> float:
    """A graph's ops priced on ``device`` one after another (one stream: the makespan);
    without the optimizer's update ops unless ``updates``."""
    cost = make_cost_model(cost_name, one_gpu(device))
    times = cost.op_times(graph, dict.fromkeys(graph.names, "gpu0"))
    return float(sum(t for name, t in zip(graph.arrays.names, times, strict=True)
                     if updates or not graph.op(name).kind.endswith("_update")))


def errors(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray
           ) -> np.ndarray:
    return np.abs(np.asarray(predicted) / np.asarray(measured) - 1)


def _stats(e: np.ndarray) -> str:
    return f"{100 * np.median(e):.1f}% / {100 * np.quantile(e, 0.9):.1f}%"


def fit(lines: list[str]) -> None:
    """Refit on the training GPUs' training kernels and rewrite the catalog's model."""
    rows = [k for k in neusight_kernels() if k.role == "train" and k.dataset == "train"]
    start = time.perf_counter()
    predictor = fit_gpu_predictor(measured_kernels(rows), refuse=HELDOUT_GPUS)
    files = {name: hashlib.sha256((data_dir() / name).read_bytes()).hexdigest()[:16]
             for name in ("neusight_kernels.csv",)}
    import lightgbm

    write_gpu_predictor(predictor, GPU_PREDICTOR_FILE, {
        "data": "NeuSight (Lee et al., ASPLOS'25) kernel latencies, benchmarks/data/"
                "neusight_kernels.csv, rows of role 'train' and dataset 'train'",
        "sha256_16": files, "training_gpus": sorted({k.device for k in rows}),
        "samples": len(rows), "lightgbm": lightgbm.__version__, "seed": 0,
        "power_reference": predictor.featurizer.power_reference})  # type: ignore[attr-defined]
    load_gpu_predictor.cache_clear()
    lines.append(f"fitted from {len(rows)} kernel rows of {', '.join(TRAINING_GPUS)} in "
                 f"{time.perf_counter() - start:.1f} s -> {GPU_PREDICTOR_FILE.name}")


def kernel_table(lines: list[str], quick: bool) -> None:
    """Per GPU and kernel family: the roofline's and the model's median / p90 |error|."""
    every = [k for k in neusight_kernels() if k.role == "heldout" or k.dataset == "test"]
    rows = [k for k in every if k.latency_s >= MIN_FIT_SECONDS][:: 8 if quick else 1]
    groups: dict[tuple[str, str, str], list[Measured]] = defaultdict(list)
    for k, m in zip(rows, measured_kernels(rows), strict=True):
        groups[(k.role, k.device, k.family)].append(m)
    lines += ["", "### Kernels (NeuSight): median / p90 |error|", "",
              f"Kernels of {1e6 * MIN_FIT_SECONDS:.0f} us or more ({len(every) - len(rows)} "
              f"shorter ones left out: timed alone, they are mostly the host's launch, which "
              f"the model does not price as part of a kernel).", "",
              "| GPU | role | family | n | roofline | GPU model |", "|---|---|---|---:|---:|---:|"]
    pooled: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (role, device, family), ms in sorted(groups.items(),
                                             key=lambda x: (x[0][0] != "heldout", x[0])):
        roof, model = _kernel_errors(ms)
        pooled[(role, family)] += list(model)
        where = "held out" if role == "heldout" else "training GPU, unseen shapes"
        lines.append(f"| {device} | {where} | {family} | {len(ms)} | {_stats(roof)} | "
                     f"{_stats(model)} |")
    lines += ["", "Pooled over the held-out GPUs, GPU model: " + ", ".join(
        f"{f} {_stats(np.array(v))}" for (r, f), v in sorted(pooled.items()) if r == "heldout")]


def _kernel_errors(ms: Sequence[Measured], *, alone: bool = True
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The roofline's and the GPU model's errors on ``ms`` (one device): kernels timed one
    at a time with the host's launch (NeuSight's, ``alone``) or back to back (DeepBench's)."""
    device = ms[0].device
    cluster = one_gpu(device)
    roofline = make_cost_model("roofline", cluster)
    model = GpuCost(cluster)
    predictor = model.alone if alone else model.predictor
    measured = [m.seconds for m in ms]
    return (errors([roofline.op_time(m.op, "gpu0") for m in ms], measured),
            errors(predictor.times([m.op for m in ms], device), measured))


def cross_validation_table(lines: list[str]) -> None:
    """Leave one training GPU out: the model fitted on the other four, per family."""
    rows = [k for k in neusight_kernels() if k.role == "train"
            and k.latency_s >= MIN_FIT_SECONDS]
    measured = measured_kernels(rows)
    lines += ["", "### Leave one training GPU out (kernels of the left-out GPU, both NeuSight "
              "datasets): median / p90 |error|", "",
              "| left out | " + " | ".join(FAMILIES) + " |", "|---|" + "---:|" * len(FAMILIES)]
    for gpu in TRAINING_GPUS:
        fitted = fit_gpu_predictor([m for k, m in zip(rows, measured, strict=True)
                                    if k.device != gpu and k.dataset == "train"])
        cells = []
        for family in FAMILIES:
            mine = [m for k, m in zip(rows, measured, strict=True)
                    if k.device == gpu and k.family == family]
            if not mine:
                cells.append("")
                continue
            e = errors(fitted.times([m.op for m in mine], mine[0].device),
                       [m.seconds for m in mine])
            cells.append(_stats(e))
        lines.append(f"| {gpu} | " + " | ".join(cells) + " |")


def _whole(d: DeepBenchMeasurement, *fields: str) -> list[int]:
    """``d``'s ``fields`` (its GEMM's or convolution's shape), each a whole number."""
    values = [getattr(d, f) for f in fields]
    if not all(isinstance(v, int) for v in values):
        raise ValueError(f"DeepBench {d.family} row: expected whole numbers for "
                         f"{', '.join(fields)}, got {values}")
    return values


FAMILIES = ("bmm", "linear", "conv", "elementwise", "layernorm", "softmax")


def deepbench_op(d: DeepBenchMeasurement) -> tuple[Op, float] | None:
    """The op a DeepBench GEMM or forward convolution ran and its time; None for others
    (and for P100's "pseudo FP16": FP16 storage, FP32 arithmetic, a dtype the IR lacks)."""
    if d.precision not in ("fp32", "fp16-mixed"):
        return None
    dtype = "fp32" if d.precision == "fp32" else "fp16"
    g = GraphBuilder("deepbench", dtype=dtype)
    if d.family == "gemm" and d.time_s:
        m, k, n = _whole(d, "m", "k", "n")
        a = g.input((m, k), "a", dtype=dtype)
        out = g.matmul(a, g.input((k, n), "b", dtype=dtype), name="op")
        return g.build().op(out), d.time_s
    if d.family == "conv" and d.fwd_s:
        n, c, h, w, k, fh, fw, sh, sw, ph, pw = _whole(
            d, "n", "c", "h", "w", "k", "filter_h", "filter_w", "stride_h", "stride_w",
            "pad_h", "pad_w")
        x = g.input((n, c, h, w), "x", dtype=dtype)
        out = g.conv2d(x, k, (fh, fw), stride=(sh, sw), padding=(ph, pw), name="op")
        return g.build().op(out), d.fwd_s
    return None


def deepbench_table(lines: list[str], quick: bool) -> None:
    groups: dict[tuple[str, str, str], list[Measured]] = defaultdict(list)
    for d in deepbench()[:: 6 if quick else 1]:
        priced = deepbench_op(d)
        if priced is not None:
            op, seconds = priced
            groups[(d.device, d.family, op.dtype)].append(Measured(op, get_device(d.device),
                                                                   seconds))
    lines += ["", "### Kernels (DeepBench): median / p90 |error|", "",
              "| GPU | fitted on it | family | dtype | n | roofline | GPU model |",
              "|---|---|---|---|---:|---:|---:|"]
    for (device, family, dtype), ms in sorted(groups.items()):
        roof, model = _kernel_errors(ms, alone=False)
        lines.append(f"| {device} | {'yes' if device in TRAINING_GPUS else 'no'} | {family} | "
                     f"{dtype} | {len(ms)} | {_stats(roof)} | {_stats(model)} |")


def label_seconds(m: ModelMeasurement, cost_name: str) -> tuple[float, float]:
    """A NeuSight label's zoo graph priced op by op on its GPU: the forward pass's seconds
    and, for a training label, the backward pass's (the step without its update ops: the
    label has no optimizer step)."""
    forward = build_model(ZOO[m.model], batch=m.batch, seq_len=m.seqlen)
    graph = forward if m.mode == "inf" else training_graph(forward, "sgd")
    cost = make_cost_model(cost_name, one_gpu(get_device(m.device)))
    times = cost.op_times(graph, dict.fromkeys(graph.names, "gpu0"))
    fw = bw = 0.0
    for name, t in zip(graph.arrays.names, times, strict=True):
        if name in forward.names:
            fw += t
        elif not graph.op(name).kind.endswith("_update"):
            bw += t
    return fw, bw


def e2e_table(lines: list[str], quick: bool) -> None:
    labels = [m for m in neusight_models() if m.parallel == "none" and not m.compiled
              and m.model in ZOO]
    if quick:
        labels = [m for m in labels if m.role == "heldout"][:6]
    lines += ["", "### End to end, one GPU (NeuSight labels): error", "",
              "GPU model's error on the forward and backward passes apart (a training "
              "label times them apart) in the last columns.", "",
              "| GPU | role | model | mode | batch | measured ms | roofline | GPU model | "
              "NeuSight's | forward | backward |", "|---|---|---|---|---:|---:|---:|---:|---:|"
              "---:|---:|"]
    by_role: dict[str, list[float]] = defaultdict(list)
    for m in sorted(labels, key=lambda m: (m.role != "heldout", m.device, m.model, m.mode,
                                           m.batch)):
        roof = sum(label_seconds(m, "roofline")) / m.e2e_s - 1
        fw, bw = label_seconds(m, "gpu")
        model = (fw + bw) / m.e2e_s - 1
        by_role[m.role].append(abs(model))
        reported = NEUSIGHT_REPORTED.get((m.device, m.model, m.mode, m.batch))
        apart = (f"{100 * (fw / m.fw_s - 1):+.1f}% | {100 * (bw / m.bw_s - 1):+.1f}%"
                 if m.mode == "train" and m.fw_s and m.bw_s else " | ")
        lines.append(f"| {m.device} | {m.role} | {m.model} | {m.mode} | {m.batch} | "
                     f"{1e3 * m.e2e_s:.1f} | {100 * roof:+.1f}% | {100 * model:+.1f}% | "
                     f"{'' if reported is None else f'{reported:.1f}%'} | {apart} |")
    for role, e in sorted(by_role.items()):
        lines.append(f"\n{role} GPUs, GPU model: median {100 * np.median(e):.1f}%, worst "
                     f"{100 * np.max(e):.1f}% over {len(e)} labels")


def distributed_table(lines: list[str]) -> None:
    labels = [m for m in neusight_models() if m.parallel != "none"]
    lines += ["", "### Four GPUs (NeuSight's Megatron-LM iterations): error", "",
              "| GPUs | model | global batch | strategy | measured ms | roofline | GPU model | "
              "NeuSight's |", "|---|---|---:|---|---:|---:|---:|---:|"]
    for m in sorted(labels, key=lambda m: (m.device, m.model, m.batch, m.parallel)):
        cluster = get_cluster(FOUR_GPU[m.device])
        cells = []
        for cost_name in ("roofline", "gpu"):
            try:
                error = distributed_step(m, cluster, cost_name) / m.e2e_s - 1
                cells.append(f"{100 * error:+.1f}%")
            except PlacelabError as err:  # e.g. no pipeline split fits in memory
                cells.append(f"infeasible: {type(err).__name__}")
        reported = NEUSIGHT_DISTRIBUTED.get((m.device, m.model, m.batch, m.parallel))
        lines.append(f"| 4x {m.device} | {m.model} | {m.batch} | {m.parallel} | "
                     f"{1e3 * m.e2e_s:.1f} | {cells[0]} | {cells[1]} | "
                     f"{'' if reported is None else f'{reported:.1f}%'} |")


def distributed_step(m: ModelMeasurement, cluster: Cluster, cost_name: str) -> float:
    """The simulated Megatron-style iteration of a 4-GPU label (Adam, as Megatron-LM)."""
    cost = make_cost_model(cost_name, cluster)
    degree = {"dp4": (4, 1, 1), "tp4": (1, 1, 4), "pp4": (1, 4, 1)}[m.parallel]
    forward = build_model(ZOO[m.model], batch=m.batch, seq_len=m.seqlen)
    plan = parallelize(forward, cluster, cost, dp=degree[0], pp=degree[1], tp=degree[2],
                       microbatches=m.micro_batches or 1, optimizer="adam")
    result = simulate(plan, cluster, cost, links="fair",
                      order="plan" if degree[1] > 1 else "priority")
    if not result.feasible:
        raise OutOfMemory(str(result.reason))
    return float(result.makespan_s)


def resnet_table(lines: list[str], quick: bool) -> None:
    batch = 32 if quick else 256
    lines += ["", "### ResNet-50 training, one A100-SXM4-80GB of the DGX A100: img/s", "",
              "| precision | published | roofline | GPU model |", "|---|---:|---:|---:|"]
    device = get_device("a100-sxm4-80gb")
    for dtype, published in RESNET50_PUBLISHED.items():
        step = training_graph(build_model("resnet50", batch=batch, dtype=dtype), "momentum")
        cells = []
        for cost_name in ("roofline", "gpu"):
            rate = batch / graph_seconds(step, device, cost_name)
            cells.append(f"{rate:,.0f} ({100 * (rate / published - 1):+.0f}%)")
        lines.append(f"| {dtype} | {published:,.0f} | {cells[0]} | {cells[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit the model first")
    parser.add_argument("--quick", action="store_true", help="a subsample of every table")
    parser.add_argument("--out", help="also write the report here")
    args = parser.parse_args()
    lines = [f"# GPU predictions against published measurements "
             f"({datetime.date.today().isoformat()})", "", describe(),
             f"command: python -m benchmarks.gpu_published"
             f"{' --fit' if args.fit else ''}{' --quick' if args.quick else ''}"]
    start = time.perf_counter()
    if args.fit:
        fit(lines)
    lines.append(f"training GPUs: {', '.join(TRAINING_GPUS)}; held out: "
                 f"{', '.join(HELDOUT_GPUS)}")
    kernel_table(lines, args.quick)
    if not args.quick:
        cross_validation_table(lines)
    deepbench_table(lines, args.quick)
    e2e_table(lines, args.quick)
    if not args.quick:
        distributed_table(lines)
    resnet_table(lines, args.quick)
    lines += ["", f"total {time.perf_counter() - start:.0f} s"]
    print(record(lines, args.out), end="")


if __name__ == "__main__":
    main()

