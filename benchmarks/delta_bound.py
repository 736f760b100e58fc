"""Delta simulation under ``mcmc``'s own moves: what a move leaves to re-simulate, and
what :class:`sim.DeltaEvaluator` saves against a full simulation.

For every candidate ``mcmc`` scores, this finds the earliest time its move can change
(:func:`sim.delta.divergence`):

* on each device whose order changed, the later of the start of the op before the first
  changed position (0 when it is the first) and the sooner of the start of the old op
  there and the earliest the new op there can be ready (its producers' ends);
* the start of every op that moved, and the end of every producer of a moved op's input
  (its transfers change when it ends).

The events left to simulate are the candidate's ops and transfers that start at or after
that time, the *share left*; against each candidate, the reference is whichever plan scored
before it (the last 50) lets the most be kept, so the figure is an upper bound on what a
chain could skip. The *share retimed* is the share of its ops whose start or end differs
from every earlier plan's (the last 50): what even an evaluator that re-timed only the ops
a move changes (FlexFlow's way) would have to work out.

Then the candidates (each built again from its placement and order, untimed, as a search
builds it) are scored by four evaluators, each in a pass of its own over all of them (no
evaluator meets another's caches or the plan's work another did), ``--rounds`` passes in
turn, the median kept:

* *full*: :func:`sim.evaluator`, a whole :func:`sim.simulate` per plan, as a search runs
  it (deriving the plan's transfers, :attr:`policies.plans.Plan.transfers`, included);
* *full, transfers derived*: the same on plans whose transfers were derived beforehand,
  untimed: the simulation alone;
* *fresh*: :class:`sim.DeltaEvaluator` with ``resume=False``: the plan's arrays
  (:class:`sim.slots.Slots`) run from the start by the compiled loop, nothing kept from
  plan to plan but what the graph fixes: the least a full evaluation built from the same
  parts costs;
* *delta*: :class:`sim.DeltaEvaluator` (8 snapshots a run, the last four plans kept).

Under ``fcfs`` and ``none`` links, whose runs resume from snapshots, and ``fair`` links,
which :class:`sim.DeltaEvaluator` runs from the start each time (its flow table changes in
place), laid out from the plan's arrays: there *delta* is itself a fresh compiled run, and
*fresh* is not measured.

Every score of each equals the full simulation's in the search (the script stops on the
first that does not).

    python -m benchmarks.delta_bound [--evals 200] [--rounds 3] [--tune] [--out F]

With ``--tune``, only fresh against resumed runs on layered DAGs apart from the benchmark's
(:data:`TUNING_SIZES` ops, width 50, seed 1): what :data:`sim.delta.RESUME_ABOVE` is chosen
on.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.machine import describe, record
from hwmodels import RooflineCost, get_cluster
from policies import plan
from policies.plans import Plan
from sim import evaluator, simulate
from sim.delta import DeltaEvaluator, divergence
from workloads import build_model, training_graph
from workloads.graph import Graph
from workloads.synthetic import layered_dag

#: The link models :class:`sim.DeltaEvaluator` runs compiled (``fair`` from the start each
#: time, the others resumed from snapshots).
COMPILED = ("fcfs", "none", "fair")


def left_after(result: Any, when: float) -> float:
    """The share of a run's ops and transfers that start at or after ``when``."""
    c = result.columns
    starts = np.concatenate((c.op_start, c.transfer_start))
    return float(np.count_nonzero(starts >= when)) / max(len(starts), 1)


def changed_share(start: np.ndarray, end: np.ndarray, new_start: np.ndarray,
                  new_end: np.ndarray) -> float:
    """The share of ops that start or end at another time in the new run."""
    moved = (start != new_start) | (end != new_end)
    return float(np.count_nonzero(moved)) / max(len(start), 1)


def copies(candidates: list[Plan]) -> list[Plan]:
    """Each candidate built again from its placement and order, as a search builds it:
    nothing worked out on it yet (its transfers are derived on first use)."""
    return [Plan(p.graph, p.placement, p.order, policy=p.policy, cluster=p.cluster,
                 cluster_hash=p.cluster_hash) for p in candidates]


