"""The relaxation bound: closed forms worked by hand, below the optimum found by brute force,
below every simulated run (random heterogeneous clusters, every link model), and never
below the simple bounds."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, CostModel, Device, Link, TableCost
from policies import Plan, plan
from policies.bounds import LP_SLACK, lower_bound, relaxation_bound
from policies.problem import Problem
from sim import simulate
from tests.helpers import op, toy_cluster
from tests.policies.test_exact import brute_force_makespan, instance
from tests.sim.test_fidelity import instances
from workloads import Graph, Op


class SpeedCost(CostModel):
    """An op's work over its device's speed; transfers from the cluster's links."""

    name = "speed"

    def __init__(self, cluster: Cluster, work: Mapping[str, float],
                 speed: Mapping[str, float]) -> None:
        super().__init__(cluster)
        self.work, self.speed = dict(work), dict(speed)

    def op_time(self, op: Op, device: str) -> float:
        return self.work[op.name] / self.speed[device]


def _pair(slow: float = 3.0) -> Cluster:
    return toy_cluster(2, bandwidth=1e9, latency_s=0.0)


def test_two_independent_ops_on_a_fast_and_a_slow_device() -> None:
    # each op takes 1 s on d0 and 3 s on d1: the relaxation puts 3/4 of the work on d0,
    # x + x = T and 3(1 - x) + 3(1 - x) = T give x = 3/4, T = 1.5 (each op then takes
    # 3/4 + 3/4 = 1.5 <= T); the simple bounds say 1, the best plan takes 2
    g = Graph("two", [op("a"), op("b")])
    cost = SpeedCost(_pair(), {"a": 1.0, "b": 1.0}, {"d0": 1.0, "d1": 1 / 3})
    assert lower_bound(g, cost.cluster, cost) == 1.0
    assert relaxation_bound(g, cost.cluster, cost) == pytest.approx(1.5, rel=2 * LP_SLACK)


def test_a_device_of_two_streams_runs_two_ops_at_once() -> None:
    cluster = Cluster("one", (Device("d0", "gpu", {"fp32": 1e12}, 2**34, 1e11,
                                     compute_streams=2),))
    g = Graph("two", [op("a"), op("b")])
    cost = SpeedCost(cluster, {"a": 1.0, "b": 1.0}, {"d0": 1.0})
    assert relaxation_bound(g, cluster, cost) == 1.0 == simulate(
        plan(g, cluster, "single_device", cost), cluster, cost).makespan_s


def test_a_tensor_between_ops_that_run_on_different_devices_pays_its_transfer() -> None:
    # a runs on d0 only, b on d1 only: a (2 s), the 4e9-byte tensor over 1 GB/s plus the
    # link's latency (4 s + 0.5 s), then b (1 s)
    cluster = toy_cluster(2, bandwidth=1e9, latency_s=0.5)
    g = Graph("ab", [op("a", nbytes=4 * 10**9), op("b", ("a",))])
    cost = TableCost(cluster, {"a": {"d0": 2.0}, "b": {"d1": 1.0}})
    assert lower_bound(g, cluster, cost) == 3.0
    assert relaxation_bound(g, cluster, cost) == pytest.approx(7.5, rel=2 * LP_SLACK)


def test_on_identical_devices_it_is_the_simple_bound() -> None:
    cluster = toy_cluster(4)
    g = Graph("fan", [op("s"), *(op(f"m{i}", ("s",)) for i in range(6)),
                      op("t", tuple(f"m{i}" for i in range(6)))])
    cost = SpeedCost(cluster, {o.name: 1.0 + i for i, o in enumerate(g)},
                     dict.fromkeys(cluster.device_names, 1.0))
    assert relaxation_bound(g, cluster, cost) == lower_bound(g, cluster, cost)


@pytest.mark.parametrize("seed", range(8))
def test_below_the_optimum_and_above_the_simple_bound(seed: int) -> None:
    graph, cluster, cost = instance(6, seed)  # per-device times, a transfer time per edge
    best = brute_force_makespan(Problem(graph, cluster, cost))
    bound = relaxation_bound(graph, cluster, cost)
    assert lower_bound(graph, cluster, cost) <= bound <= best


