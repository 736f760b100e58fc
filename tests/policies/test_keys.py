"""The search over list-scheduling priorities (``mcmc``'s keyed phase): its decoder against
HEFT's published schedule and the contention-free model, its budget, its bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import Cluster, RooflineCost, get_cluster
from policies import plan
from policies.keys import SCREEN, PredictedFinish, key_search
from policies.listsched import HEFT
from policies.plans import Plan
from policies.problem import Problem, model_makespan
from policies.search import KEYED_FROM, MCMC, contention_free
from policies.testing import random_dag
from sim import evaluator, simulate
from tests.helpers import recording, table_instance, topcuoglu_instance
from tests.policies.test_exact import brute_force_makespan, instance
from workloads import Graph, PlacementError


def test_the_upward_ranks_decode_to_the_papers_schedule_of_80() -> None:
    graph, cluster, cost = topcuoglu_instance()
    p = Problem(graph, cluster, cost)
    placed = HEFT().decode(p, p.upward_rank())
    assert placed.estimated_makespan_s == 80.0  # Topcuoglu et al. 2002, Fig. 3(a)
    assert {n for n, d in placed.devices.items() if d == "p3"} == {"n1", "n3", "n5", "n7"}


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 10**6),
       keys=st.lists(st.floats(0.01, 100.0), min_size=14, max_size=14))
def test_any_priorities_decode_to_a_valid_plan_the_contention_free_model_agrees_with(
        n: int, seed: int, keys: list[float]) -> None:
    graph, cluster, cost = instance(n, seed, devices=3)
    p = Problem(graph, cluster, cost)
    placed = HEFT().decode(p, keys[:len(p.names)])
    assert placed.order is not None
    made = Plan(graph, placed.devices, placed.order, priority=placed.priority)  # validates
    assert model_makespan(made, cluster, cost) == pytest.approx(placed.estimated_makespan_s,
                                                                rel=1e-12, abs=1e-15)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 10**6),
       keys=st.lists(st.floats(0.01, 100.0), min_size=14, max_size=14))
def test_on_identical_devices_the_predicted_finish_chooses_as_heft(
        n: int, seed: int, keys: list[float]) -> None:
    # every device's optimistic cost is the same there, so the least finish decides
    cluster = get_cluster("quad-v100-nvlink")
    graph, cost = random_dag(n, seed=seed), RooflineCost(cluster)
    p = Problem(graph, cluster, cost)
    assert np.ptp(p.optimistic_costs, axis=1).max(initial=0.0) == 0.0
    priority = keys[:p.n]
    assert PredictedFinish().decode(p, priority) == HEFT().decode(p, priority)


@pytest.mark.parametrize(("first", "makespan", "devices"), [
    # n1 ends first on p1, but n2 then waits 5 for its input or runs 10 there: PEFT puts
    # both on p2 (2 + 1 = 3) where HEFT ends at 1 + 5 + 1 = 7
    ((1, 2, 1000), 3.0, {"n1": "p2", "n2": "p2"}),
    # n1 takes 20 on p2: finish time plus optimistic cost (1 + 6 against 20 + 1) keeps it on
    # p1, then 1 + 5 + 1 = 7; by start plus optimistic cost alone it would end at 21
    ((1, 20, 1000), 7.0, {"n1": "p1", "n2": "p2"}),
])
def test_the_predicted_finish_on_a_two_op_chain_is_the_closed_form(
        first: tuple[int, int, int], makespan: float, devices: dict[str, str]) -> None:
    graph, cluster, cost = table_instance("chain", {1: first, 2: (10, 1, 1000)}, {(1, 2): 5})
    p = Problem(graph, cluster, cost)
    assert p.optimistic_costs[0].tolist() == [6.0, 1.0, 6.0]  # n2: 10, 1, or 1 after 5
    placed = PredictedFinish().decode(p, p.upward_rank())
    assert placed.estimated_makespan_s == makespan
    assert placed.devices == devices
    assert HEFT().decode(p, p.upward_rank()).estimated_makespan_s == 7.0


@pytest.mark.parametrize("seed", range(4))
def test_the_search_never_beats_the_optimum_and_keeps_the_best_it_scored(seed: int) -> None:
    graph, cluster, cost = instance(7, seed, devices=3)
    evaluate = contention_free(cluster, cost)
    score, seen, _ = recording(evaluate)
    out = key_search(Problem(graph, cluster, cost), score, lambda: True,
                     np.random.default_rng(seed), 60)
    assert out is not None
    best, found = out
    assert 1 <= len(seen) <= 60
    assert best == evaluate(found) == min(evaluate(p) for p in seen)
    # the first plan scored is the upward ranks decoded (its priorities aside)
    first = PredictedFinish().decode(Problem(graph, cluster, cost), Problem(
        graph, cluster, cost).upward_rank())
    assert (seen[0].placement, seen[0].order) == (first.devices, first.order)
    assert brute_force_makespan(Problem(graph, cluster, cost)) - 1e-9 <= best


def test_no_plan_is_scored_twice() -> None:
    graph, cluster, cost = instance(10, 3, devices=3)
    score, seen, _ = recording(contention_free(cluster, cost))
    key_search(Problem(graph, cluster, cost), score, lambda: True, np.random.default_rng(1),
               200)
    made = [(tuple(p.placement.items()), tuple(p.order.items()), tuple(p.priority.items()))
            for p in seen]
    assert len(set(made)) == len(made) > 1


def _hetero_dag() -> tuple[Graph, Cluster, RooflineCost]:
    cluster = get_cluster("hetero-box")
    return random_dag(40, seed=2), cluster, RooflineCost(cluster)


def _decodes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The estimate of every plan HEFT's decoder makes from now on, in order."""
    estimates: list[float] = []
    decode = HEFT.decode_estimate

    def spy(self, p, priority, order=None):  # type: ignore[no-untyped-def]
        estimate, placed = decode(self, p, priority, order)
        estimates.append(estimate)
        return estimate, placed

    monkeypatch.setattr(HEFT, "decode_estimate", spy)
    return estimates


