"""The relaxation bound: closed forms worked by hand, below the optimum found by brute force,
below every simulated run (random heterogeneous clusters, every link model), and never
below the simple bounds."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
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
from workloads import Graph, Op, Tensor
from workloads.errors import UnsupportedOp


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


def _grouped(o: Op, group: str) -> Op:
    return dataclasses.replace(o, attrs={**o.attrs, "colocate": group})


def test_a_co_placement_group_shares_one_split() -> None:
    # a takes 1 s on d0 and 3 s on d1, b the reverse: apart, each on its fast device, the
    # bound is 1; grouped, one share x on d0 for both: d0's load 1x + 3x and d1's
    # 3(1 - x) + 1(1 - x) within T give x = 1/2, T = 2 (each op's mix also takes 2); the
    # best plan puts both on one device: 4
    times = {"a": {"d0": 1.0, "d1": 3.0}, "b": {"d0": 3.0, "d1": 1.0}}
    cost = TableCost(_pair(), times, {})
    apart = Graph("two", [op("a"), op("b")])
    grouped = Graph("two", [_grouped(op("a"), "g"), _grouped(op("b"), "g")])
    assert relaxation_bound(apart, cost.cluster, cost) == pytest.approx(1.0, rel=2 * LP_SLACK)
    assert relaxation_bound(grouped, cost.cluster, cost) == pytest.approx(2.0, rel=2 * LP_SLACK)
    assert brute_force_makespan(Problem(grouped, cost.cluster, cost), grouped=True) == 4.0


def test_a_group_is_kept_off_a_device_one_of_its_ops_cannot_run_on() -> None:
    # b cannot run on d1, so neither can a: the whole 2 s sit on d0
    cost = _Only(_pair(), {"a": {"d0": 1.0, "d1": 0.1}, "b": {"d0": 1.0}})
    g = Graph("two", [_grouped(op("a"), "g"), _grouped(op("b"), "g")])
    assert relaxation_bound(g, cost.cluster, cost) == pytest.approx(2.0, rel=2 * LP_SLACK)


def test_a_fork_off_the_path_fits_in_its_window() -> None:
    # a -> {b, c} -> d -> e on a pair: a, b, c, d take 1 s on d0 only, e 10 s on either.
    # The path a, b, d, e is 13 s, and d0's load (4 s, e on d1) fits in 13; but b and c
    # both run between a's end and d's start, one after the other: d starts at 3 at the
    # earliest, and the bound is 14, the optimum (the transfers take 4 ns over 1 GB/s)
    g = Graph("fork", [op("a"), op("b", ("a",)), op("c", ("a",)), op("d", ("b", "c")),
                       op("e", ("d",))])
    times = {"a": {"d0": 1.0}, "b": {"d0": 1.0}, "c": {"d0": 1.0}, "d": {"d0": 1.0},
             "e": {"d0": 10.0, "d1": 10.0}}
    cost = TableCost(toy_cluster(2, bandwidth=1e9, latency_s=0.0), times, {})
    assert lower_bound(g, cost.cluster, cost) == 13.0
    assert relaxation_bound(g, cost.cluster, cost) == pytest.approx(14.0, rel=2 * LP_SLACK)
    assert relaxation_bound(g, cost.cluster, cost, windows=False) == pytest.approx(
        13.0, rel=2 * LP_SLACK)
    assert brute_force_makespan(Problem(g, cost.cluster, cost)) == 14.0


def test_on_identical_devices_a_window_beyond_the_streams_lifts_the_bound() -> None:
    # a -> {b0..b3} -> d, every op 1 s, on two identical devices: the four branches take
    # 2 s between a's end and d's start, so 4, the optimum, where the simple bound says 3
    g = Graph("fork", [op("a"), *(op(f"b{i}", ("a",)) for i in range(4)),
                       op("d", tuple(f"b{i}" for i in range(4)))])
    cost = TableCost(toy_cluster(2, bandwidth=1e9, latency_s=0.0),
                     {o.name: {"d0": 1.0, "d1": 1.0} for o in g}, {})
    assert lower_bound(g, cost.cluster, cost) == 3.0
    assert relaxation_bound(g, cost.cluster, cost) == pytest.approx(4.0, rel=2 * LP_SLACK)
    assert brute_force_makespan(Problem(g, cost.cluster, cost)) == pytest.approx(4.0)


@st.composite
def spines(draw: st.DrawFn) -> tuple[Graph, TableCost]:
    """Six to nine ops on a pair of devices where windows bind: a spine, each step of it
    forking to up to two side ops that join the next, and maybe an op hanging off it; each
    op's time on each device drawn (some on one device only), each tensor's transfer."""
    ops, spine = [op("s0")], ["s0"]
    while len(ops) < 6:
        sides = [f"f{len(ops)}_{i}" for i in range(draw(st.integers(0, 2)))]
        ops += [op(name, (spine[-1],)) for name in sides]
        spine.append(f"s{len(spine)}")
        ops.append(op(spine[-1], (spine[-2], *sides)))
    if draw(st.booleans()):
        ops.append(op("hang", (draw(st.sampled_from(spine[:-1])),)))
    g = Graph("spine", ops)
    times = {}
    for o in g:
        only = draw(st.sampled_from([None, "d0", "d1"]))
        times[o.name] = {d: float(draw(st.integers(1, 4))) for d in ("d0", "d1")
                         if only in (None, d)}
    transfers = {o.name: draw(st.sampled_from([0.0, 0.5, 2.0])) for o in g}
    return g, TableCost(toy_cluster(2, bandwidth=1e9, latency_s=0.0), times, transfers)


@settings(max_examples=40, deadline=None)
@given(spines())
def test_on_spines_below_the_optimum_and_above_the_bound_without_windows(
        case: tuple[Graph, TableCost]) -> None:
    g, cost = case
    bound = relaxation_bound(g, cost.cluster, cost)
    assert relaxation_bound(g, cost.cluster, cost, windows=False) * (1 - 1e-6) <= bound
    assert bound <= brute_force_makespan(Problem(g, cost.cluster, cost)) * (1 + 1e-9)


def test_what_follows_a_path_op_fits_after_it() -> None:
    # s (5 s on d1 only) -> a -> {f, b -> c}, a, b, c 1 s each and f 3 s, on d0 only: the
    # path s, a, f is 9 s and d0's load 6 s, but f, b and c all run on d0 after a ends at
    # 6 at the earliest: 11 s, the optimum (and 4 ns for s's tensor to cross)
    g = Graph("tail", [op("s"), op("a", ("s",)), op("b", ("a",)), op("c", ("b",)),
                       op("f", ("a",))])
    times = {"s": {"d1": 5.0}, "a": {"d0": 1.0}, "b": {"d0": 1.0}, "c": {"d0": 1.0},
             "f": {"d0": 3.0}}
    cost = TableCost(toy_cluster(2, bandwidth=1e9, latency_s=0.0), times, {})
    assert lower_bound(g, cost.cluster, cost) == 9.0
    assert relaxation_bound(g, cost.cluster, cost) == pytest.approx(11.0, rel=2 * LP_SLACK)
    assert relaxation_bound(g, cost.cluster, cost, windows=False) == pytest.approx(
        9.0, rel=2 * LP_SLACK)
    assert brute_force_makespan(Problem(g, cost.cluster, cost)) == pytest.approx(11.0)


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


def test_ops_that_take_no_time_still_pay_a_forced_crossing() -> None:
    cluster = toy_cluster(2, bandwidth=1e9, latency_s=0.5)
    g = Graph("ab", [op("a", nbytes=4 * 10**9), op("b", ("a",))])
    cost = TableCost(cluster, {"a": {"d0": 0.0}, "b": {"d1": 0.0}})
    run = simulate(Plan(g, {"a": "d0", "b": "d1"}, {"d0": ["a"], "d1": ["b"]}), cluster,
                   cost).makespan_s
    assert lower_bound(g, cluster, cost) == 0.0 and run == 4.5
    assert relaxation_bound(g, cluster, cost) == pytest.approx(run, rel=2 * LP_SLACK)


def test_on_identical_devices_branches_within_the_streams_give_the_simple_bound() -> None:
    # the six branches' 27 s of work over four devices fits in the longest one's 7 s: no
    # window binds, and one class of devices leaves nothing else to lift the bound
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


@pytest.mark.parametrize("seed", range(8))
def test_with_groups_below_the_optimum_and_above_the_bound_without(seed: int) -> None:
    """Ops paired into co-placement groups at random: the bound rises (or stays), and no
    plan that keeps each group on one device beats it."""
    graph, cluster, cost = instance(6, seed)
    rnd = random.Random(seed)
    names = graph.topological_order()
    groups = {name: f"g{rnd.randrange(3)}" for name in rnd.sample(names, 4)}
    grouped = Graph("grouped", [_grouped(o, groups[o.name]) if o.name in groups else o
                                for o in graph])
    best = brute_force_makespan(Problem(grouped, cluster, cost), grouped=True)
    bound = relaxation_bound(grouped, cluster, cost)
    assert relaxation_bound(graph, cluster, cost) * (1 - 1e-6) <= bound <= best


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
@given(heterogeneous_runs(), st.sampled_from(["fcfs", "fair", "none"]),
       st.sampled_from(["plan", "priority"]))
def test_no_simulated_run_is_shorter(case: tuple[Plan, SpeedCost], links: str,
                                     order: str) -> None:
    p, cost = case
    bound = relaxation_bound(p.graph, cost.cluster, cost)
    assert math.isfinite(bound)
    assert bound >= lower_bound(p.graph, cost.cluster, cost)
    # the bound sums op times in another order than the run: a rounding apart at most
    run = simulate(p, cost.cluster, cost, links=links, order=order)
    assert run.makespan_s >= bound * (1 - 1e-12)


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


def test_an_op_time_near_the_smallest_float_gives_the_simple_bound() -> None:
    """In units of a floor of 2e-323 s, a 4-byte transfer overflows: the program cannot be
    written, and the bound is the lower bound (no run is shorter)."""
    cluster = toy_cluster(2, bandwidth=1e9, latency_s=1e-6)
    g = Graph("ab", [op("a"), op("b", ("a",))])
    cost = SpeedCost(cluster, {"a": 0.0, "b": 5e-324}, {"d0": 0.25, "d1": 0.25})
    bound = relaxation_bound(g, cluster, cost)
    assert bound == lower_bound(g, cluster, cost) > 0
    run = simulate(Plan(g, {"a": "d0", "b": "d0"}, {"d0": ["a", "b"]}), cluster, cost)
    assert run.makespan_s >= bound


def test_heft_on_the_workstation_is_above_it() -> None:
    from hwmodels import RooflineCost, get_cluster
    from workloads import build_model, training_graph

    cluster = get_cluster("workstation")
    cost = RooflineCost(cluster)
    step = training_graph(build_model("resnet50", batch=8), "adam")
    bound = relaxation_bound(step, cluster, cost)
    heft = simulate(plan(step, cluster, "heft", cost), cluster, cost, links="fair")
    assert lower_bound(step, cluster, cost) < bound <= heft.makespan_s


def _chain_of_links() -> Cluster:
    # d0 -(slow)- d1 -(fast)- d2: the fastest crossing is d1<->d2, the first pair listed
    # (d0, d1) is slow and the farthest (d0, d2) slower still
    devices = tuple(Device(f"d{i}", "gpu", {"fp32": 1e12}, 2**34, 1e11) for i in range(3))
    return Cluster("line", devices, (Link("d0", "d1", 1e8, 0.0), Link("d1", "d2", 1e10, 0.0)))


@pytest.mark.parametrize("priced", ["by size", "by table"])
def test_a_forced_crossing_pays_the_fastest_pair_not_another(priced: str) -> None:
    cluster = _chain_of_links()
    g = Graph("ab", [op("a", nbytes=4 * 10**8), op("b", ("a",))])
    runs = {"a": {"d2": 1.0}, "b": {"d0": 1.0, "d1": 1.0}}  # a on d2, b on d0 or d1
    cost = (TableCost(cluster, runs) if priced == "by table"
            else _Only(cluster, runs))
    p = Plan(g, {"a": "d2", "b": "d1"}, {"d2": ["a"], "d1": ["b"]})
    run = simulate(p, cluster, cost).makespan_s  # 1 + 4e8 B / 1e10 B/s + 1
    assert run == pytest.approx(2.04)
    assert relaxation_bound(g, cluster, cost) == pytest.approx(run, rel=2 * LP_SLACK)


class _Only(CostModel):
    """1 s on the devices each op may run on (a table's times, priced by size)."""

    name = "only"

    def __init__(self, cluster: Cluster, runs: Mapping[str, Mapping[str, float]]) -> None:
        super().__init__(cluster)
        self.runs = {k: dict(v) for k, v in runs.items()}

    def op_time(self, op: Op, device: str) -> float:
        if device not in self.runs[op.name]:
            raise UnsupportedOp(f"only: {op.name} not on {device}")
        return self.runs[op.name][device]


def test_devices_alike_but_for_their_streams_are_kept_apart() -> None:
    # three 1 s ops on one device of one stream and one of two: all at once, in 1 s
    cluster = Cluster("two", (Device("d0", "gpu", {"fp32": 1e12}, 2**34, 1e11),
                              Device("d1", "gpu", {"fp32": 1e12}, 2**34, 1e11,
                                     compute_streams=2)), (Link("d0", "d1", 1e9),))
    g = Graph("three", [op("a"), op("b"), op("c")])
    cost = SpeedCost(cluster, dict.fromkeys("abc", 1.0), {"d0": 1.0, "d1": 1.0})
    p = Plan(g, {"a": "d0", "b": "d1", "c": "d1"}, {"d0": ["a"], "d1": ["b", "c"]})
    assert simulate(p, cluster, cost).makespan_s == 1.0
    assert relaxation_bound(g, cluster, cost) == 1.0


@st.composite
def small_instances(draw: st.DrawFn) -> tuple[Graph, SpeedCost]:
    """Up to five ops on three devices joined by links of their own speeds."""
    devices = tuple(Device(f"d{i}", "gpu", {"fp32": 1e12}, 2**34, 1e11,
                           compute_streams=draw(st.integers(1, 2))) for i in range(3))
    cluster = Cluster("three", devices, tuple(
        Link(a, b, draw(st.sampled_from([1e8, 1e9, 1e10])), draw(st.floats(0, 1e-4)))
        for a, b in (("d0", "d1"), ("d1", "d2"))))
    ops = []
    for i in range(draw(st.integers(2, 5))):
        preds = draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True)) if i else []
        ops.append(op(f"o{i}", tuple(f"o{p}" for p in preds),
                      nbytes=4 * draw(st.integers(1, 10**5))))
    g = Graph("small", ops)
    work = {o.name: draw(st.floats(1e-5, 1e-3)) for o in g}
    speed = {d.name: draw(st.sampled_from([0.25, 1.0, 4.0])) for d in devices}
    return g, SpeedCost(cluster, work, speed)


