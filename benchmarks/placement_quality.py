"""Placement quality and speed of every policy, in five parts.

1. Zoo training steps x catalog clusters x every policy: simulated step time, its ratio to
   the lower bound, feasibility, and the policy's wall time.
2. Random graphs of 8-12 ops on a heterogeneous 3-device cluster: heft, m_etf (both tie
   rules) and metis against the MILP optimum, in the model they all share (contention-free;
   the MILP's objective) and simulated with contention.
3. Placement wall time of every heuristic on a 10k-op layered graph on 16 H100s.
4. The list scheduler compiled (:mod:`policies.compiled`) against the interpreted one, in
   the same run: HEFT's and the priority search's decoder on part 3's graph and on two
   training steps (median of repeated decodes under perturbed priorities, the schedules
   checked equal), and ``mcmc`` at 500 evaluations on each step both ways, its chain's
   screen too (the plans checked equal).
5. Checking a plan: a search candidate with the priorities ``mcmc`` gives it, checked
   through the one order they give (every edge and every device's order must follow it,
   checked in arrays), against the same plan checked in full (strongly connected
   components) and with priorities no order follows (reversed), on part 4's graphs, in the
   same run (median of repeated constructions).

    python -m benchmarks.placement_quality [--part 1,2,3,4,5] [--quick] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from benchmarks.machine import describe, record
from hwmodels import Cluster, Device, Link, RooflineCost, get_cluster
from policies import POLICIES, plan
from policies.bounds import lower_bound
from policies.keys import PredictedFinish
from policies.listsched import HEFT, ready_order
from policies.moves import Moves
from policies.optimal import Optimal
from policies.plans import Plan, priorities_from_order, split_by_device
from policies.problem import Problem, model_makespan
from policies.testing import random_dag
from sim import search_evaluator, simulate
from workloads import Graph, build_model, training_graph
from workloads.errors import PlacementError
from workloads.synthetic import layered_dag

HEURISTICS = [n for n in POLICIES.names() if n != "optimal" and POLICIES.get(n).in_all]
WORKLOADS = (("resnet50", 32, None), ("inception_v3", 16, None), ("bert_base", 8, 128),
             ("gpt2_small", 4, 512))
CLUSTERS = ("workstation", "dgx1-v100", "dgx-h100", "hetero-box")


def optimum(graph: Graph, cluster: Cluster, cost: RooflineCost) -> tuple[Plan, float]:
    """The MILP's optimal plan of ``graph`` (a million nodes at most) and its makespan in
    the contention-free model."""
    best = plan(graph, cluster, Optimal(node_limit=1_000_000), cost)
    if best.estimated_makespan_s is None:
        raise PlacementError(f"policy 'optimal' gave no makespan for {graph.name!r}")
    return best, best.estimated_makespan_s


def part_zoo(quick: bool) -> pd.DataFrame:
    rows = []
    workloads = WORKLOADS[:1] if quick else WORKLOADS
    for model, batch, seq in workloads:
        step = training_graph(build_model(model, batch=batch, seq_len=seq), "adam")
        for cluster_name in CLUSTERS[:2] if quick else CLUSTERS:
            cluster = get_cluster(cluster_name)
            cost = RooflineCost(cluster)
            bound = lower_bound(step, cluster, cost)
            for policy in HEURISTICS:
                start = time.perf_counter()
                try:
                    p = plan(step, cluster, policy, cost)
                except PlacementError as err:
                    rows.append({"model": model, "cluster": cluster_name, "policy": policy,
                                 "step_ms": float("nan"), "vs_bound": float("nan"),
                                 "feasible": False, "place_s": time.perf_counter() - start,
                                 "note": str(err)[:60]})
                    continue
                elapsed = time.perf_counter() - start
                r = simulate(p, cluster, cost)
                rows.append({"model": model, "cluster": cluster_name, "policy": policy,
                             "step_ms": r.makespan_s * 1e3, "vs_bound": r.makespan_s / bound,
                             "feasible": r.feasible, "place_s": elapsed,
                             "note": "" if r.feasible else "out of memory"})
    return pd.DataFrame(rows)


def small_cluster() -> Cluster:
    """A CPU, a mid GPU and a fast GPU, fully connected (heterogeneous, contention-prone)."""
    devices = (Device("cpu", "cpu", {"fp32": 2e12}, 2**36, 2e11),
               Device("gpu-a", "gpu", {"fp32": 15e12}, 2**34, 9e11),
               Device("gpu-b", "gpu", {"fp32": 30e12}, 2**34, 2e12))
    links = (Link("cpu", "gpu-a", 16e9, 2e-6), Link("cpu", "gpu-b", 16e9, 2e-6),
             Link("gpu-a", "gpu-b", 50e9, 1e-6))
    return Cluster("small3", devices, links)


def part_optimal(quick: bool) -> pd.DataFrame:
    cluster = small_cluster()
    cost = RooflineCost(cluster)
    rows = []
    seeds = range(4) if quick else range(20)
    for seed in seeds:
        graph = random_dag(8 + seed % 5, seed=seed, edge_probability=0.3)
        best, best_model = optimum(graph, cluster, cost)
        best_sim = simulate(best, cluster, cost).makespan_s
        for policy in ("heft", "m_etf", "m_etf:ties=level", "metis"):
            p = plan(graph, cluster, policy, cost)
            rows.append({"seed": seed, "ops": len(graph), "policy": policy,
                         "model_ratio": model_makespan(p, cluster, cost) / best_model,
                         "sim_ratio": simulate(p, cluster, cost).makespan_s / best_sim,
                         "optimal_status": best.info["status"],
                         "gap": best.info["mip_gap"]})
    return pd.DataFrame(rows)


def part_speed(quick: bool) -> pd.DataFrame:
    graph = layered_dag(2_000 if quick else 10_000, width=500, seed=0)
    cluster = get_cluster("dgx-h100-x2-ib")
    cost = RooflineCost(cluster)
    plan(layered_dag(50, width=5, seed=0), cluster, "heft", cost)  # untimed: numba's load
    rows = []
    # m-ETF and m-SCT also with the transfer model and budget they had before Baechi's
    for policy in (*HEURISTICS, "m_etf:transfers=free,budget=conservative",
                   "m_sct:transfers=free,budget=conservative"):
        start = time.perf_counter()
        p = plan(graph, cluster, policy, cost)
        elapsed = time.perf_counter() - start
        rows.append({"policy": policy, "ops": len(graph), "devices": len(cluster.devices),
                     "place_s": elapsed, "devices_used": len(p.order)})
    return pd.DataFrame(rows)


def _decode_seconds(p: Problem, chooser: HEFT, repeats: int) -> tuple[float, float]:
    """Median seconds of one decode compiled and interpreted, under the same perturbed
    priorities (the schedules must agree)."""
    rng = np.random.default_rng(0)
    fast, slow = [], []
    for _ in range(repeats):
        priority = (np.asarray(p.upward_rank())
                    * np.exp(0.1 * rng.standard_normal(p.n))).tolist()
        order = ready_order(p, priority)
        start = time.perf_counter()
        a = chooser.decode(p, priority, order)
        fast.append(time.perf_counter() - start)
        start = time.perf_counter()
        b = chooser.decode_interpreted(p, priority, order, chooser.prepare(p, priority))
        slow.append(time.perf_counter() - start)
        if (a.devices, a.order, a.estimated_makespan_s) != \
                (b.devices, b.order, b.estimated_makespan_s):
            raise AssertionError(f"compiled and interpreted schedules differ on {p.graph.name}")
    return statistics.median(fast), statistics.median(slow)


def _search_seconds(graph: Graph, cluster: Cluster, cost: RooflineCost,
                    evals: int) -> tuple[float, float]:
    """Seconds of ``mcmc`` (simulator in the loop) with the compiled scheduler and chain's
    screen and with the interpreted ones (the plans must agree)."""
    seconds, plans = [], []
    for compiled in (True, False):
        HEFT.compiled = PredictedFinish.compiled = Moves.compiled = compiled
        try:
            start = time.perf_counter()
            plans.append(plan(graph, cluster, f"mcmc:evals={evals}", cost,
                              evaluate=search_evaluator(graph, cluster, cost, links="fair")))
            seconds.append(time.perf_counter() - start)
        finally:
            HEFT.compiled = PredictedFinish.compiled = Moves.compiled = True
    if plans[0].placement != plans[1].placement or plans[0].order != plans[1].order:
        raise AssertionError(f"mcmc's plans differ on {graph.name}")
    return seconds[0], seconds[1]


def _timed_cases(quick: bool) -> list[tuple[str, Graph, str]]:
    """Part 3's graph and two training steps, each with its cluster."""
    cases = [("layered", layered_dag(2_000 if quick else 10_000, width=500, seed=0),
              "dgx-h100-x2-ib")]
    for model, batch, on in (("inception_v3", 16, "quad-v100-nvlink"),
                             ("bert_base", 8, "workstation"))[:1 if quick else 2]:
        cases.append((model, training_graph(build_model(model, batch=batch), "adam"), on))
    return cases


