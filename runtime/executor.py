"""Run a Plan for real: each device executes its ops in plan order on its own worker thread,
each transfer is a real copy made by its source device's copy thread, and every op and copy
is timed into the same Trace schema the simulator writes.

Memory is counted as the engine allocates and frees: a device holds the weights of the ops
placed on it (a shared weight on every device that uses it), an op's outputs from its start
until its last local reader and outgoing copy are done (graph inputs too, staged on their
device; a view is counted in full, as the simulator counts it, although NumPy and PyTorch
share its input's buffer: a conservative count both executors agree on), a received copy
from the start of the copy until its last reader is done; graph outputs stay until the end
of the run. In a training graph the weights are the
outputs of ``parameter`` ops, counted like any output; the buffers of the ops that own them
and the optimizer state of the update ops are held for the whole run, and the updates
change the weights in place, so repeated runs are successive training steps.
"""

from __future__ import annotations

import queue
import statistics
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from policies.plans import Plan, Transfer
from runtime.engine import Engine
from runtime.resident import STAGED, numpy_dtype, parameters, place_resident, resident_key
from runtime.training import UPDATES, Call
from workloads.errors import PlacelabError
from workloads.graph import Graph
from workloads.io import write_text_atomic
from workloads.op import Op

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RunResult", "execute", "make_inputs"]

@dataclass
class RunResult:
    """Measured: makespan per repeat (median and spread), the Trace of the last repeat,
    peak memory per device, and the graph's outputs on the host; for a training graph, the
    weights after the last step (owner op -> flat array, in its slot order)."""

    makespans_s: list[float]
    peak_memory_bytes: dict[str, int]
    trace: pd.DataFrame = field(repr=False)
    outputs: dict[str, np.ndarray] = field(repr=False)
    memory_log: list[tuple[float, str, int]] = field(repr=False)
    devices: tuple[str, ...] = ()
    parameters: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: Each compute op's duration, the median over the measured repeats.
    op_seconds: dict[str, float] = field(default_factory=dict, repr=False)
    #: How long each compute op kept its device busy: from its start to the start of the
    #: device's next op (its kernel, then releasing its inputs and dispatching the next),
    #: the median over the measured repeats; a device's last op counts its kernel only.
    op_busy_s: dict[str, float] = field(default_factory=dict, repr=False)

    @classmethod
    def combine(cls, results: Sequence[RunResult]) -> RunResult:
        """Several calls' runs of one plan as one result: every repeat's makespan, the
        largest peak per device, per op the median of the calls' medians, and the last
        call's trace, outputs and weights.

        >>> from policies import plan as make_plan
        >>> from runtime import NumpyEngine
        >>> from workloads import build_model
        >>> engine = NumpyEngine(devices=1)
        >>> p = make_plan(build_model("mlp", batch=2), engine.cluster(), "single_device")
        >>> len(RunResult.combine([execute(p, engine, repeats=2) for _ in range(3)]).makespans_s)
        6
        """
        last = results[-1]
        ops = [r.op_busy_s for r in results]
        seconds = [r.op_seconds for r in results]
        return cls([t for r in results for t in r.makespans_s],
                   {d: max(r.peak_memory_bytes[d] for r in results)
                    for d in last.peak_memory_bytes}, last.trace, last.outputs,
                   last.memory_log, last.devices, last.parameters,
                   {n: statistics.median(s[n] for s in seconds) for n in last.op_seconds},
                   {n: statistics.median(o[n] for o in ops) for n in last.op_busy_s})

    @property
    def makespan_s(self) -> float:
        """The median over repeats."""
        return statistics.median(self.makespans_s)

    @property
    def spread_s(self) -> tuple[float, float]:
        """The fastest and the slowest repeat."""
        return min(self.makespans_s), max(self.makespans_s)

    def write_chrome_trace(self, path: str | Path) -> Path:
        import json

        from sim.result import chrome_trace

        return write_text_atomic(path, json.dumps(chrome_trace(self.trace)))