@settings(max_examples=25, deadline=None)
@given(small_instances(), st.sampled_from(["fcfs", "fair", "none"]))
def test_no_plan_of_a_small_graph_runs_shorter(case: tuple[Graph, SpeedCost],
                                                 links: str) -> None:
    """Every placement (in topological order) simulated: the best run is at or above the
    bound, which it often meets."""
    g, cost = case
    bound = relaxation_bound(g, cost.cluster, cost)
    assert best_run(g, cost, links) >= bound * (1 - 1e-12)


def best_run(g: Graph, cost: CostModel, links: str) -> float:
    """The shortest simulated run of ``g`` over every placement (ops in topological
    order)."""
    order = g.topological_order()
    best = math.inf
    for where in itertools.product(cost.cluster.device_names, repeat=len(order)):
        placement = dict(zip(order, where, strict=True))
        orders: dict[str, list[str]] = {}
        for name in order:
            orders.setdefault(placement[name], []).append(name)
        run = simulate(Plan(g, placement, orders), cost.cluster, cost, links=links)
        best = min(best, run.makespan_s)
    return best


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_no_data_parallel_run_of_many_replicas_is_shorter(algorithm: str) -> None:
    """A collective is lowered to ring steps and transfers that can take far less than the
    cost model's price of the collective op itself (charged in full, 32 replicas of a
    5000-wide layer gave a bound twice the run)."""
    p, cluster, cost = replicated("dgx-h100-x4-ib", 5000, 32, 200 * 2**20, algorithm)
    bound = relaxation_bound(p.graph, cluster, cost)
    for links in ("fcfs", "fair", "none"):
        run = simulate(p, cluster, cost, links=links, order="priority").makespan_s
        assert run >= bound and run >= lower_bound(p.graph, cluster, cost)


