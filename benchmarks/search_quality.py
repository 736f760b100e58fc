"""Search with the simulator in the loop: ``mcmc`` and ``autoparallel`` against what they
must beat.

Part 1 (heuristics): Adam training steps of ResNet-50, Inception-v3, GPT-2 small and
BERT-base (the policy shoot-out's steps) on every catalog cluster. Every one-shot policy's
plan is simulated with links shared max-min fairly; the best is *the best heuristic*.
``mcmc`` (started from the best of heft, metis and m_etf, the simulator with fair links as
its evaluator) runs at each budget of ``--evals`` on the cells where the best heuristic is
more than 10% above the lower bound, and at the smallest budget on every other cell (where
it must still never be worse than its start).

Part 2 (optimum): random DAGs of 8 to 12 ops on three heterogeneous devices (the instances
of ``placement_quality.py``'s part 2); the MILP's proven optimum of the contention-free model
against ``mcmc`` scoring plans by that model (``policies.search.contention_free``) at each
budget of ``--evals``.

Part 4 (every start): part 1's cells more than 10% above the bound, ``mcmc`` at the largest
budget started from every one-shot heuristic instead.

Part 6 (headroom): part 1's cells more than 10% above the lower bound against
:func:`policies.bounds.relaxation_bound` (a linear relaxation no plan beats) and
:func:`policies.bounds.segment_bound` (the critical path's segments each scheduled exactly,
transfers paid): how far the best heuristic and ``mcmc`` at the largest budget are above
them, and whether a plan 10% faster than the best heuristic can exist at all.

Part 7 (moves): part 1's cells more than 10% above the lower bound, ``mcmc`` at the
largest budget: for each kind of move of its chain (``info["moves"]``) how many it
proposed, accepted, and found faster than its current plan, and how much the priority
search and the chain each gained (``keyed_gain``: the priority search's best over the
best start; ``chain_gain``: the plan returned over the better of the two).

Part 8 (fast links): part 1's cells more than 10% above the lower bound, the same step on
the same devices with every link 100 times faster (bandwidth, and a hundredth of the
latency): the best heuristic, the relaxation bound and ``mcmc`` at the largest budget
against that cluster's lower bound, so how much of each cell's room is its transfers'.

Part 9 (neighbourhoods): part 1's cells more than 10% above the lower bound, ``mcmc`` at the
largest budget: whether its plan is a local optimum of moves wider than its chain's, each
scored by the simulator (every unit moved alone to each other device that runs it; every
branch, a run of units each exchanging tensors with exactly two others, moved whole), and
the same search with its chain's moves screened by the simulator instead of the
contention-free model (each screened move simulated, uncounted: what a perfect screening
model could give).

Part 10 (another solver): part 1's cells more than 10% above the lower bound, ``mcmc`` at the
largest budget: CP-SAT (OR-Tools, :mod:`benchmarks.cpsat`) on the contention-free model for
``--cpsat-seconds`` a cell on two threads, hinted with ``mcmc``'s plan: its plan's makespan
in that model and simulated (fair links), and the solver's proven bound on the model's least
makespan (not on the simulated one's: contention only slows a plan, so it bounds that too).
The program knows no memory: a plan that runs out of it in the simulator has no time. A
time-limited solve: its plans depend on the machine.

Part 5 (published): for each model and global batch of NeuSight's Megatron-LM iterations
on four GPUs (``benchmarks/data``; dp4, tp4 and pp4 measured), ``autoparallel`` over the four
GPUs (FP32, Adam, as measured) against the strategy that ran fastest for real.

Part 3 (autoparallel): GPT-2 small, global batch 32, sequence 1,024, FP16, SGD, on four
DGX H100 nodes (``dgx-h100-x4-ib``): ``placelab autoparallel``'s best strategy and its wall
time against every strategy of ``experiments/scripts/parallel_scaling.py``'s table for that
model (each simulated here).

Parts run together (in one process) build each cell once (its heuristics' plans) and take
a search already run on a cell with the same parameters and integer seed, and no
wall-clock cap, from the part that ran it (a seed and a budget give the same plan): parts
1, 6, 7, 9 and 10 search each far cell at the largest budget once (part 8's cells have other
links).

    python -m benchmarks.search_quality [--evals 500,2000] [--parts 1,2,3,4,5,6,7,8,9,10]
                                        [--cpsat-seconds 300] [--quick] [--out F]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd

from benchmarks.machine import describe, record
from benchmarks.placement_quality import optimum, small_cluster
from hwmodels import RooflineCost, get_cluster, list_clusters
from hwmodels.spec import Cluster
from policies import POLICIES, plan
from policies.bounds import lower_bound, relaxation_bound, segment_bound
from policies.moves import Moves
from policies.plans import Plan
from policies.problem import Problem, model_makespan
from policies.search import MCMC, _merged, contention_free
from policies.testing import random_dag
from sim import search_evaluator, simulate
from workloads import Graph, build_model, training_graph
from workloads.errors import PlacementError

MODELS = (("resnet50", 32), ("inception_v3", 16), ("gpt2_small", 8), ("bert_base", 8))
HEURISTICS = [n for n in POLICIES.names() if POLICIES.get(n).in_all and n != "optimal"]


def heuristics(step: Any, cluster: Any, cost: Any) -> dict[str, float]:
    """Every one-shot policy's simulated step (fair links), infinity out of memory."""
    out = {}
    for name in HEURISTICS:
        try:
            out[name] = simulated_s(plan(step, cluster, name, cost), cluster, cost)
        except PlacementError:
            continue
    return out


