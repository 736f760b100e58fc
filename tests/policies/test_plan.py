from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import RooflineCost, get_cluster
from policies import POLICIES, Plan, plan
from policies.plans import split_by_device
from tests.helpers import FixedCost, chain, op, toy_cluster
from workloads import Graph, PlacementError, build_model


def test_op_on_a_missing_device_is_rejected_naming_op_and_device() -> None:
    g = chain(2)
    p = Plan(g, {"op0": "d0", "op1": "d9"}, {"d0": ["op0"], "d9": ["op1"]})
    with pytest.raises(PlacementError,
                       match=r"op 'op1' is placed on device 'd9', which cluster 'toy' lacks"):
        p.validate(toy_cluster(2))


#: Priorities a plan may carry besides none: all alike, and the graph's own order (which
#: every edge follows, but not every device's order).
_ALIKE, _GRAPH_ORDER = "alike", "graph order"


def _priorities_of(g: Graph, kind: str | None) -> dict[str, float] | None:
    names = g.topological_order()
    if kind is None:
        return None
    return dict.fromkeys(names, 1.0) if kind == _ALIKE else {
        n: float(len(names) - k) for k, n in enumerate(names)}


@pytest.mark.parametrize("priority", [None, _ALIKE, _GRAPH_ORDER])
def test_op_ordered_before_its_producer_is_rejected(priority: str | None) -> None:
    g = chain(2)
    with pytest.raises(PlacementError, match=r"op 'op1' on device 'd0' is ordered before its "
                                             r"producer 'op0'"):
        Plan(g, {"op0": "d0", "op1": "d0"}, {"d0": ["op1", "op0"]},
             priority=_priorities_of(g, priority))


@pytest.mark.parametrize("priority", [None, _ALIKE, _GRAPH_ORDER])
def test_cross_device_deadlock_is_rejected(priority: str | None) -> None:
    # a0 -> b1 and b0 -> a1; d0 runs a1 before a0's partner... orders that wait on each other
    g = Graph("x", [op("a0"), op("b0"), op("a1", ("b0",)), op("b1", ("a0",))])
    placement = {"a0": "d0", "a1": "d0", "b0": "d1", "b1": "d1"}
    with pytest.raises(PlacementError, match="the device orders deadlock"):
        Plan(g, placement, {"d0": ["a1", "a0"], "d1": ["b1", "b0"]},
             priority=_priorities_of(g, priority))


def test_unplaced_and_misordered_ops_are_named() -> None:
    g = chain(2)
    with pytest.raises(PlacementError, match="op 'op1' is placed on no device"):
        Plan(g, {"op0": "d0"}, {"d0": ["op0"]})
    with pytest.raises(PlacementError, match="op 'op1' on device 'd0' is missing"):
        Plan(g, {"op0": "d0", "op1": "d0"}, {"d0": ["op0"]})


def test_a_plan_splitting_a_co_placement_group_is_refused() -> None:
    from workloads import training_graph

    step = training_graph(build_model("mlp"))
    placement = dict.fromkeys(step.topological_order(), "gpu0") | {"fc2.backward": "gpu1"}
    order = {"gpu0": [n for n in step.topological_order() if n != "fc2.backward"],
             "gpu1": ["fc2.backward"]}
    with pytest.raises(PlacementError, match=r"plan of policy '': co-placement group 'fc2' "
                                             "must share one device, got fc2.weights on gpu0, "
                                             "fc2.backward on gpu1"):
        Plan(step, placement, order)


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_a_plan_is_refused_exactly_when_a_group_spans_two_devices(rnd) -> None:  # type: ignore[no-untyped-def]
    from workloads import training_graph

    step = training_graph(build_model("mlp"))
    names = list(step.topological_order())
    # each group on one device, then a few ops moved at random
    home = {group: rnd.choice(["gpu0", "gpu1"]) for group in step.groups}
    of = {n: group for group, ops in step.groups.items() for n in ops}
    placement = {n: home[of[n]] if n in of else rnd.choice(["gpu0", "gpu1"]) for n in names}
    for n in rnd.sample(names, rnd.randint(0, 3)):
        placement[n] = rnd.choice(["gpu0", "gpu1"])
    order = {d: [n for n in names if placement[n] == d] for d in ("gpu0", "gpu1")}
    split = [group for group, ops in step.groups.items()
             if len({placement[n] for n in ops}) > 1]
    if not split:
        Plan(step, placement, order)
    else:
        with pytest.raises(PlacementError, match=f"co-placement group {split[0]!r} must "
                                                 "share one device"):
            Plan(step, placement, order)


