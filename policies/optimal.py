"""The yardstick: minimum makespan by mixed-integer programming (scipy.optimize.milp, HiGHS).

Model (the list schedulers' model, solved exactly): an op runs on one device for its cost-
model time; a tensor crossing from device d to device f adds its transfer time between its
producer's end and its reader's start; ops on one device do not overlap. Transfers do not
contend. Variables: placement binaries ``x[o, d]``, start times ``s[o]``, crossing indicators
``y[e, d, f]``, order binaries ``w[a, b]`` for ops not ordered by the graph, and the
makespan ``C``; big-M disjunctions keep ops on a device apart. Practical up to about 30 ops.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, milp

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import Param, PlacementPolicy, register_policy
from policies.plans import Placement
from policies.problem import Problem, schedule_length
from workloads.errors import PlacementError
from workloads.graph import Graph

__all__ = ["Optimal"]


class _Rows:
    """Sparse constraint rows ``lb <= a @ z <= ub`` collected one at a time."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lb: list[float] = []
        self.ub: list[float] = []

    def add(self, terms: dict[int, float], lb: float, ub: float) -> None:
        r = len(self.lb)
        for col, val in terms.items():
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(val)
        self.lb.append(lb)
        self.ub.append(ub)

    def constraint(self, n_vars: int) -> LinearConstraint:
        a = sp.csr_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.lb), n_vars))
        return LinearConstraint(a, np.asarray(self.lb), np.asarray(self.ub))


