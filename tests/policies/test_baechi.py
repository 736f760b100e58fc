"""Baechi's rules, derived by hand on small graphs: how m-ETF and m-SCT break ties, and what
m-SCT reports when its LP fails."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from policies import plan
from policies.listsched import ETF, METF, MSCT
from tests.helpers import FixedCost, op, toy_cluster
from workloads import Graph, PlacementError


def _tied() -> Graph:
    # a and b are ready at once and start at 0 anywhere; b has the longer path to the exit
    # (b -> c), a comes first in the topological order.
    return Graph("tied", [op("a"), op("b"), op("c", ("b",))])


@pytest.mark.parametrize(("policy", "a", "b"), [
    (ETF(), "d1", "d0"),               # level first: b takes the first device
    (ETF(ties="topo"), "d0", "d1"),    # Baechi: a is earlier in topological order
    (METF(), "d0", "d1"),              # m-ETF breaks ties as Baechi does by default
    (METF(ties="level"), "d1", "d0"),
    (MSCT(), "d0", "d1"),
])
def test_ties_follow_the_rule_each_algorithm_publishes(policy, a: str, b: str) -> None:
    cluster = toy_cluster(2)
    cost = FixedCost(cluster, {"a": 1.0, "b": 1.0, "c": 5.0})
    p = plan(_tied(), cluster, policy, cost)
    assert (p.placement["a"], p.placement["b"]) == (a, b)


def test_an_unknown_tie_rule_is_named() -> None:
    with pytest.raises(PlacementError, match="policy 'm_etf': ties must be one of level, "
                                             "topo, got 'rank'"):
        METF(ties="rank")


def test_m_sct_reports_a_failed_lp_instead_of_ignoring_it(monkeypatch) -> None:
    import policies.listsched as listsched

    monkeypatch.setattr(listsched, "linprog",
                        lambda *a, **k: SimpleNamespace(status=2, message="infeasible"))
    cluster = toy_cluster(2)
    p = plan(Graph("g", [op("a"), op("b", ("a",))]), cluster, "m_sct", FixedCost(cluster))
    assert p.info["sct_lp"] == ("failed (infeasible): scheduled without favourite "
                                "children")


def test_m_sct_says_its_lp_was_solved() -> None:
    cluster = toy_cluster(2)
    p = plan(Graph("g", [op("a"), op("b", ("a",))]), cluster, "m_sct", FixedCost(cluster))
    assert p.info["sct_lp"] == "optimal"


def test_m_topo_fills_a_device_up_to_its_even_memory_cap_then_moves_on() -> None:
    # Four ops of 1000 bytes each on two roomy devices: the cap is 4000 / 2 + 1000 = 3000,
    # so the first device takes three and the fourth goes to the next device.
    cluster = toy_cluster(2)
    chain = Graph("chain", [op("a", nbytes=1000), op("b", ("a",), nbytes=1000),
                            op("c", ("b",), nbytes=1000), op("d", ("c",), nbytes=1000)])
    p = plan(chain, cluster, "m_topo", FixedCost(cluster))
    assert [p.placement[n] for n in "abcd"] == ["d0", "d0", "d0", "d1"]


def test_m_topo_never_goes_back_to_an_earlier_device() -> None:
    # After d moved to the second device, e (small enough for the first) stays behind it.
    cluster = toy_cluster(2)
    g = Graph("g", [op("a", nbytes=1000), op("b", ("a",), nbytes=1000),
                    op("c", ("b",), nbytes=1000), op("d", ("c",), nbytes=1000),
                    op("e", ("d",), nbytes=4)])
    p = plan(g, cluster, "m_topo", FixedCost(cluster))
    assert p.placement["e"] == "d1"


def _fan_out() -> Graph:
    """a (1 s) feeds b, c and e (10 s each); a's output takes about 1 s over any link."""
    return Graph("fan", [op("a", nbytes=10**9), op("b", ("a",)), op("c", ("a",)),
                         op("e", ("a",))])