def test_an_op_on_a_device_without_an_order_is_named_in_a_graph_with_groups() -> None:
    from workloads import training_graph

    step = training_graph(build_model("mlp"))
    names = list(step.topological_order())
    placement = dict.fromkeys(names, "gpu0") | {"loss": "gpu1"}
    with pytest.raises(PlacementError, match="op 'loss' on device 'gpu1' is missing from "
                                             "that device's order"):
        Plan(step, placement, {"gpu0": [n for n in names if n != "loss"]})
    placement["fc1.update"] = "gpu1"  # a group split too: named first
    with pytest.raises(PlacementError, match="co-placement group 'fc1' must share one"):
        Plan(step, placement, {"gpu0": [n for n in names if placement[n] == "gpu0"]})


def test_priorities_no_float_holds_leave_the_full_check() -> None:
    g = Graph("x", [op("a"), op("b")])
    p = Plan(g, {"a": "d0", "b": "d0"}, {"d0": ["b", "a"]}, priority={"a": 10**400, "b": 0})
    assert p.order == {"d0": ("b", "a")}


def test_plan_refuses_a_policy_that_ignores_groups() -> None:
    from policies import Placement, PlacementPolicy
    from workloads import training_graph

    class Alternate(PlacementPolicy):
        name = "alternate"

        def place(self, graph, cluster, cost):  # type: ignore[no-untyped-def]
            names = graph.topological_order()
            return Placement({n: cluster.device_names[i % 2] for i, n in enumerate(names)})

    with pytest.raises(PlacementError, match="plan of policy 'alternate': co-placement group"):
        plan(training_graph(build_model("mlp")), get_cluster("quad-v100-nvlink"), Alternate())


def test_transfers_are_one_per_tensor_and_destination() -> None:
    g = Graph("fan", [op("x", nbytes=40), op("a", ("x",)), op("b", ("x",)), op("c", ("x",))])
    p = Plan(g, {"x": "d0", "a": "d1", "b": "d1", "c": "d0"},
             {"d0": ["x", "c"], "d1": ["a", "b"]})
    assert [(t.tensor, t.dst, t.consumers, t.nbytes) for t in p.transfers] == [
        ("x", "d1", ("a", "b"), 40)]


@pytest.mark.parametrize("policy", ["single_device", "round_robin", "heft"])
@pytest.mark.parametrize("cluster", ["workstation", "quad-v100-nvlink"])
def test_every_policy_gives_a_valid_serialisable_plan(policy: str, cluster: str) -> None:
    c = get_cluster(cluster)
    g = build_model("resnet50", batch=2)
    p = plan(g, c, policy)
    assert set(p.placement) == {o.name for o in g}
    assert set(p.placement.values()) <= set(c.device_names)
    assert Plan.from_json(p.to_json()) == p
    assert plan(g, c, policy).placement == p.placement  # deterministic


def test_single_device_picks_the_fastest_device() -> None:
    c = get_cluster("workstation")
    p = plan(build_model("resnet50", batch=8), c, "single_device")
    assert set(p.placement.values()) == {"gpu0"}


def test_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(Exception, match=r"unknown policy 'magic'; expected one of: .*heft"):
        plan(chain(2), toy_cluster(2), "magic")


def test_heft_matches_a_hand_schedule() -> None:
    # fork-join: x -> (a, b) -> y, all ops 1 s, transfers of 4 bytes at 1 B/s + 1 s latency.
    # Alone: 4 s. Splitting a and b costs 2 transfers of 5 s each: HEFT keeps one device.
    g = Graph("fj", [op("x"), op("a", ("x",)), op("b", ("x",)), op("y", ("a", "b"))])
    c = toy_cluster(2, bandwidth=1.0, latency_s=1.0)
    p = plan(g, c, "heft", FixedCost(c))
    assert len(set(p.placement.values())) == 1
    # With free communication and long branches, HEFT runs the branches in parallel.
    fast = toy_cluster(2, bandwidth=1e12, latency_s=0.0)
    p = plan(g, fast, "heft", FixedCost(fast, {"a": 10.0, "b": 10.0}))
    assert p.placement["a"] != p.placement["b"]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 4), st.integers(2, 30), st.randoms(use_true_random=False))
