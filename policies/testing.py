"""The conformance suite every placement policy must pass, built-in or third-party.

Each property is a named :class:`Check`; :func:`parametrize_with_checks` makes one pytest
item per (policy, check), the way scikit-learn's ``parametrize_with_checks`` does, so a
third-party package tests its policy with::

    from policies.testing import parametrize_with_checks

    @parametrize_with_checks([MyPolicy])
    def test_conformance(policy, check):
        check(policy)

:func:`check_policy` runs every check and reports every failure at once.

Properties: every op is placed on a device of the cluster and the Plan validates and
round-trips through JSON, on one device, on heterogeneous clusters, on a graph of one op,
on a graph of independent components and on graphs with co-placement groups (a training
step; two grouped ops ready at once), whose ops always share a device; the same seed gives
the same Plan; a policy's own makespan estimate, if it gives one, is never below the lower
bound; a policy that claims to honour memory (``memory_aware = True``) never yields a plan
over any device's capacity under the conservative memory model of :mod:`policies.problem`
(which bounds the simulator's peak), and raises :class:`OutOfMemory` when no plan fits; ops
no device can run are refused with a clear error; a policy that claims to place around
other jobs' load (``load_aware = True``) leaves a device alone whose queued work outlasts
the graph. (The suite stays below the simulator in
the layering; ``tests/policies`` also simulates every policy's plans.)

>>> from policies.testing import check_policy
>>> check_policy("round_robin")  # raises ConformanceError naming every failed check
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hwmodels.cost import RooflineCost
from hwmodels.registry import get_cluster
from hwmodels.spec import Cluster, Device, Link
from policies.base import POLICIES, PlacementPolicy, plan
from policies.bounds import lower_bound
from policies.load import ClusterLoad
from policies.plans import Plan
from policies.problem import Problem, plan_memory_used
from workloads.conformance import Check, ConformanceError, parametrize, run_checks
from workloads.conformance import require as _require
from workloads.errors import OutOfMemory, PlacementError
from workloads.graph import Graph
from workloads.op import Op, Tensor

if TYPE_CHECKING:
    from _pytest.mark import MarkDecorator

__all__ = ["CASES", "CHECKS", "Check", "ConformanceError", "check_policy",
           "parametrize_with_checks", "plan_memory", "random_dag"]

PolicySource = str | Callable[[], PlacementPolicy]


def _make(source: PolicySource) -> PlacementPolicy:
    return POLICIES.get(source)() if isinstance(source, str) else source()


def _label(source: PolicySource) -> str:
    if isinstance(source, str):
        return source
    return getattr(source, "name", "") or getattr(source, "__name__", repr(source))


def random_dag(n: int, *, seed: int, edge_probability: float = 0.25, max_bytes: int = 2**22,
               dtype: str = "fp32") -> Graph:
    """A random DAG of ``n`` matmul-class ops with random FLOPs and output sizes.

    >>> random_dag(5, seed=1) == random_dag(5, seed=1)
    True
    """
    rng = np.random.default_rng(seed)
    ops = []
    for i in range(n):
        preds = tuple(f"o{j}" for j in range(i) if rng.random() < edge_probability)
        elements = int(rng.integers(1, max_bytes // 4, endpoint=True))
        flops = int(rng.integers(10**6, 10**10, endpoint=True))
        ops.append(Op(f"o{i}", "synthetic", "matmul", inputs=preds,
                      outputs=(Tensor(f"o{i}", (elements,), dtype),), flops=flops,
                      bytes_read=4 * elements, bytes_written=4 * elements))
    return Graph(f"random{n}_{seed}", ops)


def _device(name: str, kind: str = "gpu", *, tflops: float = 10.0, memory: int = 2**34,
            dtypes: tuple[str, ...] = ("fp32",)) -> Device:
    return Device(name, kind, peak={d: tflops * 1e12 for d in dtypes}, memory_bytes=memory,
                  memory_bandwidth=1e12)


def _one_device() -> Cluster:
    return Cluster("one", (_device("solo"),))


def _tight(memory: int) -> Cluster:
    """Two equal devices, each with ``memory`` bytes."""
    return Cluster("tight", (_device("m0", memory=memory), _device("m1", memory=memory)),
                   (Link("m0", "m1", 50e9, 1e-6),))


def _chain(n: int, nbytes: int) -> Graph:
    ops = [Op("c0", "synthetic", "matmul", outputs=(Tensor("c0", (nbytes // 4,)),),
              flops=10**9, bytes_written=nbytes)]
    ops += [Op(f"c{i}", "synthetic", "matmul", inputs=(f"c{i - 1}",),
               outputs=(Tensor(f"c{i}", (nbytes // 4,)),), flops=10**9,
               bytes_read=nbytes, bytes_written=nbytes) for i in range(1, n)]
    return Graph("chain", ops)


def _islands() -> Graph:
    return Graph("islands", [*random_dag(6, seed=3).ops,
                             *[Op(f"x{i}", "synthetic", "matmul",
                                  outputs=(Tensor(f"x{i}", (256,)),), flops=10**8)
                               for i in range(4)]])


def _mlp() -> Graph:
    from workloads.zoo import build_model

    return build_model("mlp", batch=64)


def _lenet() -> Graph:
    from workloads.zoo import build_model

    return build_model("lenet5", batch=16)


def _training_step() -> Graph:
    """A two-layer perceptron's Adam step: weights as inputs, co-placement groups."""
    from workloads.builder import GraphBuilder
    from workloads.training import training_graph

    b = GraphBuilder("mlp2")
    b.softmax(b.linear(b.relu(b.linear(b.input((32, 256)), 512, name="fc1")), 10, name="fc2"))
    return training_graph(b.build(), "adam")