def simulated_s(p: Plan, cluster: Cluster, cost: Any) -> float:
    """``p``'s simulated step (fair links), infinity where it runs out of memory."""
    result = simulate(p, cluster, cost, links="fair")
    return result.makespan_s if result.feasible else np.inf


@dataclass
class Cell:
    """One training step on one cluster, with every one-shot policy's simulated step."""

    model: str
    cluster_name: str
    step: Any
    cluster: Any
    cost: Any
    bound: float
    found: dict[str, float]
    #: searches run on the cell (the policy's parameters -> :func:`search_run`'s answer),
    #: None for none kept: on :func:`cells`' own, a seed and a budget give the same plan
    #: (the module's constants as they are), so a later part takes an earlier part's one
    searches: dict[str, tuple[dict[str, Any], Plan]] | None = None

    @property
    def best(self) -> tuple[float, str]:
        which = min(self.found, key=self.found.__getitem__)
        return self.found[which], which

    @property
    def far(self) -> bool:
        # a cell every heuristic ran out of memory on has no heuristic to compare with
        return bool(np.isfinite(self.best[0])) and self.best[0] / self.bound > 1.10


@functools.cache
def cells(quick: bool) -> tuple[Cell, ...]:
    """The shoot-out's cells that some one-shot policy places (built once a process: every
    part's heuristics and searches are the same)."""
    return tuple(_built_cells(quick))


def _built_cells(quick: bool) -> Iterator[Cell]:
    models = MODELS[:1] if quick else MODELS
    clusters = ["quad-v100-nvlink", "workstation"] if quick else list_clusters()
    for model, batch in models:
        step = training_graph(build_model(model, batch=batch), "adam")
        for name in clusters:
            cluster = get_cluster(name)
            cost = RooflineCost(cluster)
            found = heuristics(step, cluster, cost)
            if found:  # else nothing to compare
                yield Cell(model, name, step, cluster, cost,
                           lower_bound(step, cluster, cost), found, searches={})


def searched(cell: Cell, policy: MCMC) -> tuple[dict[str, Any], float]:
    """``policy`` on the cell with the simulator (fair links) as evaluator, as ``placelab``
    searches (:func:`sim.search_evaluator`, every score a full simulation's): the columns
    every part reports, and the search's score."""
    row, p = search_run(cell, policy)
    return row, p.info["score_s"]


def search_run(cell: Cell, policy: MCMC) -> tuple[dict[str, Any], Plan]:
    """:func:`searched`'s columns, and the plan the search returned: on a cell that keeps
    its searches, the one an earlier call returned where the policy's parameters are the
    same, with an integer seed and no wall-clock cap (its ``seconds`` that call's)."""
    params = policy.get_params()
    key = repr(sorted(params.items()))
    kept = cell.searches if isinstance(params["seed"], int) \
        and params["time_limit_s"] is None else None
    if kept is not None and key in kept:
        row, p = kept[key]
        return dict(row), p
    start = time.perf_counter()
    p = plan(cell.step, cell.cluster, policy, cell.cost,
             evaluate=search_evaluator(cell.step, cell.cluster, cell.cost, links="fair"))
    heuristic, which = cell.best
    row = {"model": cell.model, "cluster": cell.cluster_name, "evals": policy.evals,
           "best_heuristic": which, "heuristic_vs_bound": heuristic / cell.bound,
           "start": p.info["start"], "start_vs_bound": p.info["start_score_s"] / cell.bound,
           "mcmc_vs_bound": p.info["score_s"] / cell.bound,
           "gain_vs_heuristic": heuristic / p.info["score_s"] - 1,
           "best_eval": p.info["best_eval"],
           "seconds": time.perf_counter() - start}
    if kept is not None:
        kept[key] = (row, p)
    return dict(row), p  # a copy: the parts drop the columns they do not report