@pytest.mark.parametrize(("transfers", "makespan"), [("channel", 13.0), ("free", 12.0)])
def test_m_etf_queues_transfers_on_each_devices_one_channel(transfers: str,
                                                            makespan: float) -> None:
    # Derived by hand: a on d0 ends at 1; b stays on d0 (starts first, earliest in topo
    # order). c goes to d1: its input is sent on d0's channel over [1, 2]. Under Baechi's
    # channels e's input waits for d0's channel: sent over [2, 3], e on d2 over [3, 13];
    # with transfers all at once e starts at 2 and ends at 12.
    cluster = toy_cluster(3, bandwidth=1e9, latency_s=1e-9)
    cost = FixedCost(cluster, {"a": 1.0, "b": 10.0, "c": 10.0, "e": 10.0})
    p = plan(_fan_out(), cluster, f"m_etf:transfers={transfers}", cost)
    assert [p.placement[x] for x in "abce"] == ["d0", "d0", "d1", "d2"]
    assert p.estimated_makespan_s == pytest.approx(makespan, rel=1e-6)


def test_a_tensor_received_once_serves_every_later_reader_on_that_device() -> None:
    from policies.listsched import Channels
    from policies.problem import Problem

    cluster = toy_cluster(2, bandwidth=1e9, latency_s=1e-9)
    g = Graph("cached", [op("a", nbytes=10**9), op("b", ("a",)), op("c", ("a",))])
    p = Problem(g, cluster, FixedCost(cluster, default=1.0))
    channels = Channels(p)
    where, finish = [0, -1, -1], [1.0, 0.0, 0.0]
    first = channels.ready(1, 1, where, finish, book=True)  # b on d1: a sent over [1, 2]
    assert first == pytest.approx(2.0, rel=1e-6)
    assert channels.free == pytest.approx([2.0, 2.0], rel=1e-6)
    # c on d1 reads the copy already there: no second transfer, channels untouched
    assert channels.ready(2, 1, where, finish, book=True) == first
    assert channels.free == pytest.approx([2.0, 2.0], rel=1e-6)


def _chain4() -> Graph:
    return Graph("c", [op("o0", nbytes=1000)] + [op(f"o{i}", (f"o{i - 1}",), nbytes=1000)
                                                 for i in range(1, 4)])


def test_m_etf_budgets_memory_along_its_own_schedule() -> None:
    # A chain of four ops, each output 1000 bytes, on two devices of 2500 bytes. Along the
    # schedule op i's output is freed once op i+1, its only reader, is scheduled: a device
    # holds at most two outputs (2000 bytes) and the chain stays on d0.
    cluster = toy_cluster(2, memory_bytes=2500, bandwidth=1e12)
    p = plan(_chain4(), cluster, "m_etf", FixedCost(cluster, default=1.0))
    assert [p.placement[f"o{i}"] for i in range(4)] == ["d0"] * 4
    assert p.info["budget"] == "schedule"
    assert p.info["budget_peak_bytes"] == {"d0": 2000, "d1": 0}


def test_the_conservative_budget_refuses_the_chain_the_schedule_budget_fits() -> None:
    # Nothing freed: d0 takes o0 and o1 (2000); o2 goes to d1 with a copy of o1's output
    # (2000 there); o3 needs 1000 more on d1 (3000) or 2000 on d0 (4000): neither fits.
    cluster = toy_cluster(2, memory_bytes=2500, bandwidth=1e12)
    with pytest.raises(PlacementError, match="policy 'm_etf': op 'o3' needs 1000 bytes "
                                             "and fits on no device"):
        plan(_chain4(), cluster, "m_etf:budget=conservative", FixedCost(cluster))


def test_the_schedule_budget_refuses_what_no_order_fits() -> None:
    # 1500 bytes a device: o1 needs its output and o0's (2000) wherever it goes.
    cluster = toy_cluster(2, memory_bytes=1500, bandwidth=1e12)
    g = Graph("c", [op("o0", nbytes=1000), op("o1", ("o0",), nbytes=1000)])
    with pytest.raises(PlacementError, match="policy 'm_etf': op 'o1' needs 1000 bytes "
                                             "and fits on no device"):
        plan(g, cluster, "m_etf", FixedCost(cluster, default=1.0))