def derived(candidates: list[Plan]) -> list[Plan]:
    """:func:`copies` whose transfers are derived already (untimed)."""
    plans = copies(candidates)
    for p in plans:
        _ = p.transfers
    return plans


def timed_pass(scorer: Callable[[Plan], float], plans: list[Plan]) -> tuple[float, list[float]]:
    """Seconds per plan of one evaluator scoring ``plans`` one after another, and its
    scores."""
    gc.collect()  # no pass pays for the garbage of the one before
    began = time.perf_counter()
    scores = [scorer(p) for p in plans]
    return (time.perf_counter() - began) / len(plans), scores


def _ratio(ms: dict[str, float], name: str, form: str = "") -> str:
    """``ms[name]`` (with ``form``) or its ratio to delta's, a dash where not measured."""
    if name not in ms:
        return "—"
    return format(ms[name], form) if form else f"{ms[name] / ms['delta']:.2f}"


Maker = tuple[Callable[[], Callable[[Plan], float]], Callable[[list[Plan]], list[Plan]]]


def medians(makers: dict[str, Maker], candidates: list[Plan], expected: list[float],
            rounds: int) -> tuple[dict[str, float], dict[str, Callable[[Plan], float]]]:
    """Each evaluator (``name``: how to make it, and how to copy the candidates for it)
    scoring the candidates in passes of its own, ``rounds`` times in turn: the median
    milliseconds per plan, and each one's last evaluator. Stops at the first score that
    is not ``expected`` (a full simulation's)."""
    times: dict[str, list[float]] = {name: [] for name in makers}
    last: dict[str, Callable[[Plan], float]] = {}
    for _ in range(rounds):
        for name, (make, build) in makers.items():
            last[name] = make()
            seconds, scores = timed_pass(last[name], build(candidates))
            times[name].append(seconds)
            if scores != expected:
                wrong = next(i for i, (a, b) in enumerate(zip(scores, expected, strict=True))
                             if a != b)
                raise AssertionError(f"{name} scored candidate {wrong} {scores[wrong]!r}, a "
                                     f"full simulation {expected[wrong]!r}")
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}, last


def case(label: str, graph: Graph, cluster_name: str, links: str, evals: int,
         rounds: int) -> str:
    cluster = get_cluster(cluster_name)
    cost = RooflineCost(cluster)
    seen: list[tuple[Plan, np.ndarray, np.ndarray]] = []
    left: list[float] = []
    changed: list[float] = []
    expected: list[float] = []

    def analyse(p: Plan) -> float:
        r = simulate(p, cluster, cost, links=links)
        c = r.columns
        assert c is not None  # a run of plan order keeps its columns
        if seen:
            when = max(divergence(o, p, s, e) for o, s, e in seen[-50:])
            left.append(left_after(r, when))
            changed.append(min(changed_share(s, e, c.op_start, c.op_end)
                               for _, s, e in seen[-50:]))
        seen.append((p, c.op_start, c.op_end))
        expected.append(r.makespan_s if r.feasible else math.inf)
        return expected[-1]

    plan(graph, cluster, f"mcmc:evals={evals},start=heft,seed=0", cost, evaluate=analyse)
    candidates = [p for p, _, _ in seen]
    makers: dict[str, Maker] = {
        "full": (lambda: evaluator(cluster, cost, links=links), copies),
        "derived": (lambda: evaluator(cluster, cost, links=links), derived),
        **({"fresh": (lambda: DeltaEvaluator(cluster, cost, links=links, resume=False),
                      copies)}
           if links != "fair" else {}),  # under fair links, delta is a fresh run itself
        "delta": (lambda: DeltaEvaluator(cluster, cost, links=links), copies)}
    ms, last = medians(makers, candidates, expected, rounds)
    delta = last["delta"]
    assert isinstance(delta, DeltaEvaluator)
    saved = delta.stats["events_saved"] / (delta.stats["events_saved"]
                                           + delta.stats["events_run"])
    return (f"| {label} | {len(graph):,} | {links} | {len(left)} | {np.mean(left):.2f} "
            f"| {np.mean(changed):.2f} | {saved:.2f} | {ms['full']:.2f} "
            f"| {ms['derived']:.2f} | {_ratio(ms, 'fresh', '.2f')} | {_ratio(ms, 'fresh')} "
            f"| {ms['delta']:.2f} | {ms['derived'] / ms['delta']:.2f} "
            f"| {ms['full'] / ms['delta']:.2f} |")


