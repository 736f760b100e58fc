"""Baseline policies: everything on the best single device, and round robin."""

from __future__ import annotations

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import PlacementPolicy, register_policy
from policies.plans import Placement
from workloads.graph import Graph

__all__ = ["RoundRobin", "SingleDevice"]


@register_policy
class SingleDevice(PlacementPolicy):
    """Every op on the device that runs the whole graph fastest alone (no transfers).

    Ties go to the device listed first in the cluster.
    """

    name = "single_device"

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        def total(device: str) -> float:
            return sum(cost.op_time(op, device) for op in graph)

        best = min(cluster.device_names, key=total)
        return Placement({op.name: best for op in graph})


@register_policy
class RoundRobin(PlacementPolicy):
    """Op ``i`` of the topological order goes to device ``i mod n``."""

    name = "round_robin"

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        names = cluster.device_names
        return Placement({op: names[i % len(names)]
                          for i, op in enumerate(graph.topological_order())})
