"""Cost models: how long an op takes on a device and a tensor takes between two devices.

A cost model is bound to one cluster (routes depend on it) and answers questions only; it
never schedules. Models register by name (entry point group ``placelab.cost_models``):

* ``roofline``: launch overhead plus the larger of the compute and the memory roof;
* ``table``: explicit op times per device and transfer times per tensor (published
  scheduling instances, measured tables);
* ``calibrated``: the roofline over device specs that calibration measured (device TOML).
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Self

import numpy as np

from hwmodels.spec import Cluster, Device, _check_positive
from workloads.dtypes import DTYPE_BYTES, OP_CLASSES
from workloads.errors import HardwareSpecError, UnsupportedOp
from workloads.graph import Graph, Op
from workloads.op import window_work
from workloads.params import Param
from workloads.plugin import Plugin
from workloads.registry import Registry

#: Op -> device name, or device indices in ``graph.arrays`` order.
Placement = Mapping[str, str] | np.ndarray

__all__ = ["COST_MODELS", "CostModel", "RooflineCost", "TableCost", "interpolate",
           "kind_key", "make_cost_model", "op_batch", "op_signature", "weight_bytes",
           "window_positions"]


class CostModel(Plugin, ABC):
    """Times of ops and transfers on one cluster, in seconds.

    Subclasses implement :meth:`op_time`. The default :meth:`transfer_time` charges the
    route's summed latency plus the bytes at the route's bottleneck bandwidth (the whole path
    is held at that rate, as the simulator does). A model whose transfer time depends on the
    tensor, not only its size, overrides :meth:`tensor_transfer_time`.

    A plug-in (:class:`workloads.plugin.Plugin`) bound to its cluster when built: the file a
    model reads is its declared parameter ``file`` (``make_cost_model("table:file=t.toml",
    cluster)``; ``placelab list cost-models --params``), shown by ``repr`` and
    ``get_params``; :meth:`clone` is the same model on the same cluster.
    """

    family = "cost model"
    error = HardwareSpecError

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._affine: dict[tuple[str, ...], tuple[float, float]] = {}

    def clone(self) -> Self:
        """The same model on the same cluster (what it read is shared: it is read-only)."""
        twin = copy.copy(self)
        twin._affine = {}
        return twin

    @classmethod
    def create(cls, cluster: Cluster, file: str | Path | None = None) -> CostModel:
        """Build the model for ``cluster``; models read from a file override this."""
        if file is not None:
            raise HardwareSpecError(f"cost model {cls.__name__}: takes no file, "
                                    f"got {str(file)!r}")
        return cls(cluster)

    @abstractmethod
    def op_time(self, op: Op, device: str) -> float:
        """Seconds ``op`` takes on the device named ``device``."""

    def check_cluster(self, cluster: Cluster, who: str) -> None:
        """Refuse ``cluster`` unless this model is bound to it (the same definition): a
        model bound to another would quietly use its speeds. ``who`` names the caller.

        >>> from hwmodels import get_cluster
        >>> RooflineCost(get_cluster("workstation")).check_cluster(
        ...     get_cluster("dgx-a100"), "simulate")
        Traceback (most recent call last):
        ...
        workloads.errors.HardwareSpecError: simulate: cost model is bound to cluster ...
        """
        if self.cluster is not cluster and \
                self.cluster.definition_hash != cluster.definition_hash:
            raise HardwareSpecError(f"{who}: cost model is bound to cluster "
                                    f"{self.cluster.name!r}, expected one bound to "
                                    f"{cluster.name!r}")

    #: What priced an op, for a model with one source (:meth:`sources`).
    source_name: str = "model"

    def sources(self, graph: Graph, placement: Placement) -> list[str]:
        """Which source priced each op of :meth:`op_times` (a model with several, such as
        the calibrated one, overrides this): the simulator reports how many ops and what
        share of the time each source priced."""
        return [self.source_name] * len(graph.arrays.names)

    def op_times(self, graph: Graph, placement: Placement) -> list[float]:
        """:meth:`op_time` of every op on its placed device, in ``graph.arrays`` order.

        ``placement`` maps op names to device names, or is an integer array of indices into
        ``cluster.device_names`` in ``graph.arrays`` order (what executors already hold).
        """
        names = self.cluster.device_names
        if isinstance(placement, np.ndarray):
            return [self.op_time(graph.op(op), names[d])
                    for op, d in zip(graph.arrays.names, placement.tolist(), strict=True)]
        return [self.op_time(graph.op(name), placement[name]) for name in graph.arrays.names]

    def least_op_times(self, graph: Graph, device: str) -> list[float]:
        """Each op's least time on ``device``, wherever the graph's other ops run, in
        ``graph.arrays`` order: what lower bounds take (:mod:`policies.bounds`). An op's
        time here depends on nothing but the op and the device, so it is :meth:`op_times`
        with every op on ``device``; a model that prices an op by its context overrides
        this.

        >>> from hwmodels import get_cluster, RooflineCost
        >>> from workloads import build_model
        >>> g, cost = build_model("mlp"), RooflineCost(get_cluster("workstation"))
        >>> cost.least_op_times(g, "gpu0") == [cost.op_time(op, "gpu0") for op in g]
        True
        """
        return self.op_times(graph, dict.fromkeys(graph.arrays.names, device))

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to device ``dst``."""
        if src == dst:
            return 0.0
        hops = self.cluster.route(src, dst)
        bandwidth = min(h.link.bandwidth for h in hops)
        return sum(h.link.latency_s for h in hops) + nbytes / bandwidth

    def tensor_transfer_time(self, tensor: str, nbytes: int, src: str, dst: str) -> float:
        """Seconds to move tensor ``tensor`` (``nbytes``) from ``src`` to ``dst``."""
        return self.transfer_time(nbytes, src, dst)

    def mean_transfer_time(self, tensor: str, nbytes: int, devices: Sequence[str]) -> float:
        """Mean of :meth:`tensor_transfer_time` over ordered pairs of distinct ``devices``.

        List schedulers rank ops by it. The default fits ``a + b * nbytes`` once per device
        set, exact when transfer time is affine in bytes (true of :meth:`transfer_time`).
        """
        key = tuple(devices)
        if key not in self._affine:
            pairs = [(p, q) for p in key for q in key if p != q]
            if not pairs:
                self._affine[key] = (0.0, 0.0)
            else:
                probe = 1 << 30
                at_zero = fmean(self.transfer_time(0, p, q) for p, q in pairs)
                at_probe = fmean(self.transfer_time(probe, p, q) for p, q in pairs)
                self._affine[key] = (at_zero, (at_probe - at_zero) / probe)
        fixed, per_byte = self._affine[key]
        return fixed + per_byte * nbytes if len(key) > 1 else 0.0


