"""HEFT: Heterogeneous Earliest Finish Time (Topcuoglu, Hariri and Wu, IEEE TPDS 2002).

Ops are ranked by their upward rank (mean compute cost plus the longest mean-cost path to an
exit) and taken in decreasing rank; each goes to the device where it would finish earliest,
using the earliest idle slot long enough for it (insertion-based policy).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from statistics import fmean

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import PlacementPolicy, register_policy
from policies.plans import Placement
from workloads.graph import Graph

__all__ = ["HEFT", "mean_transfer_model", "upward_rank"]


def mean_transfer_model(cost: CostModel, devices: Sequence[str]) -> tuple[float, float]:
    """``(a, b)`` such that the mean transfer time over ordered device pairs is ``a + b*n``.

    The paper averages communication cost over processor pairs; an affine fit at two sizes
    keeps that exact for cost models whose transfer time is affine in bytes (the built-in
    ones) without touching every pair for every edge.
    """
    pairs = [(p, q) for p in devices for q in devices if p != q]
    if not pairs:
        return 0.0, 0.0
    probe = 1 << 30
    at_zero = fmean(cost.transfer_time(0, p, q) for p, q in pairs)
    at_probe = fmean(cost.transfer_time(probe, p, q) for p, q in pairs)
    return at_zero, (at_probe - at_zero) / probe


def upward_rank(graph: Graph, cluster: Cluster, cost: CostModel) -> dict[str, float]:
    """HEFT's ``rank_u``: mean op time plus the costliest mean path to an exit."""
    devices = cluster.device_names
    fixed, per_byte = mean_transfer_model(cost, devices)
    rank: dict[str, float] = {}
    g = graph.to_networkx()
    for name in reversed(graph.topological_order()):
        mean_w = fmean(cost.op_time(graph.op(name), d) for d in devices)
        tail = 0.0
        for succ in g.successors(name):
            comm = fixed + per_byte * g.edges[name, succ]["bytes"] if fixed or per_byte else 0.0
            tail = max(tail, comm + rank[succ])
        rank[name] = mean_w + tail
    return rank


class _Timeline:
    """Busy intervals of one device, kept sorted, with insertion into idle gaps."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.ops: list[str] = []

    def earliest_start(self, ready: float, duration: float) -> float:
        i = bisect.bisect_right(self.ends, ready)
        start = ready if i == 0 else max(ready, self.ends[i - 1])
        while i < len(self.starts):
            if start + duration <= self.starts[i]:
                return start
            start = max(start, self.ends[i])
            i += 1
        return start

    def insert(self, start: float, end: float, op: str) -> None:
        i = bisect.bisect_right(self.starts, start)
        self.starts.insert(i, start)
        self.ends.insert(i, end)
        self.ops.insert(i, op)


@register_policy
class HEFT(PlacementPolicy):
    """Insertion-based HEFT; the Plan's device orders are HEFT's start-time orders."""

    name = "heft"

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        rank = upward_rank(graph, cluster, cost)
        index = {name: i for i, name in enumerate(graph.topological_order())}
        queue = sorted(rank, key=lambda n: (-rank[n], index[n]))
        devices = cluster.device_names
        timelines = {d: _Timeline() for d in devices}
        where: dict[str, str] = {}
        finish: dict[str, float] = {}
        g = graph.to_networkx()
        for name in queue:
            op = graph.op(name)
            best: tuple[float, float, str] | None = None
            for device in devices:
                ready = max((finish[p] + cost.transfer_time(g.edges[p, name]["bytes"],
                                                            where[p], device)
                             for p in g.predecessors(name)), default=0.0)
                duration = cost.op_time(op, device)
                start = timelines[device].earliest_start(ready, duration)
                if best is None or start + duration < best[0] + best[1]:
                    best = (start, duration, device)
            assert best is not None  # a cluster has at least one device
            start, duration, device = best
            timelines[device].insert(start, start + duration, name)
            where[name] = device
            finish[name] = start + duration
        order = {d: tuple(t.ops) for d, t in timelines.items() if t.ops}
        return Placement(where, order=order, priority=rank)
