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

__all__ = ["Optimal", "Schedules"]


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
        n_dev = len(p.devices)
        edges = [(i, j, np.array([[p.comm(t, d, f) for f in range(n_dev)]
                                  for d in range(n_dev)])) for j in range(p.n)
                 for i, t in p.preds[j]]
        model = Schedules(p.times, edges, p.node_of)
        res = model.solve(self.node_limit, self.time_limit_s)
        if res.x is None:
            raise PlacementError(f"policy 'optimal': the solver found no schedule within "
                                 f"its limits (node_limit={self.node_limit}, time_limit_s="
                                 f"{self.time_limit_s}): {res.message}")
        return self._placement(p, model, res)

    def _placement(self, p: Problem, model: Schedules, res: Any) -> Placement:
        """The plan of the solver's schedule ``res`` of ``model``."""
        n, n_dev = p.n, len(p.devices)
        z = res.x
        where = [int(np.argmax([z[model.x(o, d)] for d in range(n_dev)])) for o in range(n)]
        sequence = sorted(range(n), key=lambda o: (round(z[model.s0 + o], 9), o))
        order: dict[str, tuple[str, ...]] = {}
        for o in sequence:
            order.setdefault(p.devices[where[o]], ())
            order[p.devices[where[o]]] += (p.names[o],)
        gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
        return Placement({p.names[o]: p.devices[d] for o, d in enumerate(where)}, order=order,
                         estimated_makespan_s=schedule_length(p, where, sequence),
                         info={"status": "optimal" if res.status == 0 else "limit_reached",
                               "mip_gap": gap})


class Schedules:
    """The MILP of the least makespan (see the module) of ops with times ``times`` (ops x
    devices, ``inf`` where a device cannot run one), ``edges`` ``(producer, reader,
    crossing)`` (``crossing[d, f]``: seconds for the
    tensor from device ``d`` to ``f``), each op on its lead's device (``lead``, itself for
    none); devices flagged in ``overlap`` run their ops without keeping them apart (more
    than one stream).

    >>> s = Schedules(np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]]),
    ...               [(0, 1, np.array([[0, 5.0], [5.0, 0]])),
    ...                (0, 2, np.array([[0, 5.0], [5.0, 0]]))], [0, 1, 2])
    >>> round(float(s.solve(1000).fun * s.scale), 9)  # both readers on the source's device
    3.0
    """

    def __init__(self, times: np.ndarray, edges: list[tuple[int, int, np.ndarray]],
                 lead: list[int], overlap: np.ndarray | None = None) -> None:
        n, n_dev = times.shape
        self.n, self.n_dev = n, n_dev
        self.times = times
        pairs = _unordered_pairs(n, [(u, v) for u, v, _ in edges])
        raw = np.where(np.isfinite(times), times, 0.0)
        horizon = float(raw.max(axis=1).sum() + sum(c.max() for _, _, c in edges))
        #: the unit of the model's times: the horizon, for better numerics
        self.scale = scale = horizon if horizon > 0 else 1.0
        t = raw / scale
        big = horizon / scale + 1.0
        self.s0 = s0 = n * n_dev
        y0 = s0 + n
        cross = [(d, f) for d in range(n_dev) for f in range(n_dev) if d != f]
        self.w0 = w0 = y0 + len(edges) * len(cross)
        self.c_var = c_var = w0 + len(pairs)
        self.n_vars = c_var + 1
        x = self.x
        rows = self.rows = _Rows()
        for o in range(n):
            rows.add({x(o, d): 1.0 for d in range(n_dev)}, 1.0, 1.0)
            rows.add({c_var: 1.0, s0 + o: -1.0, **{x(o, d): -t[o, d]
                                                   for d in range(n_dev)}}, 0.0, np.inf)
        for o in range(n):  # co-placement: every op on its group lead's device
            if lead[o] != o:
                for d in range(n_dev):
                    rows.add({x(o, d): 1.0, x(lead[o], d): -1.0}, 0.0, 0.0)
        for e, (u, v, crossing) in enumerate(edges):
            terms = {s0 + v: 1.0, s0 + u: -1.0, **{x(u, d): -t[u, d] for d in range(n_dev)}}
            for k, (d, f) in enumerate(cross):
                y = y0 + e * len(cross) + k
                terms[y] = -crossing[d, f] / scale
                rows.add({x(u, d): 1.0, x(v, f): 1.0, y: -1.0}, -np.inf, 1.0)
            rows.add(terms, 0.0, np.inf)
        apart = [d for d in range(n_dev) if overlap is None or not overlap[d]]
        for k, (a, b) in enumerate(pairs):
            w = w0 + k
            for d in apart:
                rows.add({s0 + b: 1.0, s0 + a: -1.0, w: -big, x(a, d): -big, x(b, d): -big},
                         t[a, d] - 3 * big, np.inf)
                rows.add({s0 + a: 1.0, s0 + b: -1.0, w: big, x(a, d): -big, x(b, d): -big},
                         t[b, d] - 2 * big, np.inf)

    def x(self, o: int, d: int) -> int:
        """The column of ``x[o, d]``: whether op ``o`` runs on device ``d``."""
        return o * self.n_dev + d

    def solve(self, node_limit: int, time_limit_s: float | None = None) -> Any:
        """HiGHS's answer (:func:`scipy.optimize.milp`), times in units of :attr:`scale`,
        after at most ``node_limit`` branch-and-bound nodes."""
        n, n_dev, n_vars, w0, c_var = self.n, self.n_dev, self.n_vars, self.w0, self.c_var
        integrality = np.zeros(n_vars)
        integrality[: n * n_dev] = 1
        integrality[w0:c_var] = 1
        upper = np.full(n_vars, np.inf)
        upper[: n * n_dev] = np.where(np.isfinite(self.times), 1.0, 0.0).ravel()
        upper[self.s0 + n:c_var] = 1.0
        objective = np.zeros(n_vars)
        objective[c_var] = 1.0
        problem = {"c": objective, "integrality": integrality,
                   "bounds": Bounds(np.zeros(n_vars), upper),
                   "constraints": [self.rows.constraint(n_vars)]}
        options: dict[str, Any] = {"node_limit": node_limit, "disp": False}
        if time_limit_s is not None:
            options["time_limit"] = time_limit_s
        res = milp(**problem, options=options)
        if res.x is None and res.status == 4:
            # HiGHS's presolve occasionally reports a solve error on these big-M models;
            # the same model solves without it.
            res = milp(**problem, options={**options, "presolve": False})
        return res


def _unordered_pairs(n: int, edges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Op pairs neither of which the graph orders before the other."""
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    reach = {i: nx.descendants(g, i) for i in range(n)}
    return [(a, b) for a, b in itertools.combinations(range(n), 2)
            if b not in reach[a] and a not in reach[b]]
