from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import RooflineCost, get_cluster
from policies import POLICIES, Plan, plan
from tests.helpers import FixedCost, chain, op, toy_cluster
from workloads import Graph, PlacementError, build_model


def test_op_on_a_missing_device_is_rejected_naming_op_and_device() -> None:
    g = chain(2)
    p = Plan(g, {"op0": "d0", "op1": "d9"}, {"d0": ["op0"], "d9": ["op1"]})
    with pytest.raises(PlacementError,
                       match=r"op 'op1' is placed on device 'd9', which cluster 'toy' lacks"):
        p.validate(toy_cluster(2))


def test_op_ordered_before_its_producer_is_rejected() -> None:
    g = chain(2)
    with pytest.raises(PlacementError, match=r"op 'op1' on device 'd0' is ordered before its "
                                             r"producer 'op0'"):
        Plan(g, {"op0": "d0", "op1": "d0"}, {"d0": ["op1", "op0"]})


def test_cross_device_deadlock_is_rejected() -> None:
    # a0 -> b1 and b0 -> a1; d0 runs a1 before a0's partner... orders that wait on each other
    g = Graph("x", [op("a0"), op("b0"), op("a1", ("b0",)), op("b1", ("a0",))])
    placement = {"a0": "d0", "a1": "d0", "b0": "d1", "b1": "d1"}
    with pytest.raises(PlacementError, match="the device orders deadlock"):
        Plan(g, placement, {"d0": ["a1", "a0"], "d1": ["b1", "b0"]})


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
