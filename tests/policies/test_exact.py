"""The exact policies against brute force on instances small enough to enumerate."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

from hwmodels import Cluster, Device, Link, TableCost
from policies import plan
from policies.problem import Problem, model_makespan, schedule_length
from workloads import Graph, Op, Tensor


def instance(n: int, seed: int, devices: int = 2) -> tuple[Graph, Cluster, TableCost]:
    """A random DAG with integer op times per device and per-edge transfer times."""
    rnd = np.random.default_rng(seed)
    ops, transfers = [], {}
    for i in range(n):
        preds = [j for j in range(i) if rnd.random() < 0.4]
        for j in preds:
            transfers[f"o{j}->o{i}"] = float(rnd.integers(1, 6, endpoint=True))
        outs = tuple(Tensor(f"o{i}->o{k}", (1,)) for k in range(n) if k > i)
        ops.append((i, preds, outs))
    consumed = set(transfers)
    graph_ops = []
    for i, preds, outs in ops:
        kept = tuple(t for t in outs if t.name in consumed) or (Tensor(f"o{i}.out", (1,)),)
        graph_ops.append(Op(f"o{i}", "opaque", "matmul",
                            inputs=tuple(f"o{j}->o{i}" for j in preds), outputs=kept))
    names = [f"d{k}" for k in range(devices)]
    cluster = Cluster("pair", tuple(Device(d, "gpu", {"fp32": 1e12}, 2**30, 1e9)
                                    for d in names),
                      tuple(Link(a, b, 1e9) for a, b in itertools.combinations(names, 2)))
    times = {f"o{i}": {d: float(rnd.integers(1, 9, endpoint=True)) for d in names}
             for i in range(n)}
    return Graph("tiny", graph_ops), cluster, TableCost(cluster, times, transfers)


def brute_force_makespan(p: Problem, grouped: bool = False) -> float:
    """The least schedule length over every placement and order (``grouped``: only
    placements that keep each co-placement group on one device)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(p.n))
    g.add_edges_from((i, j) for j in range(p.n) for i, _ in p.preds[j])
    orders = list(nx.all_topological_sorts(g))
    return min(schedule_length(p, list(where), order)
               for where in itertools.product(range(len(p.devices)), repeat=p.n)
               if not grouped or all(where[i] == where[p.node_of[i]] for i in range(p.n))
               for order in orders)


@pytest.mark.parametrize("seed", range(6))
def test_optimal_matches_brute_force(seed: int) -> None:
    graph, cluster, cost = instance(6, seed)
    p = plan(graph, cluster, "optimal", cost)
    assert p.info["status"] == "optimal"
    best = brute_force_makespan(Problem(graph, cluster, cost))
    assert p.estimated_makespan_s == pytest.approx(best)
    assert model_makespan(p, cluster, cost) == pytest.approx(best)
    heft = plan(graph, cluster, "heft", cost)
    assert heft.estimated_makespan_s is not None
    assert heft.estimated_makespan_s >= best - 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_stone_mincut_minimises_compute_plus_communication(seed: int) -> None:
    graph, cluster, cost = instance(9, seed)
    prob = Problem(graph, cluster, cost)

    def objective(where: tuple[int, ...]) -> float:
        compute = sum(prob.times[i, d] for i, d in enumerate(where))
        comm = sum(prob.comm(t, where[i], where[j]) for j in range(prob.n)
                   for i, t in prob.preds[j])
        return float(compute + comm)

    best = min(objective(w) for w in itertools.product((0, 1), repeat=prob.n))
    p = plan(graph, cluster, "stone_mincut", cost)
    chosen = tuple(prob.devices.index(p.placement[name]) for name in prob.names)
    assert objective(chosen) == pytest.approx(best)
