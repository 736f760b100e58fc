"""The compiled flows of the ``fair`` link model against the model as first written in Python
(``tests/sim/fair_reference.py``): the same start and end of every op and transfer, to the
bit, on random plans (ties made common by round numbers), several jobs, and a switch behind
which thousands of flows share 128 channels."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, Device, Link, RooflineCost, get_device
from policies import Plan, order_by_priority
from sim import Job, simulate, simulate_jobs
from sim.flows import FlowTable
from sim.options import LINK_REGISTRY
from tests.helpers import FixedCost
from tests.sim.fair_reference import ReferenceFairSharing
from workloads import Graph, Op, Tensor
from workloads.synthetic import layered_dag


@pytest.fixture(scope="module", autouse=True)
def reference() -> Iterator[None]:
    LINK_REGISTRY.register("fair_reference", ReferenceFairSharing)
    yield
    LINK_REGISTRY.unregister("fair_reference")


@st.composite
def instances(draw: st.DrawFn) -> tuple[Plan, Cluster, FixedCost]:
    """Random DAGs on a chain or a star of up to five devices; bandwidths, sizes and op
    times from small sets of round numbers, so that flows start and end together often."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_dev = draw(st.integers(2, 5))
    devices = tuple(Device(f"d{i}", "gpu", {"fp32": 1e12}, 2**40, 1e11,
                           compute_streams=draw(st.integers(1, 2)),
                           copy_engines=draw(st.integers(1, 3))) for i in range(n_dev))
    bandwidth = [1e9, 2e9, 4e9]
    latency = draw(st.sampled_from([0.0, 1e-6]))
    if draw(st.booleans()):
        links = tuple(Link(f"d{i}", f"d{i + 1}", float(rng.choice(bandwidth)), latency,
                           draw(st.sampled_from(["full", "half"]))) for i in range(n_dev - 1))
        cluster = Cluster("chain", devices, links)
    else:
        links = tuple(Link(f"d{i}", "sw", float(rng.choice(bandwidth)), latency)
                      for i in range(n_dev))
        cluster = Cluster("star", devices, links, switches=("sw",))
    n = draw(st.integers(2, 40))
    ops = [Op(f"o{i}", "synthetic", "matmul",
              inputs=tuple(f"o{j}" for j in range(i) if rng.random() < 0.25),
              outputs=(Tensor(f"o{i}", (int(rng.choice([250_000, 500_000, 1_000_000])),)),))
           for i in range(n)]
    graph = Graph("random", ops)
    placement = {op.name: f"d{int(rng.integers(n_dev))}" for op in ops}
    plan = Plan(graph, placement, order_by_priority(graph, placement))
    times = {op.name: float(rng.choice([0.0, 1e-3, 2e-3])) for op in ops}
    return plan, cluster, FixedCost(cluster, times, default=0.0)


def same_timeline(plan: Plan, cluster: Cluster, cost: RooflineCost | FixedCost) -> None:
    ours = simulate(plan, cluster, cost, links="fair")
    reference = simulate(plan, cluster, cost, links="fair_reference")
    assert ours.makespan_s == reference.makespan_s
    assert ours.trace.equals(reference.trace)


@settings(max_examples=120, deadline=None)
@given(instances())
def test_fair_sharing_equals_the_python_model_to_the_bit(instance) -> None:  # type: ignore[no-untyped-def]
    same_timeline(*instance)


@settings(max_examples=25, deadline=None)
@given(instances(), st.sampled_from(["fifo", "weighted_fair", "partition"]))
def test_jobs_sharing_links_fairly_equal_the_python_model(instance, sharing: str) -> None:  # type: ignore[no-untyped-def]
    plan, cluster, cost = instance
    jobs = [Job(plan, "a"), Job(plan, "b", arrival_s=1e-3)]
    ours = simulate_jobs(jobs, cluster, cost, sharing=sharing, links="fair")
    reference = simulate_jobs(jobs, cluster, cost, sharing=sharing, links="fair_reference")
    assert ours.trace.equals(reference.trace)


def test_a_contended_switch_equals_the_python_model_to_the_bit() -> None:
    # 1,000 ops round robin over 64 GPUs behind one switch at 4.5 GB/s, 64 copy engines
    # each: components of hundreds of flows, re-rated at every start and end.
    spec = dataclasses.replace(get_device("h100-sxm5-80gb"), copy_engines=64)
    cluster = Cluster("switch64", tuple(spec.instance(f"gpu{i}") for i in range(64)),
                      tuple(Link(f"gpu{i}", "switch", 4.5e9, 1e-6) for i in range(64)),
                      switches=("switch",))
    graph = layered_dag(1000, width=100, seed=0)
    placement = {op: cluster.device_names[i % 64] for i, op in enumerate(graph.names)}
    same_timeline(Plan(graph, placement, order_by_priority(graph, placement)), cluster,
                  RooflineCost(cluster))


def test_a_flow_table_settles_bytes_at_the_old_rate_before_the_new() -> None:
    # Channel 0 (10 B/s) is shared by flows 0 and 1; flow 2 crosses channels 0 and 1
    # (4 B/s) from t = 1. Closed forms: 0 and 1 at 5 B/s until t = 1; then 2 is held to
    # 10/3 on channel 0 and gets it (channel 1 allows 4), 0 and 1 get 10/3 too.
    table = FlowTable([[0], [0], [0, 1]], [10.0, 4.0])
    table.start(0, 20.0, 0.0)
    table.start(1, 10.0, 0.0)
    soonest, rated = table.start(2, 10.0, 1.0)
    assert rated
    assert table.rate.tolist() == pytest.approx([10 / 3] * 3)
    # flow 1 has 5 bytes left at t = 1: it ends at 1 + 5 / (10/3) = 2.5
    assert soonest == pytest.approx(2.5)
    done, reshared, soonest = table.finish(2.5)
    assert (done, reshared) == ([1], True)
    # then channel 1 holds flow 2 to 4 and flow 0 takes the 6 left of channel 0; flow 2
    # had 10 - 5 = 5 bytes left, so it ends at 2.5 + 5 / 4
    assert table.rate[[0, 2]].tolist() == pytest.approx([6.0, 4.0])
    assert soonest == pytest.approx(3.75)


def test_a_flow_that_crosses_no_channel_is_never_rated() -> None:
    table = FlowTable([[]], [])
    assert table.start(0, 1.0, 0.0) == (float("inf"), False)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_the_heap_and_the_scan_pick_the_same_bottlenecks(data) -> None:  # type: ignore[no-untyped-def]
    from sim.flows import max_min_rates

    n_channels = data.draw(st.integers(1, 12))
    capacity = [data.draw(st.sampled_from([1e9, 2e9, 3e9, 4.5e9])) for _ in range(n_channels)]
    routes = [data.draw(st.lists(st.integers(0, n_channels - 1), min_size=1, max_size=3,
                                 unique=True)) for _ in range(data.draw(st.integers(1, 40)))]
    assert max_min_rates(routes, capacity, scan_up_to=0) == max_min_rates(routes, capacity)