class RooflineCost(CostModel):
    """``launch + max(FLOPs / (peak * eff), bytes / (bandwidth * eff))``.

    The efficiency of the op's class applies to both roofs; ``source`` ops (graph inputs,
    already resident) cost nothing.

    >>> from hwmodels import get_cluster
    >>> from workloads import build_model
    >>> cost = RooflineCost(get_cluster("workstation"))
    >>> fc = build_model("mlp", batch=64).op("fc1")
    >>> cost.op_time(fc, "gpu0") < cost.op_time(fc, "cpu0")
    True
    """

    source_name = "roofline"

    def spec(self, device: str) -> Device:
        """The spec the roofline uses for ``device`` (overridden by calibration)."""
        return self.cluster.device(device)

    def op_time(self, op: Op, device: str) -> float:
        if op.op_class == "source":
            return 0.0
        d = self.spec(device)
        moved = op.bytes_read + op.bytes_written
        compute = 0.0
        if op.flops:
            eff = d.efficiency_for(op.op_class, op.flops)
            compute = op.flops / (d.peak_flops(op.dtype) * eff)
        memory = moved / (d.memory_bandwidth * d.efficiency_for(op.op_class, moved))
        return d.launch_overhead_s + max(compute, memory)

    def op_times(self, graph: Graph, placement: Placement) -> list[float]:
        """Vectorised :meth:`op_time`, equal to it op for op (one pass per device and class)."""
        a = graph.arrays
        names = self.cluster.device_names
        where = placement if isinstance(placement, np.ndarray) else _codes(
            a.names, placement, names)
        times = np.zeros(len(a.names))
        dtypes, n_classes = tuple(DTYPE_BYTES), len(OP_CLASSES)
        key = where * n_classes + a.op_class
        order = np.argsort(key, kind="stable")
        cuts = np.flatnonzero(np.diff(key[order])) + 1
        for sel in np.split(order, cuts):
            if not len(sel):
                continue
            i, c = divmod(int(key[sel[0]]), n_classes)
            op_class = OP_CLASSES[c]
            if op_class == "source":
                continue
            d = self.spec(names[i])
            flops, moved, dt = a.flops[sel], a.moved_bytes[sel], a.dtype[sel]
            if dt.min() == dt.max():  # the usual case: one dtype in the group
                peak = np.full(len(flops), d.peak_flops(dtypes[int(dt[0])]) if flops.any()
                               else 1.0)
            else:
                peak = np.ones(len(flops))
                for k in np.unique(dt[flops > 0]).tolist():
                    peak[dt == k] = d.peak_flops(dtypes[k])
            compute = np.where(flops > 0, flops / (peak * _efficiency(d, op_class, flops)), 0.0)
            memory = moved / (d.memory_bandwidth * _efficiency(d, op_class, moved))
            times[sel] = d.launch_overhead_s + np.maximum(compute, memory)
        return times.tolist()


