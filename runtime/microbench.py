"""Microbenchmarks for calibration, timed on one logical device of an engine through the
same executor and kernels plans run on: random op configurations (:mod:`runtime.sampling`),
whole zoo models (each op in context), and copies between two logical devices.

A graph is run ``warmup`` times unmeasured, then at least ``repeats`` times and at least
``min_seconds`` in all; an op's time is the median of how long it kept its device busy
(its kernel, releasing its inputs, dispatching the next op). Calibration fits the cost
model to these times; validation uses graphs whose ops calibration never timed.

>>> from runtime import NumpyEngine
>>> from runtime.sampling import draw
>>> import numpy as np
>>> timed, gaps = time_cases(NumpyEngine(), [draw("relu", np.random.default_rng(0))],
...                          repeats=2, min_seconds=0.0)
>>> timed[0].sample.key in {"relu", "backward:relu", "softmax"}, timed[0].speed_s > 0
(True, True)
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hwmodels.calibrated import op_contexts
from hwmodels.predictor import DEFAULT_CACHES, Context, OpSample
from runtime.engine import Engine
from workloads.builder import GraphBuilder
from workloads.graph import Graph

if TYPE_CHECKING:
    from policies.plans import Plan
    from runtime.executor import RunResult
    from runtime.sampling import Config

__all__ = ["Sample", "ShapeSample", "Timed", "calibration_graphs", "contexts",
           "median_time", "pinned", "probe_graph", "reference_seconds", "time_cases",
           "time_copies", "time_graphs", "time_ops"]

Progress = Callable[[Iterable[Any]], Iterable[Any]]


@dataclass(frozen=True)
class Sample:
    """A measured time of an op (its class, FLOPs and bytes moved), a copy (``copy``) or
    the executor's idle time between two ops (``dispatch``)."""

    label: str
    op_class: str
    flops: float
    nbytes: float
    seconds: float
    dtype: str = "fp32"

    @classmethod
    def of(cls, s: OpSample) -> Sample:
        return cls(s.key, s.op_class, s.flops, s.moved, s.seconds, s.dtype)


@dataclass(frozen=True)
class Timed:
    """A sample, the configuration whose graph it was measured in, and the machine's speed
    when it was (the time :func:`reference_seconds` took just before)."""

    sample: OpSample
    config: Config
    speed_s: float

    def at(self, reference_s: float) -> OpSample:
        """The sample's time scaled to the machine running the probe in ``reference_s``."""
        return replace(self.sample, seconds=self.sample.seconds * reference_s / self.speed_s)


@dataclass(frozen=True)
class ShapeSample:
    """How long an op of one signature kept its device busy inside a whole graph run at
    ``batch``; ``sample``, the same time with what the predictor reads of the op."""

    kind: str
    signature: str
    batch: int
    seconds: float
    sample: OpSample | None = None
    #: The machine's speed when it was measured (:func:`reference_seconds`); 0: unknown.
    speed_s: float = 0.0

    def at(self, reference_s: float) -> ShapeSample:
        """The time scaled to the machine running the probe in ``reference_s``."""
        if not self.speed_s:
            return self
        factor = reference_s / self.speed_s
        sample = self.sample and replace(self.sample, seconds=self.sample.seconds * factor)
        return replace(self, seconds=self.seconds * factor, sample=sample)


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


def contexts(graph: Graph, caches: Sequence[int] = DEFAULT_CACHES) -> dict[str, Context]:
    """Per op of ``graph`` run on one device, its context, as the calibrated cost model
    takes it (:func:`hwmodels.calibrated.op_contexts`) against the last cache level."""
    ops = list(graph)
    found = op_contexts(graph, ops, ["one"] * len(ops), {"one": caches[-1]})
    return {op.name: c for op, c in zip(ops, found, strict=True)}


def _timed(engine: Engine, graph: Graph, *, warmup: int, repeats: int, min_seconds: float,
           seed: int) -> RunResult:
    """``graph`` on the engine's first device: at least ``repeats`` runs (three of a graph
    that takes a tenth of a second) and ``min_seconds`` in all (at most 200 runs)."""
    from runtime.executor import execute

    plan = pinned(graph, engine)
    probe = execute(plan, engine, warmup=warmup, repeats=1, seed=seed).makespan_s
    # a run of a tenth of a second or more is steady enough in a few repeats
    least = repeats if probe < 0.1 else min(repeats, 3)
    runs = max(least, min(200, math.ceil(min_seconds / max(probe, 1e-6))))
    return execute(plan, engine, warmup=0, repeats=runs, seed=seed)


