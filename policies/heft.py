"""HEFT: Heterogeneous Earliest Finish Time (Topcuoglu, Hariri and Wu, IEEE TPDS 2002).

Ops are ranked by their upward rank (mean compute cost plus the longest mean-cost path to an
exit) and taken in decreasing rank; each goes to the device where it would finish earliest,
using the earliest idle slot long enough for it (insertion-based policy).
"""

from __future__ import annotations

import bisect
from statistics import fmean

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import PlacementPolicy, register_policy
from policies.plans import Placement
from workloads.graph import Graph

__all__ = ["HEFT", "edge_transfer_time", "upward_rank"]


def edge_transfer_time(graph: Graph, cost: CostModel, src_op: str, dst_op: str, src: str,
                       dst: str) -> float:
    """Seconds for every tensor ``src_op`` sends ``dst_op`` to go from ``src`` to ``dst``."""
    if src == dst:
        return 0.0
    total = 0.0
    for name in graph.to_networkx_view().edges[src_op, dst_op]["tensors"]:
        total += cost.tensor_transfer_time(name, graph.tensor(name).nbytes, src, dst)
    return total


def upward_rank(graph: Graph, cluster: Cluster, cost: CostModel) -> dict[str, float]:
    """HEFT's ``rank_u``: mean op time plus the costliest mean path to an exit."""
    devices = cluster.device_names
    rank: dict[str, float] = {}
    g = graph.to_networkx_view()
    for name in reversed(graph.topological_order()):
        mean_w = fmean(cost.op_time(graph.op(name), d) for d in devices)
        tail = 0.0
        for succ in g.successors(name):
            comm = sum(cost.mean_transfer_time(t, graph.tensor(t).nbytes, devices)
                       for t in g.edges[name, succ]["tensors"])
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
        g = graph.to_networkx_view()
        for name in queue:
            op = graph.op(name)
            best: tuple[float, float, str] | None = None
            for device in devices:
                ready = max((finish[p] + edge_transfer_time(graph, cost, p, name, where[p],
                                                            device)
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
        return Placement(where, order=order, priority=rank,
                         estimated_makespan_s=max(finish.values(), default=0.0))