def part_heuristics(budgets: list[int], quick: bool) -> pd.DataFrame:
    rows = []
    for cell in cells(quick):
        # its starts as their policies plan them, simulated here on their own
        starts = min(cell.found.get(n, np.inf) for n in ("heft", "metis", "m_etf"))
        for evals in budgets if cell.far else budgets[:1]:
            row, score = searched(cell, MCMC(evals=evals))
            seconds = row.pop("seconds")
            rows.append(row | {"never_worse": score <= starts, "far_from_bound": cell.far,
                               "seconds": seconds})
            print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def part_every_start(evals: int, quick: bool) -> pd.DataFrame:
    """On the cells far from the bound: ``mcmc`` started from every one-shot heuristic
    (so never worse than the best of them)."""
    rows = []
    starts = "+".join(n for n in HEURISTICS if n not in ("optimal",))
    for cell in cells(quick):
        if cell.far:
            row, _ = searched(cell, MCMC(evals=evals, start=starts))
            del row["start_vs_bound"]
            rows.append(row)
            print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def part_headroom(evals: int, quick: bool) -> pd.DataFrame:
    """On the cells far from the bound: how far the best heuristic and ``mcmc`` (at
    ``evals``) are above :func:`policies.bounds.relaxation_bound` and
    :func:`policies.bounds.segment_bound`, which no plan beats, and whether a plan 10%
    faster than the best heuristic could exist above the higher of the two."""
    rows = []
    for cell in cells(quick):
        if cell.far:
            began = time.perf_counter()
            relaxed = relaxation_bound(cell.step, cell.cluster, cell.cost)
            lp_s = time.perf_counter() - began
            segments = segment_bound(cell.step, cell.cluster, cell.cost)
            segment_s = time.perf_counter() - began - lp_s
            tightest = max(relaxed, segments)
            row, score = searched(cell, MCMC(evals=evals))
            heuristic = cell.best[0]
            rows.append({"model": cell.model, "cluster": cell.cluster_name,
                         "best_heuristic": row["best_heuristic"],
                         "heuristic_vs_bound": row["heuristic_vs_bound"],
                         "relaxation_vs_bound": relaxed / cell.bound,
                         "segment_vs_bound": segments / cell.bound,
                         "heuristic_vs_relaxation": heuristic / relaxed,
                         "heuristic_vs_tightest": heuristic / tightest,
                         "room_for_10pct": heuristic / 1.10 >= tightest,
                         "evals": evals, "mcmc_vs_relaxation": score / relaxed,
                         "mcmc_vs_tightest": score / tightest,
                         "gain_vs_heuristic": row["gain_vs_heuristic"],
                         "relaxation_s": lp_s, "segment_s": segment_s})
            print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def part_moves(evals: int, quick: bool) -> pd.DataFrame:
    """On the cells far from the bound: ``mcmc`` at ``evals``, and for each kind of its
    chain's moves how many it proposed, accepted, and found faster than its current plan
    (``info["moves"]``), beside what the chain and the priority search gained."""
    rows = []
    for cell in cells(quick):
        if cell.far:
            row, p = search_run(cell, MCMC(evals=evals))
            info = p.info
            before = min(info["start_score_s"], info["keyed_score_s"] or np.inf)
            base = {"model": cell.model, "cluster": cell.cluster_name, "evals": evals,
                    "keyed_gain": info["start_score_s"] / before - 1,
                    "chain_gain": before / info["score_s"] - 1}
            for kind, counts in info["moves"].items():
                rows.append(base | {"kind": kind, **counts})
            print(_line(base | {"gain_vs_heuristic": row["gain_vs_heuristic"]}), flush=True)
    return pd.DataFrame(rows)


