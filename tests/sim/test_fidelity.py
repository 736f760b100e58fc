"""Streams, copy engines, routes, issue order and bounds; properties on random instances."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Device, Link
from policies import Plan
from policies.bounds import critical_path_bound, lower_bound, work_bound
from sim import simulate
from tests.helpers import FixedCost, chain, op, toy_cluster
from workloads import Graph, PlacementError


def device(name: str, streams: int = 1, copy_engines: int = 1) -> Device:
    return Device(name, "gpu", peak={"fp32": 1e12}, memory_bytes=2**40,
                  memory_bandwidth=1e11, compute_streams=streams, copy_engines=copy_engines)


def test_two_streams_run_independent_ops_at_once() -> None:
    g = Graph("ind", [op("a"), op("b"), op("c")])
    for streams, expected in ((1, 3.0), (2, 2.0), (3, 1.0)):
        c = Cluster("one", (device("d0", streams),))
        p = Plan(g, dict.fromkeys(("a", "b", "c"), "d0"), {"d0": ["a", "b", "c"]})
        r = simulate(p, c, FixedCost(c))
        assert r.makespan_s == expected
        assert r.utilization["d0"] == 3.0 / (expected * streams)


def test_copy_engines_limit_concurrent_sends() -> None:
    # d0 sends to d1 and to d2 over separate links: one engine serialises them.
    g = Graph("fan", [op("a", nbytes=4000), op("b", ("a",)), op("c", ("a",))])
    placement = {"a": "d0", "b": "d1", "c": "d2"}
    order = {"d0": ["a"], "d1": ["b"], "d2": ["c"]}
    for engines, expected in ((1, 8e-3), (2, 4e-3)):
        c = Cluster("star", (device("d0", copy_engines=engines), device("d1"), device("d2")),
                    (Link("d0", "d1", 1e6), Link("d0", "d2", 1e6)))
        r = simulate(Plan(g, placement, order), c, FixedCost(c, default=0.0))
        assert r.makespan_s == pytest.approx(expected)


def test_compute_overlaps_transfers() -> None:
    # a's output crosses to d1 (4 ms) while d0 computes c (4 ms): total 4 ms + b's 1 ms.
    g = Graph("ov", [op("a", nbytes=4000), op("b", ("a",)), op("c", ("a",))])
    c = toy_cluster(2, bandwidth=1e6, latency_s=0.0)
    p = Plan(g, {"a": "d0", "b": "d1", "c": "d0"}, {"d0": ["a", "c"], "d1": ["b"]})
    r = simulate(p, c, FixedCost(c, {"a": 0.0, "b": 1e-3, "c": 4e-3}))
    assert r.makespan_s == pytest.approx(5e-3)


def test_multi_hop_transfer_holds_every_link_of_its_route() -> None:
    # d0 -> d2 crosses l0 and l1; a d1 -> d2 transfer requested meanwhile waits for l1.
    g = Graph("hop", [op("a", nbytes=4000), op("b", nbytes=4000), op("x", ("a",)),
                      op("y", ("b",))])
    c = toy_cluster(3, bandwidth=1e6, latency_s=0.0)
    p = Plan(g, {"a": "d0", "b": "d1", "x": "d2", "y": "d2"},
             {"d0": ["a"], "d1": ["b"], "d2": ["x", "y"]})
    r = simulate(p, c, FixedCost(c, {"a": 0.0, "b": 1e-3, "x": 0.0, "y": 0.0}))
    xfers = r.trace[r.trace["kind"] == "transfer"].set_index("src")
    assert xfers.loc["d0", "stream"] == "d0/copy0,l0:d0->d1,l1:d1->d2"
    assert xfers.loc["d1", "start_s"] == pytest.approx(4e-3)  # waited for l1
    assert r.makespan_s == pytest.approx(8e-3)


def test_priority_order_takes_the_most_urgent_ready_op() -> None:
    g = Graph("p", [op("a"), op("b")])
    c = Cluster("one", (device("d0"),))
    p = Plan(g, {"a": "d0", "b": "d0"}, {"d0": ["a", "b"]}, priority={"a": 1.0, "b": 2.0})
    cost = FixedCost(c, {"a": 1.0, "b": 2.0})
    by_plan = simulate(p, c, cost).trace.set_index("name")["start_s"]
    by_priority = simulate(p, c, cost, order="priority").trace.set_index("name")["start_s"]
    assert (by_plan["a"], by_plan["b"]) == (0.0, 1.0)
    assert (by_priority["b"], by_priority["a"]) == (0.0, 2.0)


def test_priority_order_needs_priorities_and_order_is_checked() -> None:
    c = toy_cluster(1)
    p = Plan(chain(2), {"op0": "d0", "op1": "d0"}, {"d0": ["op0", "op1"]}, policy="mine")
    with pytest.raises(PlacementError, match="policy 'mine' gave none"):
        simulate(p, c, FixedCost(c), order="priority")
    with pytest.raises(PlacementError, match="order must be one of plan, priority, got 'lifo'"):
        simulate(p, c, FixedCost(c), order="lifo")


def test_bounds_closed_forms() -> None:
    c = Cluster("two", (device("d0"), device("d1", streams=2)), (Link("d0", "d1", 1e9),))
    times = {"op0": 1.0, "op1": 2.0, "op2": 3.0}
    cost = FixedCost(c, times)
    assert critical_path_bound(chain(3), c, cost) == 6.0
    assert work_bound(chain(3), c, cost) == 6.0 / 3
    ind = Graph("ind", [op(f"op{i}") for i in range(3)])
    assert critical_path_bound(ind, c, cost) == 3.0
    assert lower_bound(ind, c, cost) == 3.0


@st.composite
def instances(draw: st.DrawFn) -> tuple[Plan, FixedCost]:
    n_dev = draw(st.integers(1, 4))
    tree = nx.random_labeled_tree(n_dev, seed=draw(st.integers(0, 10**6))) if n_dev > 1 \
        else nx.empty_graph(1)
    devices = tuple(device(f"d{i}", draw(st.integers(1, 3)), draw(st.integers(1, 2)))
                    for i in range(n_dev))
    links = tuple(Link(f"d{u}", f"d{v}", draw(st.floats(1e8, 1e10)),
                       draw(st.floats(0, 1e-5)), draw(st.sampled_from(["full", "half"])))
                  for u, v in tree.edges)
    cluster = Cluster("rand", devices, links)
    ops = []
    for i in range(draw(st.integers(1, 30))):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ops.append(op(f"o{i}", tuple(f"o{p}" for p in preds),
                      nbytes=4 * draw(st.integers(1, 10**5)),
                      param_bytes=draw(st.integers(0, 1000)),
                      workspace_bytes=draw(st.integers(0, 1000))))
    g = Graph("r", ops)
    placement = {o.name: f"d{draw(st.integers(0, n_dev - 1))}" for o in g}
    order: dict[str, list[str]] = {}
    for name in g.topological_order():
        order.setdefault(placement[name], []).append(name)
    times = {o.name: draw(st.floats(0, 1e-3)) for o in g}
    priority = {o.name: draw(st.floats(0, 1)) for o in g}
    return Plan(g, placement, order, priority=priority), FixedCost(cluster, times)


@settings(max_examples=80, deadline=None)
@given(instances(), st.sampled_from(["plan", "priority"]))
def test_properties_of_random_runs(case, order: str) -> None:
    p, cost = case
    c = cost.cluster
    r = simulate(p, c, cost, order=order)
    trace = r.trace
    compute = trace[trace["kind"] == "compute"].set_index("name")
    assert sorted(compute.index) == sorted(p.placement)  # every op exactly once
    moved = trace[trace["kind"] == "transfer"]
    arrival = {(n.split("->")[0], d): e
               for n, d, e in zip(moved["name"], moved["dst"], moved["end_s"], strict=True)}
    for edge in p.graph.edges():  # inputs arrive before their reader starts
        ready = compute.loc[edge.src, "end_s"]
        if p.placement[edge.src] != p.placement[edge.dst]:
            ready = arrival[(edge.tensor.name, p.placement[edge.dst])]
        assert compute.loc[edge.dst, "start_s"] >= ready - 1e-12
    for name, rows in compute.groupby("device"):  # never more ops at once than streams
        events = sorted([(s, 1) for s in rows["start_s"]] + [(e, -1) for e in rows["end_s"]],
                        key=lambda x: (x[0], x[1]))
        running = peak = 0
        for _, delta in events:
            running += delta
            peak = max(peak, running)
        assert peak <= c.device(name).compute_streams
    bound = lower_bound(p.graph, c, cost)
    assert r.makespan_s >= bound * (1 - 1e-9)
    mem = r.memory_frame()
    assert (mem["bytes"] >= 0).all()
    final = mem.groupby("device")["bytes"].last().to_dict()
    assert final == {d: r.resident_bytes[d] for d in final}
    again = simulate(p, c, cost, order=order)
    assert again.trace.equals(trace)
    assert again.peak_memory_bytes == r.peak_memory_bytes