def make_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Host arrays for the graph's inputs: standard normal floats; integer ids below the
    smallest table (vocabulary) of the embeddings that read them, or the number of classes
    of the loss that reads them."""
    out = {}
    for op in graph:
        if op.kind != "input":
            continue
        t = op.output
        rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
        if t.dtype.startswith("int"):
            tables = [graph.op(c).attrs.get("vocab", graph.op(c).attrs.get("classes", 2))
                      for c in graph.consumers(t.name)]
            out[t.name] = rng.integers(0, min(tables, default=2), t.shape).astype(
                numpy_dtype(t.dtype))
        else:
            out[t.name] = rng.standard_normal(t.shape).astype(numpy_dtype(t.dtype))
    return out


def _bind_all(plan: Plan, engine: Engine) -> dict[str, Call]:
    """Every op's call, made before anything runs (so a missing kernel stops nothing)."""
    plan.validate(engine.cluster())
    calls = {}
    for op in plan.graph:
        numpy_dtype(op.dtype)
        if op.kind not in STAGED:
            calls[op.name] = engine.bind(plan.graph, op)
    return calls


class _Run:
    """One execution of the plan: shared state of the device and copy threads."""

    def __init__(self, plan: Plan, engine: Engine, inputs: Mapping[str, np.ndarray],
                 weights: Mapping[tuple[str, str], dict[str, Any]],
                 resident: Mapping[str, int], calls: Mapping[str, Call]) -> None:
        self.plan, self.engine, self.graph = plan, engine, plan.graph
        self.inputs, self.weights, self.calls = inputs, weights, calls
        self.values: dict[tuple[str, str], Any] = {}
        self.ready: dict[tuple[str, str], threading.Event] = {}
        self.refs: dict[tuple[str, str], int] = {}
        self.nbytes: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()
        self.used = dict(resident)
        self.peak = dict(resident)
        self.log: list[tuple[float, str, int]] = []
        self.rows: list[dict[str, Any]] = []
        self.failure: BaseException | None = None
        self.updated: dict[str, tuple[str, Any]] = {}
        self.copies = {d: queue.Queue() for d in engine.devices}  # type: ignore[var-annotated]
        self.sends: dict[str, list[Transfer]] = {}
        self._wire()

    def _wire(self) -> None:
        keep = set(self.graph.outputs)
        for op in self.graph:
            d = self.plan.placement[op.name]
            for t in op.outputs:
                key = (t.name, d)
                self.ready[key] = threading.Event()
                readers = [c for c in self.graph.consumers(t.name)
                           if self.plan.placement[c] == d]
                self.refs[key] = len(readers) + (1 if t.name in keep else 0)
                self.nbytes[key] = t.nbytes
        for tr in self.plan.transfers:
            self.sends.setdefault(tr.producer, []).append(tr)
            self.refs[(tr.tensor, tr.src)] += 1
            key = (tr.tensor, tr.dst)
            self.ready[key] = threading.Event()
            self.refs[key] = len(tr.consumers) + (1 if tr.tensor in keep else 0)
            self.nbytes[key] = tr.nbytes

    # -- memory ---------------------------------------------------------------------------

    def _allocate(self, key: tuple[str, str]) -> None:
        d = key[1]
        with self.lock:
            self.used[d] += self.nbytes[key]
            self.peak[d] = max(self.peak[d], self.used[d])
            self.log.append((self.engine.now() - self.t0, d, self.used[d]))

    def _release(self, key: tuple[str, str]) -> None:
        with self.lock:
            self.refs[key] -= 1
            if self.refs[key] > 0:
                return
            self.values.pop(key, None)
            self.used[key[1]] -= self.nbytes[key]
            self.log.append((self.engine.now() - self.t0, key[1], self.used[key[1]]))

    # -- the workers ----------------------------------------------------------------------

    def _guard(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as err:  # handed to the caller's thread, which re-raises it
            self.failure = self.failure or err
            for event in self.ready.values():
                event.set()

    def _wait(self, key: tuple[str, str]) -> Any:
        self.ready[key].wait()
        if self.failure is not None:
            raise RuntimeError("another worker failed")
        return self.values[key]

    def _run_device(self, device: str) -> None:
        engine = self.engine
        with engine.on(device):
            for name in self.plan.order.get(device, ()):
                self._run_op(self.graph.op(name), device)

    def _run_op(self, op: Op, device: str) -> None:
        engine = self.engine
        args = [self._wait((t, device)) for t in op.inputs]
        for t in op.outputs:
            self._allocate((t.name, device))
        start = engine.now()
        if op.kind in STAGED:
            outs: tuple[Any, ...] = (self.inputs[op.output.name],)
        else:
            resident = self.weights.get((resident_key(self.graph, op), device), {})
            outs = self.calls[op.name](engine.xp, args, resident)
            if op.kind in UPDATES:  # updated in place: remember where
                self.updated[op.inputs[-1]] = (device, args[-1])
        engine.synchronize(device)
        end = engine.now()
        self._row(op.name, "compute", device, "", "", f"{device}/stream0", start, end,
                  op.flops, op.bytes_read + op.bytes_written)
        for tensor, value in zip(op.outputs, outs, strict=True):
            self.values[(tensor.name, device)] = value
            self.ready[(tensor.name, device)].set()
        for name in dict.fromkeys(op.inputs):
            self._release((name, device))
        for tr in self.sends.get(op.name, ()):
            self.copies[tr.src].put(tr)
        for tensor in op.outputs:  # read by nobody: freed when its producer ends
            if self.refs[(tensor.name, device)] == 0:
                self.refs[(tensor.name, device)] = 1
                self._release((tensor.name, device))

    def _run_copies(self, device: str) -> None:
        engine = self.engine
        with engine.on(device):
            while (tr := self.copies[device].get()) is not None:
                value = self._wait((tr.tensor, tr.src))
                self._allocate((tr.tensor, tr.dst))
                start = engine.now()
                copied = engine.copy(value, tr.src, tr.dst)
                engine.synchronize(tr.dst)
                end = engine.now()
                self._row(tr.name, "transfer", "", tr.src, tr.dst, f"{tr.src}/copy0", start,
                          end, 0, tr.nbytes)
                self.values[(tr.tensor, tr.dst)] = copied
                self.ready[(tr.tensor, tr.dst)].set()
                self._release((tr.tensor, tr.src))

    def _row(self, name: str, kind: str, device: str, src: str, dst: str, stream: str,
             start: float, end: float, flops: int, nbytes: int) -> None:
        row = {"job": "job0", "name": name, "kind": kind, "device": device, "src": src,
               "dst": dst, "stream": stream, "start_s": start - self.t0,
               "end_s": end - self.t0, "flops": flops, "bytes": nbytes}
        with self.lock:
            self.rows.append(row)

    def run(self, workers: _Workers) -> float:
        devices = self.engine.devices
        self.t0 = self.engine.now()
        copiers = [workers.copy[d].submit(self._guard, partial(self._run_copies, d))
                   for d in devices]
        compute = [workers.compute[d].submit(self._guard, partial(self._run_device, d))
                   for d in devices]
        for future in compute:
            future.result()
        for d in devices:
            self.copies[d].put(None)
        for future in copiers:
            future.result()
        if self.failure is not None:
            raise self.failure
        return max((r["end_s"] for r in self.rows), default=0.0)


class _Workers:
    """A compute thread and a copy thread per device, kept for every repeat of a run (so
    no repeat pays for starting threads)."""

    def __init__(self, devices: tuple[str, ...]) -> None:
        self.compute = {d: ThreadPoolExecutor(1, thread_name_prefix=f"{d}-compute")
                        for d in devices}
        self.copy = {d: ThreadPoolExecutor(1, thread_name_prefix=f"{d}-copy") for d in devices}
        pools = [*self.compute.values(), *self.copy.values()]
        for started in [pool.submit(int) for pool in pools]:  # start the threads now
            started.result()

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for pool in [*self.compute.values(), *self.copy.values()]:
            pool.shutdown(wait=True)


def execute(plan: Plan, engine: Engine, *, inputs: Mapping[str, np.ndarray] | None = None,
            weights: Mapping[str, Mapping[str, np.ndarray]] | None = None,
            warmup: int = 1, repeats: int = 5, seed: int = 0) -> RunResult:
    """Run ``plan`` on ``engine`` ``warmup + repeats`` times; measure the last ``repeats``.

    Inputs and weights are drawn from ``seed`` unless given (``weights``: owner op name ->
    its arrays by slot, e.g. :func:`runtime.onnx_weights.onnx_weights` of an imported model).

    A plan made for another cluster, or a graph with an op no kernel implements, is refused
    before anything runs.

    >>> from policies import plan as make_plan
    >>> from runtime import NumpyEngine
    >>> from workloads import build_model
    >>> engine = NumpyEngine(devices=2)
    >>> p = make_plan(build_model("mlp", batch=4), engine.cluster(), "round_robin")
    >>> r = execute(p, engine, repeats=2)
    >>> r.outputs["softmax"].shape, r.makespan_s > 0
    ((4, 10), True)
    """
    if warmup < 0 or repeats < 1:
        raise PlacelabError(f"execute: expected warmup >= 0 and repeats >= 1, got "
                            f"warmup={warmup}, repeats={repeats}")
    if plan.device_groups:
        name = next(iter(plan.device_groups))
        raise PlacelabError(f"execute: plan of graph {plan.graph.name!r}: expected ops the "
                            f"engine has kernels for, got collective {name!r} "
                            f"({plan.graph.op(name).kind}); collectives are simulated, not "
                            f"run")
    calls = _bind_all(plan, engine)
    host = dict(make_inputs(plan.graph, seed)) if inputs is None else dict(inputs)
    host |= parameters(plan.graph, seed, weights or {})
    placed, resident = place_resident(plan, engine, seed, weights or {})
    staged = {op.output.name: engine.to_device(host[op.output.name], plan.placement[op.name])
              for op in plan.graph if op.kind in STAGED}
    times: list[float] = []
    durations: dict[str, list[float]] = {}
    busy: dict[str, list[float]] = {}
    with engine.session(), _Workers(engine.devices) as workers:
        for i in range(warmup + repeats):
            run = _Run(plan, engine, staged, placed, resident, calls)
            elapsed = run.run(workers)
            _write_back(run, staged)
            if i >= warmup:
                times.append(elapsed)
                _collect(run.rows, durations, busy)
    result = _result(plan, engine, run, times)
    result.op_seconds = {name: statistics.median(d) for name, d in durations.items()}
    result.op_busy_s = {name: statistics.median(d) for name, d in busy.items()}
    result.parameters = {op.attrs["weights_of"]: engine.to_host(staged[op.output.name])
                         for op in plan.graph if op.kind == "parameter"}
    return result


def _collect(rows: list[dict[str, Any]], durations: dict[str, list[float]],
             busy: dict[str, list[float]]) -> None:
    """One repeat's kernel durations and device-busy times, per compute op."""
    by_device: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["kind"] == "compute":
            durations.setdefault(row["name"], []).append(row["end_s"] - row["start_s"])
            by_device.setdefault(row["device"], []).append(row)
    for ops in by_device.values():
        ops.sort(key=lambda r: r["start_s"])
        for row, after in zip(ops, [*ops[1:], None], strict=True):
            until = row["end_s"] if after is None else after["start_s"]
            busy.setdefault(row["name"], []).append(until - row["start_s"])


def _write_back(run: _Run, staged: dict[str, Any]) -> None:
    """Weights updated on another device than their ``parameter`` op's (a plan that does
    not co-place them) are copied home for the next step, outside the timed step."""
    for tensor, (device, value) in run.updated.items():
        home = run.plan.placement[run.graph.producer(tensor)]
        if device != home:
            staged[tensor][...] = run.engine.copy(value, device, home)


def _result(plan: Plan, engine: Engine, run: _Run, times: list[float]) -> RunResult:
    import pandas as pd

    from sim.result import TRACE_COLUMNS

    outputs = {}
    for name in plan.graph.outputs:
        device = plan.placement[plan.graph.producer(name)]
        outputs[name] = engine.to_host(run.values[(name, device)])
    trace = pd.DataFrame(run.rows, columns=list(TRACE_COLUMNS)).sort_values(
        "start_s", kind="stable", ignore_index=True)
    return RunResult(makespans_s=times, peak_memory_bytes=dict(run.peak), trace=trace,
                     outputs=outputs, memory_log=run.log, devices=engine.devices)