def part_neighbourhoods(evals: int, quick: bool) -> pd.DataFrame:
    """On the cells far from the bound, whether ``mcmc``'s plan (at ``evals``) is a local
    optimum of neighbourhoods wider than its chain's, each plan scored by the simulator:
    every unit (an op, or a group) moved alone to every other device that runs it, and every
    branch (:func:`branches`) moved whole; and the same search with its chain's moves
    screened by the simulator itself rather than the contention-free model (each move its
    screen draws simulated, uncounted: what a perfect screening model could give)."""
    rows = []
    for cell in cells(quick):
        if cell.far:
            row, p = search_run(cell, MCMC(evals=evals))
            problem = Problem(cell.step, cell.cluster, cell.cost)
            runs = branches(problem)
            moved = _relocations(problem, p, [[u] for u in problem.units()])
            branched = _relocations(problem, p, runs)
            with mock.patch.object(Moves, "_schedule_length", _simulated_length):
                screened = plan(cell.step, cell.cluster, MCMC(evals=evals), cell.cost,
                                evaluate=search_evaluator(cell.step, cell.cluster, cell.cost,
                                                          links="fair"))
            heuristic = cell.best[0]
            rows.append({"model": cell.model, "cluster": cell.cluster_name, "evals": evals,
                         "gain_vs_heuristic": row["gain_vs_heuristic"],
                         # in percent: the gains are a few hundredths of one
                         "unit_moves": moved[0], "unit_best_gain_pct": 100 * moved[1],
                         "branches": len(runs), "branch_moves": branched[0],
                         "branch_best_gain_pct": 100 * branched[1],
                         "simulator_screen_gain_vs_heuristic":
                             heuristic / screened.info["score_s"] - 1})
            print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def part_solver(evals: int, seconds: float, quick: bool) -> pd.DataFrame:
    """On the cells far from the bound: CP-SAT (:func:`benchmarks.cpsat.solve`, ``seconds``
    a cell) on the contention-free model from ``mcmc``'s plan (at ``evals``), its plan
    simulated as ``mcmc``'s are, beside ``mcmc``'s."""
    from benchmarks.cpsat import solve

    rows = []
    for cell in cells(quick):
        if cell.far:
            row, p = search_run(cell, MCMC(evals=evals))
            problem = Problem(cell.step, cell.cluster, cell.cost)
            began = time.perf_counter()
            out = solve(problem, hint=p, seconds=seconds)
            solve_s = time.perf_counter() - began
            # the program knows no memory: its plan can fail to fit
            simulated = np.inf if out.plan is None else simulated_s(out.plan, cell.cluster,
                                                                    cell.cost)
            heuristic = cell.best[0]
            rows.append({"model": cell.model, "cluster": cell.cluster_name,
                         "best_heuristic": row["best_heuristic"],
                         "heuristic_vs_bound": row["heuristic_vs_bound"], "evals": evals,
                         "mcmc_model_vs_bound": model_makespan(p, cell.cluster, cell.cost,
                                                               problem) / cell.bound,
                         "mcmc_vs_bound": row["mcmc_vs_bound"],
                         "gain_vs_heuristic": row["gain_vs_heuristic"],
                         "cpsat_status": out.status,
                         "cpsat_model_vs_bound": out.model_s / cell.bound,
                         "cpsat_proven_vs_bound": out.bound_s / cell.bound,
                         "cpsat_vs_bound": simulated / cell.bound,
                         "cpsat_fits": bool(np.isfinite(simulated)),
                         "cpsat_gain_vs_heuristic": heuristic / simulated - 1
                         if np.isfinite(simulated) else math.nan,
                         "cpsat_s": solve_s})
            print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def solver_summary(df: pd.DataFrame) -> str:
    """Part 10's line under its table: where CP-SAT's plans beat ``mcmc``'s, simulated."""
    fits = df[df["cpsat_fits"]]
    return (f"CP-SAT's plan faster than mcmc's (simulated) on "
            f"{int((df['cpsat_vs_bound'] < df['mcmc_vs_bound']).sum())} of {len(df)} "
            f"(by at most {(df['mcmc_vs_bound'] / df['cpsat_vs_bound']).max() - 1:.2%}), "
            f"out of memory on {int((~df['cpsat_fits']).sum())}; "
            f"median gain over the best heuristic where it fits "
            f"{fits['cpsat_gain_vs_heuristic'].median():+.1%} against mcmc's "
            f"{fits['gain_vs_heuristic'].median():+.1%} there; at least 10% faster than the "
            f"best heuristic on {int((df['cpsat_gain_vs_heuristic'] >= 0.10).sum())} "
            f"of {len(df)}")