@register_policy
class Optimal(PlacementPolicy):
    """Minimum-makespan placement and order by MILP; the Plan's ``info`` reports the solver
    status and the relative optimality gap.

    The search stops after ``node_limit`` branch-and-bound nodes, a limit that does not
    depend on the machine, so the same input gives the same plan under any load.
    ``time_limit_s`` (off by default) adds a wall-clock cap, at the price of that guarantee.
    """

    name = "optimal"

    params = (Param("node_limit", "int", 20_000, minimum=1,
                    doc="branch-and-bound nodes before the search stops"),
              Param("max_ops", "int", 30, minimum=1, doc="the largest graph it accepts"),
              Param("time_limit_s", "float", None, minimum=0, optional=True,
                    doc="a wall-clock cap (the plan then depends on the machine)"))

    def __init__(self, node_limit: int = 20_000, max_ops: int = 30,
                 time_limit_s: float | None = None) -> None:
        self.node_limit = self.checked("node_limit", node_limit)
        self.max_ops: int = self.checked("max_ops", max_ops)
        self.time_limit_s = self.checked("time_limit_s", time_limit_s)

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        if len(graph) > self.max_ops:
            raise PlacementError(f"policy 'optimal': graph {graph.name!r} has {len(graph)} "
                                 f"ops; the MILP is limited to max_ops={self.max_ops}")
        p = Problem(graph, cluster, cost)
        n, n_dev = p.n, len(p.devices)
        edges = [(i, j, t) for j in range(n) for i, t in p.preds[j]]
        pairs = _unordered_pairs(p)
        raw = np.where(np.isfinite(p.times), p.times, 0.0)
        horizon = float(raw.max(axis=1).sum() + sum(
            max(p.comm(t, d, f) for d in range(n_dev) for f in range(n_dev))
            for _, _, t in edges))
        scale = horizon if horizon > 0 else 1.0  # solve in units of the horizon: better numerics
        times = raw / scale
        big = horizon / scale + 1.0

        def comm(t: int, d: int, f: int) -> float:
            return p.comm(t, d, f) / scale


        def x(o: int, d: int) -> int:
            return o * n_dev + d

        s0 = n * n_dev
        y0 = s0 + n
        cross = [(d, f) for d in range(n_dev) for f in range(n_dev) if d != f]
        w0 = y0 + len(edges) * len(cross)
        c_var = w0 + len(pairs)
        n_vars = c_var + 1
        rows = _Rows()
        for o in range(n):
            rows.add({x(o, d): 1.0 for d in range(n_dev)}, 1.0, 1.0)
            rows.add({c_var: 1.0, s0 + o: -1.0, **{x(o, d): -times[o, d]
                                                   for d in range(n_dev)}}, 0.0, np.inf)
        for o in range(n):  # co-placement: every op on its group lead's device
            if p.node_of[o] != o:
                for d in range(n_dev):
                    rows.add({x(o, d): 1.0, x(p.node_of[o], d): -1.0}, 0.0, 0.0)
        for e, (u, v, t) in enumerate(edges):
            terms = {s0 + v: 1.0, s0 + u: -1.0, **{x(u, d): -times[u, d] for d in range(n_dev)}}
            for k, (d, f) in enumerate(cross):
                y = y0 + e * len(cross) + k
                terms[y] = -comm(t, d, f)
                rows.add({x(u, d): 1.0, x(v, f): 1.0, y: -1.0}, -np.inf, 1.0)
            rows.add(terms, 0.0, np.inf)
        for k, (a, b) in enumerate(pairs):
            w = w0 + k
            for d in range(n_dev):
                rows.add({s0 + b: 1.0, s0 + a: -1.0, w: -big, x(a, d): -big, x(b, d): -big},
                         times[a, d] - 3 * big, np.inf)
                rows.add({s0 + a: 1.0, s0 + b: -1.0, w: big, x(a, d): -big, x(b, d): -big},
                         times[b, d] - 2 * big, np.inf)
        return self._solve(p, rows, n_vars, w0, c_var, s0, x)

    def _solve(self, p: Problem, rows: _Rows, n_vars: int, w0: int, c_var: int, s0: int,
               x: Callable[[int, int], int]) -> Placement:
        n, n_dev = p.n, len(p.devices)
        integrality = np.zeros(n_vars)
        integrality[: n * n_dev] = 1
        integrality[w0:c_var] = 1
        upper = np.full(n_vars, np.inf)
        upper[: n * n_dev] = np.where(np.isfinite(p.times), 1.0, 0.0).ravel()
        upper[s0 + n:c_var] = 1.0
        objective = np.zeros(n_vars)
        objective[c_var] = 1.0
        problem = {"c": objective, "integrality": integrality,
                   "bounds": Bounds(np.zeros(n_vars), upper),
                   "constraints": [rows.constraint(n_vars)]}
        options: dict[str, Any] = {"node_limit": self.node_limit, "disp": False}
        if self.time_limit_s is not None:
            options["time_limit"] = self.time_limit_s
        res = milp(**problem, options=options)
        if res.x is None and res.status == 4:
            # HiGHS's presolve occasionally reports a solve error on these big-M models;
            # the same model solves without it.
            res = milp(**problem, options={**options, "presolve": False})
        if res.x is None:
            raise PlacementError(f"policy 'optimal': the solver found no schedule within "
                                 f"its limits (node_limit={self.node_limit}, time_limit_s="
                                 f"{self.time_limit_s}): {res.message}")
        z = res.x
        where = [int(np.argmax([z[x(o, d)] for d in range(n_dev)])) for o in range(n)]
        sequence = sorted(range(n), key=lambda o: (round(z[s0 + o], 9), o))
        order: dict[str, tuple[str, ...]] = {}
        for o in sequence:
            order.setdefault(p.devices[where[o]], ())
            order[p.devices[where[o]]] += (p.names[o],)
        gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
        return Placement({p.names[o]: p.devices[d] for o, d in enumerate(where)}, order=order,
                         estimated_makespan_s=schedule_length(p, where, sequence),
                         info={"status": "optimal" if res.status == 0 else "limit_reached",
                               "mip_gap": gap})


def _unordered_pairs(p: Problem) -> list[tuple[int, int]]:
    """Op pairs neither of which the graph orders before the other."""
    g = nx.DiGraph()
    g.add_nodes_from(range(p.n))
    g.add_edges_from((i, j) for j in range(p.n) for i, _ in p.preds[j])
    reach = {i: nx.descendants(g, i) for i in range(p.n)}
    return [(a, b) for a, b in itertools.combinations(range(p.n), 2)
            if b not in reach[a] and a not in reach[b]]
