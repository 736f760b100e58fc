"""The ``mcmc`` search: its budget, its evaluator, its bounds (brute force, the
simulator)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import RooflineCost, get_cluster
from policies import plan
from policies.problem import Problem
from policies.search import MCMC, contention_free
from policies.testing import random_dag
from sim import evaluator, simulate
from tests.helpers import recording
from tests.policies.test_exact import brute_force_makespan, instance
from workloads import Graph, PlacementError, build_model, training_graph


@pytest.mark.parametrize("seed", range(6))
def test_mcmc_is_never_better_than_the_optimum(seed: int) -> None:
    graph, cluster, cost = instance(6, seed, devices=3)
    p = plan(graph, cluster, MCMC(evals=150, seed=seed), cost)
    best = brute_force_makespan(Problem(graph, cluster, cost))
    assert best - 1e-9 <= p.info["score_s"]
    # the score is the plan's own contention-free makespan (the brute force's model)
    assert contention_free(cluster, cost)(p) == p.info["score_s"]


def test_the_budget_counts_every_plan_scored_and_a_seed_fixes_the_result() -> None:
    graph = training_graph(build_model("mlp", batch=32), "adam")
    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    simulated = evaluator(cluster, cost)
    counting, scored, _ = recording(simulated)
    first = plan(graph, cluster, MCMC(evals=40, seed=3), cost, evaluate=counting)
    assert len(scored) == first.info["evals"] == 40  # three starts and 37 moves
    again = plan(graph, cluster, MCMC(evals=40, seed=3), cost, evaluate=simulated)
    assert (again.placement, again.order) == (first.placement, first.order)
    assert first.info["score_s"] == simulate(first, cluster, cost).makespan_s
    assert first.info["score_s"] == min(simulated(p) for p in scored)


def test_a_plan_that_does_not_fit_is_never_chosen() -> None:
    # GPT-2's Adam step fits on no single V100; starts that overflow score infinity
    step = training_graph(build_model("gpt2_small", batch=12, seq_len=1024), "adam")
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    p = plan(step, cluster, MCMC(evals=12, start="single_device+m_topo"), cost,
             evaluate=evaluator(cluster, cost))
    assert p.info["start"] == "m_topo" and math.isfinite(p.info["score_s"])
    assert simulate(p, cluster, cost).feasible


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 25), seed=st.integers(0, 10**6),
       policy=st.sampled_from(["heft", "random", "round_robin", "metis"]))
def test_the_contention_free_score_is_the_simulators_without_contention(
        n: int, seed: int, policy: str) -> None:
    # one stream per device (the hetero-box's GPUs have one), no link limits
    graph = random_dag(n, seed=seed)
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    p = plan(graph, cluster, f"{policy}:seed=1" if policy in ("random", "metis") else policy,
             cost)
    assert all(d.compute_streams == 1 for d in cluster.devices)
    assert contention_free(cluster, cost)(p) == pytest.approx(
        simulate(p, cluster, cost, links="none").makespan_s, rel=1e-12)


def test_bad_starts_are_refused_by_name() -> None:
    with pytest.raises(PlacementError, match=r"policy 'mcmc': start must name registered "
                                             r"policies that score no plans, got 'nope'"):
        MCMC(start="heft+nope")
    with pytest.raises(PlacementError, match=r"got 'mcmc'"):
        MCMC(start="mcmc")
    with pytest.raises(PlacementError, match=r"mcmc': evals must be an int >= 1, got 0"):
        MCMC(evals=0)


def test_never_worse_than_any_start_as_its_policy_planned_it() -> None:
    step = training_graph(build_model("lenet5", batch=16), "adam")
    cluster = get_cluster("workstation")
    cost = RooflineCost(cluster)
    simulated = evaluator(cluster, cost, links="fair")
    p = plan(step, cluster, MCMC(evals=30, start="heft+cpop+single_device"), cost,
             evaluate=simulated)
    starts = {name: simulate(plan(step, cluster, name, cost), cluster, cost,
                             links="fair").makespan_s
              for name in ("heft", "cpop", "single_device")}
    assert p.info["start_score_s"] == min(starts.values())
    assert p.info["score_s"] <= min(starts.values())
    assert simulate(p, cluster, cost, links="fair").makespan_s == p.info["score_s"]


def test_plans_carry_priorities_for_an_evaluator_in_priority_order() -> None:
    step = training_graph(build_model("mlp", batch=16), "adam")
    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    p = plan(step, cluster, MCMC(evals=20), cost,
             evaluate=evaluator(cluster, cost, order="priority"))
    assert p.priority and p.info["score_s"] == simulate(p, cluster, cost,
                                                        order="priority").makespan_s


def test_the_first_start_is_scored_whatever_the_time_limit() -> None:
    graph = random_dag(12, seed=4)
    cluster = get_cluster("quad-v100-nvlink")
    p = plan(graph, cluster, MCMC(evals=50, time_limit_s=1e-9), RooflineCost(cluster))
    assert p.info["evals"] == 1 and p.info["stopped_by"] == "time_limit_s"


@pytest.mark.parametrize(("graph", "cluster"), [
    (training_graph(build_model("mlp", batch=16), "adam"), "hetero-box"),
    (random_dag(60, seed=3), "workstation")])  # large enough for the priority search
def test_best_eval_is_the_first_evaluation_that_scored_the_plan_returned(
        graph, cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = get_cluster(cluster)
    cost = RooflineCost(cluster)
    score, _, seen = recording(evaluator(cluster, cost))
    p = plan(graph, cluster, MCMC(evals=120, seed=2), cost, evaluate=score)
    assert len(seen) == p.info["evals"] == 120
    assert seen[p.info["best_eval"] - 1] == p.info["score_s"] == min(seen)
    assert min(seen[:p.info["best_eval"] - 1], default=math.inf) > p.info["score_s"]


@pytest.mark.parametrize("patience", [1, 5, 30])
def test_patience_stops_after_so_many_evaluations_without_a_faster_plan(patience) -> None:  # type: ignore[no-untyped-def]
    graph = random_dag(60, seed=3)
    cluster = get_cluster("workstation")
    cost = RooflineCost(cluster)
    score, _, seen = recording(evaluator(cluster, cost))
    p = plan(graph, cluster, MCMC(evals=5000, patience=patience, seed=1), cost,
             evaluate=score)
    found = p.info["best_eval"]
    assert p.info["stopped_by"] == "patience" and len(seen) == found + patience
    # nothing in the last `patience` evaluations was faster, and every improvement before
    # came within `patience` evaluations of the one before it
    assert min(seen[found:]) >= seen[found - 1] == p.info["score_s"]
    bests = [k for k in range(len(seen)) if seen[k] < min(seen[:k], default=math.inf)]
    assert all(b - a <= patience for a, b in zip([0, *bests], bests, strict=False))
    again = plan(graph, cluster, MCMC(evals=5000, patience=patience, seed=1), cost,
                 evaluate=evaluator(cluster, cost))
    assert (again.placement, again.order) == (p.placement, p.order)


def test_patience_larger_than_the_budget_changes_nothing() -> None:
    graph = training_graph(build_model("mlp", batch=16), "adam")
    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    runs = [plan(graph, cluster, MCMC(evals=80, patience=p, seed=3), cost)
            for p in (None, 80)]
    infos = [{k: v for k, v in r.info.items() if k != "policy_params"} for r in runs]
    assert infos[0] == infos[1] and infos[0]["stopped_by"] == "evals"
    assert runs[0].placement == runs[1].placement


def test_nothing_to_change_spends_no_evaluations() -> None:
    # a chain of ops on one device: no other device, no two neighbours free to swap
    from hwmodels import Cluster
    from policies.testing import CASES
    from workloads import Graph, Op, Tensor

    chain = Graph("chain", [Op(f"c{i}", "synthetic", "matmul",
                               inputs=(f"c{i - 1}",) if i else (),
                               outputs=(Tensor(f"c{i}", (64,)),), flops=10**8)
                            for i in range(6)])
    one: Cluster = CASES[0][2]()  # the suite's one-device cluster
    p = plan(chain, one, MCMC(evals=500), RooflineCost(one))
    assert p.info["evals"] == 3  # the three starts, nothing after


def test_starts_without_priorities_are_scored_in_priority_order_too() -> None:
    graph = training_graph(build_model("mlp", batch=16), "adam")
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    p = plan(graph, cluster, MCMC(evals=10, start="round_robin+m_topo"), cost,
             evaluate=evaluator(cluster, cost, order="priority"))
    assert p.info["score_s"] == simulate(p, cluster, cost, order="priority").makespan_s


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 20), seed=st.integers(0, 10**6), data=st.data())
def test_an_order_move_swaps_two_neighbours_of_one_device_and_keeps_every_edge(
        n: int, seed: int, data: st.DataObject) -> None:
    from policies.moves import Moves

    graph, cluster, cost = instance(n, seed, devices=3)
    search = Moves(Problem(graph, cluster, cost), 0.3, np.random.default_rng(seed))
    names = search.problem.names
    where = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    ranked = list(graph.topological_order())
    order = search.reorder(where, ranked, data.draw(st.integers(0, n - 1)))
    if order is None:  # then no op and the next op of its device may trade places
        assert not any(_tradable(search.edges, ranked, where, names, i) for i in range(n))
        return
    position = {name: i for i, name in enumerate(order)}
    assert sorted(order) == sorted(ranked)
    assert all(position[a] < position[b] for a, b in search.edges)

    def by_device(seq: list[str]) -> list[list[str]]:
        return [[x for x in seq if where[names.index(x)] == d] for d in range(3)]

    changed = [(old, new) for old, new in zip(by_device(ranked), by_device(order),
                                              strict=True) if old != new]
    assert len(changed) == 1
    old, new = changed[0]
    i = next(k for k in range(len(old)) if old[k] != new[k])
    assert new == [*old[:i], old[i + 1], old[i], *old[i + 2:]]


def test_the_tuning_sets_are_apart_from_what_the_benchmark_reports() -> None:
    from benchmarks.search_quality import MODELS, REPORTED_SEEDS, small_graph
    from benchmarks.search_tuning import TUNING_CELLS, TUNING_SEEDS

    assert not set(TUNING_SEEDS) & set(REPORTED_SEEDS)
    reported = {small_graph(seed).to_json() for seed in REPORTED_SEEDS}
    assert not any(small_graph(seed).to_json() in reported for seed in TUNING_SEEDS)
    # the benchmark's cells are Adam steps at its batches; the tuning cells are not
    assert all(step != "adam" and (model, batch) not in MODELS
               for model, step, batch, _ in TUNING_CELLS)


def _tradable(edges: set[tuple[str, str]], ranked: list[str], where: list[int],
              names: Sequence[str], i: int) -> bool:
    """Whether ``ranked[i]`` and the next op of its device can trade places: the two ops
    in either order, each op between them kept on its side of every edge."""
    device = [where[names.index(x)] for x in ranked]
    j = next((k for k in range(i + 1, len(ranked)) if device[k] == device[i]), None)
    if j is None:
        return False
    a, b, between = ranked[i], ranked[j], ranked[i + 1:j]
    for order in ([*between, b, a], [b, a, *between]):
        pos = {x: k for k, x in enumerate(order)}
        if all(pos[u] < pos[v] for u, v in edges if u in pos and v in pos):
            return True
    return False


def test_independent_ops_of_one_device_trade_places() -> None:
    from policies.moves import Moves

    graph = random_dag(4, seed=0, edge_probability=0.0)
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    search = Moves(Problem(graph, cluster, cost), 0.3, np.random.default_rng(0))
    ranked = list(graph.topological_order())
    assert search.reorder([0, 0, 1, 0], ranked, 1) == [ranked[0], ranked[2], ranked[3],
                                                          ranked[1]]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), data=st.data())
def test_a_segment_move_takes_a_run_of_one_device_s_units_to_one_device_that_runs_them(
        seed: int, data: st.DataObject) -> None:
    from policies.moves import Moves

    # groups (leads and followers), more units on a device than the longest run
    graph = training_graph(build_model("vgg16", batch=2), "adam")
    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    search = Moves(Problem(graph, cluster, cost), 0.3, np.random.default_rng(seed))
    p = search.problem
    where = [data.draw(st.sampled_from(search.able[search.unit_of[p.node_of[i]]]))
             for i in range(p.n)]
    ranked = list(graph.topological_order())
    draws = np.random.default_rng(seed)  # the op the run starts at, then its length
    at, length = int(draws.integers(len(ranked))), int(draws.integers(2, 17))
    out = search.segment(where, ranked)
    # the run: the first units of the start's device met in the order from it on, distinct
    leads = [p.node_of[search.index[n]] for n in ranked[at:]]
    device = where[leads[0]]
    run = [u for u in dict.fromkeys(leads) if where[u] == device][:length]
    able = set.intersection(*(set(search.able[search.unit_of[u]]) for u in run))
    assert (out is None) == (able <= {device})
    if out is None:  # no other device runs every unit of the run
        return
    assert {u for u in search.units if out[u] != where[u]} == set(run)
    moved = [u for u in search.units if out[u] != where[u]]
    assert 1 <= len(moved) <= 16 and len({where[u] for u in moved}) == 1
    assert len({out[u] for u in moved}) == 1
    target = out[moved[0]]
    assert all(target in search.able[search.unit_of[u]] for u in moved)
    # the run: the first units of the device met in the global order from some op on
    device = where[moved[0]]

    def run_from(i: int) -> set[int]:
        leads = [p.node_of[search.index[n]] for n in ranked[i:]]
        mine = [u for u in dict.fromkeys(leads) if where[u] == device]
        return set(mine[:len(moved)])

    assert any(run_from(i) == set(moved) for i in range(len(ranked)))


def test_runs_of_units_move_only_on_large_graphs_and_segments_is_a_share() -> None:
    from policies.moves import SEGMENT_FROM, Moves

    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    small, large = random_dag(SEGMENT_FROM, seed=1), random_dag(SEGMENT_FROM + 1, seed=1)
    for graph, share in ((small, 0.0), (large, 0.3)):
        moves = Moves(Problem(graph, cluster, cost), MCMC().segments, np.random.default_rng(0))
        assert moves.segments == share
    for bad in (1.5, -0.1):
        with pytest.raises(PlacementError, match=rf"^policy 'mcmc': segments must be a share "
                                                 rf"of the moves, in \[0, 1\], got {bad}$"):
            MCMC(segments=bad)
    assert MCMC(segments=0).segments == 0


def test_the_optimum_summary_counts_a_plan_within_the_milps_tolerance_as_reached() -> None:
    import pandas as pd

    from benchmarks.search_quality import optimum_summary

    df = pd.DataFrame({"gap_500": [0.03, -2e-6, 0.0], "gap_10000": [1e-4, 0.0, -1e-5]})
    assert optimum_summary(df, [500, 10000]) == [
        "500 evals: optimum reached on 2 of 3; mean gap 1.00%; worst 3.00%",
        "10000 evals: optimum reached on 3 of 3; mean gap 0.00%; worst 0.01%"]
    # further below the proven optimum than its tolerance: the two models disagree
    with pytest.raises(ValueError, match=r"^gap_500: mcmc below the MILP's proven optimum "
                                         r"by more than its tolerance \(-2.00e-03\)"):
        optimum_summary(pd.DataFrame({"gap_500": [0.0, -2e-3]}), [500])


@pytest.mark.parametrize("value", [1.10449, 0.00049, 2.0005, 0.1235])
def test_the_benchmark_tables_round_each_figure_once_as_its_line_does(
        value: float, monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    import benchmarks.search_quality as quality

    row = {"model": "m", "evals": 500, "heuristic_vs_bound": value, "gain_vs_heuristic": 0.1,
           "never_worse": True, "far_from_bound": True}
    monkeypatch.setattr(quality, "part_heuristics", lambda budgets, quick: pd.DataFrame([row]))
    report = quality.main(["--parts", "1", "--evals", "500"])
    assert f"| m | 500 | {value:.3f} | 0.100 | True | True |" in report.splitlines()


def _kind(before, after) -> str:  # type: ignore[no-untyped-def]
    """What a chain's move did, read from the plans alone: ``order`` where no op changed
    device, ``swap`` where two traded devices, ``segment`` where several went to one
    device, ``single`` where one op moved."""
    moved = [n for n in after.placement if after.placement[n] != before.placement[n]]
    if not moved:
        assert after.order != before.order
        return "order"
    if len(moved) == 2 and after.placement[moved[0]] == before.placement[moved[1]] \
            and after.placement[moved[1]] == before.placement[moved[0]]:
        return "swap"
    if len(moved) > 1:
        assert len({after.placement[n] for n in moved}) == 1
        assert len({before.placement[n] for n in moved}) == 1
        return "segment"
    return "single"


@pytest.mark.parametrize(("seed", "segments"), [(0, 0.3), (1, 0.0), (2, 0.8)])
def test_the_move_counts_are_what_the_scored_plans_show(seed: int, segments: float) -> None:
    # a greedy chain (no slower plan accepted) and one restart: its current plan is the
    # last one scored no slower than every plan before, so an independent record of what
    # it scored tells each move's kind, whether it was faster, and whether it was kept
    # (no priority search: on these graphs it leaves the chain nothing faster to find)
    graph, cluster = random_dag(60, seed=seed), get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    score, plans, seen = recording(evaluator(cluster, cost))
    p = plan(graph, cluster, MCMC(evals=300, beta=1e300, restarts=1, segments=segments,
                                  keyed=0, seed=seed), cost, evaluate=score)
    moves = p.info["moves"]
    assert list(moves) == ["neighbour", "swap", "device", "segment", "order"]
    chain = sum(n["proposed"] for n in moves.values())
    first = p.info["evals"] - chain  # the starts' and the priority search's evaluations
    assert first > 1 and len(seen) == p.info["evals"] == 300
    expected = {kind: {"proposed": 0, "accepted": 0, "faster": 0}
                for kind in ("single", "swap", "segment", "order")}
    now = min(seen[:first])
    current = plans[seen.index(now)]
    for candidate, seconds in zip(plans[first:], seen[first:], strict=True):
        counts = expected[_kind(current, candidate)]
        counts["proposed"] += 1
        counts["faster"] += int(seconds < now)
        if seconds <= now:
            counts["accepted"] += 1
            current, now = candidate, seconds
    # a run of units may be a run of one (no unit of its device after it): it reads as one
    # op moved, so single moves and runs are compared together, runs of several apart
    placed = {key: sum(moves[k][key] for k in ("neighbour", "device", "segment"))
              for key in expected["single"]}
    read = {key: expected["single"][key] + expected["segment"][key] for key in placed}
    assert placed == read and moves["swap"] == expected["swap"]
    assert moves["order"] == expected["order"]
    assert moves["segment"]["proposed"] >= expected["segment"]["proposed"]
    assert sum(n["accepted"] for n in moves.values()) == p.info["accepted"]
    assert (expected["segment"]["proposed"] > 0) == (segments > 0)
    assert sum(n["faster"] for n in moves.values()) > 0


def test_the_benchmarks_moves_summary_sums_each_kind_over_the_cells() -> None:
    import pandas as pd

    from benchmarks.search_quality import moves_summary

    rows = [{"model": m, "cluster": "c", "kind": k, "proposed": p, "accepted": a, "faster": f}
            for m, k, p, a, f in (("a", "device", 300, 12, 3), ("a", "order", 100, 90, 0),
                                  ("b", "device", 200, 5, 0), ("b", "order", 0, 0, 0))]
    assert moves_summary(pd.DataFrame(rows)) == [
        "- device: 500 proposed, 17 accepted, 3 faster than the chain's current plan "
        "(6.0 per thousand), on 1 of 2 cells",
        "- order: 100 proposed, 90 accepted, 0 faster than the chain's current plan "
        "(0.0 per thousand), on 0 of 2 cells"]


def test_the_benchmarks_fast_links_take_a_hundredth_of_each_transfers_time() -> None:
    from benchmarks.search_quality import fast_links

    cluster = get_cluster("workstation")
    fast = fast_links(cluster, 100.0)
    assert fast.name == "workstation-links-x100"
    assert [d.name for d in fast.devices] == [d.name for d in cluster.devices]
    g = build_model("mlp", batch=8)  # a chain: one transfer at a time, none contended
    link = cluster.links[0]
    for c, scale in ((cluster, 1.0), (fast, 100.0)):
        cost = RooflineCost(c)
        run = simulate(plan(g, c, "round_robin", cost), c, cost).columns
        assert run is not None and len(run.transfer_bytes) > 0
        # each transfer: the link's latency plus its bytes over the link's bandwidth
        expected = (link.latency_s + run.transfer_bytes / link.bandwidth) / scale
        assert run.transfer_end - run.transfer_start == pytest.approx(expected, rel=1e-9)


def test_the_benchmark_takes_a_search_already_run_on_a_cell_for_the_same_policy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.search_quality as quality
    from policies.bounds import lower_bound

    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    g = build_model("mlp", batch=8)
    cell = quality.Cell("mlp", cluster.name, g, cluster, cost, lower_bound(g, cluster, cost),
                        {"heft": 1.0}, searches={})
    calls: list[object] = []
    real = quality.plan

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(quality, "plan", spy)
    first, p = quality.search_run(cell, MCMC(evals=20))
    first.pop("seconds")  # a part dropping a column it does not report
    again, q = quality.search_run(cell, MCMC(evals=20))
    assert q is p and "seconds" in again and len(calls) == 1
    _, r = quality.search_run(cell, MCMC(evals=20, seed=1))
    assert len(calls) == 2 and r is not p
    # a seed that is a generator gives no plan to take again
    quality.search_run(cell, MCMC(evals=20, seed=np.random.default_rng(0)))
    quality.search_run(cell, MCMC(evals=20, seed=np.random.default_rng(0)))
    assert len(calls) == 4
    # nor does a wall-clock cap, nor a cell that keeps no searches (the tuning sets', whose
    # settings patch the search's constants under the same parameters)
    quality.search_run(cell, MCMC(evals=20, time_limit_s=60.0))
    quality.search_run(cell, MCMC(evals=20, time_limit_s=60.0))
    fresh = quality.Cell("mlp", cluster.name, g, cluster, cost, cell.bound, {"heft": 1.0})
    quality.search_run(fresh, MCMC(evals=20))
    quality.search_run(fresh, MCMC(evals=20))
    assert len(calls) == 8 and fresh.searches is None


def _interpreted_makespan(p: Problem, where: list[int], ranked: list[str]) -> float:
    """The contention-free makespan of chain state ``(where, ranked)``, interpreted, from
    its ``Plan`` (each op where its lead is, each device's ops in the order)."""
    from policies.plans import Plan, split_by_device
    from policies.problem import model_makespan

    devices = dict(zip(p.names, (p.devices[d] for d in p.follow_leads(where)), strict=True))
    return model_makespan(Plan(p.graph, devices, split_by_device(ranked, devices)),
                          p.cluster, p.cost)


def _on_last_devices(p: Problem) -> list[int]:
    """Each op on the last device that runs it: a chain state (with the graph's order)."""
    return [int(np.flatnonzero(np.isfinite(p.times[i]))[-1]) for i in range(p.n)]


#: Graphs of more than 32 units, the chain's moves screened: plain, and with groups.
_screened_graphs = pytest.mark.parametrize(
    "graph", [random_dag(60, seed=3), training_graph(build_model("vgg16", batch=2), "adam")],
    ids=["dag", "groups"])


@_screened_graphs
def test_a_screened_move_is_the_drawn_one_the_contention_free_model_puts_first(
        graph: Graph) -> None:
    from policies.moves import Moves

    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    p = Problem(graph, cluster, cost)

    # the same seed: the screened chain draws the moves the plain one proposes, in turn
    plain = Moves(p, 0.3, np.random.default_rng(5))
    screened = Moves(p, 0.3, np.random.default_rng(5), screen=6)
    where = _on_last_devices(p)
    ranked = list(p.names)
    for _ in range(8):
        drawn = [plain.propose(where, ranked) for _ in range(6)]
        assert all(move is not None for move in drawn)
        lengths = [_interpreted_makespan(p, *move) for move in drawn if move is not None]
        expected = drawn[int(np.argmin(lengths))]
        chosen = screened.propose(where, ranked)
        assert chosen == expected and chosen is not None
        assert screened.kind in ("neighbour", "swap", "device", "segment", "order")
        where, ranked = chosen  # the screened chain goes on from its own state's arrays


@_screened_graphs
def test_each_screened_estimate_is_the_interpreted_makespan_of_the_move_drawn(
        graph: Graph, monkeypatch: pytest.MonkeyPatch) -> None:
    # the screen works each candidate's arrays out from what its move changed, and takes
    # the chosen one's over as the next state's: each must be the drawn state's own
    from policies.moves import Moves

    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    p = Problem(graph, cluster, cost)
    moves = Moves(p, 0.3, np.random.default_rng(11), screen=6)
    drawn: list[tuple[list[int], list[str]]] = []
    lengths: list[float] = []
    draw, length = moves.draw, moves._schedule_length

    def drawing(where: list[int], ranked: list[str]) -> tuple[list[int], list[str]] | None:
        move = draw(where, ranked)
        if move is not None:
            drawn.append(move)
        return move

    def measuring(devices: np.ndarray, sequence: np.ndarray) -> float:
        lengths.append(length(devices, sequence))
        return lengths[-1]

    monkeypatch.setattr(moves, "draw", drawing)
    monkeypatch.setattr(moves, "_schedule_length", measuring)
    where = _on_last_devices(p)
    ranked = list(p.names)
    for step in range(30):
        chosen = moves.propose(where, ranked)
        assert chosen is not None
        if step % 3:  # the chain moves two times in three, else stays where it is
            where, ranked = chosen
    assert len(drawn) == len(lengths) == 30 * 6
    assert {len(set(ranked)) for _, ranked in drawn} == {p.n}
    for (where, ranked), estimate in zip(drawn, lengths, strict=True):
        assert estimate == _interpreted_makespan(p, where, ranked)  # to the bit


def test_an_interpreted_screen_proposes_what_the_compiled_one_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # what benchmarks/placement_quality.py times both ways: the same proposals, and the
    # interpreted chain never calls the compiled model
    from policies import compiled
    from policies.moves import Moves

    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    p = Problem(random_dag(60, seed=3), cluster, cost)
    fast = Moves(p, 0.3, np.random.default_rng(2), screen=6)
    slow = Moves(p, 0.3, np.random.default_rng(2), screen=6)
    monkeypatch.setattr(slow, "compiled", False)
    states = [(_on_last_devices(p), list(p.names))]
    for _ in range(20):
        moved = fast.propose(*states[-1])
        assert moved is not None
        states.append(moved)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the compiled model was called")

    monkeypatch.setattr(compiled, "schedule_length", refused)
    for state, expected in itertools.pairwise(states):
        assert slow.propose(*state) == expected and slow.estimate(*expected) == \
            _interpreted_makespan(p, *expected)


def test_without_a_transfer_table_moves_are_not_screened_and_estimates_are_interpreted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from policies import compiled
    from policies.moves import Moves
    from policies.problem import schedule_length

    graph, cluster = training_graph(build_model("vgg16", batch=2), "adam"), \
        get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    fast = Moves(Problem(graph, cluster, cost), 0.3, np.random.default_rng(0), screen=16)
    monkeypatch.setattr(compiled, "MAX_TABLE", 0)
    p = Problem(graph, cluster, cost)
    slow = Moves(p, 0.3, np.random.default_rng(0), screen=16)
    assert fast.screen == 16 and slow.screen == 1 and p.comm_table is None
    where = [k % len(p.devices) for k in range(p.n)]
    ranked = list(p.names)
    sequence = [p.names.index(n) for n in ranked]
    expected = schedule_length(p, p.follow_leads(where), sequence)
    assert slow.estimate(where, ranked) == expected == fast.estimate(where, ranked)


@pytest.mark.parametrize("screen", [1, 16])
def test_a_state_given_from_outside_is_refused_with_a_device_out_of_range(screen: int
                                                                           ) -> None:
    # the compiled model reads the chain's indices unchecked: a state from outside (a
    # start, a restart) is checked once, by a proposal as by an estimate
    from policies.moves import Moves

    cluster = get_cluster("quad-v100-nvlink")
    p = Problem(random_dag(40, seed=2), cluster, RooflineCost(cluster))
    moves = Moves(p, 0.3, np.random.default_rng(0), screen=screen)
    for where in ([4] * p.n, [-1] * p.n, [10**6] * p.n, [0] * (p.n - 1)):
        with pytest.raises(ValueError, match=r"^moves: expected a device 0 to 3 for "
                                             r"each of 40 ops$"):
            moves.propose(where, list(p.names))
        with pytest.raises(ValueError, match=r"^moves: expected a device 0 to 3 for "
                                             r"each of 40 ops$"):
            moves.estimate(where, list(p.names))


@_screened_graphs
def test_a_proposal_depends_on_the_state_and_the_draws_alone_not_on_the_chain_s_path(
        graph: Graph) -> None:
    # a chain keeps its state's arrays and takes over those of the move it proposed: back
    # at an earlier state (a restart), or at an equal state in new lists, it must propose
    # what a fresh chain with the same generator proposes there
    import copy

    from policies.moves import Moves

    cluster = get_cluster("hetero-box")
    p = Problem(graph, cluster, RooflineCost(cluster))
    moves = Moves(p, 0.3, np.random.default_rng(9), screen=6)
    where = _on_last_devices(p)
    ranked = list(p.names)
    visited = [(where, ranked)]
    for step in range(24):
        state = visited[-1] if step % 4 else visited[len(visited) // 2]  # now and then back
        if step % 5 == 4:
            state = (list(state[0]), list(state[1]))  # equal, in new lists
        fresh = Moves(p, 0.3, copy.deepcopy(moves.rng), screen=6)
        expected = fresh.propose(*state)
        chosen = moves.propose(*state)
        assert chosen == expected and chosen is not None
        visited.append(chosen)


def test_large_graphs_are_screened_by_screen_small_ones_by_small_screen() -> None:
    from policies.moves import SCREEN_FROM, Moves

    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    small, large = random_dag(SCREEN_FROM, seed=1), random_dag(SCREEN_FROM + 1, seed=1)
    for graph, screen in ((small, 3), (large, 16)):
        moves = Moves(Problem(graph, cluster, cost), 0.3, np.random.default_rng(0), 16, 3)
        assert moves.screen == screen
    assert Moves(Problem(small, cluster, cost), 0.3, np.random.default_rng(0), 16).screen == 1
    assert MCMC().screen > 1
    unscreened = Problem(large, cluster, cost)
    assert Moves(unscreened, 0.3, np.random.default_rng(0), 1, 8).screen == 1
    assert "comm_table" not in vars(unscreened)  # no transfer table built for no screen
    for name in ("screen", "small_screen"):
        for bad in (0, 1.5):
            with pytest.raises(PlacementError, match=rf"^policy 'mcmc': {name} must be an "
                                                     rf"int >= 1, got {bad}$"):
                MCMC(**{name: bad})  # type: ignore[arg-type]


@_screened_graphs
@pytest.mark.parametrize("screen", [1, 6])
def test_the_plan_scored_is_the_state_proposed(graph: Graph, screen: int) -> None:
    # the search builds each candidate from the arrays its moves worked out; the plan must
    # be what the state's lists say: each op on its lead's device, the devices' orders
    # drawn from the global order, priorities that give that order back
    from policies.plans import Plan, split_by_device
    from policies.search import _Search

    cluster = get_cluster("hetero-box")
    search = _Search(MCMC(screen=screen, seed=4), graph, cluster, RooflineCost(cluster),
                     lambda _: 1.0)
    p = search.problem
    state = (_on_last_devices(p), list(p.names))
    for step in range(30):
        proposed = search.moves.propose(*state)
        assert proposed is not None
        # now the proposal, now the current state, now an equal state in new lists
        where, ranked = (proposed, state, (list(proposed[0]), list(proposed[1])))[step % 3]
        devices = {n: p.devices[where[p.node_of[i]]] for i, n in enumerate(p.names)}
        expected = Plan(graph, devices, split_by_device(ranked, devices), policy="mcmc",
                        priority={n: float(len(ranked) - k) for k, n in enumerate(ranked)})
        assert search.score(where, ranked)[1] == expected
        state = proposed


def test_a_chain_after_one_that_found_nothing_faster_starts_from_a_kicked_plan() -> None:
    # the first chain finds the best plan, the second nothing faster: the third and the
    # fourth each begin with one kicked plan, scored first, which is slower
    graph, cluster = build_model("mlp", batch=8), get_cluster("workstation")
    cost = RooflineCost(cluster)
    score, _, seen = recording(contention_free(cluster, cost))
    p = plan(graph, cluster, MCMC(evals=200, restarts=4, seed=2), cost, evaluate=score)
    first, *rest = p.info["best_per_restart_s"]
    assert first < p.info["start_score_s"] and rest == [first] * 3
    assert p.info["kicks"] == 2 and len(seen) == p.info["evals"] == 200
    assert p.info["score_s"] == min(seen) == seen[p.info["best_eval"] - 1]
    # three starts, then chains of (200 - 3) // 4, (200 - 52) // 3, (200 - 101) // 2 and the
    # last 50 evaluations: the kicked plans are the 102nd and the 151st scored
    assert min(seen[101], seen[150]) > p.info["score_s"]
    unkicked = plan(graph, cluster, MCMC(evals=200, restarts=4, seed=2, kick=0), cost,
                    evaluate=contention_free(cluster, cost))
    assert unkicked.info["kicks"] == 0


def test_kicks_reach_brute_force_optima_that_chains_from_the_best_plan_miss() -> None:
    # 6-op instances at a small budget: a chain stuck at a local optimum restarts from it
    # unkicked and stays there
    reached = {kick: 0 for kick in (0.0, 0.5)}
    for seed in range(40, 50):
        graph, cluster, cost = instance(6, seed, devices=3)
        best = brute_force_makespan(Problem(graph, cluster, cost))
        for kick in reached:
            p = plan(graph, cluster, MCMC(evals=60, seed=seed, kick=kick), cost)
            assert best - 1e-9 <= p.info["score_s"]
            reached[kick] += p.info["score_s"] <= best + 1e-9
    assert reached[0.5] > reached[0.0]


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan])
def test_kick_is_a_share_of_the_ops_and_groups(bad: float) -> None:
    with pytest.raises(PlacementError, match=r"^policy 'mcmc': kick "):
        MCMC(kick=bad)
    assert MCMC(kick=0).kick == 0


