"""The policy interface, its registry and :func:`plan`, the one way to build a Plan."""

from __future__ import annotations

import numbers
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from hwmodels.cost import CostModel, make_cost_model
from hwmodels.spec import Cluster
from policies.load import ClusterLoad
from policies.params import Param
from policies.plans import Placement, Plan, order_by_priority
from workloads.errors import PlacementError, UnsupportedOp
from workloads.graph import Graph
from workloads.params import split_specs
from workloads.plugin import Plugin
from workloads.registry import Registry

__all__ = ["POLICIES", "Param", "PlacementPolicy", "Seed", "make_policy",
           "make_rng", "plan", "policy_parameters", "register_policy", "seed_int",
           "split_policies"]


class PlacementPolicy(Plugin, ABC):
    """Decides which device runs each op (and optionally in which order).

    One method is required: :meth:`place`. Policies propose; the simulator and the runtime
    apply. Parameters are keyword arguments of the constructor, stored under their own names
    (so :func:`repr` shows them); ``place`` keeps its working state in locals, so one
    instance may serve several calls and threads. A randomised policy takes ``seed``
    (an integer, a ``numpy.random.Generator`` or None) and draws from :func:`make_rng`.
    """

    family = "policy"
    error = PlacementError
    #: The policy never exceeds a device's memory under the conservative model of
    #: :mod:`policies.problem`, and raises :class:`OutOfMemory` when nothing fits.
    memory_aware: ClassVar[bool] = False
    #: The largest graph (in ops) the policy accepts; None: no limit.
    max_ops: int | None = None
    # ``params`` (Plugin): the CLI and sweeps read and check them from there; the
    # conformance suite holds them to the constructor's signature.
    #: The policy places around other jobs' load when :func:`plan` is given one.
    load_aware: ClassVar[bool] = False
    #: The policy scores candidate plans with an evaluator (``Plan -> seconds``) that
    #: :func:`plan` passes to :meth:`place_scored` when its caller gives one.
    scores_plans: ClassVar[bool] = False
    #: Among the policies "all" names (compare, the demo); a search, whose cost is its
    #: budget of evaluations, runs only when named.
    in_all: ClassVar[bool] = True

    @abstractmethod
    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        """Propose a placement of every op of ``graph`` on devices of ``cluster``."""

    def place_scored(self, graph: Graph, cluster: Cluster, cost: CostModel,
                     evaluate: Callable[[Plan], float]) -> Placement:
        """A placement chosen by scoring candidate plans with ``evaluate`` (seconds;
        infinity for a plan that does not fit). By default the evaluator is not needed;
        policies that declare ``scores_plans`` override this."""
        return self.place(graph, cluster, cost)

    def place_under_load(self, graph: Graph, cluster: Cluster, cost: CostModel,
                         load: ClusterLoad) -> Placement:
        """A placement with other jobs' ``load`` already on the cluster. By default the
        load is ignored; policies that declare ``load_aware`` override this."""
        return self.place(graph, cluster, cost)


Seed = int | np.integer | np.random.Generator | None


def make_rng(seed: Seed) -> np.random.Generator:
    """The one kind of generator policies draw from: the same integer seed gives the same
    draws in any process.

    >>> float(make_rng(1).random()) == float(make_rng(1).random())
    True
    """
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def seed_int(seed: Seed) -> int:
    """An integer seed for libraries that take only integers (METIS, ARPACK's start)."""
    if isinstance(seed, numbers.Integral):
        return int(seed)
    return int(make_rng(seed).integers(2**31 - 1))


#: The built-in policies, imported on first lookup (listing names imports none).
_BUILTIN = {
    "single_device": "policies.baselines:SingleDevice",
    "round_robin": "policies.baselines:RoundRobin",
    "random": "policies.baselines:RandomPlacement",
    "heft": "policies.listsched:HEFT", "cpop": "policies.listsched:CPOP",
    "etf": "policies.listsched:ETF", "m_etf": "policies.listsched:METF",
    "m_sct": "policies.listsched:MSCT", "m_topo": "policies.memory:MTopo",
    "m_topo_speed": "policies.memory:MTopoSpeed",
    "metis": "policies.cuts:Metis", "kernighan_lin": "policies.cuts:KernighanLin",
    "spectral": "policies.cuts:Spectral", "stone_mincut": "policies.cuts:StoneMinCut",
    "pipeline": "policies.pipeline:Pipeline", "optimal": "policies.optimal:Optimal",
    "mcmc": "policies.search:MCMC",
}
POLICIES: Registry[type[PlacementPolicy]] = Registry("policy", "placelab.policies",
                                                     builtins=_BUILTIN)


def register_policy(cls: type[PlacementPolicy]) -> type[PlacementPolicy]:
    """Class decorator: register ``cls`` under ``cls.name`` (a duplicate is an error)."""
    POLICIES.register(cls.name, cls)
    return cls


