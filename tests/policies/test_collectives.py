"""Collectives placed on device groups, simulated as their algorithms' point-to-point steps:
times against the closed forms of the ring, binomial-tree and hierarchical algorithms on
topologies where no two transfers of a step share a link."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Link
from hwmodels.cost import CostModel
from policies import plan as make_plan
from policies.collectives import lower
from policies.plans import Plan
from sim import simulate
from tests.helpers import toy_device
from workloads import Graph, Op, Tensor
from workloads.collectives import collective, member_outputs
from workloads.errors import GraphError, PlacelabError


class FreeCompute(CostModel):
    """Every op free: a collective's time is its transfers'."""

    name = "free-compute"

    def op_time(self, op: Op, device: str) -> float:
        return 0.0


def _ring(n: int, bandwidth: float, latency_s: float) -> Cluster:
    """``n`` devices, each linked to the next and the last to the first."""
    devices = tuple(toy_device(f"d{i}") for i in range(n))
    links = tuple(Link(f"d{i}", f"d{(i + 1) % n}", bandwidth, latency_s, name=f"l{i}")
                  for i in range(n if n > 2 else 1))
    return Cluster("ring", devices, links)


def _star(n: int, bandwidth: float, latency_s: float) -> Cluster:
    """``n`` devices, each with its own full-duplex link into one switch."""
    devices = tuple(toy_device(f"d{i}") for i in range(n))
    links = tuple(Link(f"d{i}", "sw", bandwidth, latency_s, name=f"l{i}") for i in range(n))
    return Cluster("star", devices, links, switches=("sw",))


def _nodes(nodes: int, per_node: int, inner: tuple[float, float],
           outer: tuple[float, float]) -> Cluster:
    """``nodes`` nodes of ``per_node`` devices in a ring (``inner``: bandwidth, latency),
    every device also linked to one network switch (``outer``)."""
    devices, links, hosts = [], [], {}
    for k in range(nodes):
        names = [f"n{k}.d{i}" for i in range(per_node)]
        devices += [toy_device(d) for d in names]
        hosts.update(dict.fromkeys(names, f"node{k}"))
        pairs = per_node if per_node > 2 else per_node - 1
        links += [Link(names[i], names[(i + 1) % per_node], *inner, name=f"n{k}.l{i}")
                  for i in range(pairs)]
        links += [Link(d, "net", *outer, name=f"{d}.nic") for d in names]
    return Cluster("nodes", tuple(devices), tuple(links), switches=("net",), hosts=hosts)


def _plan(cluster: Cluster, kind: str, nbytes: int, algorithm: str) -> Plan:
    """Each device makes its tensor, then one collective over every device."""
    names = cluster.device_names
    p = len(names)
    elements = nbytes // 4
    ops = [Op(f"x{m}", "input", "source", outputs=(Tensor(f"x{m}", (elements,)),))
           for m in range(p if kind != "broadcast" else 1)]
    inputs = [[op.output] for op in ops]
    c = collective("c", kind, inputs, algorithm=algorithm, suffix=".out",
                   members=p if kind == "broadcast" else None)
    graph = Graph("collective", [*ops, c])
    placement = {f"x{m}": names[m] for m in range(len(ops))} | {"c": names[0]}
    order = {d: ([f"x{m}"] if m < len(ops) else []) + ["c"] for m, d in enumerate(names)}
    return Plan(graph, placement, order, device_groups={"c": names})


def _time(cluster: Cluster, kind: str, nbytes: int, algorithm: str,
          links: str = "fcfs") -> float:
    return simulate(_plan(cluster, kind, nbytes, algorithm), cluster, FreeCompute(cluster),
                    links=links).makespan_s


@pytest.mark.parametrize("links", ["fcfs", "fair"])
@settings(max_examples=15, deadline=None)
@given(p=st.integers(2, 8), chunks=st.integers(1, 2000))
def test_the_ring_all_reduce_is_its_closed_form(links: str, p: int, chunks: int) -> None:
    bw, lat = 1e9, 1e-5
    nbytes = 4 * p * chunks
    closed = 2 * (p - 1) / p * nbytes / bw + 2 * (p - 1) * lat
    assert _time(_ring(p, bw, lat), "all_reduce", nbytes, "ring", links) == \
        pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("kind", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("p", [2, 3, 8])
def test_ring_reduce_scatter_and_all_gather_take_p_minus_1_steps(kind: str, p: int) -> None:
    bw, lat, nbytes = 1e9, 1e-5, 4 * 8 * 3 * 1000
    chunk = nbytes / p if kind == "reduce_scatter" else nbytes  # all-gather: each brings B/p
    assert _time(_ring(p, bw, lat), kind, nbytes, "ring") == \
        pytest.approx((p - 1) * (chunk / bw + lat), rel=1e-9)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_tree_all_reduce_and_broadcast_are_binomial(p: int) -> None:
    bw, lat, nbytes = 1e9, 1e-5, 4_000_000
    hop = nbytes / bw + 2 * lat  # device -> switch -> device
    levels = math.ceil(math.log2(p))
    star = _star(p, bw, lat)
    assert _time(star, "all_reduce", nbytes, "tree") == pytest.approx(2 * levels * hop,
                                                                      rel=1e-9)
    assert _time(star, "broadcast", nbytes, "tree") == pytest.approx(levels * hop, rel=1e-9)


@pytest.mark.parametrize(("nodes", "per_node"), [(2, 4), (4, 2), (3, 3), (2, 8)])
def test_hierarchical_all_reduce_rings_inside_then_across_nodes(nodes: int,
                                                                per_node: int) -> None:
    inner, outer = (1e11, 1e-6), (1e9, 2e-6)
    cluster = _nodes(nodes, per_node, inner, outer)
    nbytes = 4 * nodes * per_node * 1000
    g, n = per_node, nodes
    shard = nbytes / g
    closed = (2 * (g - 1) * (shard / inner[0] + inner[1])
              + 2 * (n - 1) * (shard / n / outer[0] + 2 * outer[1]))
    assert _time(cluster, "all_reduce", nbytes, "hierarchical") == \
        pytest.approx(closed, rel=1e-9)
    # the flat ring crosses the slow network in most of its hops: slower here
    assert _time(cluster, "all_reduce", nbytes, "ring") > closed


def test_steps_are_collective_rows_and_move_the_ring_s_bytes() -> None:
    p, nbytes = 4, 4 * 4 * 250
    cluster = _ring(p, 1e9, 1e-6)
    r = simulate(_plan(cluster, "all_reduce", nbytes, "ring"), cluster, FreeCompute(cluster))
    kinds = r.trace.groupby("kind").size().to_dict()
    assert kinds["collective"] == p * (2 + 2 * (p - 1))  # pack, steps, unpack per member
    assert kinds["compute"] == p
    moved = r.trace[r.trace["kind"] == "transfer"]["bytes"].sum()
    assert moved == 2 * (p - 1) * nbytes  # 2(p-1) chunks of B/p from each member


def test_member_outputs_are_on_member_devices() -> None:
    cluster = _ring(3, 1e9, 1e-6)
    p = _plan(cluster, "all_gather", 4 * 30, "ring")
    low = lower(p, cluster)
    op = p.graph.op("c")
    for m, device in enumerate(cluster.device_names):
        for t in member_outputs(op, m):
            assert low.placement[low.graph.producer(t.name)] == device
    assert set(low.step_of.values()) == {"c"}


def test_a_plan_with_device_groups_round_trips_through_json() -> None:
    p = _plan(_ring(4, 1e9, 1e-6), "all_reduce", 4 * 400, "tree")
    back = Plan.from_json(p.to_json())
    assert back == p and back.device_groups == {"c": ("d0", "d1", "d2", "d3")}


def test_bad_collectives_are_one_clear_line() -> None:
    cluster = _ring(4, 1e9, 1e-6)
    p = _plan(cluster, "all_reduce", 4 * 400, "ring")
    with pytest.raises(PlacelabError, match=r"collective 'c': expected 4 distinct devices, "
                                            r"the first its placement 'd0', got"):
        Plan(p.graph, p.placement, p.order, device_groups={"c": ("d0", "d1", "d1", "d2")})
    with pytest.raises(PlacelabError, match=r"op 'c' \(all_reduce\) is a collective: "
                                            r"expected a device group for it, got none"):
        Plan(p.graph, p.placement, {"d0": ("x0", "c"), "d1": ("x1",), "d2": ("x2",),
                                    "d3": ("x3",)})
    with pytest.raises(PlacelabError, match=r"op 'c' is a collective \(all_reduce\): "
                                            r"expected ops a policy places on one device"):
        make_plan(p.graph, cluster, "round_robin")
    with pytest.raises(GraphError, match=r"algorithm for all_gather must be one of ring, "
                                         r"got 'tree'"):
        collective("c", "all_gather", [[Tensor("a", (4,))], [Tensor("b", (4,))]],
                   algorithm="tree")
    lopsided = _nodes(2, 2, (1e11, 1e-6), (1e9, 1e-6)).without("n1.d1")
    with pytest.raises(PlacelabError, match=r"the hierarchical algorithm needs as many "
                                            r"members on every node"):
        _time(lopsided, "all_reduce", 4 * 300, "hierarchical")


def test_a_tenant_with_collectives_runs_as_it_does_alone() -> None:
    from sim import simulate_jobs
    from sim.tenants import Job

    cluster = _ring(4, 1e9, 1e-5)
    p = _plan(cluster, "all_reduce", 4 * 4 * 1000, "tree")
    alone = simulate(p, cluster, FreeCompute(cluster))
    shared = simulate_jobs([Job(p, "a")], cluster, FreeCompute(cluster))
    assert shared.makespan_s == alone.makespan_s
    assert (shared.trace["kind"] == "collective").sum() == (alone.trace["kind"]
                                                           == "collective").sum() > 0