def test_the_topcuoglu_instance_is_bounded_below_heft() -> None:
    from tests.helpers import topcuoglu_instance

    graph, cluster, cost = topcuoglu_instance()
    bound = relaxation_bound(graph, cluster, cost)
    # HEFT's published schedule takes 80 (Topcuoglu, Hariri and Wu, 2002, Fig. 2)
    assert lower_bound(graph, cluster, cost) < bound <= 80


def _fan() -> Graph:
    ops = [op("s", nbytes=4 * 10**5), *(op(f"m{i}", ("s",), nbytes=4 * 10**5)
                                         for i in range(4))]
    return Graph("fan", [*ops, op("t", tuple(f"m{i}" for i in range(4)))])


def _trio(second: float) -> SpeedCost:
    cluster = Cluster("three", tuple(Device(f"d{i}", "gpu", {"fp32": 1e12}, 2**34, 1e11)
                                     for i in range(3)),
                      (Link("d0", "d1", 1e9, 1e-6), Link("d1", "d2", 2e9, 1e-6)))
    work = {"s": 1e-5, "t": 1e-5} | {f"m{i}": 1e-4 for i in range(4)}
    return SpeedCost(cluster, work, {"d0": 1.0, "d1": second, "d2": 0.2})


def test_identical_devices_merged_bound_no_plan_too_tightly() -> None:
    # d0 and d1 alike are one class; the same devices kept apart (speeds differing in the
    # 12th digit) give a program whose optimum the merged one can only exceed, and the
    # best plan, found by brute force, is above both
    g, merged, apart = _fan(), _trio(1.0), _trio(1.0 + 1e-12)
    bound = relaxation_bound(g, merged.cluster, merged)
    assert bound > lower_bound(g, merged.cluster, merged) * 1.01
    assert bound >= relaxation_bound(g, apart.cluster, apart) * (1 - 1e-6)
    assert bound <= brute_force_makespan(Problem(g, merged.cluster, merged))


@st.composite
def heterogeneous_runs(draw: st.DrawFn) -> tuple[Plan, SpeedCost]:
    """The simulator's random runs (random trees of links, streams, DAGs, plans) with each
    device at its own speed, often one speed shared (the relaxation merges those)."""
    p, fixed = draw(instances())
    names = fixed.cluster.device_names
    speed = {d: draw(st.sampled_from([0.25, 1.0, 4.0]) | st.floats(0.1, 10)) for d in names}
    work = {o.name: fixed.op_time(o, names[0]) for o in p.graph}
    return p, SpeedCost(fixed.cluster, work, speed)


@settings(max_examples=60, deadline=None)
@given(heterogeneous_runs(), st.sampled_from(["fcfs", "fair", "none"]))
def test_no_simulated_run_is_shorter(case: tuple[Plan, SpeedCost], links: str) -> None:
    p, cost = case
    bound = relaxation_bound(p.graph, cost.cluster, cost)
    assert math.isfinite(bound)
    assert bound >= lower_bound(p.graph, cost.cluster, cost)
    # the bound sums op times in another order than the run: a rounding apart at most
    assert simulate(p, cost.cluster, cost, links=links).makespan_s >= bound * (1 - 1e-12)


def test_no_data_parallel_run_on_a_mixed_pair_is_shorter() -> None:
    from hwmodels import RooflineCost, get_cluster
    from policies.data_parallel import data_parallel
    from workloads import build_model

    cluster = get_cluster("workstation")  # a Xeon and an L4: the collective crosses PCIe
    cost = RooflineCost(cluster)
    p = data_parallel(build_model("mlp", batch=16), cluster, cost, replicas=2)
    assert p.graph.collectives
    bound = relaxation_bound(p.graph, cluster, cost)
    assert simulate(p, cluster, cost, order="priority").makespan_s >= bound


def test_heft_on_the_workstation_is_above_it() -> None:
    from hwmodels import RooflineCost, get_cluster
    from workloads import build_model, training_graph

    cluster = get_cluster("workstation")
    cost = RooflineCost(cluster)
    step = training_graph(build_model("resnet50", batch=8), "adam")
    bound = relaxation_bound(step, cluster, cost)
    heft = simulate(plan(step, cluster, "heft", cost), cluster, cost, links="fair")
    assert lower_bound(step, cluster, cost) < bound <= heft.makespan_s
