"""The compiled list scheduler: its order against networkx's lexicographic topological sort,
its schedules against the interpreted scheduler's to the bit (heterogeneous and identical
devices, co-placement groups, other jobs' load, ops some devices cannot run, transfers
priced per tensor), and the published schedule of Topcuoglu et al."""

from __future__ import annotations

import math
import zlib

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, RooflineCost, get_cluster
from policies import compiled
from policies.keys import PredictedFinish
from policies.listsched import CPOP, HEFT, Timeline, ready_order
from policies.load import ClusterLoad
from policies.problem import Problem, schedule_length
from policies.testing import random_dag
from tests.helpers import topcuoglu_instance
from workloads import Graph, Op, build_model, training_graph
from workloads.errors import PlacementError, UnsupportedOp

STEPS = {name: training_graph(build_model(name, batch=2), "adam")
         for name in ("mlp", "lenet5")}


class _PerTensor(RooflineCost):
    """The roofline's transfers scaled per tensor name: priced by tensor, not by size."""

    name = "per-tensor"

    def tensor_transfer_time(self, tensor: str, nbytes: int, src: str, dst: str) -> float:
        scale = 1 + zlib.crc32(tensor.encode()) % 7 / 3
        return scale * super().tensor_transfer_time(tensor, nbytes, src, dst)


class _Asymmetric(RooflineCost):
    """The roofline's transfers dearer the later their destination in the cluster: a
    transfer's time depends on its direction."""

    name = "asymmetric"

    def tensor_transfer_time(self, tensor: str, nbytes: int, src: str, dst: str) -> float:
        scale = 1 + self.cluster.device_names.index(dst) / 4
        return scale * super().tensor_transfer_time(tensor, nbytes, src, dst)


class _Patchy(RooflineCost):
    """The roofline, but about a third of the ops cannot run on the first device."""

    name = "patchy"

    def op_time(self, op: Op, device: str) -> float:
        if device == self.cluster.device_names[0] and zlib.crc32(op.name.encode()) % 3 == 0:
            raise UnsupportedOp(f"patchy: {op.name} not on {device}")
        return super().op_time(op, device)


def _priorities(p: Problem, seed: int, ties: bool) -> list[float]:
    rng = np.random.default_rng(seed)
    if ties:  # few values: many ready ops tie and go by index
        return rng.integers(0, 3, p.n).astype(float).tolist()
    return (np.asarray(p.upward_rank()) * np.exp(rng.normal(0, 0.5, p.n))).tolist()


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    cluster: Cluster = get_cluster(draw(st.sampled_from(
        ["workstation", "hetero-box", "quad-v100-nvlink", "dgx1-v100"])))
    if draw(st.booleans()):
        graph: Graph = STEPS[draw(st.sampled_from(sorted(STEPS)))]
        cost = draw(st.sampled_from([RooflineCost, _PerTensor, _Asymmetric]))(cluster)
    else:
        graph = random_dag(draw(st.integers(1, 40)), seed=draw(st.integers(0, 10**6)),
                           edge_probability=draw(st.sampled_from([0.05, 0.2, 0.5])))
        cost = draw(st.sampled_from([RooflineCost, _PerTensor, _Asymmetric,
                                     _Patchy]))(cluster)
    busy = {d: draw(st.sampled_from([0.0, 1e-5, 1e-3])) for d in cluster.device_names}
    return Problem(graph, cluster, cost, ClusterLoad(busy))


@settings(max_examples=60, deadline=None)
@given(problems(), st.integers(0, 2**32 - 1), st.booleans())
def test_the_order_is_networkx_lexicographic_topological_sort(p: Problem, seed: int,
                                                               ties: bool) -> None:
    priority = _priorities(p, seed, ties)
    g = nx.DiGraph()
    g.add_nodes_from(i for i in range(p.n) if not p.floating[i])
    g.add_edges_from((s, i) for i in range(p.n) for s, _ in p.preds[i]
                     if not p.floating[s])
    expected = list(nx.lexicographical_topological_sort(g, key=lambda i: (-priority[i], i)))
    assert ready_order(p, priority) == expected


@settings(max_examples=80, deadline=None)
@given(problems(), st.integers(0, 2**32 - 1), st.booleans(),
       st.sampled_from([HEFT, PredictedFinish]))
def test_the_compiled_schedule_is_the_interpreted_one(p: Problem, seed: int, ties: bool,
                                                      scheduler: type[HEFT]) -> None:
    chooser = scheduler()
    priority = _priorities(p, seed, ties)
    order = ready_order(p, priority)
    fast = chooser.decode(p, priority, order)
    slow = chooser.decode_interpreted(p, priority, order, chooser.prepare(p, priority))
    assert fast.devices == slow.devices
    assert fast.order == slow.order
    assert fast.estimated_makespan_s == slow.estimated_makespan_s  # to the bit
    # a search screening by the estimate takes it before the schedule (made on demand)
    estimate, placed = chooser.decode_estimate(p, priority, order)
    schedule = placed()
    assert estimate == slow.estimated_makespan_s
    assert (schedule.devices, schedule.order) == (slow.devices, slow.order)


def test_a_cluster_too_large_to_tabulate_runs_interpreted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = get_cluster("hetero-box")
    p = Problem(STEPS["lenet5"], c, RooflineCost(c))
    expected = HEFT().decode(p, p.upward_rank())
    monkeypatch.setattr(compiled, "MAX_TABLE", 0)
    p = Problem(STEPS["lenet5"], c, RooflineCost(c))
    assert compiled.decode(p, np.asarray(ready_order(p, p.upward_rank()))) is None
    assert HEFT().decode(p, p.upward_rank()) == expected