def part_compiled(quick: bool) -> pd.DataFrame:
    """Part 4: compiled against interpreted, in the same run."""
    rows = []
    for name, graph, cluster_name in _timed_cases(quick):
        cluster = get_cluster(cluster_name)
        cost = RooflineCost(cluster)
        p = Problem(graph, cluster, cost)
        HEFT().decode(p, p.upward_rank())  # untimed: the tables, built once per problem
        for chooser in (HEFT(), PredictedFinish()):
            fast, slow = _decode_seconds(p, chooser, 3 if name == "layered" else 20)
            rows.append({"graph": name, "ops": p.n, "cluster": cluster_name,
                         "what": f"decode ({type(chooser).__name__})", "compiled_s": fast,
                         "interpreted_s": slow, "speedup": slow / fast})
        if name != "layered":
            fast, slow = _search_seconds(graph, cluster, cost, 100 if quick else 500)
            rows.append({"graph": name, "ops": p.n, "cluster": cluster_name,
                         "what": f"mcmc:evals={100 if quick else 500}", "compiled_s": fast,
                         "interpreted_s": slow, "speedup": slow / fast})
    return pd.DataFrame(rows)


def part_checks(quick: bool) -> pd.DataFrame:
    """Part 5: a search candidate checked through the order its priorities give, against
    the same plan checked in full (that order's check switched off), and against
    priorities no order follows (reversed: the order's check fails, then the full one)."""
    from unittest import mock

    from policies.search import _merged

    rows = []
    for name, graph, cluster_name in _timed_cases(quick):
        cluster = get_cluster(cluster_name)
        start = plan(graph, cluster, "metis", RooflineCost(cluster))
        ranked = _merged(graph, start)  # as mcmc's chain orders a candidate
        orders = split_by_device(ranked, start.placement)
        priority = priorities_from_order(ranked)
        by_order = _check_seconds(graph, start.placement, orders, priority)
        with mock.patch.object(Plan, "_priorities_follow", lambda self, chains: False):
            full = _check_seconds(graph, start.placement, orders, priority)
        reversed_ = _check_seconds(graph, start.placement, orders,
                                   {n: -v for n, v in priority.items()})
        rows.append({"graph": name, "ops": len(graph), "cluster": cluster_name,
                     "by_order_ms": by_order * 1e3, "full_check_ms": full * 1e3,
                     "speedup": full / by_order, "no_order_ms": reversed_ * 1e3})
    return pd.DataFrame(rows)