def _mates() -> Graph:
    """A group of two ops with no path between them, ready at once, and a floating
    source: the group's device is fixed by whichever is placed first."""
    ops = [Op("w", "input", "source", outputs=(Tensor("w", (1024,)),),
              attrs={"colocate": "g"}),
           *random_dag(4, seed=7).ops,
           Op("a", "synthetic", "matmul", inputs=("o0", "w"), outputs=(Tensor("a", (4096,)),),
              flops=10**9, attrs={"colocate": "g"}),
           Op("b", "synthetic", "matmul", inputs=("o1",), outputs=(Tensor("b", (4096,)),),
              flops=3 * 10**9, attrs={"colocate": "g"}),
           Op("c", "synthetic", "matmul", inputs=("a", "b", "o3"),
              outputs=(Tensor("c", (64,)),), flops=10**8)]
    return Graph("mates", ops)


#: (name, graph factory, cluster factory) of the instances every policy runs on.
CASES: tuple[tuple[str, Callable[[], Graph], Callable[[], Cluster]], ...] = (
    ("one device", lambda: random_dag(12, seed=1), _one_device),
    ("one op", lambda: random_dag(1, seed=2), lambda: get_cluster("quad-v100-nvlink")),
    ("independent components", _islands, lambda: get_cluster("quad-v100-nvlink")),
    ("heterogeneous CPU + GPU", _mlp, lambda: get_cluster("workstation")),
    ("heterogeneous box", lambda: random_dag(20, seed=4), lambda: get_cluster("hetero-box")),
    ("CNN on NVLink", _lenet, lambda: get_cluster("dgx1-v100")),
    ("training step with co-placement", _training_step,
     lambda: get_cluster("quad-v100-nvlink")),
    ("co-placed ops ready together", _mates, lambda: get_cluster("hetero-box")),
)


def _cases(source: PolicySource) -> list[tuple[str, Graph, Cluster]]:
    limit = _make(source).max_ops
    built = [(case, make_graph(), make_cluster()) for case, make_graph, make_cluster in CASES]
    return [(c, g, k) for c, g, k in built if limit is None or len(g) <= limit]


def _plan(source: PolicySource, graph: Graph, cluster: Cluster) -> Plan:
    return plan(graph, cluster, _make(source), RooflineCost(cluster))


# -- the checks -----------------------------------------------------------------------------


def check_valid_plans(source: PolicySource) -> None:
    """Every op placed on a device of the cluster; the Plan round-trips through JSON."""
    label = _label(source)
    for case, graph, cluster in _cases(source):
        p = _plan(source, graph, cluster)
        _require(set(p.placement) == {op.name for op in graph},
                 f"{label} on {case}: not every op placed")
        _require(set(p.placement.values()) <= set(cluster.device_names),
                 f"{label} on {case}: op placed on a device the cluster lacks")
        _require(Plan.from_json(p.to_json()) == p, f"{label} on {case}: the Plan does not "
                                                  f"round-trip through JSON")