def test_policies_place_random_dags_validly(n_dev: int, n_ops: int, rnd) -> None:
    ops = [op(f"o{i}", tuple(f"o{j}" for j in range(i) if rnd.random() < 0.2), nbytes=400)
           for i in range(n_ops)]
    g, c = Graph("r", ops), toy_cluster(n_dev)
    for name in POLICIES.names():
        p = plan(g, c, name, RooflineCost(c))
        assert set(p.placement) == {o.name for o in g}


@st.composite
def placed_dags(draw: st.DrawFn) -> tuple[Graph, dict[str, str], dict[str, list[str]]]:
    """A random DAG (ops listed in or out of topological order), a random placement on up
    to three devices and per-device orders drawn from a random topological order."""
    import networkx as nx

    n = draw(st.integers(1, 16))
    ops = [op(f"o{i}", tuple(dict.fromkeys(
        draw(st.lists(st.sampled_from([f"o{j}" for j in range(i)]), max_size=3)) if i else [])))
           for i in range(n)]
    g = Graph("r", reversed(ops) if draw(st.booleans()) else ops)
    placement = {o.name: f"d{draw(st.integers(0, 2))}" for o in g}
    keys = {o.name: draw(st.integers(0, 5)) for o in g}
    ranked = nx.lexicographical_topological_sort(g.to_networkx(), key=keys.__getitem__)
    order: dict[str, list[str]] = {}
    for name in ranked:
        order.setdefault(placement[name], []).append(name)
    return g, placement, order


@settings(max_examples=80, deadline=None)
@given(placed_dags())
def test_transfers_match_a_derivation_from_the_edges(case) -> None:  # type: ignore[no-untyped-def]
    g, placement, order = case
    expected: dict[tuple[str, str], list[str]] = {}
    for edge in g.edges():
        if placement[edge.src] != placement[edge.dst]:
            expected.setdefault((edge.tensor.name, placement[edge.dst]), []).append(edge.dst)
    p = Plan(g, placement, order)
    assert [(t.tensor, t.dst, list(t.consumers)) for t in p.transfers] == [
        (tensor, dst, consumers) for (tensor, dst), consumers in expected.items()]
    assert all(t.src == placement[t.producer] for t in p.transfers)


@settings(max_examples=80, deadline=None)
@given(placed_dags(), st.randoms(use_true_random=False))
def test_orders_are_accepted_exactly_when_they_cannot_deadlock(case, rnd) -> None:  # type: ignore[no-untyped-def]
    import itertools

    import networkx as nx

    g, placement, order = case
    for ops in order.values():  # shuffle one device's order: it may now wait on a cycle
        if len(ops) > 1 and rnd.random() < 0.5:
            rnd.shuffle(ops)
    union = g.to_networkx()
    for ops in order.values():
        union.add_edges_from(itertools.pairwise(ops))
    acyclic = nx.is_directed_acyclic_graph(union)
    names = list(g.topological_order())
    # priorities a plan may carry: none, all alike, any (ties too), one NaN, the graph's order
    # (every edge follows it, the devices' orders may not), and where the orders cannot
    # deadlock one order they all follow (which spares the full check)
    priorities: list[dict[str, float] | None] = [
        None, dict.fromkeys(names, 1.0), {n: float(rnd.randint(0, 3)) for n in names},
        {n: rnd.random() for n in names} | {names[0]: float("nan")},
        {n: float(len(names) - k) for k, n in enumerate(names)}]
    if acyclic:
        ranked = list(nx.topological_sort(union))
        priorities.append({n: float(len(ranked) - k) for k, n in enumerate(ranked)})
    for priority in priorities:
        if acyclic:
            Plan(g, placement, order, priority=priority)
        else:
            with pytest.raises(PlacementError, match=r"ordered before its producer|deadlock"):
                Plan(g, placement, order, priority=priority)