def branches(problem: Problem) -> list[list[int]]:
    """The graph's branches as lists of units: the maximal runs of two units or more each
    exchanging tensors with exactly two other units (a chain of layers; in a training step
    a layer's forward and backward ops share a group, so the run is one both ways).

    >>> from hwmodels import RooflineCost, get_cluster
    >>> g = build_model("mlp", batch=8)  # x -> fc1 -> relu1 -> fc2 -> relu2 -> fc3 -> softmax
    >>> c = get_cluster("workstation")
    >>> p = Problem(g, c, RooflineCost(c))
    >>> [[p.names[u] for u in run] for run in branches(p)]
    [['fc1', 'relu1', 'fc2', 'relu2', 'fc3']]
    """
    import networkx as nx

    lead = problem.node_of
    g = nx.Graph()
    g.add_nodes_from(problem.units())
    g.add_edges_from((lead[i], lead[j]) for i in range(problem.n)
                     for j, _ in problem.succs[i] if lead[i] != lead[j])
    inner = g.subgraph(u for u in g if g.degree(u) == 2)
    return [sorted(run) for run in nx.connected_components(inner) if len(run) > 1]


def _relocations(problem: Problem, searched: Plan, runs: list[list[int]]
                 ) -> tuple[int, float]:
    """How many plans moving one of ``runs`` of units whole to another device that runs
    them all (every op of a moved group with its lead; each device's ops in the search's
    global order) the simulator scored, and the largest gain of one over ``searched``
    (negative where none is faster, -1 where none fits, NaN where there is no such plan)."""
    evaluate = search_evaluator(problem.graph, problem.cluster, problem.cost, links="fair")
    names, devices = problem.names, problem.devices
    index = {d: k for k, d in enumerate(devices)}
    where = np.array([index[searched.placement[n]] for n in names])
    position = {n: k for k, n in enumerate(names)}
    sequence = np.array([position[n] for n in _merged(problem.graph, searched)])
    lead = np.asarray(problem.node_of)
    base, best, count = evaluate(searched), np.inf, 0
    for run in runs:
        able = np.isfinite(problem.times[run]).all(axis=0)
        for d in np.flatnonzero(able):
            if (where[run] == d).all():
                continue
            codes = where.copy()
            codes[np.isin(lead, run)] = d
            best = min(best, evaluate(Plan.from_sequence(problem.graph, devices, codes,
                                                         sequence)))
            count += 1
    return count, base / best - 1 if count else math.nan


def _simulated_length(self: Moves, devices: np.ndarray, sequence: np.ndarray) -> float:
    """A screen's ranking by the simulator (fair links) in place of the contention-free
    model: part 9's stand-in for a perfect screening model."""
    evaluate = self.__dict__.get("_simulator")
    problem = self.problem
    if evaluate is None:
        evaluate = self.__dict__["_simulator"] = search_evaluator(
            problem.graph, problem.cluster, problem.cost, links="fair")
    return float(evaluate(Plan.from_sequence(problem.graph, problem.devices, devices,
                                             sequence)))


#: Part 8's links: this many times the bandwidth, a this-many-th of the latency.
FAST_LINKS = 100.0


def part_fast_links(evals: int, quick: bool) -> pd.DataFrame:
    """On the cells far from the bound, the same step on the same devices with every link
    :data:`FAST_LINKS` times faster: the best heuristic, :func:`policies.bounds.
    relaxation_bound` and ``mcmc`` (at ``evals``) against that cluster's lower bound, so
    how much of a cell's room above the bound is what its transfers cost."""
    rows = []
    for cell in cells(quick):
        if cell.far:
            fast = fast_links(cell.cluster, FAST_LINKS)
            cost = RooflineCost(fast)
            faster = Cell(cell.model, cell.cluster_name, cell.step, fast, cost,
                          lower_bound(cell.step, fast, cost), heuristics(cell.step, fast, cost))
            relaxed = relaxation_bound(cell.step, fast, cost)
            row, _ = searched(faster, MCMC(evals=evals))
            rows.append({"model": cell.model, "cluster": cell.cluster_name,
                         "heuristic_vs_bound": cell.best[0] / cell.bound,
                         "fast_best_heuristic": row["best_heuristic"],
                         "fast_heuristic_vs_bound": row["heuristic_vs_bound"],
                         "fast_relaxation_vs_bound": relaxed / faster.bound,
                         "evals": evals, "fast_mcmc_vs_bound": row["mcmc_vs_bound"],
                         "fast_gain_vs_heuristic": row["gain_vs_heuristic"]})
            print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def fast_links(cluster: Cluster, factor: float) -> Cluster:
    """``cluster`` with every link ``factor`` times the bandwidth and a ``factor``-th of
    the latency (devices, routes and hosts as they were), named for it.

    >>> c = fast_links(get_cluster("workstation"), 100.0)
    >>> c.bandwidth("cpu0", "gpu0") == 100 * get_cluster("workstation").bandwidth("cpu0", "gpu0")
    True
    """
    links = tuple(dataclasses.replace(link, bandwidth=link.bandwidth * factor,
                                      latency_s=link.latency_s / factor)
                  for link in cluster.links)
    return dataclasses.replace(cluster, name=f"{cluster.name}-links-x{factor:g}", links=links)