def _spied_kicks(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], list[int]]:
    """Record what each kick starts from and gives, and the chain's moves each drew."""
    from policies import search
    from policies.moves import Moves

    given: list[Any] = []
    kicked: list[Any] = []
    draws: list[int] = []
    within = [False]
    kick, draw = search._Search.kicked, Moves.draw

    def spy_kick(self: Any, state: Any) -> Any:
        given.append(state)
        draws.append(0)
        within[0] = True
        kicked.append(kick(self, state))
        within[0] = False
        return kicked[-1]

    def spy_draw(self: Any, where: Any, ranked: Any) -> Any:
        if within[0]:
            draws[-1] += 1
        return draw(self, where, ranked)

    monkeypatch.setattr(search._Search, "kicked", spy_kick)
    monkeypatch.setattr(Moves, "draw", spy_draw)
    return given, kicked, draws


def test_a_kick_starts_from_the_best_plan_and_a_kicked_plan_faster_than_it_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every plan scores alike, so no chain finds anything faster and the chain wanders
    # away from the best plan (the first scored): the second chain, the 53rd evaluation
    # (three starts, then (200 - 3) // 4), starts kicked from the best plan, not from where
    # the first ended; that plan is made to score less and is returned
    given, kicked, _ = _spied_kicks(monkeypatch)
    graph, cluster = build_model("mlp", batch=8), get_cluster("workstation")
    cost = RooflineCost(cluster)
    score, plans, seen = recording(lambda p: 0.5 if len(seen) == 52 else 1.0)
    p = plan(graph, cluster, MCMC(evals=200, seed=2), cost, evaluate=score)
    assert seen.count(0.5) == 1 and p.info["score_s"] == 0.5 and p.info["best_eval"] == 53
    assert (p.placement, p.order) == (plans[52].placement, plans[52].order)
    first = Problem(graph, cluster, cost)
    index = {d: k for k, d in enumerate(first.devices)}
    assert given[0][0] == [index[plans[0].placement[n]] for n in first.names]
    # the second chain finds nothing faster than its kicked plan: the third is kicked from it
    assert len(kicked) == p.info["kicks"] == 3 and given[1][0] == kicked[0][0]


