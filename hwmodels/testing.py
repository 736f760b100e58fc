"""The conformance suite every cost model must pass, built-in or third-party.

Each property is a named :class:`Check`; :func:`parametrize_with_checks` makes one pytest
item per (cost model, check)::

    from hwmodels.testing import parametrize_with_checks

    @parametrize_with_checks([MyCost])          # a factory: Cluster -> CostModel
    def test_cost_conformance(cost, check):
        check(cost)

A cost model is given as a registered name (``"roofline"``) or a factory taking a cluster.
Properties: times are finite and >= 0 for every op a device can run; :meth:`op_times` equals
:meth:`op_time` op for op, whether the placement is given by name or by device index; a
device without an op's dtype raises :class:`UnsupportedOp`; a transfer within one device
is free, and transfer time never falls as bytes grow; the mean transfer time over a device
set lies between the fastest and the slowest pair.

>>> check_cost_model("roofline")  # raises ConformanceError naming every failed check
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hwmodels.cost import COST_MODELS, CostModel
from hwmodels.spec import Cluster, Device, Link
from workloads.conformance import (
    Check,
    ConformanceError,
    parametrize,
    require_plugin_contract,
    run_checks,
)
from workloads.conformance import require as _require
from workloads.errors import UnsupportedOp
from workloads.graph import Graph
from workloads.op import Op, Tensor

if TYPE_CHECKING:
    from _pytest.mark import MarkDecorator

__all__ = ["CHECKS", "Check", "ConformanceError", "check_cost_model",
           "parametrize_with_checks"]

CostSource = str | Callable[[Cluster], CostModel]


def _make(source: CostSource, cluster: Cluster) -> CostModel:
    return COST_MODELS.get(source).create(cluster) if isinstance(source, str) \
        else source(cluster)


def _label(source: CostSource) -> str:
    return source if isinstance(source, str) else getattr(source, "__name__", repr(source))


def _cluster() -> Cluster:
    """A CPU with fp64 and an accelerator without, over one link."""
    cpu = Device("c0", "cpu", {"fp64": 1e12, "fp32": 2e12}, 2**34, 1e11,
                 launch_overhead_s=5e-6)
    npu = Device("n0", "npu", {"fp32": 1e14, "bf16": 4e14}, 2**34, 1e12,
                 launch_overhead_s=2e-6, efficiency={"matmul": 0.7})
    far = Device("n1", "npu", {"fp32": 1e14, "bf16": 4e14}, 2**34, 1e12)
    return Cluster("cost-suite", (cpu, npu, far),
                   (Link("c0", "n0", 32e9, 2e-6), Link("n0", "n1", 100e9, 1e-6)))


def _graph() -> Graph:
    """Ops of every compute class, one of them fp64."""
    x = Op("x", "input", "source", outputs=(Tensor("x", (64, 256)),))
    ops = [x]
    prev = "x"
    for i, (kind, cls) in enumerate((("linear", "matmul"), ("relu", "elementwise"),
                                     ("softmax", "reduction"), ("transpose", "data_movement"),
                                     ("conv2d", "conv"))):
        name = f"{kind}{i}"
        ops.append(Op(name, kind, cls, inputs=(prev,), outputs=(Tensor(name, (64, 256)),),
                      flops=10**6 * (i + 1), bytes_read=65536, bytes_written=65536))
        prev = name
    ops.append(Op("wide", "linear", "matmul", inputs=(prev,),
                  outputs=(Tensor("wide", (64, 256), "fp64"),), flops=10**7,
                  bytes_read=65536, bytes_written=131072))
    return Graph("cost-suite", ops)


def check_finite_times(source: CostSource) -> None:
    """Every op a device can run takes a finite, non-negative time there."""
    cluster, graph = _cluster(), _graph()
    cost = _make(source, cluster)
    for device in cluster.device_names:
        for op in graph:
            try:
                t = cost.op_time(op, device)
            except UnsupportedOp:
                continue
            _require(isinstance(t, float | int) and math.isfinite(t) and t >= 0,
                     f"{_label(source)}: op {op.name!r} on {device!r} takes {t!r} s")


def check_vector_equals_scalar(source: CostSource) -> None:
    """``op_times`` equals ``op_time`` op for op, by device name or by device index."""
    cluster, graph = _cluster(), _graph()
    cost = _make(source, cluster)
    names = graph.arrays.names
    fp32 = [op for op in names if graph.op(op).dtype != "fp64"]
    sub = Graph("fp32", [graph.op(n) for n in fp32])
    for d, device in enumerate(("n0", "n1")):
        expect = [cost.op_time(sub.op(n), device) for n in sub.arrays.names]
        by_name = cost.op_times(sub, dict.fromkeys(sub.arrays.names, device))
        by_index = cost.op_times(sub, np.full(len(sub), d + 1, dtype=np.int64))
        _require(np.allclose(by_name, expect, rtol=1e-12, atol=0) and
                 np.allclose(by_index, expect, rtol=1e-12, atol=0),
                 f"{_label(source)}: op_times differs from op_time on {device!r}")


def check_unsupported_dtype(source: CostSource) -> None:
    """A device without an op's dtype raises :class:`UnsupportedOp` (not a spec error)."""
    cluster, graph = _cluster(), _graph()
    cost = _make(source, cluster)
    try:
        cost.op_time(graph.op("wide"), "n0")
    except UnsupportedOp:
        return
    raise ConformanceError(f"{_label(source)}: an fp64 op on a device without fp64 was "
                           f"costed instead of raising UnsupportedOp")


