"""Published scheduling instances, reproduced through the ``table`` cost model."""

from __future__ import annotations

import pytest

from policies import plan
from policies.keys import PredictedFinish
from policies.problem import Problem
from sim import simulate
from tests.helpers import arabnejad_instance, topcuoglu_instance
from tests.sim.oracle import naive_simulate


def test_heft_upward_ranks_match_the_paper() -> None:
    # Topcuoglu et al. 2002, Table 2 (rank_u column).
    graph, cluster, cost = topcuoglu_instance()
    p = Problem(graph, cluster, cost)
    rank = dict(zip(p.names, p.upward_rank(), strict=True))
    expected = {1: 108.0, 2: 77.0, 3: 80.0, 4: 80.0, 5: 69.0, 6: 63.333, 7: 42.667,
                8: 35.667, 9: 44.333, 10: 14.667}
    assert {int(k[1:]): round(v, 3) for k, v in rank.items()} == expected


def test_heft_schedule_length_is_the_papers_80() -> None:
    # Fig. 3(a): schedule length 80 with n1, n3, n5, n7 on P3; n4, n6, n9, n10 on P2;
    # n2, n8 on P1.
    graph, cluster, cost = topcuoglu_instance()
    p = plan(graph, cluster, "heft", cost)
    assert p.estimated_makespan_s == 80.0
    assert {d: sorted(ops, key=lambda n: int(n[1:])) for d, ops in p.order.items()} == {
        "p1": ["n2", "n8"], "p2": ["n4", "n6", "n9", "n10"], "p3": ["n1", "n3", "n5", "n7"]}


def test_peft_optimistic_ranks_match_the_paper() -> None:
    # Arabnejad and Barbosa 2014, Table 2 (rank_oct: each task's mean optimistic cost).
    graph, cluster, cost = arabnejad_instance()
    p = Problem(graph, cluster, cost)
    rank = p.optimistic_costs.mean(axis=1)
    expected = {1: 72.7, 2: 41.0, 3: 37.0, 4: 43.7, 5: 31.0, 6: 41.7, 7: 17.0, 8: 20.7,
                9: 16.3, 10: 0.0}
    assert {int(k[1:]): round(float(v), 1) for k, v in zip(p.names, rank, strict=True)} \
        == expected


def test_peft_schedule_length_is_the_papers_122() -> None:
    # PEFT: rank_oct priorities, each task where its finish plus optimistic cost is least;
    # the paper's schedule takes 122 with five tasks on P1, three on P2 and two on P3.
    graph, cluster, cost = arabnejad_instance()
    p = Problem(graph, cluster, cost)
    placed = PredictedFinish().decode(p, p.optimistic_costs.mean(axis=1).tolist())
    assert placed.estimated_makespan_s == 122.0 and placed.order is not None
    assert {d: len(ops) for d, ops in placed.order.items()} == {"p1": 5, "p2": 3, "p3": 2}


def test_the_same_plan_under_link_contention_takes_longer() -> None:
    # The paper assumes every transfer runs at once; the simulator serialises transfers
    # sharing a copy engine or a link direction, so the same plan runs longer (never
    # shorter), exactly as long as the textbook simpy model of the same rules says.
    graph, cluster, cost = topcuoglu_instance()
    p = plan(graph, cluster, "heft", cost)
    result = simulate(p, cluster, cost)
    assert result.makespan_s > 80.0
    assert result.makespan_s == pytest.approx(naive_simulate(p, cluster, cost).makespan_s)


def test_cpop_schedule_length_is_the_papers_86() -> None:
    # Fig. 3(b): CPOP's schedule length is 86; its critical path n1-n2-n9-n10 runs on P2.
    graph, cluster, cost = topcuoglu_instance()
    p = plan(graph, cluster, "cpop", cost)
    assert p.estimated_makespan_s == 86.0
    assert {"n1", "n2", "n9", "n10"} <= set(p.order["p2"])


@pytest.mark.parametrize(("policy", "paper"), [("heft", 80.0), ("cpop", 86.0)])
def test_without_contention_the_simulator_replays_the_papers_schedule(policy, paper) -> None:
    graph, cluster, cost = topcuoglu_instance()
    p = plan(graph, cluster, policy, cost)
    assert simulate(p, cluster, cost, links="none").makespan_s == paper


@pytest.mark.parametrize("policy", ["heft", "cpop", "etf", "m_etf:transfers=free",
                                    "m_sct:transfers=free"])
def test_without_contention_the_simulator_reproduces_each_list_schedulers_estimate(
        policy) -> None:
    from hwmodels import RooflineCost, get_cluster
    from policies.testing import random_dag

    for seed in range(6):
        for name in ("hetero-box", "dgx1-v100"):
            graph, cluster = random_dag(16 + seed, seed=seed), get_cluster(name)
            cost = RooflineCost(cluster)
            p = plan(graph, cluster, policy, cost)
            replay = simulate(p, cluster, cost, links="none").makespan_s
            assert replay == pytest.approx(p.estimated_makespan_s, rel=1e-12)
            assert simulate(p, cluster, cost).makespan_s >= replay * (1 - 1e-12)