def moves_summary(df: pd.DataFrame) -> list[str]:
    """Part 7's moves summed over its cells, by kind: faster per thousand proposed."""
    total = df.groupby("kind", sort=False)[["proposed", "accepted", "faster"]].sum()
    return [f"- {kind}: {int(n['proposed'])} proposed, {int(n['accepted'])} accepted, "
            f"{int(n['faster'])} faster than the chain's current plan "
            f"({1000 * n['faster'] / max(n['proposed'], 1):.1f} per thousand), on "
            f"{int((df[df['kind'] == kind]['faster'] > 0).sum())} of "
            f"{df['model'].str.cat(df['cluster']).nunique()} cells"
            for kind, n in total.iterrows()]


#: HiGHS's relative optimality gap, within which the MILP's optimum is proven.
MILP_TOLERANCE = 1e-4
#: Seeds of the small graphs reported against the MILP optimum (``mcmc``'s defaults were
#: chosen on others: ``benchmarks.search_tuning.TUNING_SEEDS``).
REPORTED_SEEDS = range(20)


def small_graph(seed: int) -> Graph:
    """The random DAG of 8-12 ops of ``seed``."""
    return random_dag(8 + seed % 5, seed=seed, edge_probability=0.3)


def part_optimum(budgets: list[int], quick: bool) -> pd.DataFrame:
    """Each small graph's MILP optimum against ``mcmc`` at each budget (a column of gaps
    per budget, ``gap_<evals>``)."""
    cluster = small_cluster()
    cost = RooflineCost(cluster)
    rows = []
    for seed in REPORTED_SEEDS[:4] if quick else REPORTED_SEEDS:
        graph = small_graph(seed)
        best, best_s = optimum(graph, cluster, cost)
        row: dict[str, Any] = {"seed": seed, "ops": len(graph),
                               "optimal_status": best.info["status"],
                               "optimum": best_s}
        for evals in budgets:
            p = plan(graph, cluster, MCMC(evals=evals, seed=seed), cost,
                     evaluate=contention_free(cluster, cost))
            row[f"gap_{evals}"] = model_makespan(p, cluster, cost) / best_s - 1
        rows.append(row)
        print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def optimum_summary(df: pd.DataFrame, budgets: list[int]) -> list[str]:
    """Per budget: the instances where ``mcmc`` reached the optimum (within the MILP's own
    optimality tolerance, HiGHS's relative gap 1e-4), the mean and the worst gap (a plan
    below the MILP's within that tolerance counts as a gap of zero; one further below
    means the two disagree on the model, and is refused).

    >>> df = pd.DataFrame({"gap_500": [0.02, -1e-6], "gap_2000": [5e-5, 0.0]})
    >>> optimum_summary(df, [500, 2000])[0]
    '500 evals: optimum reached on 1 of 2; mean gap 1.00%; worst 2.00%'
    """
    lines = []
    for evals in budgets:
        gap = df[f"gap_{evals}"]
        if (gap < -MILP_TOLERANCE).any():
            raise ValueError(f"gap_{evals}: mcmc below the MILP's proven optimum by more than "
                             f"its tolerance ({gap.min():.2e}): the two models disagree")
        gap = gap.clip(lower=0)
        lines.append(f"{evals} evals: optimum reached on {int((gap <= MILP_TOLERANCE).sum())} of "
                     f"{len(df)}; mean gap {gap.mean():.2%}; worst {gap.max():.2%}")
    return lines


