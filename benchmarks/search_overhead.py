"""The search's own cost per evaluation, apart from its evaluator: ``mcmc``'s chain drawing
a move (and, screened, estimating 16) and building the candidate's plan, against scoring
that plan with the evaluator ``benchmarks/search_quality.py`` gives it.

On layered DAGs of 1k and 10k ops (``benchmarks/delta_bound.py``'s) and GPT-2 small's Adam
step, on four V100s, from HEFT's plan: a chain of ``--proposals`` proposals for each
``screen`` (1, 16), each taken where the contention-free model puts it no slower than the
chain's state (the walk itself untimed); then the screened walk's candidates built into
plans as the search builds them and scored by :func:`sim.search_evaluator` (``fair``
links), each timed on its own: means over a walk, the least of ``--rounds`` walks (the
same walk each time: the machine's noise only adds). Last, the priority search (``mcmc``'s
``keyed`` phase, :func:`policies.keys.key_search`) over ``--proposals`` evaluations with
every plan scored alike (so each move is taken): what one of its evaluations costs apart
from the evaluator (moves drawn, decoded and screened by the scheduler's estimate, the
plan of the one scored built and checked), the least of ``--rounds`` runs. And a kicked
restart's own cost: ``mcmc``'s ``kick`` (its default share) of the units' moves drawn from
HEFT's plan, unscreened (:meth:`policies.search._Search.kicked`), the least of ``--rounds``,
against the evaluation above.

    python -m benchmarks.search_overhead [--proposals 200] [--rounds 3] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import math
import time
from collections.abc import Callable

import numpy as np

from benchmarks.delta_bound import REPORTED_DAGS
from benchmarks.machine import describe, record
from hwmodels import RooflineCost, get_cluster
from policies import plan
from policies.keys import key_search
from policies.moves import Moves
from policies.plans import Plan
from policies.problem import Problem
from policies.search import MCMC, _Search
from sim import search_evaluator
from workloads import build_model, training_graph
from workloads.graph import Graph
from workloads.synthetic import layered_dag

#: The chain's screens compared: unscreened, and ``mcmc``'s default.
SCREENS = (1, MCMC().screen)


def walk(problem: Problem, start: tuple[list[int], list[str]], screen: int,
         proposals: int) -> tuple[float, list[tuple[np.ndarray, np.ndarray]]]:
    """Mean seconds a proposal of a chain with ``screen`` takes from ``start``, and its
    candidates as the search builds plans from them (each op's device and the global
    order's op indices, which the proposal worked out); a candidate the model puts no
    slower becomes the chain's state."""
    moves = Moves(problem, 0.3, np.random.default_rng(0), screen)
    where, ranked = start
    now, spent, candidates = moves.estimate(where, ranked), 0.0, []
    for _ in range(proposals):
        began = time.perf_counter()
        moved = moves.propose(where, ranked)
        spent += time.perf_counter() - began
        assert moved is not None  # every graph here has ops that can move
        candidates.append(moves.plan_arrays(*moved))
        length = moves.estimate(*moved)
        if length <= now:
            (where, ranked), now = moved, length
    return spent / proposals, candidates


def mean_ms(run: Callable[[], object], count: int, rounds: int) -> float:
    """The least over ``rounds`` of the milliseconds ``run`` takes, over ``count``."""
    least = math.inf
    for _ in range(rounds):
        gc.collect()
        began = time.perf_counter()
        run()
        least = min(least, time.perf_counter() - began)
    return 1e3 * least / count


def row(label: str, graph: Graph, proposals: int, rounds: int) -> tuple[str, str]:
    """The table's line for ``graph``, and the kick table's."""
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    search = _Search(MCMC(), graph, cluster, cost, lambda _: 0.0)
    problem = search.problem
    start = search.state(plan(graph, cluster, "heft", cost))
    ms = {}
    for screen in SCREENS:  # the same walk each round; the screened one's candidates kept
        spent = []
        for _ in range(rounds):
            seconds, candidates = walk(problem, start, screen, proposals)
            spent.append(seconds)
        ms[screen] = 1e3 * min(spent)
    keyed = mean_ms(lambda: key_search(problem, lambda _: 0.0, lambda: True,
                                       np.random.default_rng(0), proposals), proposals, rounds)

    def built() -> list[Plan]:  # as _Search.score builds them, its lookup of the arrays aside
        return [Plan.from_sequence(graph, problem.devices, codes, sequence, policy="mcmc")
                for codes, sequence in candidates]

    plans = built()
    build = mean_ms(built, len(plans), rounds)
    evaluate = search_evaluator(graph, cluster, cost, links="fair")
    evaluate(plans[0])  # compiled code and the graph's arrays, once
    scored = mean_ms(lambda: [evaluate(p) for p in plans], len(plans), rounds)
    own = ms[SCREENS[-1]] + build
    kick = mean_ms(lambda: search.kicked(start), 1, rounds)
    units, drawn = len(search.moves.units), search.kick_moves()
    return (f"| {label} | {len(graph):,} | {ms[1]:.2f} | {ms[SCREENS[-1]]:.2f} | {build:.2f} "
            f"| {scored:.2f} | {own / (own + scored):.2f} | {keyed:.2f} |",
            f"| {label} | {len(graph):,} | {units:,} | {drawn:,} | {kick:.2f} "
            f"| {kick / scored:.1f} |")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3,
                        help="walks and passes timed, the least kept")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    lines = [f"{describe()}, {datetime.date.today()}",
             f"command: python -m benchmarks.search_overhead --proposals {args.proposals} "
             f"--rounds {args.rounds}",
             "", f"| graph | ops | proposal ms, screen 1 | proposal ms, screen {SCREENS[-1]} "
             "| plan built ms | evaluation ms (fair links) | search's own share, screened "
             "| priority move ms |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    cases = [(f"layered DAG, width {w}", layered_dag(n, width=w, seed=seed))
             for n, w, seed in REPORTED_DAGS]
    cases.append(("GPT-2 small, Adam step",
                  training_graph(build_model("gpt2_small", batch=8), "adam")))
    kicks = ["", "| graph | ops | units | moves a kick draws | kick ms | kick / evaluation |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, graph in cases:
        line, kick = row(label, graph, args.proposals, args.rounds)
        lines.append(line)
        kicks.append(kick)
        print(line, flush=True)
    print("\n".join(kicks), flush=True)
    return record(lines + kicks, args.out)


if __name__ == "__main__":
    main()
