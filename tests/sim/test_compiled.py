"""The compiled event loop (sim.compiled, sim.engine.CompiledRun) against the Python one
(sim.engine.Simulation, itself checked against simpy and SimGrid): every column, the memory
record and the overflow equal to the bit, on random plans with and without running out of
memory, and on a real model's training step."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Device, Link, RooflineCost, get_cluster
from policies import Plan, order_by_priority, plan
from sim import engine, simulate
from sim.engine import CompiledRun, PlanOrder, Simulation
from sim.links import FairSharing, FirstComeFirstServed, NoContention
from sim.wiring import wire
from tests.helpers import FixedCost
from tests.sim.test_flows import instances
from workloads import Graph, build_model, training_graph

_COLUMNS = ("start", "stream", "next", "t_start", "t_end", "t_engine", "used", "peak",
            "timeline", "op_dev", "op_time", "t_src", "t_dst", "t_bytes", "t_channels",
            "transfer_names")


def with_memory(cluster: Cluster, memory_bytes: int) -> Cluster:
    """``cluster`` with every device holding ``memory_bytes``."""
    return replace(cluster, devices=tuple(replace(d, memory_bytes=memory_bytes)
                                          for d in cluster.devices))


def both(p: Plan, cluster: Cluster, cost: Any, links: str) -> tuple[Simulation, Simulation]:
    """The Python loop's run and the compiled loop's, of one plan."""
    model = {"fcfs": FirstComeFirstServed, "none": NoContention, "fair": FairSharing}[links]
    slow = Simulation(wire(p, cluster, cost), cluster, cluster.device_names, p)
    slow.compose(PlanOrder, model)
    fast = CompiledRun(p, cluster, cost, contention=links == "fcfs",
                       fair=FairSharing() if links == "fair" else None)
    slow.run()
    fast.run()
    return slow, fast


def assert_same(slow: Simulation, fast: Simulation) -> None:
    for name in _COLUMNS:
        assert getattr(fast, name) == getattr(slow, name), name
    assert list(map(type, fast.timeline)) == list(map(type, slow.timeline))
    assert fast.memory.overflow == slow.memory.overflow
    a, b = slow.result("j"), fast.result("j")
    assert (a.makespan_s, a.feasible, a.reason) == (b.makespan_s, b.feasible, b.reason)
    assert a.trace.equals(b.trace)


@settings(max_examples=150, deadline=None)
@given(instances(), st.sampled_from(["fcfs", "none", "fair"]),
       st.sampled_from([2**40, 3_000_000, 1_500_000]))
def test_the_compiled_loop_equals_the_python_loop_to_the_bit(instance, links: str,  # type: ignore[no-untyped-def]
                                                            memory: int) -> None:
    p, cluster, cost = instance
    cluster = with_memory(cluster, memory)
    assert_same(*both(p, cluster, FixedCost(cluster, cost.times, cost.default), links))


@settings(max_examples=60, deadline=None)
@given(instances(), st.sampled_from(["fcfs", "none", "fair"]), st.integers(0, 2**32 - 1))
def test_ops_listed_out_of_order_with_workspace_alike_in_both_loops(  # type: ignore[no-untyped-def]
        instance, links: str, seed: int) -> None:
    """A graph whose ops are not listed in topological order (its arrays then list them
    in another order than the graph: the order Plan.transfers follows), some ops holding
    workspace while they run."""
    p, cluster, cost = instance
    rng = np.random.default_rng(seed)
    ops = [replace(o, workspace_bytes=int(rng.choice([0, 0, 1_000_000])))
           for o in p.graph.ops_by_name().values()]
    graph = Graph("shuffled", [ops[i] for i in rng.permutation(len(ops))])
    q = Plan(graph, p.placement, order_by_priority(graph, p.placement))
    assert_same(*both(q, cluster, cost, links))


@pytest.mark.parametrize("links", ["fcfs", "none", "fair"])
@pytest.mark.parametrize("memory_gib", [32, 0.5, 0.01])
def test_a_training_step_alike_in_both_loops(links: str, memory_gib: float) -> None:
    """Parameters, workspace and optimizer state, on a machine roomy, tight and too small
    for the parameters alone."""
    cluster = with_memory(get_cluster("quad-v100-nvlink"), int(memory_gib * 2**30))
    cost = RooflineCost(cluster)
    graph = training_graph(build_model("resnet50", batch=8), "adam")
    p = plan(graph, cluster, "heft", cost)
    slow, fast = both(p, cluster, cost, links)
    assert_same(slow, fast)
    assert bool(slow.memory.overflow) == (memory_gib < 32)


def test_simulate_runs_the_compiled_loop_where_it_applies(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Plan order with fcfs, none or fair links on unshared hosts: compiled; priority order
    or shared hosts: the Python loop."""
    compiled: list[bool] = []
    run, fast = engine.Simulation.run, engine.CompiledRun.run

    def python(self: Simulation) -> Any:
        compiled.append(False)
        return run(self)

    def arrays(self: CompiledRun) -> Any:
        compiled.append(True)
        return fast(self)

    monkeypatch.setattr(engine.Simulation, "run", python)
    monkeypatch.setattr(engine.CompiledRun, "run", arrays)
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    p = plan(build_model("mlp"), cluster, "heft", cost)
    for order, links in (("plan", "fcfs"), ("plan", "none"), ("priority", "fcfs"),
                         ("plan", "fair")):
        simulate(p, cluster, cost, order=order, links=links)
    assert compiled == [True, True, False, True]
    compiled.clear()
    shared = Cluster("shared", tuple(Device(n, "cpu", {"fp32": 1e9}, 2**30, 1e9)
                                     for n in ("a", "b")), (Link("a", "b", 1e9, 1e-6),),
                     hosts={"a": "h", "b": "h"}, host_slowdown={"h": 1.5})
    simulate(plan(build_model("mlp"), shared, "round_robin"), shared, RooflineCost(shared))
    assert compiled == [False]


def test_a_plan_without_transfers() -> None:
    """A plan whose every op sits on one device: no transfer, no channel."""
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    p = plan(build_model("mlp"), cluster, "single_device", cost)
    slow, fast = both(p, cluster, cost, "fcfs")
    assert_same(slow, fast)
    assert np.asarray(fast.t_end).size == 0