def part_autoparallel(quick: bool) -> tuple[pd.DataFrame, dict[str, Any]]:
    from experiments.autoparallel import autoparallel
    from experiments.scripts.parallel_scaling import GPUS, run, strategies

    model, batch, seq = ("bert_base", 16, 32) if quick else ("gpt2_small", 32, 1024)
    cluster, gpus = ("quad-v100-nvlink", (1, 2, 4)) if quick else ("dgx-h100-x4-ib", GPUS)
    start = time.perf_counter()
    ranked = autoparallel(model, cluster, global_batch=batch, seq_len=seq, dtype="fp16",
                          optimizer="sgd", workers=None)
    wall = time.perf_counter() - start
    hand = pd.DataFrame([run(cluster, model, batch, seq, "fp16", *s, algorithm)
                         for n in gpus for s in strategies(model, n)
                         for algorithm in (("ring", "hierarchical") if n >= 16 and s[0] == "dp"
                                           else ("ring",))])
    top = ranked.iloc[0]
    best_hand = hand[hand["feasible"]].sort_values("step_s").iloc[0]
    summary = {"model": model, "cluster": cluster, "autoparallel": top["strategy"],
               "autoparallel_step_ms": top["step_s"] * 1e3, "wall_s": wall,
               "simulated": int(ranked["step_s"].notna().sum()), "ranked": len(ranked),
               "untried": ranked.attrs["untried"],
               "best_hand_picked": f"{best_hand['strategy']} on {best_hand['gpus']} GPUs",
               "best_hand_picked_step_ms": best_hand["step_s"] * 1e3,
               "at_least_as_fast": bool(top["step_s"] <= best_hand["step_s"])}
    print(summary, flush=True)
    return hand[["strategy", "gpus", "dp", "pp", "tp", "step_s", "feasible"]], summary


def part_published(quick: bool) -> pd.DataFrame:
    """NeuSight's Megatron-LM iterations on four GPUs (gpu_published.py's part 3): the
    strategy autoparallel picks against the one that ran fastest for real."""
    from gpu_published import FOUR_GPU, ZOO

    from experiments.autoparallel import autoparallel
    from hwmodels.published import neusight_models

    groups: dict[tuple[str, str, int, int], dict[str, float]] = {}
    for m in neusight_models():
        if m.parallel != "none":
            groups.setdefault((m.device, m.model, m.batch, m.seqlen), {})[m.parallel] = m.e2e_s
    rows = []
    for (device, model, batch, seq), measured in list(groups.items())[:1 if quick else None]:
        start = time.perf_counter()
        ranked = autoparallel(ZOO[model], FOUR_GPU[device], global_batch=batch, seq_len=seq,
                              dtype="fp32", optimizer="adam", gpus=[4])
        top = ranked.iloc[0]
        shape = {(4, 1, 1): "dp4", (1, 4, 1): "tp4", (1, 1, 4): "pp4"}.get(
            (int(top["dp"]), int(top["tp"]), int(top["pp"])), "")  # (dp, tp, pp)
        fastest = min(measured, key=measured.__getitem__)
        rows.append({"gpus": f"4x {device}", "model": model, "global_batch": batch,
                     "measured": ", ".join(f"{k} {v * 1e3:.0f} ms"
                                           for k, v in sorted(measured.items())),
                     "fastest_measured": fastest, "autoparallel": top["strategy"],
                     "picks_the_fastest": shape == fastest,
                     "simulated_ms": top["step_s"] * 1e3,
                     "seconds": time.perf_counter() - start})
        print(_line(rows[-1]), flush=True)
    return pd.DataFrame(rows)


def _line(row: dict[str, Any]) -> str:
    return "| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v)
                             for v in row.values()) + " |"


