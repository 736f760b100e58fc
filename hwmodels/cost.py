"""Cost models: how long an op takes on a device and a transfer between two devices.

A cost model is bound to one cluster (routes depend on it) and answers questions only; it
never schedules. Models register by name (entry point group ``placelab.cost_models``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

import numpy as np

from hwmodels.spec import Cluster, Device
from workloads.graph import DTYPE_BYTES, OP_CLASSES, Graph, Op
from workloads.registry import Registry

__all__ = ["COST_MODELS", "CostModel", "RooflineCost", "make_cost_model"]


class CostModel(ABC):
    """Times of ops and transfers on one cluster, in seconds.

    Subclasses implement :meth:`op_time`; the default :meth:`transfer_time` charges the
    route's summed latency plus the bytes at the route's bottleneck bandwidth (the whole
    path is held at that rate, as the simulator does).
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @abstractmethod
    def op_time(self, op: Op, device: str) -> float:
        """Seconds ``op`` takes on the device named ``device``."""

    def op_times(self, graph: Graph, placement: Mapping[str, str]) -> list[float]:
        """:meth:`op_time` of every op on its placed device, in ``graph.arrays`` order."""
        return [self.op_time(graph.op(name), placement[name]) for name in graph.arrays.names]

    def transfer_time(self, nbytes: int, src: str, dst: str) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to device ``dst``."""
        if src == dst:
            return 0.0
        hops = self.cluster.route(src, dst)
        bandwidth = min(h.link.bandwidth for h in hops)
        return sum(h.link.latency_s for h in hops) + nbytes / bandwidth


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

    name = "roofline"

    def op_time(self, op: Op, device: str) -> float:
        if op.op_class == "source":
            return 0.0
        d = self.cluster.device(device)
        moved = op.bytes_read + op.bytes_written
        compute = 0.0
        if op.flops:
            eff = d.efficiency_for(op.op_class, op.flops)
            compute = op.flops / (d.peak_flops(op.dtype) * eff)
        memory = moved / (d.memory_bandwidth * d.efficiency_for(op.op_class, moved))
        return d.launch_overhead_s + max(compute, memory)

    def op_times(self, graph: Graph, placement: Mapping[str, str]) -> list[float]:
        """Vectorised :meth:`op_time`, equal to it op for op."""
        a = graph.arrays
        names = self.cluster.device_names
        index = {d: i for i, d in enumerate(names)}
        where = np.fromiter((index[placement[n]] for n in a.names), np.int64, len(a.names))
        times = np.zeros(len(a.names))
        dtypes = tuple(DTYPE_BYTES)
        for i in np.unique(where).tolist():
            d = self.cluster.device(names[i])
            on = where == i
            for c in np.unique(a.op_class[on]).tolist():
                op_class = OP_CLASSES[c]
                if op_class == "source":
                    continue
                sel = on & (a.op_class == c)
                flops, moved, dt = a.flops[sel], a.moved_bytes[sel], a.dtype[sel]
                peak = np.ones(len(flops))
                for k in np.unique(dt[flops > 0]).tolist():
                    peak[dt == k] = d.peak_flops(dtypes[k])
                compute = np.where(flops > 0, flops / (peak * _efficiency(d, op_class, flops)),
                                   0.0)
                memory = moved / (d.memory_bandwidth * _efficiency(d, op_class, moved))
                times[sel] = d.launch_overhead_s + np.maximum(compute, memory)
        return times.tolist()


def _efficiency(device: Device, op_class: str, size: np.ndarray) -> np.ndarray | float:
    """``device.efficiency_for`` over an array of sizes."""
    value = device.efficiency.get(op_class, 1.0)
    if isinstance(value, float):
        return value
    thresholds = np.array([t for t, _ in value])
    effs = np.array([e for _, e in value])
    return effs[np.maximum(np.searchsorted(thresholds, size, side="right") - 1, 0)]


COST_MODELS: Registry[type[CostModel]] = Registry("cost model", "placelab.cost_models")
COST_MODELS.register("roofline", RooflineCost)


def make_cost_model(name: str, cluster: Cluster) -> CostModel:
    """The registered cost model ``name`` bound to ``cluster``."""
    return COST_MODELS.get(name)(cluster)