class _Last(HEFT):
    """HEFT's order, every op on the last device it can run on: a choice of its own."""

    def choose(self, p: Problem, op: int, ready: list[float], lines: list[Timeline],
               state: object = None) -> tuple[float, int]:
        d = int(np.flatnonzero(np.isfinite(p.times[op]))[-1])
        return lines[d].earliest_start(ready[d], float(p.times[op, d])), d


def test_a_scheduler_with_its_own_choice_runs_it() -> None:
    c = get_cluster("workstation")
    p = Problem(STEPS["mlp"], c, RooflineCost(c))
    placed = _Last().decode(p, p.upward_rank())
    assert set(placed.devices.values()) == {c.device_names[-1]}
    assert HEFT().decode(p, p.upward_rank()).devices != placed.devices  # not HEFT's


class _AheadOnly(HEFT):
    """An ``ahead`` term but HEFT's own choice, which never reads it."""

    def ahead(self, p: Problem, state: object) -> np.ndarray:
        return np.where(np.arange(len(p.devices)) == 0, 1e3, 0.0) * np.ones((p.n, 1))


def test_an_ahead_term_without_its_choice_is_not_compiled_in() -> None:
    c = get_cluster("workstation")
    p = Problem(STEPS["mlp"], c, RooflineCost(c))
    assert _AheadOnly().decode(p, p.upward_rank()) == HEFT().decode(p, p.upward_rank())


def test_a_time_that_is_not_a_number_schedules_as_the_interpreted_loop() -> None:
    c = get_cluster("workstation")
    p = Problem(random_dag(3, seed=0, edge_probability=0.0), c, RooflineCost(c))
    p.times[:] = [[5.0, 9.0], [np.nan, np.nan], [1.0, 1.0]]
    priority, order = [3.0, 2.0, 1.0], [0, 1, 2]
    assert compiled.decode(p, np.asarray(order)) is None
    assert HEFT().decode(p, priority, order) == \
        HEFT().decode_interpreted(p, priority, order, None)


def test_bad_priorities_and_orders_are_refused() -> None:
    c = get_cluster("workstation")
    p = Problem(random_dag(3, seed=0), c, RooflineCost(c))
    with pytest.raises(PlacementError, match=r"^ready order: op 'o1' has priority NaN, "
                                             r"expected a number$"):
        ready_order(p, [1.0, float("nan"), 0.0])
    with pytest.raises(ValueError, match=r"^ready order: expected 3 priorities, got 2$"):
        ready_order(p, [1.0, 0.0])
    with pytest.raises(ValueError, match=r"^decode: expected an order of distinct ops 0 "
                                         r"to 2$"):
        compiled.decode(p, np.asarray([0, 0, 1]))


def test_the_order_alone_prices_no_transfer() -> None:
    c = get_cluster("hetero-box")
    p = Problem(STEPS["lenet5"], c, RooflineCost(c))
    ready_order(p, p.upward_rank())
    assert "comm_table" not in vars(p)  # built on the first schedule only


def test_cpop_keeps_its_critical_path_on_one_device() -> None:
    graph, cluster, cost = topcuoglu_instance()
    p = Problem(graph, cluster, cost)
    placed = CPOP().decode(p, CPOP().priorities(p))
    assert placed.estimated_makespan_s == 86.0  # Topcuoglu et al. 2002, Fig. 3(b)


def test_it_gives_the_papers_heft_schedule_of_80() -> None:
    graph, cluster, cost = topcuoglu_instance()
    p = Problem(graph, cluster, cost)
    order = np.asarray(ready_order(p, p.upward_rank()))
    found = compiled.decode(p, order)
    assert found is not None
    where, _, finish = found
    assert finish.max() == 80.0  # Topcuoglu et al. 2002, Fig. 3(a)
    on_p3 = {p.names[i] for i, d in enumerate(where.tolist()) if p.devices[d] == "p3"}
    assert on_p3 == {"n1", "n3", "n5", "n7"}


@settings(max_examples=60, deadline=None)
@given(problems(), st.integers(0, 2**32 - 1))
def test_the_compiled_schedule_length_is_the_interpreted_one(p: Problem, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # each op on a device that runs it, so that the lengths are finite
    where = np.asarray([rng.choice(np.flatnonzero(np.isfinite(p.times[i])))
                        for i in range(p.n)], dtype=np.int64)
    g = nx.DiGraph()
    g.add_nodes_from(range(p.n))
    g.add_edges_from((s, i) for i in range(p.n) for s, _ in p.preds[i])
    key = rng.random(p.n)
    sequence = list(nx.lexicographical_topological_sort(g, key=key.__getitem__))
    expected = schedule_length(p, where.tolist(), sequence)
    assert math.isfinite(expected)
    assert compiled.schedule_length(p, where, np.asarray(sequence)) == expected  # to the bit


def test_a_schedule_length_too_large_to_tabulate_is_none(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    c = get_cluster("hetero-box")
    monkeypatch.setattr(compiled, "MAX_TABLE", 0)
    p = Problem(STEPS["lenet5"], c, RooflineCost(c))
    assert compiled.schedule_length(p, np.zeros(p.n), np.arange(p.n)) is None


def test_a_schedule_length_of_devices_or_ops_out_of_range_is_refused() -> None:
    c = get_cluster("hetero-box")
    p = Problem(STEPS["lenet5"], c, RooflineCost(c))
    order = np.arange(p.n)
    for where, sequence in ((np.full(p.n, len(p.devices)), order), (np.zeros(p.n - 1), order),
                            (np.full(p.n, -1), order), (np.zeros(p.n), order + 1)):
        with pytest.raises(ValueError, match=r"^schedule length: expected "):
            compiled.schedule_length(p, where, sequence)
