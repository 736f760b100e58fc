"""How much re-simulating only what a move changes could save: the ceilings of delta
simulation under ``mcmc``'s own moves.

A search move changes a plan from some point of its timeline on; a simulator that kept the
previous run could restore its state just before that point and simulate only the rest.
For every candidate ``mcmc`` scores, this finds the earliest time the move can change
(:func:`sim.delta.divergence`):

* on each device whose order changed, the later of the start of the op before the first
  changed position (0 when it is the first) and the sooner of the start of the old op
  there and the earliest the new op there can be ready (its producers' ends);
* the start of every op that moved, and the end of every producer of a moved op's input
  (its transfers change when it ends).

The events left to simulate are the candidate's ops and transfers that start at or after
that time, the *share left*. Against each candidate, the reference is whichever plan scored
before it (the last 50) lets the most be kept; the chain's current plan is among them, so
the figure is an upper bound on what the chain would get.

Beside them, the delta evaluator itself (:class:`sim.DeltaEvaluator`, which restores the
latest of 16 snapshots per run from before that time, against the last four plans it
simulated) scores the same candidates as a full simulation does, both timed in the same run:
its share of events skipped, milliseconds per evaluation, and the speed-up.

A second share bounds every exact evaluator, prefix-reusing or not (FlexFlow's delta
simulation re-times only the tasks whose times change): whatever it reuses, it must still
work out the new times of the ops whose start or end differs from every earlier plan's
(the last 50 scored), the *share retimed*.

Four ceilings per case, each the total time of full evaluations over the least the
evaluator could spend, with each op or event it must redo costing what a full run's event
loop spends on it, and restoring state free; ``s`` is the loop's share of a full
evaluation (the rest builds the plan's lists, its *wiring*), measured here:

* prefix, wiring paid: ``1 / (left · s + 1 - s)``: an evaluator that builds each new
  plan's wiring in full, as :class:`sim.DeltaEvaluator` does;
* prefix, wiring free: ``1 / (left · s)``: one that also updated the wiring for nothing;
* exact, wiring paid and free: the same with the share retimed (transfers that change
  free), so upper bounds for an evaluator that works out an op's times no faster than the
  simulator does.

    python -m benchmarks.delta_bound [--evals 200] [--out F]
"""

from __future__ import annotations

import argparse
import datetime
import time
from typing import Any

import numpy as np

from benchmarks.machine import describe, record
from hwmodels import RooflineCost, get_cluster
from policies import plan
from policies.plans import Plan
from sim import evaluator, simulate
from sim.delta import DeltaEvaluator, divergence
from sim.engine import Simulation
from workloads import build_model, training_graph
from workloads.graph import Graph
from workloads.synthetic import layered_dag


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


def loop_share(p: Plan, cluster: Any, cost: Any, links: str) -> float:
    """The share of a full evaluation spent in the event loop (median of five)."""
    shares = []
    run = Simulation.run
    for _ in range(5):
        began = time.perf_counter()
        simulate(p, cluster, cost, links=links)
        full = time.perf_counter() - began
        looped: list[float] = []

        def timed_run(self: Simulation, looped: list[float] = looped) -> None:
            t = time.perf_counter()
            run(self)
            looped.append(time.perf_counter() - t)

        Simulation.run = timed_run  # type: ignore[method-assign]
        try:
            began = time.perf_counter()
            simulate(p, cluster, cost, links=links)
            full = min(full, time.perf_counter() - began)
        finally:
            Simulation.run = run  # type: ignore[method-assign]
        shares.append(min(looped[0] / full, 1.0))
    return float(np.median(shares))


def case(label: str, graph: Graph, cluster_name: str, links: str, evals: int) -> str:
    cluster = get_cluster(cluster_name)
    cost = RooflineCost(cluster)
    seen: list[tuple[Plan, np.ndarray, np.ndarray]] = []
    left: list[float] = []
    changed: list[float] = []
    full, delta = evaluator(cluster, cost, links=links), DeltaEvaluator(cluster, cost,
                                                                        links=links)
    clock = {"full": 0.0, "delta": 0.0}

    def evaluate(p: Plan) -> float:
        r = simulate(p, cluster, cost, links=links)
        c = r.columns
        if seen:
            when = max(divergence(o, p, s, e) for o, s, e in seen[-50:])
            left.append(left_after(r, when))
            changed.append(min(changed_share(s, e, c.op_start, c.op_end)
                               for _, s, e in seen[-50:]))
        seen.append((p, c.op_start, c.op_end))
        scores = {}
        for name, scorer in (("full", full), ("delta", delta)):
            began = time.perf_counter()
            scores[name] = scorer(p)
            clock[name] += time.perf_counter() - began
        if scores["full"] != scores["delta"]:
            raise AssertionError(f"delta simulation scored {scores['delta']!r}, a full one "
                                 f"{scores['full']!r}")
        return scores["full"]

    searched = plan(graph, cluster, f"mcmc:evals={evals},start=heft,seed=0", cost,
                    evaluate=evaluate)
    share = loop_share(searched, cluster, cost, links)
    mean_left = float(np.mean(left))
    mean_changed = float(np.mean(changed))
    saved = delta.stats["events_saved"] / (delta.stats["events_saved"]
                                           + delta.stats["events_run"])
    ceilings = [1 / (x * share + paid * (1 - share))
                for x in (mean_left, mean_changed) for paid in (1, 0)]
    return (f"| {label} | {len(graph):,} | {links} | {len(left)} | {share:.2f} "
            f"| {mean_left:.2f} | {mean_changed:.2f} | "
            + " | ".join(f"{c:.2f}" for c in ceilings)
            + f" | {saved:.2f} | {clock['full'] / evals * 1e3:.1f} "
            f"| {clock['delta'] / evals * 1e3:.1f} | {clock['full'] / clock['delta']:.2f} |")


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=200)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    lines = [f"{describe()}, {datetime.date.today()}",
             f"command: python -m benchmarks.delta_bound --evals {args.evals}", "",
             "On quad-v100-nvlink (four V100s, NVLink). Shares are means over the moves; "
             "ceilings are against a whole full evaluation (see the script); the last four "
             "columns time `sim.DeltaEvaluator` against full simulations of the same "
             "candidates in the same run.", "",
             "| graph | ops | links | moves | loop share s | share left | share retimed "
             "| ceiling, prefix, wiring paid | ceiling, prefix, wiring free "
             "| ceiling, exact, wiring paid | ceiling, exact, wiring free | events skipped "
             "| full ms/eval | delta ms/eval | speed-up |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    gpt2 = training_graph(build_model("gpt2_small", batch=8), "adam")
    cases = [("layered DAG", layered_dag(1000, width=100, seed=0)),
             ("layered DAG", layered_dag(10_000, width=100, seed=0)),
             ("GPT-2 small, Adam step", gpt2)]
    for label, graph in cases:
        for links in ("fcfs", "fair"):
            row = case(label, graph, "quad-v100-nvlink", links, args.evals)
            lines.append(row)
            print(row, flush=True)
    return record(lines, args.out)


if __name__ == "__main__":
    main()
