"""The segment bound: closed forms worked by hand, equal to the optimum found by brute force
where every op lies between the path's first and last (a fork-join) and below it otherwise,
below every simulated run (random heterogeneous clusters, every link model, collectives,
several streams), and never below the simple bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Device, TableCost
from policies import Plan
from policies.bounds import lower_bound, segment_bound
from policies.problem import Problem
from sim import simulate
from tests.helpers import op, toy_cluster
from tests.policies.test_bounds import (
    SpeedCost,
    best_run,
    heterogeneous_runs,
    replicated,
    small_instances,
)
from tests.policies.test_exact import brute_force_makespan, instance
from workloads import Graph


def _fork(width: int = 2, nbytes: int = 4) -> Graph:
    """``s`` feeding ``width`` ops that ``t`` joins."""
    middle = [op(f"m{i}", ("s",), nbytes=nbytes) for i in range(width)]
    return Graph("fork", [op("s", nbytes=nbytes), *middle,
                          op("t", tuple(f"m{i}" for i in range(width)))])


@pytest.mark.parametrize(("latency_s", "expected"), [(5.0, 4.0), (0.1, 3.1)])
def test_a_fork_of_two_pays_for_serial_or_for_its_transfers(latency_s: float,
                                                            expected: float) -> None:
    # every op 1 s; the branches either run one after the other on one device (1 + 1 +
    # 1 + 1) or apart, the one sent away paying its transfer and t joining them where it
    # ran, the other's output crossing meanwhile (1 + l + 1 + 1): with 5 s transfers 4,
    # with 0.1 s ones 3.1; the critical path says 3
    cluster = toy_cluster(2, bandwidth=1e12, latency_s=latency_s)
    g = _fork()
    cost = TableCost(cluster, {o.name: {"d0": 1.0, "d1": 1.0} for o in g})
    assert lower_bound(g, cluster, cost) == 3.0
    assert segment_bound(g, cluster, cost) == pytest.approx(expected, rel=1e-4)
    assert segment_bound(g, cluster, cost) <= expected
    assert brute_force_makespan(Problem(g, cluster, cost)) == pytest.approx(expected)


def test_a_device_of_two_streams_runs_both_branches_at_once() -> None:
    devices = tuple(Device(f"d{i}", "gpu", {"fp32": 1e12}, 2**34, 1e11, compute_streams=2)
                    for i in range(2))
    cluster = Cluster("pair", devices, toy_cluster(2, latency_s=5.0).links)
    g = _fork()
    cost = SpeedCost(cluster, dict.fromkeys(g.names, 1.0), {"d0": 1.0, "d1": 1.0})
    run = simulate(Plan(g, dict.fromkeys(g.names, "d0"), {"d0": list(g.names)}), cluster,
                   cost).makespan_s
    assert run == 3.0
    assert segment_bound(g, cluster, cost) == 3.0


def test_one_device_gives_the_simple_bound() -> None:
    cluster = toy_cluster(1)
    g = _fork(3)
    cost = TableCost(cluster, {o.name: {"d0": 1.0} for o in g})
    assert segment_bound(g, cluster, cost) == lower_bound(g, cluster, cost) == 5.0


@pytest.mark.parametrize("seed", range(6))
def test_a_fork_join_is_one_segment_and_its_optimum(seed: int) -> None:
    """Each branch's time and each transfer drawn: the path is s, a branch, t, and every
    op is between s and t, so the bound is the least schedule, which brute force finds."""
    import numpy as np

    rnd = np.random.default_rng(seed)
    cluster = toy_cluster(3, bandwidth=1e9, latency_s=0.0)
    cluster = Cluster("three", cluster.devices, cluster.links)
    g = _fork(3)
    times = {o.name: {d: float(rnd.integers(1, 6)) for d in cluster.device_names} for o in g}
    transfers = {name: float(rnd.integers(0, 4)) for name in g.names}
    cost = TableCost(cluster, times, transfers)
    best = brute_force_makespan(Problem(g, cluster, cost))
    assert segment_bound(g, cluster, cost) == pytest.approx(best, rel=1e-4)
    assert segment_bound(g, cluster, cost) <= best


@pytest.mark.parametrize("seed", range(8))
def test_below_the_optimum_and_above_the_simple_bound(seed: int) -> None:
    graph, cluster, cost = instance(6, seed, devices=2 + seed % 2)
    best = brute_force_makespan(Problem(graph, cluster, cost))
    for ops in (1, 2, 6):
        bound = segment_bound(graph, cluster, cost, ops=ops)
        assert lower_bound(graph, cluster, cost) <= bound <= best


@settings(max_examples=60, deadline=None)
@given(heterogeneous_runs(), st.sampled_from(["fcfs", "fair", "none"]),
       st.sampled_from(["plan", "priority"]), st.sampled_from([2, 24]))
def test_no_simulated_run_is_shorter(case: tuple[Plan, SpeedCost], links: str,
                                     order: str, ops: int) -> None:
    p, cost = case
    bound = segment_bound(p.graph, cost.cluster, cost, ops=ops)
    assert math.isfinite(bound)
    assert bound >= lower_bound(p.graph, cost.cluster, cost)
    run = simulate(p, cost.cluster, cost, links=links, order=order)
    assert run.makespan_s >= bound * (1 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(small_instances(), st.sampled_from(["fcfs", "fair", "none"]))
def test_no_plan_of_a_small_graph_runs_shorter(case: tuple[Graph, SpeedCost],
                                                 links: str) -> None:
    """Every placement (in topological order) simulated: the best run is at or above the
    bound."""
    g, cost = case
    assert best_run(g, cost, links) >= segment_bound(g, cost.cluster, cost) * (1 - 1e-12)


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_no_data_parallel_run_is_shorter(algorithm: str) -> None:
    """A collective's transfers are the ones it is lowered to: it is priced at nothing,
    and so are the tensors into and out of it."""
    p, cluster, cost = replicated("dgx-h100-x2-ib", 2000, 16, 50 * 2**20, algorithm)
    assert p.graph.collectives
    bound = segment_bound(p.graph, cluster, cost)
    for links in ("fcfs", "fair", "none"):
        assert simulate(p, cluster, cost, links=links, order="priority").makespan_s >= bound


def test_above_the_critical_path_on_identical_devices() -> None:
    """BERT's attention cannot spread its query and key projections over V100s without
    transfers that cost more than running them one after the other: the bound rises above
    the critical path, where the relaxation bound stays (identical devices)."""
    from hwmodels import RooflineCost, get_cluster
    from policies import plan
    from workloads.zoo.sequence import bert_base

    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    g = bert_base(batch=8, layers=2)
    bound = segment_bound(g, cluster, cost, ops=12)
    assert bound > 1.05 * lower_bound(g, cluster, cost)
    for name in ("heft", "etf", "single_device"):
        assert simulate(plan(g, cluster, name, cost), cluster, cost).makespan_s >= bound


def test_ops_per_segment_must_be_positive() -> None:
    cluster = toy_cluster(2)
    g = _fork()
    cost = TableCost(cluster, {o.name: {"d0": 1.0, "d1": 1.0} for o in g})
    with pytest.raises(ValueError, match=r"^segment_bound: ops must be at least 1, got 0$"):
        segment_bound(g, cluster, cost, ops=0)