def _codes(ops: Sequence[str], placement: Mapping[str, str],
           devices: Sequence[str]) -> np.ndarray:
    index = {d: i for i, d in enumerate(devices)}
    return np.fromiter((index[placement[n]] for n in ops), np.int64, len(ops))


def _efficiency(device: Device, op_class: str, size: np.ndarray) -> np.ndarray | float:
    """``device.efficiency_for`` over an array of sizes."""
    value = device.efficiency.get(op_class, 1.0)
    if isinstance(value, float):
        return value
    thresholds = np.array([t for t, _ in value])
    effs = np.array([e for _, e in value])
    return effs[np.maximum(np.searchsorted(thresholds, size, side="right") - 1, 0)]


def kind_key(op: Op) -> str:
    """What a per-kind time model is keyed by: the op's kind, a backward op's forward kind;
    a linear layer over a single row is ``linear:gemv`` (BLAS runs a matrix-vector product
    there, several times faster per byte than the matrix product two rows take).

    >>> kind_key(Op("g", "backward", "conv", attrs={"of": "c", "of_kind": "conv2d"}))
    'backward:conv2d'
    """
    if op.kind == "backward":
        return f"backward:{op.attrs.get('of_kind')}"
    if op.kind == "linear" and len(op.outputs) == 1 and math.prod(op.output.shape[:-1]) == 1:
        return "linear:gemv"
    return op.kind


def window_positions(op: Op) -> int:
    """Kernel positions a windowed op (convolution, pooling, or its backward) visits."""
    kernel = op.attrs.get("kernel")
    return int(kernel[0] * kernel[1]) if kernel else 0


#: Attributes that change what a kernel does (the signature keeps them; names and
#: bookkeeping differ between ops that cost the same).
_KERNEL_ATTRS = ("kernel", "stride", "padding", "groups", "axis", "axes", "perm", "bias",
                 "of_kind", "grads", "count_include_pad", "output_size", "squeeze", "eps",
                 "keepdims", "sizes", "classes", "grad_outputs")