def check_honours_groups(source: PolicySource) -> None:
    """The ops of each co-placement group share a device (``plan`` refuses a proposal
    that splits one)."""
    label = _label(source)
    for case, graph, cluster in _cases(source):
        if not graph.groups:
            continue
        try:
            p = _plan(source, graph, cluster)
        except PlacementError as err:
            raise ConformanceError(f"{label} on {case}: {err}") from err
        for group, ops in graph.groups.items():
            devices = {p.placement[name] for name in ops}
            _require(len(devices) == 1, f"{label} on {case}: group {group!r} split over "
                                        f"{sorted(devices)}")


def check_deterministic(source: PolicySource) -> None:
    """Two instances built alike give the same plan (the same seed, the same result)."""
    label = _label(source)
    for case, graph, cluster in _cases(source):
        first, second = _plan(source, graph, cluster), _plan(source, graph, cluster)
        _require(first.placement == second.placement and first.order == second.order,
                 f"{label} on {case}: the same seed gave a different plan")


def check_reusable(source: PolicySource) -> None:
    """One instance placing two graphs in turn gives what two fresh instances give (no
    state left on the instance)."""
    label = _label(source)
    cases = _cases(source)
    policy = _make(source)
    for case, graph, cluster in cases[:2] + cases[:1]:
        shared = plan(graph, cluster, policy, RooflineCost(cluster))
        fresh = _plan(source, graph, cluster)
        _require(shared.placement == fresh.placement,
                 f"{label} on {case}: a reused instance placed differently from a new one")


def check_estimate_above_bound(source: PolicySource) -> None:
    """A policy's own makespan estimate is never below the lower bound."""
    label = _label(source)
    for case, graph, cluster in _cases(source):
        estimate = _plan(source, graph, cluster).estimated_makespan_s
        bound = lower_bound(graph, cluster, RooflineCost(cluster))
        _require(estimate is None or estimate >= bound * (1 - 1e-9),
                 f"{label} on {case}: estimated makespan {estimate} below the lower bound "
                 f"{bound}")


def check_honours_memory(source: PolicySource) -> None:
    """A memory-aware policy keeps every device within capacity: under the conservative
    model, replayed here; a policy that budgets along its own schedule
    (``budget == "schedule"``) within the peak it reports in ``info["budget_peak_bytes"]``,
    and the resident state it places within capacity under any model."""
    label = _label(source)
    graph = _chain(8, 2**20)
    roomy = _tight(6 * 2**20)  # neither device holds the chain, the two together do
    p = _plan(source, graph, roomy)
    if getattr(_make(source), "budget", "conservative") == "schedule":
        used_by = dict(p.info.get("budget_peak_bytes", {}))
        _require(set(used_by) == set(roomy.device_names),
                 f"{label}: budgets along its schedule but reports no peak per device")
        for op in graph:
            used_by[p.placement[op.name]] = max(used_by[p.placement[op.name]], 0)
    else:
        used_by = plan_memory(p, roomy)
    for device, used in used_by.items():
        capacity = roomy.device(device).memory_bytes
        resident = sum(op.param_bytes for op in graph if p.placement[op.name] == device)
        _require(max(used, resident) <= capacity,
                 f"{label}: claims to honour memory, but puts {max(used, resident)} bytes "
                 f"on device {device!r} of {capacity}")


def check_refuses_when_nothing_fits(source: PolicySource) -> None:
    """A memory-aware policy raises :class:`OutOfMemory` when no plan fits (here an op
    whose output alone exceeds every device, so under any memory model)."""
    label = _label(source)
    cramped = _tight(2**19)
    try:
        _plan(source, _chain(8, 2**20), cramped)
    except OutOfMemory as err:
        _require("fit" in str(err), f"{label}: unclear out-of-memory error: {err}")
    except PlacementError as err:
        raise ConformanceError(f"{label}: no plan fits, expected OutOfMemory, got "
                               f"{type(err).__name__}: {err}") from err
    else:
        raise ConformanceError(f"{label}: placed a graph that fits in no device's memory")


