"""Repair a memory budget with the simulator: place, simulate, hold back what overflowed.

A list scheduler that budgets memory along its own schedule (``m_etf``, ``m_sct``) frees a
tensor when its last reader is *scheduled*; the simulator frees it when that reader *ends*,
so the simulated peak can exceed the budget. :func:`repair` closes the gap as Baechi's
authors suggest closing it by hand: simulate the plan; for every device that overflowed,
hold back the bytes it went over (on top of what was held before) and place again, with
that memory taken (:class:`policies.load.ClusterLoad`), for a few rounds at most.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import PlacementPolicy, make_policy, plan
from policies.load import ClusterLoad
from policies.plans import Plan
from sim.engine import simulate
from sim.result import SimResult
from workloads.errors import OutOfMemory, PlacementError
from workloads.graph import Graph

__all__ = ["Repaired", "repair"]


@dataclass
class Repaired:
    """The last plan placed and its simulation, and per round the bytes each device went
    over and the bytes held back before it (a round where the policy refused to place
    with that much held back says why in ``refused``; the plan before it is kept)."""

    plan: Plan
    result: SimResult
    rounds: list[dict[str, Any]] = field(default_factory=list)


def repair(graph: Graph, cluster: Cluster, policy: PlacementPolicy | str, cost: CostModel,
           *, rounds: int = 3, links: str = "fcfs", order: str = "plan") -> Repaired:
    """Place ``graph`` with ``policy`` (a memory-aware policy that takes a load), simulate,
    and while a device overflows and fewer than ``rounds`` re-placements were made, hold
    back on it the bytes it went over and place again. The first placement's refusal
    (:class:`OutOfMemory`) is raised; a later one ends the repair.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> r = repair(build_model("mlp"), c, "m_etf", RooflineCost(c))
    >>> r.result.feasible, len(r.rounds)
    (True, 1)
    """
    chosen = make_policy(policy) if isinstance(policy, str) else policy
    if not (chosen.memory_aware and chosen.load_aware):
        raise PlacementError(f"repair: policy {chosen.name!r}: expected a memory-aware policy "
                             f"that takes a load (m_etf, m_sct), got one that is not")
    if rounds < 0:
        raise PlacementError(f"repair: rounds must be >= 0, got {rounds}")
    held: dict[str, int] = {}
    history: list[dict[str, Any]] = []
    last: Repaired | None = None
    while True:
        try:
            p = plan(graph, cluster, chosen, cost,
                     load=ClusterLoad(memory_bytes=held) if held else None)
        except OutOfMemory as err:
            if last is None:
                raise
            history.append({"round": len(history), "refused": str(err),
                            "held_bytes": dict(held)})
            return Repaired(last.plan, last.result, history)
        result = simulate(p, cluster, cost, links=links, order=order)
        last = Repaired(p, result)
        over = {d: peak - result.memory_capacity_bytes[d]
                for d, peak in result.peak_memory_bytes.items()
                if peak > result.memory_capacity_bytes[d]}
        history.append({"round": len(history), "over_bytes": over, "held_bytes": dict(held)})
        if not over or len(history) > rounds:
            return Repaired(p, result, history)
        for d, extra in over.items():
            held[d] = held.get(d, 0) + extra