def _op_seconds(run: RunResult) -> dict[str, float]:
    """Each op's busy time; the device's last op, whose busy time is its kernel alone,
    also pays the run's median idle time between ops (what a next op would cost it)."""
    busy = dict(run.op_busy_s)
    gaps = _gaps(run.trace)
    ops = run.trace[run.trace["kind"] == "compute"]
    if gaps and len(ops):
        last = str(ops.loc[ops["start_s"].idxmax(), "name"])
        busy[last] = busy.get(last, 0.0) + statistics.median(gaps)
    return busy


def time_ops(engine: Engine, graph: Graph, *, warmup: int = 1, repeats: int = 3,
             min_seconds: float = 0.5, seed: int = 0) -> tuple[RunResult, dict[str, float]]:
    """``graph`` on the engine's first device (at least ``repeats`` runs and
    ``min_seconds`` in all) and each op's median busy time there, in context (the
    device's last op also paying the run's median idle time between ops).

    >>> from runtime.engine import NumpyEngine
    >>> from workloads import build_model
    >>> run, seconds = time_ops(NumpyEngine(), build_model("mlp"), min_seconds=0.01)
    >>> set(seconds) <= set(build_model("mlp").names) and run.makespan_s > 0
    True
    """
    run = _timed(engine, graph, warmup=warmup, repeats=repeats, min_seconds=min_seconds,
                 seed=seed)
    return run, _op_seconds(run)


def _samples(graph: Graph, seconds: Mapping[str, float], caches: Sequence[int]
             ) -> list[OpSample]:
    from hwmodels.cost import op_batch, op_signature

    where = contexts(graph, caches)
    return [OpSample.of(op, seconds[op.name], context=where[op.name], caches=caches,
                        signature=op_signature(op, op_batch(op, graph)))
            for op in graph if op.op_class != "source" and op.name in seconds]


def time_cases(engine: Engine, configs: Sequence[Config], *, warmup: int = 1,
               repeats: int = 5, min_seconds: float = 0.05, seed: int = 0,
               progress: Progress = iter, caches: Sequence[int] = DEFAULT_CACHES
               ) -> tuple[list[Timed], list[float]]:
    """Build and run each configuration's graph (:func:`runtime.sampling.build`); every
    op of it becomes a sample, paired with the configuration that made it and the
    machine's speed then (:func:`reference_seconds`, taken before the case); and the idle
    times between consecutive ops (the executor's dispatch)."""
    from runtime.sampling import build

    out: list[Timed] = []
    gaps: list[float] = []
    for config in progress(list(configs)):
        graph = build(config)
        speed = reference_seconds(engine)
        run, seconds = time_ops(engine, graph, warmup=warmup, repeats=repeats,
                                min_seconds=min_seconds, seed=seed)
        gaps += _gaps(run.trace)
        out += [Timed(s, config, speed) for s in _samples(graph, seconds, caches)]
    return out, gaps


def time_graphs(engine: Engine, graphs: list[Graph], *, warmup: int = 1, repeats: int = 3,
                seed: int = 0, progress: Progress = iter, min_seconds: float = 0.5,
                caches: Sequence[int] = DEFAULT_CACHES
                ) -> tuple[list[ShapeSample], list[float]]:
    """Run each graph on the engine's first device and record how long each op kept the
    device busy (the median over at least ``repeats`` runs and ``min_seconds``), under its
    signature and batch, with what the predictor reads of it and the machine's speed then;
    and each run's delay before its first op."""
    from hwmodels.cost import op_batch

    samples, starts = [], []
    for graph in progress(graphs):
        speed = reference_seconds(engine)
        run, seconds = time_ops(engine, graph, warmup=warmup, repeats=repeats,
                                min_seconds=min_seconds, seed=seed)
        for s in _samples(graph, seconds, caches):
            batch = op_batch(graph.op(s.name), graph)
            samples.append(ShapeSample(s.key, s.signature, batch, s.seconds, s, speed))
        starts.append(float(run.trace["start_s"].min()))
    return samples, starts


def probe_graph() -> Graph:
    """A small fixed graph whose time says how fast the machine runs now: a product of a
    few million FLOPs and a pass over two megabytes (about two milliseconds)."""
    b = GraphBuilder("speed_probe")
    b.relu(b.linear(b.input((160, 384)), 384))
    b.relu(b.input((512, 1024), name="stream"))
    return b.build()


def reference_seconds(engine: Engine, repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of :func:`probe_graph` on the engine's first device:
    the machine's speed now, to compare with its speed at other times (a shared machine's
    speed drifts, in phases of milliseconds to minutes)."""
    from runtime.executor import execute

    return min(execute(pinned(probe_graph(), engine), engine, warmup=1,
                       repeats=repeats).makespans_s)


def median_time(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """The median wall time of ``repeats`` calls of ``fn`` after ``warmup`` unmeasured ones.

    >>> 0.005 <= median_time(lambda: time.sleep(0.005), repeats=3) < 0.5
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