def policy_parameters(name: str) -> dict[str, Param]:
    """The parameters policy ``name`` declares, by name.

    >>> {k: p.default for k, p in policy_parameters("optimal").items()}
    {'node_limit': 20000, 'max_ops': 30, 'time_limit_s': None}
    """
    return {p.name: p for p in POLICIES.get(name).params}


def make_policy(spec: str) -> PlacementPolicy:
    """A registered policy from ``name`` or ``name:key=value,key=value`` (its declared
    parameters, each value read and checked as :class:`Param` says).

    >>> make_policy("random:seed=3")
    RandomPlacement(seed=3)
    >>> make_policy("optimal:node_limit=50,max_ops=12")
    Optimal(node_limit=50, max_ops=12, time_limit_s=None)
    """
    policy: PlacementPolicy = POLICIES.make(spec)
    return policy


def split_policies(text: str) -> list[str]:
    """``"heft,optimal:node_limit=50,max_ops=12"`` -> ``["heft", "optimal:node_limit=50,
    max_ops=12"]``: a comma followed by ``key=value`` continues the policy before it."""
    return split_specs(text)


def _check_runnable(graph: Graph, cluster: Cluster, cost: CostModel,
                    devices: Mapping[str, str], policy: str) -> None:
    """Every op must be placed on a device of the cluster that can run it."""
    names = set(cluster.device_names)
    for name, device in devices.items():
        if device not in names:
            raise PlacementError(f"policy {policy!r} placed op {name!r} on device "
                                 f"{device!r}, which cluster {cluster.name!r} lacks")
    try:
        cost.op_times(graph, devices)
    except UnsupportedOp:
        for op in graph:
            try:
                cost.op_time(op, devices[op.name])
            except UnsupportedOp as err:
                raise PlacementError(f"policy {policy!r} placed op {op.name!r} on device "
                                     f"{devices[op.name]!r}, which cannot run it: "
                                     f"{err}") from err


def _refuse_collectives(graph: Graph) -> None:
    if graph.collectives:
        op = graph.op(graph.collectives[0])
        raise PlacementError(
            f"plan: graph {graph.name!r}: op {op.name!r} is a collective ({op.kind}): "
            f"expected ops a policy places on one device; collectives come with their "
            f"device groups from the parallel transforms (data_parallel, "
            f"tensor_parallel)")


def plan(graph: Graph, cluster: Cluster, policy: PlacementPolicy | str,
         cost: CostModel | str = "roofline", *, load: ClusterLoad | None = None,
         evaluate: Callable[[Plan], float] | None = None) -> Plan:
    """Run ``policy`` on ``graph`` and ``cluster`` and return the validated Plan.

    ``load``: what other jobs already hold (see :mod:`policies.load`); a ``load_aware``
    policy places around it, any other ignores it, and ``info["load_aware"]`` says which.
    ``evaluate``: how a policy that ``scores_plans`` (a search) scores a candidate plan,
    in seconds (:func:`sim.evaluator` gives the simulator's verdict); without one it uses
    its own model; other policies ignore it.

    >>> from hwmodels import get_cluster
    >>> from workloads import build_model
    >>> p = plan(build_model("resnet50"), get_cluster("quad-v100-nvlink"), "heft")
    >>> sorted(set(p.placement.values())) <= ["gpu0", "gpu1", "gpu2", "gpu3"]
    True
    """
    policy = make_policy(policy) if isinstance(policy, str) else policy
    cost = make_cost_model(cost, cluster) if isinstance(cost, str) else cost
    if not len(graph):
        raise PlacementError(f"plan: graph {graph.name!r}: expected at least one op, got none")
    _refuse_collectives(graph)
    cost.check_cluster(cluster, "plan")
    start = time.perf_counter()
    if load is None and evaluate is not None and policy.scores_plans:
        proposal = policy.place_scored(graph, cluster, cost, evaluate)
    elif load is None:
        proposal = policy.place(graph, cluster, cost)
    else:
        proposal = policy.place_under_load(graph, cluster, cost, load.check(cluster))
    elapsed = time.perf_counter() - start
    for name in graph.topological_order():
        if name not in proposal.devices:
            raise PlacementError(f"policy {policy.name!r} left op {name!r} unplaced")
    order = proposal.order
    if order is None:
        order = order_by_priority(graph, proposal.devices, proposal.priority)
    _check_runnable(graph, cluster, cost, proposal.devices, policy.name)
    info = {**(proposal.info or {}), "load_aware": load is not None and policy.load_aware,
            "policy_params": {
        k: v if isinstance(v, int | float | str | bool | None) else repr(v)
        for k, v in policy.get_params().items()}}
    result = Plan(graph, proposal.devices, order, policy=policy.name,
                  priority=proposal.priority, placement_s=elapsed,
                  estimated_makespan_s=proposal.estimated_makespan_s, info=info,
                  cluster=cluster.name, cluster_hash=cluster.definition_hash)
    return result.validate(cluster)