def table(df: pd.DataFrame) -> list[str]:
    """``df`` as a Markdown table, each float to three places as its row's line prints it
    (rounded once: rounding to four places first could lift a figure by 0.001).

    >>> table(pd.DataFrame({"ratio": [1.10449], "evals": [2000]}))[2]
    '| 1.104 | 2000 |'
    """
    head = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    return [head, rule, *(_line(row) for row in df.to_dict(orient="records"))]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", default="500,2000")
    parser.add_argument("--parts", default="1,2,3")
    parser.add_argument("--cpsat-seconds", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    parts = {int(p) for p in args.parts.split(",")}
    budgets = [int(e) for e in args.evals.split(",")]
    largest = max(budgets)  # parts 4 and 6-10 search at the largest budget
    lines = [describe(), f"date: {datetime.date.today().isoformat()}",
             f"command: python -m benchmarks.search_quality --evals {args.evals} "
             f"--parts {args.parts}"
             f"{f' --cpsat-seconds {args.cpsat_seconds:g}' if 10 in parts else ''}"
             f"{' --quick' if args.quick else ''}"]
    if 1 in parts:
        df = part_heuristics(budgets, args.quick)
        far = df[df["far_from_bound"]]
        lines += ["", "### Part 1: mcmc against the best heuristic (fair links)", "",
                  *table(df), ""]
        for evals, rows in far.groupby("evals"):
            won = int((rows["gain_vs_heuristic"] >= 0.10).sum())
            lines.append(f"{evals} evals, cells more than 10% above the bound: {len(rows)}; "
                         f"mcmc at least 10% faster than the best heuristic on {won}; median "
                         f"gain {rows['gain_vs_heuristic'].median():+.1%}; never worse than "
                         f"its starts: {bool(rows['never_worse'].all())}")
        lines.append(f"never worse than heft, metis and m_etf (simulated on their own) on "
                     f"every cell: "
                     f"{bool(df['never_worse'].all())}")
    if 2 in parts:
        df = part_optimum(budgets, args.quick)
        lines += ["", "### Part 2: mcmc against the MILP optimum (contention-free model)", "",
                  *table(df), "", *optimum_summary(df, budgets)]
    if 4 in parts:
        df = part_every_start(largest, args.quick)
        won = int((df["gain_vs_heuristic"] >= 0.10).sum())
        lines += ["", f"### Part 4: mcmc from every one-shot heuristic, {largest} evals, cells "
                  f"more than 10% above the bound", "", *table(df), "",
                  f"at least 10% faster than the best heuristic on {won} of {len(df)}; "
                  f"median gain {df['gain_vs_heuristic'].median():+.1%}"]
    if 6 in parts:
        df = part_headroom(largest, args.quick)
        room = df[df["room_for_10pct"]]
        lines += ["", f"### Part 6: headroom above the relaxation and segment bounds, cells "
                  f"more than 10% above the bound, mcmc at {largest} evals", "", *table(df), "",
                  f"a plan 10% faster than the best heuristic can exist on {len(room)} of "
                  f"{len(df)} (the others: it would beat the relaxation or the segment "
                  f"bound); mcmc at least 10% faster on "
                  f"{int((df['gain_vs_heuristic'] >= 0.10).sum())} of {len(df)}, and on "
                  f"{int((room['gain_vs_heuristic'] >= 0.10).sum())} of {len(room)} with room"]
    if 7 in parts:
        df = part_moves(largest, args.quick)
        lines += ["", f"### Part 7: the chain's moves by kind, cells more than 10% above the "
                  f"bound, mcmc at {largest} evals", "", *table(df), "", *moves_summary(df)]
    if 8 in parts:
        df = part_fast_links(largest, args.quick)
        lines += ["", f"### Part 8: links {FAST_LINKS:g} times faster, cells more than 10% "
                  f"above the bound, mcmc at {largest} evals", "", *table(df), "",
                  f"the best heuristic within 5% of the bound with fast links on "
                  f"{int((df['fast_heuristic_vs_bound'] <= 1.05).sum())} of {len(df)}"]
    if 9 in parts:
        df = part_neighbourhoods(largest, args.quick)
        lines += ["", f"### Part 9: wider neighbourhoods around mcmc's plans, cells more than "
                  f"10% above the bound, mcmc at {largest} evals", "", *table(df), "",
                  f"a one-unit move faster than mcmc's plan on "
                  f"{int((df['unit_best_gain_pct'] > 0).sum())} of {len(df)} (at most "
                  f"{df['unit_best_gain_pct'].max():.3f}%), a branch's on "
                  f"{int((df['branch_best_gain_pct'] > 0).sum())} (at most "
                  f"{df['branch_best_gain_pct'].max():.3f}%); the simulator as the chain's "
                  f"screen: median gain {df['simulator_screen_gain_vs_heuristic'].median():+.1%} "
                  f"against {df['gain_vs_heuristic'].median():+.1%}, 10% past the best "
                  f"heuristic on {int((df['simulator_screen_gain_vs_heuristic'] >= 0.10).sum())}"
                  f" of {len(df)}"]
    if 10 in parts:
        df = part_solver(largest, args.cpsat_seconds, args.quick)
        lines += ["", f"### Part 10: CP-SAT from mcmc's plans, {args.cpsat_seconds:g} s a cell, "
                  f"cells more than 10% above the bound, mcmc at {largest} evals", "",
                  *table(df), "", solver_summary(df)]
    if 5 in parts:
        df = part_published(args.quick)
        lines += ["", "### Part 5: autoparallel against NeuSight's measured 4-GPU strategies",
                  "", *table(df), "",
                  f"picks the strategy that ran fastest for real in "
                  f"{int(df['picks_the_fastest'].sum())} of {len(df)} (strategies not measured "
                  f"cannot be checked)"]
    if 3 in parts:
        hand, summary = part_autoparallel(args.quick)
        lines += ["", "### Part 3: autoparallel against the parallel-scaling strategies", "",
                  *table(hand), "", *(f"- {k}: {v}" for k, v in summary.items())]
    return record(lines, args.out)


if __name__ == "__main__":
    print(main())
