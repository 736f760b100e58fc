"""Baseline policies: everything on the best single device, round robin, and random."""

from __future__ import annotations

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import Param, PlacementPolicy, Seed, make_rng, register_policy
from policies.plans import Placement
from policies.problem import Problem
from workloads.graph import Graph

__all__ = ["RandomPlacement", "RoundRobin", "SingleDevice"]


@register_policy
class SingleDevice(PlacementPolicy):
    """Every op on the device that runs the whole graph fastest alone (no transfers).

    Ties go to the device listed first in the cluster.
    """

    name = "single_device"

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        best = p.devices[int(np.argmin(p.times.sum(axis=0)))]
        return Placement({name: best for name in p.names})


@register_policy
class RoundRobin(PlacementPolicy):
    """Op ``i`` of the topological order goes to device ``i mod n`` (of the devices that can
    run it); the ops of a co-placement group follow its lead."""

    name = "round_robin"

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        where = []
        for i in range(p.n):
            able = np.flatnonzero(np.isfinite(p.times[i]))
            where.append(int(able[i % len(able)]))
        return _placement(p, where)


@register_policy
class RandomPlacement(PlacementPolicy):
    """Each op on a device drawn uniformly at random among those that can run it (the ops
    of a co-placement group follow its lead); the same ``seed`` gives the same placement in
    any process."""

    name = "random"

    params = (Param("seed", "seed", 0, doc="fixes the random draws"),)

    def __init__(self, seed: Seed = 0) -> None:
        self.seed = self.checked("seed", seed)

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        rng = make_rng(self.seed)
        picks = rng.random(p.n)
        where = []
        for i in range(p.n):
            able = np.flatnonzero(np.isfinite(p.times[i]))
            where.append(int(able[int(picks[i] * len(able))]))
        return _placement(p, where)


def _placement(p: Problem, where: list[int]) -> Placement:
    return Placement({p.names[i]: p.devices[d] for i, d in enumerate(p.follow_leads(where))})