def replicated(cluster_name: str, width: int, replicas: int, bucket_bytes: int,
               algorithm: str) -> tuple[Plan, Cluster, CostModel]:
    """An SGD step of a one-hidden-layer MLP ``width`` wide on one device, replicated data
    parallel on the named catalog cluster, and its roofline cost model."""
    from hwmodels import RooflineCost, get_cluster
    from policies.data_parallel import replicate
    from workloads.training import training_graph
    from workloads.zoo.dense import mlp

    cluster = get_cluster(cluster_name)
    step = training_graph(mlp(batch=1, in_features=width, hidden=(width,), classes=10), "sgd")
    d0 = cluster.device_names[0]
    inner = Plan(step, dict.fromkeys(step.names, d0), {d0: step.topological_order()})
    p = replicate(inner, cluster, replicas=replicas, bucket_bytes=bucket_bytes,
                  algorithm=algorithm)
    return p, cluster, RooflineCost(cluster)


def test_an_op_priced_by_its_context_is_bounded_by_its_cheapest() -> None:
    """The calibrated model prices weights cold once a device holds more than its cache:
    with both 20 MiB layers on one device each is cold, apart both are warm (1 us)."""
    import pathlib
    import tempfile

    from hwmodels import dumps
    from hwmodels.calibrated import CalibratedCost
    from hwmodels.predictor import KindModel, OpTimePredictor

    spec = Device("n0", "cpu", {"fp32": 1e11}, 2**34, 2e10)
    path = pathlib.Path(tempfile.mkdtemp()) / "n0.toml"
    path.write_text(dumps(devices=[spec]))
    cluster = Cluster("c", (spec.instance("a"), spec.instance("b")),
                      (Link("a", "b", 1e10, 1e-6),))
    cost = CalibratedCost(cluster, path, profiles=None)
    # the fitted model a calibration would hold: 1 us + 1 ns per cold weight byte
    cost._predictors["n0"] = OpTimePredictor({"class:matmul": KindModel(
        "class:matmul", (1e-6, 0, 0, 0, 0, 0, 0, 1e-9), "", 1, max_correction=0.0)})
    g = Graph("two", [Op(f"m{i}", "linear", "matmul", outputs=(Tensor(f"m{i}", (4,)),),
                         flops=8, bytes_read=16, bytes_written=16, param_bytes=20 * 2**20)
                      for i in range(2)])
    assert min(cost.op_times(g, {"m0": "a", "m1": "a"})) > 0.02  # together: cold
    apart = Plan(g, {"m0": "a", "m1": "b"}, {"a": ["m0"], "b": ["m1"]})
    run = simulate(apart, cluster, cost).makespan_s
    assert run == pytest.approx(1e-6)
    assert lower_bound(g, cluster, cost) <= relaxation_bound(g, cluster, cost) <= run