def op_batch(op: Op, graph: Graph | None = None) -> int:
    """The batch an op runs at: its graph's (``meta["batch"]``), else the leading
    dimension of its first output (1 without one)."""
    batch = graph.meta.get("batch") if graph is not None else None
    if isinstance(batch, int) and batch > 0:
        return batch
    return op.outputs[0].shape[0] if op.outputs and op.outputs[0].shape else 1


def op_signature(op: Op, batch: int) -> str:
    """What ops that cost the same at every batch size share: the kind, dtype, output
    shapes (a leading dimension equal to ``batch`` left out), weight bytes, FLOPs per
    output element and window elements per batch element where they scale with the
    batch, the bytes written where the output is not batched (optimizer updates differ
    in nothing else), and the attributes a kernel reads.

    >>> from workloads import build_model
    >>> a, b = (build_model("lenet5", batch=n).op("c3") for n in (2, 16))
    >>> op_signature(a, 2) == op_signature(b, 16), op_signature(a, 2) == op_signature(b, 2)
    (True, False)
    """
    import json

    shapes = [["B", *t.shape[1:]] if t.shape[:1] == (batch,) else list(t.shape)
              for t in op.outputs]
    batched = bool(op.outputs) and op.outputs[0].shape[:1] == (batch,)
    # FLOPs per output element where they scale with the batch; else the bytes written,
    # which do not (an optimizer update writes the weights it updates in place)
    work = round(op.flops / op.outputs[0].numel, 3) if batched else op.bytes_written
    elements, _ = window_work(op)
    attrs = {k: op.attrs[k] for k in _KERNEL_ATTRS if k in op.attrs}
    return json.dumps([kind_key(op), op.dtype, shapes, op.param_bytes, work,
                       elements // batch, attrs], separators=(",", ":"), default=list)


def interpolate(batches: Sequence[int], seconds: Sequence[float], batch: int) -> float:
    """Time at ``batch`` from times measured at ``batches`` (sorted): linear between the
    two nearest, extended along the nearest pair's slope (never falling) beyond them.

    >>> interpolate([1, 4], [1.0, 2.5], 2), interpolate([1, 4], [1.0, 2.5], 8)
    (1.5, 4.5)
    """
    if len(batches) == 1:
        return float(seconds[0])
    i = int(np.clip(np.searchsorted(batches, batch) - 1, 0, len(batches) - 2))
    b0, b1, t0, t1 = batches[i], batches[i + 1], seconds[i], seconds[i + 1]
    slope = max((t1 - t0) / (b1 - b0), 0.0)
    return float(max(t0 + slope * (batch - b0), 0.0))


def weight_bytes(graph: Graph, op: Op) -> int:
    """The weights ``op`` reads: its own resident state, and tensors of ``parameter`` ops
    (a training step's weights)."""
    read = op.param_bytes
    for name in dict.fromkeys(op.inputs):
        producer = graph.op(graph.producer(name))
        if producer.kind == "parameter":
            read += graph.tensor(name).nbytes
    return read


class TableCost(CostModel):
    """Explicit times: ``op_times[op][device]`` seconds and, for a tensor crossing devices,
    ``transfer_times[tensor]`` seconds (any pair of distinct devices, as in the scheduling
    literature); a tensor missing from the table pays the route's latency and bandwidth.

    The TOML form::

        [op_time_s]
        t1 = { p1 = 14, p2 = 16, p3 = 9 }
        [transfer_time_s]
        t1 = 18

    >>> from hwmodels import Cluster, Device, Link
    >>> d = tuple(Device(n, "cpu", {"fp32": 1e9}, 2**30, 1e9) for n in ("p1", "p2"))
    >>> c = Cluster("c", d, (Link("p1", "p2", 1e9),))
    >>> cost = TableCost(c, {"a": {"p1": 2.0, "p2": 3.0}}, {"a": 5.0})
    >>> [cost.tensor_transfer_time("a", 4, "p1", q) for q in ("p2", "p1")]
    [5.0, 0.0]
    """

    source_name = "table"
    params = (Param("file", "str", None, optional=True,
                    doc="the TOML table read (None: built from mappings in Python)"),)

    def __init__(self, cluster: Cluster, op_times: Mapping[str, Mapping[str, float]],
                 transfer_times: Mapping[str, float] | None = None) -> None:
        super().__init__(cluster)
        self.file: str | None = None
        for name, table in (("op_time_s", op_times), ("transfer_time_s", transfer_times)):
            if table is not None and not isinstance(table, Mapping):
                raise HardwareSpecError(f"table: {name} must be a mapping, got "
                                        f"{type(table).__name__}")
        for op, row in op_times.items():
            if not isinstance(row, Mapping):
                raise HardwareSpecError(f"table: op_time_s.{op} must be a mapping of device "
                                        f"to seconds, got {row!r}")
        self.table = {op: dict(row) for op, row in op_times.items()}
        self.transfers = dict(transfer_times or {})
        for op, row in self.table.items():
            for device, seconds in row.items():
                cluster.device(device)
                _check_positive("table", f"op_time_s.{op}.{device}", seconds, allow_zero=True)
        for tensor, seconds in self.transfers.items():
            _check_positive("table", f"transfer_time_s.{tensor}", seconds, allow_zero=True)

    @classmethod
    def create(cls, cluster: Cluster, file: str | Path | None = None) -> CostModel:
        """Read the TOML form (see the class docstring)."""
        from hwmodels.schema import CostTableDocument
        from workloads.io import read_text
        from workloads.schema import load_toml, validate

        if file is None:
            raise HardwareSpecError("cost model table: needs a table file, got none")
        text = read_text(file, HardwareSpecError, "cost table")
        data = load_toml(text, source=str(file), error=HardwareSpecError)
        doc = validate(CostTableDocument, data, source=str(file), error=HardwareSpecError)
        try:
            made = cls(cluster, doc.op_time_s, doc.transfer_time_s)
        except HardwareSpecError as err:
            raise HardwareSpecError(f"{file}: {err}") from None
        made.file = str(file)
        return made

    def op_time(self, op: Op, device: str) -> float:
        try:
            return float(self.table[op.name][device])
        except KeyError:
            raise UnsupportedOp(f"table: no time for op {op.name!r} on device "
                                f"{device!r}") from None

    def tensor_transfer_time(self, tensor: str, nbytes: int, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        if tensor in self.transfers:
            return float(self.transfers[tensor])
        return self.transfer_time(nbytes, src, dst)

    def mean_transfer_time(self, tensor: str, nbytes: int, devices: Sequence[str]) -> float:
        if tensor in self.transfers and len(devices) > 1:
            return float(self.transfers[tensor])
        return super().mean_transfer_time(tensor, nbytes, devices)


COST_MODELS: Registry[type[CostModel]] = Registry(
    "cost model", "placelab.cost_models",
    builtins={"calibrated": "hwmodels.calibrated:CalibratedCost",
              "gpu": "hwmodels.gpufit:GpuCost"})
COST_MODELS.register("roofline", RooflineCost)
COST_MODELS.register("table", TableCost)


def make_cost_model(name: str, cluster: Cluster, file: str | Path | None = None) -> CostModel:
    """The registered cost model ``name`` (or spec ``name:file=PATH``) bound to ``cluster``;
    ``file`` for those that read one (``table``, ``calibrated``; ``gpu`` reads the fitted
    GPU model shipped with placelab unless given another).

    >>> from hwmodels.registry import get_cluster
    >>> make_cost_model("roofline", get_cluster("workstation"))
    RooflineCost()
    """
    from workloads.params import parse_spec

    cls = COST_MODELS.get(name.partition(":")[0])
    _, given = parse_spec(name, cls.params, what="cost model", error=HardwareSpecError)
    named = given.get("file")
    if named is not None and file is not None and str(named) != str(file):
        raise HardwareSpecError(f"cost model {cls.__name__}: expected one file, got "
                                f"{named!r} in its spec and {str(file)!r} beside it")
    return cls.create(cluster, file if file is not None else named)