def _favourite_waits() -> Graph:
    """P (1 s) makes a 5 s tensor for C and a tiny one for V; U (3 s) runs beside it."""
    from workloads import Op, Tensor

    return Graph("fc", [
        Op("P", "relu", "elementwise",
           outputs=(Tensor("P.small", (1,)), Tensor("P.big", (5 * 10**9 // 4,)))),
        op("U"),
        op("V", ("P.small",)),
        op("C", ("P.big",)),
    ])


@pytest.mark.parametrize(("policy", "order"), [
    # Baechi: when P ends (t=1) its device d0 is C's earliest (1 s against 6 s on d1), so
    # d0 waits for C and starts V only once V is urgent (t=3, its start on d1): C runs at
    # 1, then V at 2 on d0, free again.
    ("m_sct", ["P", "C", "V"]),
    # pinned, C may only go to d0, but V (earlier in topological order) takes d0 at 1
    ("m_sct:favourites=pin", ["P", "V", "C"]),
    ("m_etf", ["P", "V", "C"]),                # no favourites: the tie goes to V
])
def test_the_device_of_a_favourite_childs_parent_waits_for_it(policy: str,
                                                               order: list[str]) -> None:
    cluster = toy_cluster(2, bandwidth=1e9, latency_s=1e-9)
    cost = FixedCost(cluster, {"P": 1.0, "U": 3.0, "V": 1.0, "C": 1.0})
    p = plan(_favourite_waits(), cluster, policy, cost)
    assert list(p.order["d0"]) == order
    assert p.placement["U"] == "d1"


def test_baechis_rounding_lets_a_later_edge_replace_an_earlier_favourite() -> None:
    from policies.listsched import _round_baechi, _round_matching

    edges = [(0, 1), (0, 2), (3, 2)]
    x = [0.9, 0.6, 0.7]
    # Baechi: (0,1) then (0,2) replaces 1 as 0's favourite, then (3,2) takes 2 from 0
    assert _round_baechi(edges, x) == {2: 3}
    # matching: largest first, (0,1) then (3,2); (0,2) conflicts with both
    assert _round_matching(edges, x) == {1: 0, 2: 3}


def test_a_group_goes_where_its_later_ops_fit_too_or_else_where_it_fits() -> None:
    from workloads import Op, Tensor

    def grouped(name: str, inputs: tuple[str, ...]) -> Op:
        return Op(name, "relu", "elementwise", inputs=inputs,
                  outputs=(Tensor(name, (250,)),), attrs={"colocate": "L"})

    # a -> f -> c -> b, f and b one co-placement group, every output 1000 bytes.
    g = Graph("grp", [op("a", nbytes=1000), grouped("f", ("a",)), op("c", ("f",), nbytes=1000),
                      grouped("b", ("c",))])
    roomy = toy_cluster(2, memory_bytes=3000, bandwidth=1e12)
    # f on d0 needs 1000 beside a's 1000, and room for b's 1000 later: 3000 fits
    p = plan(g, roomy, "m_etf", FixedCost(roomy, default=1.0))
    assert set(p.placement.values()) == {"d0"}
    assert p.info["budget_peak_bytes"]["d0"] == 2000  # a, f; then f, c; then c, b
    # at 2500 no device has that room: f goes where it fits, and b fits after it there
    tight = toy_cluster(2, memory_bytes=2500, bandwidth=1e12)
    p = plan(g, tight, "m_etf", FixedCost(tight, default=1.0))
    assert set(p.placement.values()) == {"d0"}
    assert p.info["budget_peak_bytes"]["d0"] == 2000


def test_m_topo_says_what_stops_an_op_beyond_the_free_bytes() -> None:
    # The demo's GPT-2 step on the workstation: the CPU has 206 GB free, yet m-TOPO has
    # left it (its even share was full) and the GPU lacks room for the op with its inputs.
    from hwmodels.registry import get_cluster
    from workloads.training import training_graph
    from workloads.zoo import build_model

    step = training_graph(build_model("gpt2_small", batch=12), "adam")
    with pytest.raises(PlacementError, match=r"op 'h10\.attn\.scores' needs 603979776 bytes "
                                             r"and fits on no device \(bytes free: cpu0 \d+ "
                                             r"\(its even share, \d+ bytes, was full; m_topo "
                                             r"never returns to a device it left\), gpu0 "
                                             r"\d+ \(needs \d+ with its group and inputs\)\)"):
        plan(step, get_cluster("workstation"), "m_topo")
