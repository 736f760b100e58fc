"""Collective communication costs on a cluster (alpha-beta models, route-aware).

Each step's time is the slowest transfer of that step under the cost model, so routes, link
latencies and bandwidths of the real topology count; transfers of one step are assumed not
to contend with each other (true of a ring or tree laid out along distinct links).
References: Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication
Operations in MPICH" (IJHPCA 2005); Patarasuk and Yuan, "Bandwidth optimal all-reduce
algorithms for clusters of workstations" (JPDC 2009).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hwmodels.cost import CostModel
from workloads.errors import HardwareSpecError

__all__ = ["all_gather_time", "reduce_scatter_time", "ring_allreduce_time",
           "tree_allreduce_time"]


def _check(devices: Sequence[str], nbytes: int) -> None:
    if len(devices) != len(set(devices)):
        raise HardwareSpecError(f"collective: devices must be distinct, got {list(devices)}")
    if nbytes < 0:
        raise HardwareSpecError(f"collective: nbytes must be >= 0, got {nbytes}")


def _ring_step(cost: CostModel, devices: Sequence[str], chunk: float) -> float:
    p = len(devices)
    return max(cost.transfer_time(math.ceil(chunk), devices[i], devices[(i + 1) % p])
               for i in range(p))


def reduce_scatter_time(cost: CostModel, devices: Sequence[str], nbytes: int) -> float:
    """Ring reduce-scatter of an ``nbytes`` buffer: ``p - 1`` steps of ``nbytes / p``.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> c = get_cluster("quad-v100-nvlink")
    >>> t = reduce_scatter_time(RooflineCost(c), c.device_names, 100_000_000)
    >>> round(t * 1e3, 3)  # 3 steps of (1 us + 25 MB / 25 GB/s)
    3.003
    """
    _check(devices, nbytes)
    p = len(devices)
    return 0.0 if p < 2 else (p - 1) * _ring_step(cost, devices, nbytes / p)


def all_gather_time(cost: CostModel, devices: Sequence[str], nbytes: int) -> float:
    """Ring all-gather producing ``nbytes`` on every device: ``p - 1`` steps of ``nbytes/p``."""
    return reduce_scatter_time(cost, devices, nbytes)


def ring_allreduce_time(cost: CostModel, devices: Sequence[str], nbytes: int) -> float:
    """Ring all-reduce: a reduce-scatter then an all-gather, ``2 (p - 1)`` steps."""
    return 2 * reduce_scatter_time(cost, devices, nbytes)


def tree_allreduce_time(cost: CostModel, devices: Sequence[str], nbytes: int) -> float:
    """Binary-tree reduce to ``devices[0]`` then broadcast back, whole buffer per hop:
    ``2 * ceil(log2 p)`` levels, each as slow as its slowest parent-child transfer."""
    _check(devices, nbytes)
    p = len(devices)
    total = 0.0
    for level in range(math.ceil(math.log2(p)) if p > 1 else 0):
        stride = 1 << level
        pairs = [(devices[i + stride], devices[i]) for i in range(0, p - stride, 2 * stride)]
        up = max(cost.transfer_time(nbytes, child, parent) for child, parent in pairs)
        down = max(cost.transfer_time(nbytes, parent, child) for child, parent in pairs)
        total += up + down
    return total
