"""A plan laid out for many plans (sim.slots: the op-time table, transfer numbers kept
from plan to plan) runs as the Python event loop runs the plan's wiring (sim.wiring,
sim.engine.Simulation, itself checked against simpy and SimGrid): the same op times,
transfer times and peaks, plan after plan of one layout, on random plans and a real
training step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, RooflineCost, get_cluster
from policies import Plan, plan
from sim import SimResult, compiled
from sim.engine import PlanOrder, Simulation
from sim.links import FirstComeFirstServed, NoContention
from sim.slots import Slots
from sim.wiring import wire
from tests.helpers import FixedCost
from tests.sim.test_compiled import with_memory
from tests.sim.test_delta import moved
from tests.sim.test_flows import instances
from workloads import build_model, training_graph


def python_loop(p: Plan, cluster: Cluster, cost: Any, links: str) -> SimResult:
    run = Simulation(wire(p, cluster, cost), cluster, cluster.device_names, p)
    run.compose(PlanOrder, FirstComeFirstServed if links == "fcfs" else NoContention)
    run.run()
    return run.result("job0")


def assert_runs_alike(p: Plan, cluster: Cluster, cost: Any, links: str,
                      slots: Slots | None = None) -> None:
    slots = slots or Slots(p.graph, cluster, cost)
    inputs = slots.inputs(p)
    run = slots.state(inputs, record=False)
    compiled.begin(slots.columns, inputs, run, links == "fcfs")
    compiled.advance(slots.columns, inputs, run, links == "fcfs", 2**62)
    full = python_loop(p, cluster, cost, links)
    c = full.columns
    assert c is not None
    assert float(run.clock[1]) == full.makespan_s
    assert np.array_equal(run.start, c.op_start)
    assert run.peak.tolist() == [full.peak_memory_bytes[d] for d in cluster.device_names]
    a = p.graph.arrays
    index = {d: i for i, d in enumerate(cluster.device_names)}
    numbers = slots.transfer_numbers(inputs)
    for k, t, start, end in zip(numbers, p.transfers, c.transfer_start, c.transfer_end,
                                strict=True):
        assert inputs.k_tensor[k] == a.tensor_index[t.tensor], t.name
        assert inputs.k_dst[k] == index[t.dst], t.name
        assert (run.t_start[k], run.t_end[k]) == (start, end), t.name


@settings(max_examples=150, deadline=None)
@given(instances(), st.sampled_from(["fcfs", "none"]),
       st.sampled_from([2**40, 3_000_000, 1_500_000]))
def test_slot_columns_run_as_the_simulator_runs_the_plan(instance, links: str,  # type: ignore[no-untyped-def]
                                                          memory: int) -> None:
    p, cluster, cost = instance
    cluster = with_memory(cluster, memory)
    cost = FixedCost(cluster, cost.times, cost.default)
    slots = Slots(p.graph, cluster, cost)
    rng = np.random.default_rng(len(p.graph))
    for _ in range(4):  # one layout, plan after plan
        assert_runs_alike(p, cluster, cost, links, slots)
        p = moved(p, rng, cluster.device_names)


@pytest.mark.parametrize("policy", ["heft", "random"])
def test_a_training_step_runs_alike(policy: str) -> None:
    cluster = with_memory(get_cluster("quad-v100-nvlink"), 2**30)
    cost = RooflineCost(cluster)
    graph = training_graph(build_model("resnet50", batch=8), "adam")
    assert_runs_alike(plan(graph, cluster, policy, cost), cluster, cost, "fcfs")