def test_each_evaluation_scores_the_first_move_no_worse_than_the_current_plan_else_the_best(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the moves decoded for one evaluation (each estimated by the scheduler), the one
    scored is the first whose estimate is no worse than the current plan's estimate, else
    the one of lowest estimate. Scored as twice the contention-free model, which the
    estimates equal: a screen against the score rather than the estimate would pass every
    move."""
    graph, cluster, cost = _hetero_dag()
    estimates = _decodes(monkeypatch)
    evaluate = contention_free(cluster, cost)
    scored: list[tuple[int, float]] = []

    def score(p: Plan) -> float:
        scored.append((len(estimates), 2 * evaluate(p)))
        return scored[-1][1]

    key_search(Problem(graph, cluster, cost), score, lambda: True, np.random.default_rng(0),
               60)
    assert len(scored) == 60 and len(estimates) > len(scored)
    (before, now), current, screened = scored[0], estimates[0], 0
    for count, seconds in scored[1:]:
        group, chosen = estimates[before:count], seconds / 2
        assert 1 <= len(group) <= SCREEN
        no_worse = [k for k, e in enumerate(group) if e <= current * (1 + 1e-12)]
        if no_worse:
            assert no_worse[0] == len(group) - 1
            assert chosen == pytest.approx(group[-1], rel=1e-12)
        else:
            assert chosen == pytest.approx(min(group), rel=1e-12)
        screened += len(group) > 1
        if seconds <= now:
            now, current = seconds, chosen
        before = count
    assert screened > 0


def test_a_plan_is_built_only_for_each_move_scored(monkeypatch: pytest.MonkeyPatch) -> None:
    # the moves decoded for a screen need only the scheduler's estimate: checking a plan
    # for each would cost as much again as decoding it
    graph, cluster, cost = _hetero_dag()
    estimates = _decodes(monkeypatch)
    built: list[Plan] = []
    init = Plan.__init__

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(Plan, "__init__", counted)
    score, seen, _ = recording(contention_free(cluster, cost))
    key_search(Problem(graph, cluster, cost), score, lambda: True, np.random.default_rng(0),
               60)
    assert len(seen) == 60 and len(estimates) > 60  # some evaluations screened
    assert len(built) == 60


def test_no_move_is_decoded_once_time_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, cluster, cost = _hetero_dag()
    decoded = _decodes(monkeypatch)

    def left() -> bool:  # time runs out once the first plan and one move are decoded
        return len(decoded) < 2

    score, seen, _ = recording(contention_free(cluster, cost))
    key_search(Problem(graph, cluster, cost), score, left, np.random.default_rng(0), 60)
    assert len(decoded) == 2 and len(seen) == 2  # the one move decoded is still scored


def test_a_heft_plan_that_does_not_fit_ends_the_search_and_nothing_left_scores_nothing(
        ) -> None:
    graph, cluster, cost = instance(9, 2, devices=3)
    score, seen, _ = recording(lambda p: math.inf)
    out = key_search(Problem(graph, cluster, cost), score, lambda: True,
                     np.random.default_rng(0), 50)
    assert out is not None and out[0] == math.inf and len(seen) == 1
    assert key_search(Problem(graph, cluster, cost), score, lambda: False,
                      np.random.default_rng(0), 50) is None
    assert len(seen) == 1


def test_the_search_stops_when_told_and_a_generator_fixes_it() -> None:
    graph = random_dag(40, seed=3)
    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    problem, evaluate = Problem(graph, cluster, cost), contention_free(cluster, cost)
    score, seen, _ = recording(evaluate)
    key_search(problem, score, lambda: len(seen) < 7, np.random.default_rng(0), 50)
    assert len(seen) == 7
    runs = [key_search(problem, evaluate, lambda: True, np.random.default_rng(5), 40)
            for _ in range(2)]
    assert runs[0] is not None and runs[1] is not None
    assert runs[0][0] == runs[1][0]
    assert (runs[0][1].placement, runs[0][1].order) == (runs[1][1].placement,
                                                        runs[1][1].order)


def test_mcmc_spends_its_keyed_share_first_and_counts_it() -> None:
    graph = random_dag(KEYED_FROM + 8, seed=4)
    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    score, seen, _ = recording(evaluator(cluster, cost))
    p = plan(graph, cluster, MCMC(evals=60, keyed=0.5, seed=1), cost, evaluate=score)
    assert len(seen) == p.info["evals"] == 60
    # the starts (3), then up to half of the rest (28) decoded by the list scheduler from
    # perturbed priorities: the upward ranks' plan first
    keyed = seen[3:3 + p.info["keyed_evals"]]
    assert 1 < len(keyed) <= 28
    problem = Problem(graph, cluster, cost)
    first = PredictedFinish().decode(problem, problem.upward_rank())
    assert (keyed[0].placement, keyed[0].order) == (first.devices, first.order)
    assert p.info["keyed_score_s"] == min(evaluator(cluster, cost)(k) for k in keyed)
    assert p.info["score_s"] <= min(p.info["keyed_score_s"], p.info["start_score_s"])
    assert p.info["score_s"] == simulate(p, cluster, cost).makespan_s


def test_the_keyed_phase_runs_only_on_large_graphs_and_is_a_share() -> None:
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    for n, ran in ((KEYED_FROM, False), (KEYED_FROM + 1, True)):
        p = plan(random_dag(n, seed=1), cluster, MCMC(evals=30), cost)
        assert (p.info["keyed_score_s"] is not None) is ran
    off = plan(random_dag(KEYED_FROM + 1, seed=1), cluster, MCMC(evals=30, keyed=0), cost)
    assert off.info["keyed_score_s"] is None
    for bad in (1.5, -0.1):
        with pytest.raises(PlacementError, match=rf"^policy 'mcmc': keyed must be a share of "
                                                 rf"the evaluations, in \[0, 1\], got {bad}$"):
            MCMC(keyed=bad)
    with pytest.raises(PlacementError, match=r"^policy 'mcmc': keyed must be a finite number, "
                                             r"got nan$"):
        MCMC(keyed=math.nan)