def test_a_kick_draws_kick_times_the_units_moves_and_at_least_two(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, draws = _spied_kicks(monkeypatch)
    graph, cluster = build_model("mlp", batch=8), get_cluster("workstation")  # 7 units
    cost = RooflineCost(cluster)
    for kick, moves in ((0.5, 4), (0.01, 2), (1.0, 7)):
        draws.clear()
        p = plan(graph, cluster, MCMC(evals=200, seed=2, kick=kick), cost,
                 evaluate=lambda _: 1.0)
        assert p.info["kicks"] == 3 and draws == [moves] * 3


def test_a_chain_kicked_to_a_plan_that_does_not_fit_starts_from_the_best_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the kicked plan (the 53rd scored) does not fit: the chain takes no move from it, as
    # from a plan that does not fit it would take any; it proposes from the best plan
    from policies.moves import Moves

    _, kicked, _ = _spied_kicks(monkeypatch)
    proposed_from: list[Any] = []
    propose = Moves.propose

    def spy_propose(self: Any, where: Any, ranked: Any) -> Any:
        proposed_from.append((where, ranked))
        return propose(self, where, ranked)

    monkeypatch.setattr(Moves, "propose", spy_propose)
    graph, cluster = build_model("mlp", batch=8), get_cluster("workstation")
    cost = RooflineCost(cluster)
    score, _, seen = recording(lambda p: math.inf if len(seen) == 52 else 1.0)
    p = plan(graph, cluster, MCMC(evals=200, seed=2), cost, evaluate=score)
    assert seen[52] == math.inf and p.info["score_s"] == 1.0 and kicked[0] is not None
    after = proposed_from[49]  # the first chain's 49 proposals, then the second's first
    assert after[0] != kicked[0][0] and after[0] == proposed_from[0][0]


def test_a_kick_stops_drawing_once_the_time_limit_passes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a clock that moves only while a kick draws: the first draw takes it past the limit,
    # so the kick draws no second move (it would draw four), scores no kicked plan, and
    # the search stops there, saying why
    from policies import search

    _, kicked, draws = _spied_kicks(monkeypatch)
    clock = [0.0]
    monkeypatch.setattr(search.time, "perf_counter", lambda: clock[0])
    draw = search.Moves.draw

    def slow(self: Any, where: Any, ranked: Any) -> Any:
        if draws and len(draws) == len(kicked) + 1:  # within a kick (see _spied_kicks)
            clock[0] += 100.0
        return draw(self, where, ranked)

    monkeypatch.setattr(search.Moves, "draw", slow)
    graph, cluster = build_model("mlp", batch=8), get_cluster("workstation")
    cost = RooflineCost(cluster)
    p = plan(graph, cluster, MCMC(evals=200, seed=2, time_limit_s=50.0), cost,
             evaluate=lambda _: 1.0)
    assert draws == [1] and kicked == [None]
    assert p.info["kicks"] == 0 and p.info["stopped_by"] == "time_limit_s"
    assert p.info["evals"] == 3 + (200 - 3) // 4  # the starts and the first chain


def test_the_benchmark_scores_every_move_of_a_unit_and_of_a_branch_around_the_plan(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an SGD step of the mlp on the workstation (nine units, each on either device; one
    # branch, fc1 to loss): part 9's best one-unit move against each such plan built by
    # the constructor and run by the full simulator
    import networkx as nx

    import benchmarks.search_quality as quality
    from policies.bounds import lower_bound
    from policies.plans import Plan, split_by_device

    cluster = get_cluster("workstation")
    cost = RooflineCost(cluster)
    g = training_graph(build_model("mlp", batch=8), "sgd")
    cell = quality.Cell("mlp", cluster.name, g, cluster, cost, lower_bound(g, cluster, cost),
                        {"heft": 1.0}, searches={})  # far: 1 s against microseconds
    monkeypatch.setattr(quality, "cells", lambda quick: (cell,))
    screened: list[float] = []
    screen = quality._simulated_length

    def spy(self: Any, devices: np.ndarray, sequence: np.ndarray) -> float:
        # the screen's figure is the simulator's for the plan of those arrays
        screened.append(screen(self, devices, sequence))
        built = Plan.from_sequence(g, cluster.device_names, devices, sequence)
        assert screened[-1] == simulate(built, cluster, cost, links="fair").makespan_s
        return screened[-1]

    monkeypatch.setattr(quality, "_simulated_length", spy)
    row = quality.part_neighbourhoods(60, quick=True).iloc[0]
    assert screened  # the second search's chain screened its moves by the simulator
    p = quality.search_run(cell, MCMC(evals=60))[1]
    chained = g.to_networkx()
    for ops in p.order.values():
        nx.add_path(chained, ops)
    # the search's global order: ties in the graph's order
    ranked = list(nx.lexicographical_topological_sort(chained, key=g.arrays.position.get))

    def moved(units: Sequence[str], device: str) -> float:
        ops = {n for u in units for n in g.groups.get(u, (u,))}
        placement = {n: device if n in ops else d for n, d in p.placement.items()}
        return simulate(Plan(g, placement, split_by_device(ranked, placement)), cluster, cost,
                        links="fair").makespan_s

    units = ("input", "fc1", "relu1", "fc2", "relu2", "fc3", "softmax", "labels", "loss")
    fastest = min(moved([u], "cpu0" if p.placement[u] == "gpu0" else "gpu0") for u in units)
    branch = (*units[1:-2], "loss")  # fc1 to softmax, and loss
    # the branch moves to each device it is not all on already
    targets = [d for d in ("cpu0", "gpu0") if any(p.placement[u] != d for u in branch)]
    assert row["unit_moves"] == 9 and row["branches"] == 1
    assert row["branch_moves"] == len(targets)
    score = simulate(p, cluster, cost, links="fair").makespan_s
    assert row["unit_best_gain_pct"] == pytest.approx(100 * (score / fastest - 1), rel=1e-9,
                                                      abs=1e-10)
    branched = min(moved(branch, d) for d in targets)
    assert row["branch_best_gain_pct"] == pytest.approx(100 * (score / branched - 1),
                                                        rel=1e-9, abs=1e-10)
    assert row["gain_vs_heuristic"] == pytest.approx(1.0 / score - 1)


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_reaches_the_milps_optimum_and_bounds_it_from_below(seed: int) -> None:
    # benchmarks.cpsat (OR-Tools) against policy "optimal" (a MILP, HiGHS): two solvers of
    # the contention-free model, each the other's reference
    pytest.importorskip("ortools", reason="benchmarks.cpsat needs ortools (the test extra)")
    from benchmarks.cpsat import TICK, solve
    from benchmarks.placement_quality import optimum, small_cluster
    from benchmarks.search_quality import small_graph

    graph, cluster = small_graph(seed), small_cluster()
    cost = RooflineCost(cluster)
    _, best = optimum(graph, cluster, cost)
    out = solve(Problem(graph, cluster, cost), seconds=30)
    assert out.status == "OPTIMAL"
    # ticks rounded down: at most one tick lost per op and per transfer on the last path
    slack = TICK * (len(graph.ops) + len(graph.arrays.edge_src))
    assert best - 1e-12 <= out.model_s <= best + slack
    assert best - slack <= out.bound_s <= best


def test_a_cpsat_plan_keeps_its_groups_and_the_simulator_runs_it_in_its_makespan() -> None:
    pytest.importorskip("ortools", reason="benchmarks.cpsat needs ortools (the test extra)")
    from benchmarks.cpsat import solve

    graph = training_graph(build_model("mlp", batch=32), "adam")
    cluster = get_cluster("hetero-box")
    cost = RooflineCost(cluster)
    problem = Problem(graph, cluster, cost)
    hint = plan(graph, cluster, "heft", cost)
    out = solve(problem, hint=hint, seconds=20)
    assert out.plan is not None and out.status in ("OPTIMAL", "FEASIBLE")
    assert graph.groups
    for group in graph.groups.values():
        assert len({out.plan.placement[name] for name in group}) == 1
    run = simulate(out.plan, cluster, cost, links="none")
    assert run.makespan_s == pytest.approx(out.model_s, rel=1e-9)
    assert out.bound_s <= out.model_s <= contention_free(cluster, cost)(hint) * (1 + 1e-6)


def test_the_benchmark_gives_a_plan_that_does_not_fit_no_time() -> None:
    # part 10's CP-SAT program knows no memory: its plans are simulated and kept only if
    # they fit, as the heuristics' are
    import dataclasses

    from benchmarks.search_quality import simulated_s
    from hwmodels.spec import Cluster
    from policies.plans import Plan

    graph = training_graph(build_model("mlp", batch=32), "adam")
    roomy = get_cluster("workstation")
    cost = RooflineCost(roomy)
    made = plan(graph, roomy, "single_device", cost)
    p = Plan(graph, dict(made.placement), made.order)  # not bound to one cluster's definition
    assert simulated_s(p, roomy, cost) == simulate(p, roomy, cost, links="fair").makespan_s
    tiny = Cluster(roomy.name, tuple(dataclasses.replace(d, memory_bytes=2**10)
                                     for d in roomy.devices), roomy.links)
    cramped = RooflineCost(tiny)
    assert not simulate(p, tiny, cramped, links="fair").feasible
    assert simulated_s(p, tiny, cramped) == math.inf


def test_the_solver_summary_counts_faster_plans_and_leaves_plans_that_do_not_fit_out() -> None:
    import pandas as pd

    from benchmarks.search_quality import solver_summary

    df = pd.DataFrame({"mcmc_vs_bound": [1.20, 1.10, 1.30],
                       "cpsat_vs_bound": [1.00, 1.21, math.inf],
                       "cpsat_fits": [True, True, False],
                       "gain_vs_heuristic": [0.10, 0.0, 0.5],
                       "cpsat_gain_vs_heuristic": [0.32, -0.09, math.nan]})
    assert solver_summary(df) == (
        "CP-SAT's plan faster than mcmc's (simulated) on 1 of 3 (by at most 20.00%), out of "
        "memory on 1; median gain over the best heuristic where it fits +11.5% against "
        "mcmc's +5.0% there; at least 10% faster than the best heuristic on 1 of 3")