def test_orders_that_list_an_op_wrongly_are_named() -> None:
    g = chain(2)
    with pytest.raises(PlacementError, match="op 'op1' is placed on device 'd1' but ordered "
                                             "on device 'd0'"):
        Plan(g, {"op0": "d0", "op1": "d1"}, {"d0": ["op0", "op1"], "d1": ["op1"]})
    with pytest.raises(PlacementError, match="op 'op0' appears twice in the order of device "
                                             "'d0'"):
        Plan(g, {"op0": "d0", "op1": "d0"}, {"d0": ["op0", "op0", "op1"]})
    with pytest.raises(PlacementError, match="device 'd0' orders op 'ghost', which is not in "
                                             "graph 'chain'"):
        Plan(g, {"op0": "d0", "op1": "d0"}, {"d0": ["op0", "op1", "ghost"]})
    with pytest.raises(PlacementError, match="op 'ghost' is placed on device 'd1' but is not "
                                             "in graph 'chain'"):
        Plan(g, {"op0": "d0", "op1": "d0", "ghost": "d1"}, {"d0": ["op0", "op1"]})


@st.composite
def sequenced_dags(draw: st.DrawFn) -> tuple[Graph, list[str], dict[str, str]]:
    """A random DAG (its ops listed in or out of topological order), one random
    topological order of its ops, and a random placement on up to three devices."""
    import networkx as nx

    g, placement, _ = draw(placed_dags())
    keys = {o.name: draw(st.integers(0, 5)) for o in g}
    ranked = list(nx.lexicographical_topological_sort(g.to_networkx(), key=keys.__getitem__))
    return g, ranked, placement


_DEVICES = ("d0", "d1", "d2")


def _arrays(g: Graph, ranked: list[str], placement: dict[str, str]
            ) -> tuple[np.ndarray, np.ndarray]:
    a = g.arrays
    return (np.array([_DEVICES.index(placement[n]) for n in a.names]),
            np.array([a.position[n] for n in ranked]))


@settings(max_examples=80, deadline=None)
@given(sequenced_dags())
def test_a_plan_from_arrays_is_the_plan_its_lists_make(case) -> None:  # type: ignore[no-untyped-def]
    g, ranked, placement = case
    expected = Plan(g, placement, split_by_device(ranked, placement), policy="p",
                    priority={n: float(len(ranked) - k) for k, n in enumerate(ranked)})
    codes, sequence = _arrays(g, ranked, placement)
    got = Plan.from_sequence(g, _DEVICES, codes, sequence, policy="p")
    # what a search's evaluator reads, before any dict is worked out
    assert got.devices == expected.devices
    assert (got.device_codes(_DEVICES) == expected.device_codes(_DEVICES)).all()
    for mine, theirs in zip(got.order_positions(_DEVICES), expected.order_positions(_DEVICES),
                            strict=True):
        assert mine.tolist() == theirs.tolist()
    assert got.transfers == expected.transfers
    assert not {"placement", "order", "priority"} & set(vars(got))  # none worked out yet
    assert got == expected
    # then the dicts, in the same order (a plan's JSON lists them so)
    for name in ("placement", "order", "priority"):
        assert list(getattr(got, name).items()) == list(getattr(expected, name).items())
    assert got.to_json() == expected.to_json()


@settings(max_examples=30, deadline=None)
@given(sequenced_dags())
def test_a_pickled_plan_is_the_same_plan(case) -> None:  # type: ignore[no-untyped-def]
    """Made from lists or from arrays (its dicts not yet worked out), a plan comes back from
    pickle (as a process pool or a Dask worker sends it) equal, with the same JSON."""
    import pickle

    g, ranked, placement = case
    listed = Plan(g, placement, split_by_device(ranked, placement), policy="p")
    codes, sequence = _arrays(g, ranked, placement)
    for p in (listed, Plan.from_sequence(g, _DEVICES, codes, sequence, policy="p")):
        p.device_codes(_DEVICES), p.order_positions(_DEVICES)  # the caches pickled too
        back = pickle.loads(pickle.dumps(p))
        assert back == p
        assert back.to_json() == p.to_json()
        shared = [back.device_codes(_DEVICES), *back.order_positions(_DEVICES)]
        assert (shared[0] == p.device_codes(_DEVICES)).all()
        assert not any(a.flags.writeable for a in shared)  # shared by every caller


