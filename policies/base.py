"""The policy interface, its registry and :func:`plan`, the one way to build a Plan."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from hwmodels.cost import CostModel, make_cost_model
from hwmodels.spec import Cluster
from policies.plans import Placement, Plan, order_by_priority
from workloads.errors import HardwareSpecError, PlacementError
from workloads.graph import Graph
from workloads.registry import Registry

__all__ = ["POLICIES", "PlacementPolicy", "check_number", "check_seed", "make_policy", "plan",
           "register_policy"]


class PlacementPolicy(ABC):
    """Decides which device runs each op (and optionally in which order).

    One method is required: :meth:`place`. Policies propose; the simulator and the runtime
    apply. A randomised policy takes ``seed`` in its constructor.
    """

    name: ClassVar[str] = ""

    @abstractmethod
    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        """Propose a placement of every op of ``graph`` on devices of ``cluster``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_seed(policy: str, seed: object) -> int | None:
    """A policy's ``seed``: an int or None (fresh randomness), nothing else."""
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise PlacementError(f"policy {policy!r}: seed must be an int or None, got {seed!r}")
    return seed


def check_number(policy: str, field: str, value: object, *, integer: bool = False,
                 minimum: float = 0.0) -> None:
    """``value`` must be a number > 0 (or an int >= ``minimum`` when ``integer``)."""
    if integer:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise PlacementError(f"policy {policy!r}: {field} must be an int >= "
                                 f"{minimum:g}, got {value!r}")
    elif not isinstance(value, int | float) or isinstance(value, bool) or value <= minimum:
        raise PlacementError(f"policy {policy!r}: {field} must be > {minimum:g}, "
                             f"got {value!r}")


POLICIES: Registry[type[PlacementPolicy]] = Registry("policy", "placelab.policies")


def register_policy(cls: type[PlacementPolicy]) -> type[PlacementPolicy]:
    """Class decorator: register ``cls`` under ``cls.name`` (a duplicate is an error)."""
    POLICIES.register(cls.name, cls)
    return cls


def make_policy(name: str) -> PlacementPolicy:
    """A registered policy with its default parameters."""
    return POLICIES.get(name)()


def _check_runnable(graph: Graph, cluster: Cluster, cost: CostModel,
                    devices: Mapping[str, str], policy: str) -> None:
    """Every op must be placed on a device of the cluster that can run it."""
    names = set(cluster.device_names)
    for op, device in devices.items():
        if device not in names:
            raise PlacementError(f"policy {policy!r} placed op {op!r} on device {device!r}, "
                                 f"which cluster {cluster.name!r} lacks")
    try:
        cost.op_times(graph, devices)
    except HardwareSpecError:
        for op in graph:
            try:
                cost.op_time(op, devices[op.name])
            except HardwareSpecError as err:
                raise PlacementError(f"policy {policy!r} placed op {op.name!r} on device "
                                     f"{devices[op.name]!r}, which cannot run it: "
                                     f"{err}") from err


def plan(graph: Graph, cluster: Cluster, policy: PlacementPolicy | str,
         cost: CostModel | str = "roofline") -> Plan:
    """Run ``policy`` on ``graph`` and ``cluster`` and return the validated Plan.

    >>> from hwmodels import get_cluster
    >>> from workloads import build_model
    >>> p = plan(build_model("resnet50"), get_cluster("quad-v100-nvlink"), "heft")
    >>> sorted(set(p.placement.values())) <= ["gpu0", "gpu1", "gpu2", "gpu3"]
    True
    """
    policy = make_policy(policy) if isinstance(policy, str) else policy
    cost = make_cost_model(cost, cluster) if isinstance(cost, str) else cost
    if cost.cluster is not cluster and cost.cluster != cluster:
        raise PlacementError(f"plan: cost model is bound to cluster {cost.cluster.name!r}, "
                             f"expected {cluster.name!r}")
    start = time.perf_counter()
    proposal = policy.place(graph, cluster, cost)
    elapsed = time.perf_counter() - start
    for name in graph.topological_order():
        if name not in proposal.devices:
            raise PlacementError(f"policy {policy.name!r} left op {name!r} unplaced")
    order = proposal.order
    if order is None:
        order = order_by_priority(graph, proposal.devices, proposal.priority)
    _check_runnable(graph, cluster, cost, proposal.devices, policy.name)
    result = Plan(graph, proposal.devices, order, policy=policy.name,
                  priority=proposal.priority, placement_s=elapsed,
                  estimated_makespan_s=proposal.estimated_makespan_s, info=proposal.info)
    return result.validate(cluster)
