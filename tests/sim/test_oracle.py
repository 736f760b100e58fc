"""The simulator against an independent textbook simpy model of the same semantics, on
random graphs, clusters (streams, copy engines, multi-hop routes) and placements."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, CostModel, Device, Link
from policies import Plan, order_by_priority
from sim import simulate
from tests.sim.oracle import naive_simulate
from workloads import Graph, Op, Tensor


class RandomCost(CostModel):
    """Op times drawn once per op and device from a seed: no two events tie by accident."""

    def __init__(self, cluster: Cluster, seed: int) -> None:
        super().__init__(cluster)
        self.rng = np.random.default_rng(seed)
        self.table: dict[tuple[str, str], float] = {}

    def op_time(self, op: Op, device: str) -> float:
        key = (op.name, device)
        if key not in self.table:
            self.table[key] = float(1e-3 * (0.5 + self.rng.random()))
        return self.table[key]


@st.composite
def instances(draw: st.DrawFn) -> tuple[Plan, Cluster, CostModel]:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_dev = draw(st.integers(1, 4))
    devices = tuple(
        Device(f"d{i}", "gpu", {"fp32": 1e12}, 2**40, 1e11,
               compute_streams=draw(st.integers(1, 2)), copy_engines=draw(st.integers(1, 2)))
        for i in range(n_dev))
    chain = draw(st.booleans())  # a chain gives multi-hop routes; a switch, two hops each
    if chain:
        links = tuple(Link(f"d{i}", f"d{i + 1}", float(rng.uniform(1e8, 1e9)),
                           float(rng.uniform(0, 1e-4)), draw(st.sampled_from(["full", "half"])))
                      for i in range(n_dev - 1))
        cluster = Cluster("chain", devices, links)
    else:
        links = tuple(Link(f"d{i}", "sw", float(rng.uniform(1e8, 1e9)),
                           float(rng.uniform(0, 1e-4))) for i in range(n_dev))
        cluster = Cluster("star", devices, links, switches=("sw",))
    n = draw(st.integers(1, 24))
    ops = []
    for i in range(n):
        inputs = tuple(f"o{j}" for j in range(i) if rng.random() < 0.3)
        size = int(rng.integers(1, 250_000))
        ops.append(Op(f"o{i}", "synthetic", "matmul", inputs=inputs,
                      outputs=(Tensor(f"o{i}", (size,)),)))
    graph = Graph("random", ops)
    placement = {op.name: f"d{int(rng.integers(n_dev))}" for op in ops}
    priority = {op.name: float(rng.random()) for op in ops}
    plan = Plan(graph, placement, order_by_priority(graph, placement, priority))
    return plan, cluster, RandomCost(cluster, seed)


@settings(max_examples=150, deadline=None)
@given(instances())
def test_simulator_equals_the_textbook_model(instance) -> None:
    plan, cluster, cost = instance
    ours = simulate(plan, cluster, cost)
    theirs = naive_simulate(plan, cluster, cost)
    assert ours.makespan_s == pytest.approx(theirs.makespan_s, rel=1e-12, abs=0)
    trace = ours.trace.set_index("name")
    for name, start in theirs.start.items():
        assert trace.loc[name, "start_s"] == pytest.approx(start, rel=1e-12, abs=1e-15), name
        assert trace.loc[name, "end_s"] == pytest.approx(theirs.end[name], rel=1e-12,
                                                         abs=1e-15), name


@settings(max_examples=100, deadline=None)
@given(instances())
def test_contention_only_delays_a_plan_in_plan_order(instance) -> None:
    # With each device's order fixed, a transfer that shares a link can only make later
    # events later: both contended models are at least the contention-free replay, and
    # fair sharing of one transfer at a time is that transfer's contention-free time.
    plan, cluster, cost = instance
    free = simulate(plan, cluster, cost, links="none").makespan_s
    for links in ("fcfs", "fair"):
        assert simulate(plan, cluster, cost, links=links).makespan_s >= free * (1 - 1e-12)