def check_refuses_unrunnable_ops(source: PolicySource) -> None:
    """Ops no device can run (an fp64 op on bf16-only devices) are refused clearly."""
    label = _label(source)
    graph = random_dag(3, seed=5, dtype="fp64")
    cluster = Cluster("bf16-only", (_device("b0", dtypes=("bf16",)),
                                    _device("b1", dtypes=("bf16",))),
                      (Link("b0", "b1", 1e10),))
    try:
        _plan(source, graph, cluster)
    except PlacementError as err:
        _require("can run on no device" in str(err) or "cannot run it" in str(err),
                 f"{label}: unclear error for unrunnable ops: {err}")
    else:  # plan() itself refuses such placements, so only a broken plan() gets here
        raise ConformanceError(f"{label}: placed an fp64 op on devices without fp64")


def check_declares_parameters(source: PolicySource) -> None:
    """``params`` names the constructor's keyword parameters with their defaults, each
    default valid, and ``get_params`` (what a plan and ``repr`` show) reports them."""
    import inspect

    label = _label(source)
    policy = _make(source)
    signature = {p.name: p.default for p in inspect.signature(
        type(policy).__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    declared = {p.name: p.default for p in policy.params}
    _require(signature == declared, f"{label}: params declares {declared}, the constructor "
                                    f"takes {signature}")
    for param in policy.params:
        param.check(label, param.default)
    _require(set(policy.get_params()) == set(declared),
             f"{label}: get_params() reports {sorted(policy.get_params())}, expected "
             f"{sorted(declared)}")


def check_places_around_load(source: PolicySource) -> None:
    """A load-aware policy leaves alone a device whose queued work outlasts the whole graph
    on the others, and says in the plan that it placed around the load."""
    label = _label(source)
    graph = random_dag(8, seed=11)
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    busy = 10 * float(sum(cost.op_time(op, "gpu0") for op in graph))
    p = plan(graph, cluster, _make(source), cost, load=ClusterLoad({"gpu0": busy}))
    on_busy = sorted(n for n, d in p.placement.items() if d == "gpu0")
    _require(not on_busy, f"{label}: placed {on_busy} on gpu0, busy for {busy:.3g} s more "
                          f"than the graph's whole work")
    _require(p.info.get("load_aware") is True,
             f"{label}: info['load_aware'] is {p.info.get('load_aware')!r}, expected True")


def _memory_aware(policy: PlacementPolicy) -> bool:
    return policy.memory_aware


def _load_aware(policy: PlacementPolicy) -> bool:
    return policy.load_aware


CHECKS: tuple[Check[PolicySource], ...] = (
    Check("valid_plans", check_valid_plans),
    Check("honours_groups", check_honours_groups),
    Check("deterministic", check_deterministic),
    Check("reusable", check_reusable),
    Check("estimate_above_bound", check_estimate_above_bound),
    Check("honours_memory", check_honours_memory, _memory_aware),
    Check("refuses_when_nothing_fits", check_refuses_when_nothing_fits, _memory_aware),
    Check("refuses_unrunnable_ops", check_refuses_unrunnable_ops),
    Check("declares_parameters", check_declares_parameters),
    Check("places_around_load", check_places_around_load, _load_aware),
)


def checks_for(source: PolicySource) -> list[Check[PolicySource]]:
    """The checks that concern ``source`` (memory checks only for memory-aware policies)."""
    policy = _make(source)
    return [check for check in CHECKS if check.applies(policy)]


def check_policy(source: PolicySource) -> None:
    """Run every check on a registered policy name or a zero-argument factory; raise one
    :class:`ConformanceError` that lists every failure."""
    run_checks(checks_for(source), source)


def parametrize_with_checks(sources: Sequence[PolicySource]) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over (policy, check): one test item each, named
    ``<policy>-<check>``; the test body is ``check(policy)``."""
    return parametrize(("policy", "check"), [(s, _label(s), c) for s in sources
                                             for c in checks_for(s)])


def plan_memory(p: Plan, cluster: Cluster) -> dict[str, int]:
    """Bytes per device under the conservative model (an upper bound of simulated peak)."""
    problem = Problem(p.graph, cluster, RooflineCost(cluster))
    return dict(zip(problem.devices, plan_memory_used(problem, p), strict=True))