@settings(max_examples=30, deadline=None)
@given(st.randoms(use_true_random=False))
def test_arrays_that_split_a_group_are_refused_as_the_lists_would_be(rnd) -> None:  # type: ignore[no-untyped-def]
    from workloads import training_graph

    step = training_graph(build_model("mlp"))
    a = step.arrays
    codes = np.array([rnd.randint(0, 1) for _ in a.names])
    placement = {n: ("gpu0", "gpu1")[c] for n, c in zip(a.names, codes.tolist(), strict=True)}
    ranked = list(step.topological_order())
    sequence = np.array([a.position[n] for n in ranked])
    split = [group for group, ops in step.groups.items()
             if len({placement[n] for n in ops}) > 1]
    if not split:
        got = Plan.from_sequence(step, ("gpu0", "gpu1"), codes, sequence)
        assert got == Plan(step, placement, split_by_device(ranked, placement), priority={
            n: float(len(ranked) - k) for k, n in enumerate(ranked)})
        assert got.to_json() == Plan.from_json(got.to_json()).to_json()
        return
    with pytest.raises(PlacementError, match=f"co-placement group {split[0]!r} must share "
                                             "one device"):
        Plan.from_sequence(step, ("gpu0", "gpu1"), codes, sequence)


def test_arrays_out_of_order_or_range_are_one_line_naming_what_is_wrong() -> None:
    g = chain(3)
    with pytest.raises(PlacementError, match=r"op 'op1' on device 'd0' is ordered before its "
                                             r"producer 'op0'"):
        Plan.from_sequence(g, ("d0",), np.zeros(3, int), np.array([1, 0, 2]))
    with pytest.raises(PlacementError, match=r"^plan from arrays of graph 'chain': op 2 has "
                                             r"device index 4, expected 0 to 1$"):
        Plan.from_sequence(g, ("d0", "d1"), np.array([0, 1, 4]), np.arange(3))
    with pytest.raises(PlacementError, match=r"the order lists op index -1, expected 0 to 2$"):
        Plan.from_sequence(g, ("d0",), np.zeros(3, int), np.array([0, 1, -1]))
    with pytest.raises(PlacementError, match=r"expected a device index for each of 3 ops, "
                                             r"got 4$"):
        Plan.from_sequence(g, ("d0",), np.zeros(4, int), np.arange(3))
    with pytest.raises(PlacementError, match="op 'op2' is placed on no device"):
        Plan.from_sequence(g, ("d0",), np.zeros(2, int), np.arange(3))
    with pytest.raises(PlacementError, match="op 'op2' on device 'd0' is missing"):
        Plan.from_sequence(g, ("d0",), np.zeros(3, int), np.array([0, 1]))
    with pytest.raises(PlacementError, match=r"expected whole-number indices, got an array "
                                             r"of float64$"):
        Plan.from_sequence(g, ("d0", "d1"), np.array([0.9, 1.7, 0.2]), np.arange(3))
    with pytest.raises(PlacementError, match=r"got an array of bool$"):
        Plan.from_sequence(g, ("d0", "d1"), np.zeros(3, int), np.array([True, False, True]))
    with pytest.raises(PlacementError, match=r"op 0 has device index 0, expected none: no "
                                             r"devices given$"):
        Plan.from_sequence(g, (), np.zeros(3, int), np.arange(3))
    with pytest.raises(PlacementError, match="op 'op0' is placed on no device"):
        Plan.from_sequence(g, ("",), np.zeros(3, int), np.arange(3))


def test_arrays_naming_a_device_twice_make_the_plan_the_lists_make() -> None:
    g = chain(3)
    got = Plan.from_sequence(g, ("d0", "d0"), np.array([0, 1, 0]), np.arange(3))
    assert got.order == {"d0": ("op0", "op1", "op2")} and got.devices == ("d0",)