def check_transfers(source: CostSource) -> None:
    """Free within a device; positive and non-decreasing in bytes across devices."""
    cluster = _cluster()
    cost = _make(source, cluster)
    _require(cost.transfer_time(10**6, "n0", "n0") == 0.0,
             f"{_label(source)}: a transfer within one device is not free")
    sizes = [0, 1, 10**3, 10**6, 10**9]
    for src, dst in (("c0", "n0"), ("n0", "c0"), ("c0", "n1")):
        times = [cost.transfer_time(b, src, dst) for b in sizes]
        _require(all(math.isfinite(t) and t >= 0 for t in times) and times[-1] > 0,
                 f"{_label(source)}: transfer {src}->{dst} times {times}")
        _require(all(a <= b for a, b in itertools.pairwise(times)),
                 f"{_label(source)}: transfer {src}->{dst} gets faster with more bytes: "
                 f"{times}")


def check_mean_transfer(source: CostSource) -> None:
    """The mean over a device set lies between its fastest and slowest ordered pair."""
    cluster = _cluster()
    cost = _make(source, cluster)
    devices = cluster.device_names
    for nbytes in (0, 4096, 10**8):
        pairs = [cost.tensor_transfer_time("t", nbytes, a, b)
                 for a in devices for b in devices if a != b]
        mean = cost.mean_transfer_time("t", nbytes, devices)
        _require(min(pairs) * (1 - 1e-9) <= mean <= max(pairs) * (1 + 1e-9),
                 f"{_label(source)}: mean transfer time {mean} of {nbytes} bytes outside "
                 f"[{min(pairs)}, {max(pairs)}]")


def check_declares_parameters(source: CostSource) -> None:
    """``get_params`` shows the declared parameters; ``clone`` is the same model on the same
    cluster, pricing every op alike; ``repr`` names the class."""
    cluster, graph = _cluster(), _graph()
    cost = _make(source, cluster)
    require_plugin_contract(cost, _label(source))
    twin = cost.clone()
    _require(twin.cluster is cost.cluster,
             f"{_label(source)}: its clone {twin!r} is bound to another cluster")
    for op in graph:
        for device in cluster.device_names:
            try:
                mine = cost.op_time(op, device)
            except UnsupportedOp:
                continue
            _require(twin.op_time(op, device) == mine,
                     f"{_label(source)}: its clone prices {op.name!r} on {device!r} otherwise")


CHECKS: tuple[Check[CostSource], ...] = (
    Check("finite_times", check_finite_times),
    Check("vector_equals_scalar", check_vector_equals_scalar),
    Check("unsupported_dtype", check_unsupported_dtype),
    Check("transfers", check_transfers),
    Check("mean_transfer", check_mean_transfer),
    Check("declares_parameters", check_declares_parameters),
)


def check_cost_model(source: CostSource) -> None:
    """Run every check; raise one :class:`ConformanceError` listing every failure."""
    run_checks(CHECKS, source)


def parametrize_with_checks(sources: Sequence[CostSource]) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over (cost, check), one item each."""
    return parametrize(("cost", "check"), [(s, _label(s), c) for s in sources for c in CHECKS])
