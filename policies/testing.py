"""The conformance suite every placement policy must pass, built-in or third-party.

>>> from policies.testing import check_policy
>>> check_policy("round_robin")  # raises AssertionError naming the failed property

Properties: every op is placed on a device of the cluster and the Plan validates and
round-trips through JSON; the same seed gives the same Plan; a policy's own makespan
estimate, if it gives one, is never below the lower bound; a policy that claims to honour
memory (``memory_aware = True``) never yields a plan over any device's capacity under the
conservative memory model of :mod:`policies.problem` (which bounds the simulator's peak), and
says so with a :class:`PlacementError` when no plan fits; it works on one device, on
heterogeneous clusters, on a graph of one op and on a graph of independent components; it
refuses ops no device can run with a clear error. (The suite stays below the simulator in
the layering; ``tests/policies`` also simulates every policy's plans.)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from hwmodels.cost import RooflineCost
from hwmodels.registry import get_cluster
from hwmodels.spec import Cluster, Device, Link
from policies.base import POLICIES, PlacementPolicy, plan
from policies.bounds import lower_bound
from policies.plans import Plan
from policies.problem import MemoryBook, Problem
from workloads.errors import PlacementError
from workloads.graph import Graph, Op, Tensor
from workloads.zoo import build_model

__all__ = ["CASES", "check_policy", "plan_memory", "random_dag"]

PolicySource = str | Callable[[], PlacementPolicy]


def _make(source: PolicySource) -> PlacementPolicy:
    return POLICIES.get(source)() if isinstance(source, str) else source()


def random_dag(n: int, *, seed: int, edge_probability: float = 0.25, max_bytes: int = 2**22,
               dtype: str = "fp32") -> Graph:
    """A random DAG of ``n`` matmul-class ops with random FLOPs and output sizes."""
    rnd = random.Random(seed)
    ops = []
    for i in range(n):
        preds = tuple(f"o{j}" for j in range(i) if rnd.random() < edge_probability)
        elements = rnd.randint(1, max_bytes // 4)
        flops = rnd.randint(10**6, 10**10)
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


#: (name, graph factory, cluster factory) of the instances every policy runs on.
CASES: tuple[tuple[str, Callable[[], Graph], Callable[[], Cluster]], ...] = (
    ("one device", lambda: random_dag(12, seed=1), _one_device),
    ("one op", lambda: random_dag(1, seed=2), lambda: get_cluster("quad-v100-nvlink")),
    ("independent components",
     lambda: Graph("islands", [*random_dag(6, seed=3).ops,
                               *[Op(f"x{i}", "synthetic", "matmul",
                                    outputs=(Tensor(f"x{i}", (256,)),), flops=10**8)
                                 for i in range(4)]]),
     lambda: get_cluster("quad-v100-nvlink")),
    ("heterogeneous CPU + GPU", lambda: build_model("mlp", batch=64),
     lambda: get_cluster("workstation")),
    ("heterogeneous box", lambda: random_dag(20, seed=4), lambda: get_cluster("hetero-box")),
    ("CNN on NVLink", lambda: build_model("lenet5", batch=16),
     lambda: get_cluster("dgx1-v100")),
)


def _check_plan(name: str, p: Plan, graph: Graph, cluster: Cluster) -> None:
    assert set(p.placement) == {op.name for op in graph}, f"{name}: not every op placed"
    assert set(p.placement.values()) <= set(cluster.device_names), \
        f"{name}: op placed on a device the cluster lacks"
    assert Plan.from_json(p.to_json()) == p, f"{name}: the Plan does not round-trip"


def _cases(source: PolicySource) -> Iterator[tuple[str, Graph, Cluster, Plan, Plan]]:
    for case, make_graph, make_cluster in CASES:
        graph, cluster = make_graph(), make_cluster()
        cost = RooflineCost(cluster)
        if len(graph) > getattr(_make(source), "max_ops", len(graph)):
            continue
        first = plan(graph, cluster, _make(source), cost)
        second = plan(graph, cluster, _make(source), cost)
        yield case, graph, cluster, first, second


def check_policy(source: PolicySource) -> None:
    """Run the whole suite on a registered policy name or a zero-argument factory."""
    policy = _make(source)
    label = policy.name or type(policy).__name__
    for case, graph, cluster, first, second in _cases(source):
        _check_plan(f"{label} on {case}", first, graph, cluster)
        assert first.placement == second.placement and first.order == second.order, \
            f"{label} on {case}: the same seed gave a different plan"
        estimate = first.estimated_makespan_s
        bound = lower_bound(graph, cluster, RooflineCost(cluster))
        assert estimate is None or estimate >= bound * (1 - 1e-9), \
            f"{label} on {case}: estimated makespan {estimate} below the lower bound {bound}"
    if getattr(policy, "memory_aware", False):
        _check_memory(source, label)
    _check_unrunnable(source, label)


def _check_memory(source: PolicySource, label: str) -> None:
    graph = _chain(8, 2**20)
    roomy = _tight(6 * 2**20)  # neither device holds the chain, the two together do
    p = plan(graph, roomy, _make(source), RooflineCost(roomy))
    for device, used in plan_memory(p, roomy).items():
        capacity = roomy.device(device).memory_bytes
        assert used <= capacity, (f"{label}: claims to honour memory, but puts {used} "
                                  f"bytes on device {device!r} of {capacity}")
    cramped = _tight(3 * 2**20)
    try:
        plan(graph, cramped, _make(source), RooflineCost(cramped))
    except PlacementError as err:
        assert "fit" in str(err), f"{label}: unclear out-of-memory error: {err}"
    else:
        raise AssertionError(f"{label}: placed a graph that fits in no device's memory")


def plan_memory(p: Plan, cluster: Cluster) -> dict[str, int]:
    """Bytes per device under the conservative model (an upper bound of simulated peak)."""
    problem = Problem(p.graph, cluster, RooflineCost(cluster))
    book = MemoryBook(problem, p.policy)
    index = {d: i for i, d in enumerate(problem.devices)}
    where = [index[p.placement[name]] for name in problem.names]
    for op in range(problem.n):
        book.commit(op, where[op], where)
    return dict(zip(problem.devices, book.used, strict=True))


def _check_unrunnable(source: PolicySource, label: str) -> None:
    graph = random_dag(3, seed=5, dtype="fp64")
    cluster = Cluster("bf16-only", (_device("b0", dtypes=("bf16",)),
                                    _device("b1", dtypes=("bf16",))),
                      (Link("b0", "b1", 1e10),))
    try:
        plan(graph, cluster, _make(source), RooflineCost(cluster))
    except PlacementError as err:
        assert "can run on no device" in str(err) or "cannot run it" in str(err), \
            f"{label}: unclear error: {err}"
    else:  # plan() itself refuses such placements, so only a broken plan() gets here
        raise AssertionError(f"{label}: placed an fp64 op on devices without fp64")
