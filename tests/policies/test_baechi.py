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
