"""Devices sharing a host slow each other down while they compute at once: closed forms
over hand-built plans."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Device, Link
from hwmodels.cost import TableCost
from policies.plans import Plan
from sim.engine import simulate
from workloads import GraphBuilder


def _cluster(slowdown: dict[str, float], hosts: dict[str, str] | None = None,
             devices: tuple[str, ...] = ("a", "b")) -> Cluster:
    specs = tuple(Device(n, "cpu", {"fp32": 1e9}, 2**30, 1e9) for n in devices)
    links = tuple(Link(p, q, 1e9, 1e-6) for i, p in enumerate(devices)
                  for q in devices[i + 1:])
    return Cluster("shared", specs, links,
                   hosts=dict.fromkeys(devices, "h") if hosts is None else hosts,
                   host_slowdown=slowdown)


def _side_by_side(cluster: Cluster, times: list[float]) -> tuple[Plan, TableCost]:
    """One op per device, each on its own input: nothing orders them but the host."""
    b = GraphBuilder("apart")
    for i, _ in enumerate(times):
        b.relu(b.input((4,), name=f"in{i}"), name=f"op{i}")
    graph = b.build()
    devices = cluster.device_names
    where = {n: devices[int(n[-1])] for n in graph.names}
    table = {n: dict.fromkeys(devices, 0.0 if n.startswith("in") else times[int(n[-1])])
             for n in graph.names}
    plan = Plan(graph, where, {d: [f"in{i}", f"op{i}"] for i, d in enumerate(devices)},
                cluster=cluster.name, cluster_hash=cluster.definition_hash)
    return plan, TableCost(cluster, table)


def _ends(cluster: Cluster, times: list[float], links: str = "fcfs") -> list[float]:
    plan, cost = _side_by_side(cluster, times)
    trace = simulate(plan, cluster, cost, links=links).trace.set_index("name")
    return [float(trace.loc[f"op{i}", "end_s"]) for i in range(len(times))]


@settings(max_examples=40, deadline=None)
@given(short=st.floats(0.1, 5.0), extra=st.floats(0.0, 5.0), slowdown=st.floats(1.0, 3.0),
       links=st.sampled_from(["fcfs", "fair", "none"]))
def test_two_ops_at_once_each_run_slowdown_times_slower_until_one_ends(
        short: float, extra: float, slowdown: float, links: str) -> None:
    ends = _ends(_cluster({"h": slowdown}), [short, short + extra], links)
    # together until the short one is done (its work at 1/s), then the long one alone
    assert ends[0] == pytest.approx(slowdown * short)
    assert ends[1] == pytest.approx(slowdown * short + extra)


@settings(max_examples=20, deadline=None)
@given(t=st.floats(0.1, 5.0), slowdown=st.floats(1.0, 3.0))
def test_three_devices_at_once_run_one_plus_twice_the_excess_slower(t: float,
                                                                   slowdown: float) -> None:
    cluster = _cluster({"h": slowdown}, devices=("a", "b", "c"))
    assert _ends(cluster, [t, t, t]) == pytest.approx([(1 + 2 * (slowdown - 1)) * t] * 3)


def test_devices_on_other_hosts_or_without_a_slowdown_run_as_if_alone() -> None:
    apart = _cluster({"h": 2.0}, hosts={"a": "h", "b": "g"})
    assert _ends(apart, [1.0, 3.0]) == pytest.approx([1.0, 3.0])
    assert _ends(_cluster({}), [1.0, 3.0]) == pytest.approx([1.0, 3.0])
    assert _ends(_cluster({"h": 1.0}), [1.0, 3.0]) == pytest.approx([1.0, 3.0])


def test_ops_that_never_overlap_are_not_slowed() -> None:
    cluster = _cluster({"h": 2.0})
    b = GraphBuilder("chain")
    x = b.input((4,), name="x")
    for i in range(4):
        x = b.relu(x, name=f"r{i}")
    graph = b.build()
    where = {"x": "a", "r0": "a", "r1": "b", "r2": "a", "r3": "b"}
    plan = Plan(graph, where, {d: [n for n in graph.names if where[n] == d] for d in "ab"},
                cluster=cluster.name, cluster_hash=cluster.definition_hash)
    table = {n: dict.fromkeys("ab", 0.0 if n == "x" else 1.0) for n in graph.names}
    result = simulate(plan, cluster, TableCost(cluster, table))
    assert result.makespan_s == pytest.approx(4.0 + 3 * (1e-6 + 16 / 1e9))
    assert result.busy_s == pytest.approx({"a": 2.0, "b": 2.0})


def test_tenants_on_devices_of_one_host_slow_each_other_too() -> None:
    from sim.tenants import Job, simulate_jobs

    cluster = _cluster({"h": 1.5})
    jobs = []
    for name, device in (("p", "a"), ("q", "b")):
        b = GraphBuilder(name)
        b.relu(b.input((4,), name="x"), name="r")
        graph = b.build()
        jobs.append(Job(Plan(graph, dict.fromkeys(graph.names, device),
                             {device: ["x", "r"]}, cluster=cluster.name,
                             cluster_hash=cluster.definition_hash), name))
    table = {n: dict.fromkeys("ab", 0.0 if n == "x" else 2.0) for n in ("x", "r")}
    result = simulate_jobs(jobs, cluster, TableCost(cluster, table))
    assert list(result.jobs["end_s"]) == pytest.approx([3.0, 3.0])  # 2 s each, 1.5x slower
    assert list(result.jobs["alone_s"]) == pytest.approx([2.0, 2.0])