#: Sizes of the layered DAGs (width and seed TUNING_SHAPE: apart from the benchmark's) on
#: which :data:`sim.delta.RESUME_ABOVE` is chosen.
TUNING_SIZES = (3000, 5000, 7000, 10_000, 20_000)
TUNING_SHAPE = (50, 1)
#: The layered DAGs the benchmark reports: (ops, width, seed).
REPORTED_DAGS = ((1000, 100, 0), (10_000, 100, 0))


def tune(evals: int, rounds: int) -> list[str]:
    """Fresh compiled runs against runs resumed from snapshots, ``fcfs`` links, on the
    tuning graphs: where resuming starts to pay."""
    cluster = get_cluster("quad-v100-nvlink")
    cost = RooflineCost(cluster)
    lines = ["| ops | fresh ms/eval | resumed ms/eval | fresh / resumed |",
             "|---:|---:|---:|---:|"]
    for n in TUNING_SIZES:
        graph = layered_dag(n, width=TUNING_SHAPE[0], seed=TUNING_SHAPE[1])
        seen: list[Plan] = []
        scored: list[float] = []

        def record_plan(p: Plan, seen: list[Plan] = seen, scored: list[float] = scored
                        ) -> float:
            r = simulate(p, cluster, cost)
            seen.append(p)
            scored.append(r.makespan_s if r.feasible else math.inf)
            return scored[-1]

        plan(graph, cluster, f"mcmc:evals={evals},start=heft,seed=0", cost,
             evaluate=record_plan)
        ms, _ = medians({"fresh": (lambda: DeltaEvaluator(cluster, cost, resume=False),
                                   copies),
                         "resumed": (lambda: DeltaEvaluator(cluster, cost), copies)},
                        seen, scored, rounds)
        fresh, resumed = ms["fresh"], ms["resumed"]
        lines.append(f"| {n:,} | {fresh:.2f} | {resumed:.2f} | {fresh / resumed:.2f} |")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3,
                        help="passes of each evaluator over the candidates (median kept)")
    parser.add_argument("--tune", action="store_true",
                        help="only the tuning graphs that sim.delta.RESUME_ABOVE is chosen on")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.tune:
        return record([f"{describe()}, {datetime.date.today()}",
                       f"command: python -m benchmarks.delta_bound --tune --evals "
                       f"{args.evals} --rounds {args.rounds}", "",
                       *tune(args.evals, args.rounds)], args.out)
    lines = [f"{describe()}, {datetime.date.today()}",
             f"command: python -m benchmarks.delta_bound --evals {args.evals} "
             f"--rounds {args.rounds}", "",
             "On quad-v100-nvlink (four V100s, NVLink). Shares are means over the moves; "
             "the evaluators score the same candidates in the same run, each in passes of "
             "its own (median of the rounds; see the script).",
             "",
             "| graph | ops | links | moves | share left | share retimed | events skipped "
             "| full ms/eval | full, transfers derived | fresh ms/eval | fresh / delta "
             "| delta ms/eval | derived / delta | full / delta |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    gpt2 = training_graph(build_model("gpt2_small", batch=8), "adam")
    cases = [*(("layered DAG", layered_dag(n, width=w, seed=seed))
               for n, w, seed in REPORTED_DAGS), ("GPT-2 small, Adam step", gpt2)]
    for label, graph in cases:
        for links in COMPILED:
            row = case(label, graph, "quad-v100-nvlink", links, args.evals, args.rounds)
            lines.append(row)
            print(row, flush=True)
    return record(lines, args.out)


if __name__ == "__main__":
    main()
