"""Microbenchmarks for calibration: ops of every class the cost model costs, over the sizes
and shapes the zoo uses, timed on one logical device of an engine through the same kernels
the executor calls; and copies between two logical devices over a range of sizes.

Each case is timed ``warmup`` times unmeasured and ``repeats`` times measured; its time is
the median. Calibration fits the cost model to these times; validation uses models and
shapes calibration never timed.

>>> cases = benchmark_cases(quick=True)
>>> sorted({c.op_class for c in cases})
['conv', 'data_movement', 'elementwise', 'matmul', 'reduction']
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from hwmodels.cost import kind_features, kind_key, weight_bytes, window_positions
from runtime.engine import Engine
from workloads.builder import GraphBuilder
from workloads.graph import Graph
from workloads.op import Op

if TYPE_CHECKING:
    from policies.plans import Plan

__all__ = ["Case", "Sample", "ShapeSample", "benchmark_cases", "calibration_graphs",
           "median_time", "pinned", "reference_seconds", "time_copies", "time_graphs",
           "time_ops"]


@dataclass(frozen=True)
class Case:
    """One op of a small graph to time (its inputs are the graph's tensors it reads)."""

    label: str
    graph: Graph
    op: Op
    #: Whether the op runs among copies of itself with weights of their own, so that its
    #: weights come from memory, as in a model larger than the cache.
    cold: bool = False

    @property
    def op_class(self) -> str:
        return self.op.op_class


@dataclass(frozen=True)
class Sample:
    """A measured time: of an op (its kind key, class, FLOPs, bytes moved and window
    positions) or of a copy."""

    label: str
    op_class: str
    flops: float
    nbytes: float
    seconds: float
    dtype: str = "fp32"
    kind: str = ""
    windows: float = 0.0
    #: The op's :data:`hwmodels.cost.KIND_FEATURES` (empty for copies and gaps).
    features: tuple[float, ...] = ()


@dataclass(frozen=True)
class ShapeSample:
    """How long an op of one signature kept its device busy inside a whole graph run at
    ``batch``; ``sample``, the same time with the op's features, for the per-kind models."""

    kind: str
    signature: str
    batch: int
    seconds: float
    sample: Sample | None = None


def pinned(graph: Graph, engine: Engine, where: Mapping[str, str] | None = None) -> Plan:
    """``graph`` as a Plan on ``engine``'s cluster: each op on the device ``where`` names
    (every op on the first device without it), each device's ops in topological order.

    >>> from runtime import NumpyEngine
    >>> from workloads import build_model
    >>> sorted(set(pinned(build_model("mlp"), NumpyEngine(devices=2)).placement.values()))
    ['cpu0']
    """
    from policies.plans import Plan

    cluster, order = engine.cluster(), graph.topological_order()
    where = dict(where) if where is not None else dict.fromkeys(order, engine.devices[0])
    devices = list(dict.fromkeys(where[n] for n in order))
    return Plan(graph, where, {d: [n for n in order if where[n] == d] for d in devices},
                cluster=cluster.name, cluster_hash=cluster.definition_hash)


def _case(label: str, build: Callable[[GraphBuilder, str], str],
          shape: tuple[int, ...], dtype: str = "fp32") -> Case:
    b = GraphBuilder(label, dtype)
    out = build(b, b.input(shape))
    g = b.build()
    return Case(label, g, g.op(out))


def _linear(b: GraphBuilder, x: str, n: int) -> str:
    return b.linear(x, n)


def _conv(b: GraphBuilder, x: str, c: int, k: tuple[int, int], s: tuple[int, int],
          p: tuple[int, int]) -> str:
    return b.conv2d(x, c, k, stride=s, padding=p)


def _gemms(quick: bool) -> Iterable[Case]:
    sizes = (64, 256, 1024) if quick else (32, 128, 512, 2048)
    rows = (1, 2, 8) if quick else (1, 2, 4, 16)
    wide = ((256, 1024), (1024, 256), (2048, 2048), (4096, 4096)) + (
        () if quick else ((8192, 4096), (1024, 8192)))
    for m in rows:  # batch-sized rows: bound by reading the weights, some beyond the caches
        for k, n in wide:
            yield _case(f"linear {m}x{k}x{n}", partial(_linear, n=n), (m, k))
    for m in sizes:
        for k in sizes:
            for n in sizes:
                if quick and len({m, k, n}) == 3:
                    continue
                yield _case(f"linear {m}x{k}x{n}", partial(_linear, n=n), (m, k))
    for m in ((1024,) if quick else (512, 2048)):
        yield _case(f"linear fp64 {m}", partial(_linear, n=m), (m, m), "fp64")


def _convs(quick: bool) -> Iterable[Case]:
    """Distinct convolution shapes of the zoo's ResNet-50 (batch 1) and LeNet-5."""
    from workloads.zoo import build_model

    seen = []
    for model, batch in (("lenet5", 8), ("resnet50", 1)):
        g = build_model(model, batch=batch)
        for op in g:
            if op.kind != "conv2d":
                continue
            key = (g.tensor(op.inputs[0]).shape, op.output.shape[1], op.attrs["kernel"],
                   op.attrs["stride"], op.attrs["padding"])
            if key not in seen:
                seen.append(key)
    if quick:
        seen = seen[::4]
    for shape, cout, kernel, stride, padding in seen:
        yield _case(f"conv {shape} -> {cout} k{kernel[0]} s{stride[0]}",
                    partial(_conv, c=cout, k=kernel, s=stride, p=padding), shape)


def _streams(quick: bool) -> Iterable[Case]:
    sizes = (2**10, 2**14, 2**18, 2**22) if quick else tuple(2**e for e in range(8, 25, 2))
    for n in sizes:
        yield _case(f"relu {n}", lambda b, x: b.relu(x), (n,))
        yield _case(f"tanh {n}", lambda b, x: b.tanh(x), (n,))
        yield _case(f"add {n}", lambda b, x: b.add(x, x), (n,))
        yield _case(f"softmax {n}", lambda b, x: b.softmax(x), (n // 256, 256))
        yield _case(f"transpose {n}", lambda b, x: b.transpose(x, (1, 0)), (n // 64, 64))
        side = max(int((n // 64) ** 0.5), 2)
        yield _case(f"max_pool {n}", lambda b, x: b.max_pool2d(x, 2), (1, 64, side, side))
        yield _case(f"max_pool k3s2 {n}", lambda b, x: b.max_pool2d(x, 3, stride=2),
                    (1, 64, side + 1, side + 1))
        if not quick:
            yield _case(f"layernorm {n}", lambda b, x: b.layernorm(x), (n // 256, 256))
            yield _case(f"concat {n}", lambda b, x: b.concat([x, x], axis=0), (n // 2,))


def _training(quick: bool) -> Iterable[Case]:
    """Every op of the SGD and Adam steps of two small networks (a perceptron, a CNN with
    batch norm, pooling and a residual add) at a few sizes: forward and backward ops,
    losses and updates, some of them larger than the caches."""
    from workloads.training import training_graph

    sizes = ((1, 96), (4, 768), (32, 256)) if quick else \
        ((1, 96), (2, 32), (8, 128), (4, 768), (32, 512), (2, 1536))
    for batch, width in sizes:
        b = GraphBuilder(f"mlp{width}")
        x = b.relu(b.linear(b.input((batch, 4 * width)), width))
        b.softmax(b.linear(b.tanh(b.linear(x, width)), 10))
        c = GraphBuilder(f"cnn{width}")
        y = c.max_pool2d(c.relu(c.batchnorm(c.conv2d(c.input((batch // 2 or 1, 3, 16, 16)),
                                                     width // 8, 3, padding=1))), 2)
        z = c.relu(c.batchnorm(c.conv2d(y, width // 8, 3, padding=1)))
        z = c.global_avg_pool(c.relu(c.add(y, z)))
        c.softmax(c.linear(c.flatten(z), 10))
        for net, optimizer in ((b.build(), "sgd"), (c.build(), "adam")):
            step = training_graph(net, optimizer)
            for op in step:
                if op.op_class != "source":
                    yield Case(f"{op.name} {net.name} b{batch}", step, op)


def _transformer(quick: bool) -> Iterable[Case]:
    """Every op of the Adam steps of small GPT-2-shaped decoders: embeddings, layer norms,
    the attention's split, reshapes, transposes, batched products, scaling and softmax,
    GELU, a tied head, and their backward ops."""
    from workloads.training import training_graph
    from workloads.zoo.sequence import gpt2_small

    sizes = ((16, 64, 2), (64, 128, 4), (32, 256, 8)) if quick else (
        (16, 64, 2), (64, 128, 4), (32, 256, 8), (128, 192, 4))
    for seq, dim, heads in sizes:
        net = gpt2_small(batch=1, seq_len=seq, layers=1, dim=dim, heads=heads, vocab=500)
        step = training_graph(net, "adam")
        for op in step:
            if op.op_class != "source":
                yield Case(f"{op.name} gpt s{seq} d{dim}", step, op)


def _cold(cases: list[Case], cache_bytes: int) -> Iterable[Case]:
    """Each one-op case whose weights are between an eighth of the cache and the cache
    again, among copies of itself (each with its own weights) reading the same input:
    together twice the cache, so each copy finds its weights evicted, as a layer of a
    model larger than the cache does."""
    for case in cases:
        held = case.op.param_bytes
        if len(case.graph) != 2 or not cache_bytes // 8 <= held <= cache_bytes:
            continue
        copies = min(16, -(-2 * cache_bytes // held))
        source = case.graph.op(case.graph.producer(case.op.inputs[0]))
        ops = [source] + [replace(case.op, name=f"{case.op.name}.{i}", outputs=tuple(
            replace(t, name=f"{t.name}.{i}") for t in case.op.outputs))
            for i in range(copies)]
        graph = Graph(f"{case.graph.name} cold", ops)
        yield from (Case(f"{case.label} cold", graph, op, cold=True) for op in ops[1:])


def benchmark_cases(quick: bool = False, cache_bytes: int = 32 * 2**20) -> list[Case]:
    """The ops calibration times: GEMMs over a grid of m, n, k (and batch-sized rows); the
    zoo's convolution shapes; elementwise, reduction and layout ops over sizes from 1 KiB
    to 64 MiB; every op of small training steps (a perceptron, a CNN, a decoder); and the
    one-op cases with large weights again among copies of themselves (weights from
    memory)."""
    cases = [*_gemms(quick), *_convs(quick), *_streams(quick), *_training(quick),
             *_transformer(quick)]
    return cases + list(_cold(cases, cache_bytes))


#: Zoo models calibration runs whole: (model, batches, sequence length), forward passes and,
#: for the small ones, SGD training steps. Validation runs them at batches in between.
CALIBRATION_MODELS: tuple[tuple[str, tuple[int, ...], int | None, bool], ...] = (
    ("mlp", (4, 32), None, True), ("lenet5", (4, 32), None, True),
    ("stacked_autoencoder", (4, 32), None, True), ("lstm", (1, 3), None, False),
    ("alexnet", (1, 3), None, False), ("resnet50", (1, 3), None, False),
    ("vgg16", (1, 3), None, False), ("inception_v3", (1, 3), None, False),
    ("bert_base", (1, 3), 32, False), ("gpt2_small", (1, 3), 32, False))


def calibration_graphs(quick: bool = False) -> list[Graph]:
    """The zoo models calibration runs whole (:data:`CALIBRATION_MODELS`; quick: the small
    ones), so that ops are timed where they run: after their producers, among the
    model's other weights."""
    from workloads.training import training_graph
    from workloads.zoo import build_model

    graphs = []
    for model, batches, seq_len, train in CALIBRATION_MODELS[:3] if quick \
            else CALIBRATION_MODELS:
        for batch in batches:
            forward = build_model(model, batch=batch, seq_len=seq_len)
            graphs += [forward, training_graph(forward)] if train else [forward]
    return graphs


def time_graphs(engine: Engine, graphs: list[Graph], *, warmup: int = 1, repeats: int = 3,
                seed: int = 0, progress: Callable[[Iterable[Graph]], Iterable[Graph]] = iter,
                cache_bytes: int = 32 * 2**20) -> tuple[list[ShapeSample], list[float]]:
    """Run each graph on the engine's first device and record how long each op kept the
    device busy (the median over ``repeats``, more for a short graph: at least half a
    second of runs, at most 200), under its signature and batch and with its features
    (its weights read from memory where the graph's exceed ``cache_bytes``, as the
    calibrated cost model takes them); and each run's delay before its first op."""
    from hwmodels.cost import op_batch, op_signature
    from runtime.executor import execute

    samples, starts = [], []
    for graph in progress(graphs):
        plan = pinned(graph, engine)
        probe = execute(plan, engine, warmup=warmup, repeats=1, seed=seed).makespan_s
        runs = max(repeats, min(200, math.ceil(0.5 / max(probe, 1e-6))))
        run = execute(plan, engine, warmup=0, repeats=runs, seed=seed)
        cold = graph.param_bytes > cache_bytes
        for op in graph:
            if op.op_class != "source" and op.name in run.op_busy_s:
                batch, seconds = op_batch(op, graph), run.op_busy_s[op.name]
                samples.append(ShapeSample(kind_key(op), op_signature(op, batch), batch,
                                           seconds, _sample(graph, op, seconds, cold,
                                                            cache_bytes)))
        starts.append(float(run.trace["start_s"].min()))
    return samples, starts


def reference_seconds(engine: Engine, repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of a fixed reference graph (ResNet-50's forward
    pass at batch 1) on the engine's first device: the machine's speed now, to compare
    with its speed when it was calibrated (a shared machine's speed drifts)."""
    from runtime.executor import execute
    from workloads.zoo import build_model

    plan = pinned(build_model("resnet50"), engine)
    return min(execute(plan, engine, warmup=1, repeats=repeats).makespans_s)


def median_time(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """The median wall time of ``repeats`` calls of ``fn`` after ``warmup`` unmeasured ones.

    >>> median_time(lambda: None, repeats=3) < 1.0
    True
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_ops(engine: Engine, cases: list[Case], *, warmup: int = 2, repeats: int = 5,
             seed: int = 0, progress: Callable[[Iterable[Graph]], Iterable[Graph]] = iter,
             cache_bytes: int = 32 * 2**20) -> list[Sample]:
    """Time the cases' ops as the executor runs them: each case's graph placed on the
    engine's first device and executed ``warmup + repeats`` times; an op's time is the
    median of how long it kept the device busy (``RunResult.op_busy_s``: its kernel,
    releasing its inputs, dispatching the next op), so it carries what running inside a
    plan costs."""
    from runtime.executor import execute

    graphs: dict[int, Graph] = {}
    for case in cases:
        graphs.setdefault(id(case.graph), case.graph)
    seconds: dict[tuple[int, str], float] = {}
    gaps: list[float] = []
    for graph in progress(list(graphs.values())):
        run = execute(pinned(graph, engine), engine, warmup=warmup, repeats=repeats, seed=seed)
        for name, value in run.op_busy_s.items():
            seconds[(id(graph), name)] = value
        gaps += _gaps(run.trace)
    samples = [_sample(c.graph, c.op, seconds[(id(c.graph), c.op.name)], c.cold,
                       cache_bytes, c.label) for c in cases]
    return samples + [Sample("gap", "dispatch", 0.0, 0.0, g) for g in gaps]


def _sample(graph: Graph, op: Op, seconds: float, cold: bool, cache_bytes: int,
            label: str = "") -> Sample:
    """``op``'s measured time with its features (``cold``: its weights from memory)."""
    return Sample(label or op.name, op.op_class, float(op.flops),
                  float(op.bytes_read + op.bytes_written), seconds, op.dtype, kind_key(op),
                  window_positions(op), kind_features(
                      op, cache_bytes, weight_bytes(graph, op) if cold else 0))


def _gaps(trace: Any) -> list[float]:
    """Idle time between one op's end and the next op's start on a device running a
    chain of ready ops: what the executor spends dispatching an op outside its kernel."""
    ops = trace[(trace["kind"] == "compute") & (trace["end_s"] > trace["start_s"])]
    ops = ops.sort_values("start_s")
    gaps = (ops["start_s"].to_numpy()[1:] - ops["end_s"].to_numpy()[:-1]).tolist()
    return [g for g in gaps if g >= 0]


def time_copies(engine: Engine, *, quick: bool = False, warmup: int = 2, repeats: int = 5
                ) -> list[Sample]:
    """Transfers as plans see them: chains of ops alternating between the first two
    logical devices, 1 KiB to 64 MiB per tensor; a sample is the time from the producer's
    end to the reader's start (the copy and the executor's hand-offs), taken in every
    measured repeat (a hand-off's wake-up varies from one to the next). None on an engine
    of one device."""
    from runtime.executor import execute

    if len(engine.devices) < 2:
        return []
    pair = engine.devices[:2]
    sizes = (2**10, 2**16, 2**20, 2**24) if quick else tuple(2**e for e in range(10, 27, 2))
    samples = []
    for n in sizes:
        b = GraphBuilder(f"chain{n}")
        x = b.input((n // 4,))
        for _ in range(6):
            x = b.relu(x)
        g = b.build()
        order = g.topological_order()
        plan = pinned(g, engine, {name: pair[i % 2] for i, name in enumerate(order)})
        execute(plan, engine, warmup=warmup, repeats=1)
        for _ in range(repeats):
            trace = execute(plan, engine, warmup=0, repeats=1).trace
            ops = trace[trace["kind"] == "compute"].set_index("name")
            samples += [Sample(f"copy {n}", "copy", 0.0, float(n), float(
                ops.loc[reader, "start_s"] - ops.loc[producer, "end_s"]))
                for producer, reader in itertools.pairwise(order)]
    return samples