def _check_seconds(graph: Graph, placement: Mapping[str, str],
                   orders: Mapping[str, Sequence[str]], priority: dict[str, float]) -> float:
    """Median seconds of 20 constructions (each checked) of one plan."""
    Plan(graph, placement, orders, priority=priority)  # untimed: the graph's caches
    times = []
    for _ in range(20):
        start = time.perf_counter()
        Plan(graph, placement, orders, priority=priority)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def header() -> list[str]:
    flags = " ".join(a for a in sys.argv[1:])
    return [describe(), f"date: {datetime.date.today().isoformat()}",
            f"command: python -m benchmarks.placement_quality {flags}".rstrip(), ""]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="1,2,3,4,5")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    parts = {int(x) for x in args.part.split(",")}
    out = header()
    print("\n".join(out), flush=True)
    if 1 in parts:
        df = part_zoo(args.quick)
        out += ["### 1. Training steps (Adam) on catalog clusters", "",
                df.to_markdown(index=False, floatfmt=".3g"), ""]
        summary = df[df["feasible"]].groupby("policy").agg(
            mean_vs_bound=("vs_bound", "mean"), worst_vs_bound=("vs_bound", "max"),
            feasible_runs=("feasible", "size"), max_place_s=("place_s", "max"))
        out += [f"Per policy over the feasible runs ({(~df['feasible']).sum()} of {len(df)} "
                "runs infeasible):", "",
                summary.to_markdown(floatfmt=".3g"), ""]
        print("\n".join(out[4:]), flush=True)
    if 2 in parts:
        df = part_optimal(args.quick)
        summary = df.groupby("policy").agg(
            mean_model_ratio=("model_ratio", "mean"), worst_model_ratio=("model_ratio", "max"),
            mean_sim_ratio=("sim_ratio", "mean"), worst_sim_ratio=("sim_ratio", "max"))
        statuses = df.drop_duplicates("seed")["optimal_status"].value_counts().to_dict()
        out += ["### 2. Against the MILP optimum (random graphs of 8-12 ops, 3 devices)", "",
                f"instances: {df['seed'].nunique()}; solver status: {statuses}; "
                f"largest reported gap: {df['gap'].max():.3g}", "",
                summary.to_markdown(floatfmt=".3f"), ""]
        print("\n".join(out[-6:]), flush=True)
    if 3 in parts:
        df = part_speed(args.quick)
        out += ["### 3. Placement time on a layered graph, 16 devices", "",
                df.to_markdown(index=False, floatfmt=".3g"), "",
                f"slowest: {df.loc[df['place_s'].idxmax(), 'policy']} "
                f"({df['place_s'].max():.2f} s); median "
                f"{statistics.median(df['place_s']):.2f} s", ""]
        print("\n".join(out[-6:]), flush=True)
    if 4 in parts:
        df = part_compiled(args.quick)
        out += ["### 4. The list scheduler compiled against interpreted, same run", "",
                df.to_markdown(index=False, floatfmt=".3g"), "",
                "schedules and plans equal both ways: True", ""]
        print("\n".join(out[-(len(df) + 6):]), flush=True)
    if 5 in parts:
        df = part_checks(args.quick)
        out += ["### 5. Checking a search candidate through its priorities' order or in full",
                "",
                df.to_markdown(index=False, floatfmt=".3g"), ""]
        print("\n".join(out[-(len(df) + 5):]), flush=True)
    return record(out, args.out)


if __name__ == "__main__":
    main()
