"""Placing and ordering a graph as a CP-SAT program (OR-Tools): a solver nobody here wrote,
run on the model the list schedulers and ``mcmc``'s screen plan with, to check on graphs far
past the MILP's thirty ops what a search finds.

The model is :func:`policies.problem.schedule_length`'s: each op runs on one device that can
run it (a co-placement group's ops on one), a device one op at a time, an op after each
producer ends and, from another device, after its tensor's transfer (latency plus bytes over
the route's bandwidth, no contention); the makespan is the last end. Times are whole ticks
(:data:`TICK`) rounded down, so the solver's proven bound holds for the model in seconds;
the plan it returns is re-timed by :func:`~policies.problem.schedule_length` in seconds.

Needs ``ortools`` (the ``bench`` and ``test`` extras).

>>> from policies.testing import random_dag
>>> from hwmodels import RooflineCost, get_cluster
>>> c = get_cluster("workstation")
>>> p = Problem(random_dag(8, seed=1), c, RooflineCost(c))
>>> out = solve(p, seconds=10)
>>> out.status, out.bound_s <= out.model_s
('OPTIMAL', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from policies.plans import Plan
from policies.problem import Problem, schedule_length
from policies.search import _merged

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

__all__ = ["TICK", "Solved", "solve"]

#: The program's unit of time: op and transfer times are whole ticks, rounded down.
TICK = 1e-8


@dataclass(frozen=True)
class Solved:
    """What :func:`solve` found: its plan (None where it found none), that plan's makespan
    in the contention-free model (seconds; infinite without a plan), the solver's proven
    lower bound on the model's least makespan, and its status (``OPTIMAL``, ``FEASIBLE``,
    ``UNKNOWN``)."""

    plan: Plan | None
    model_s: float
    bound_s: float
    status: str


def solve(problem: Problem, *, hint: Plan | None = None, seconds: float = 60.0,
          workers: int = 2, seed: int = 0) -> Solved:
    """The least makespan CP-SAT finds in ``seconds`` (wall clock, on ``workers`` threads)
    for ``problem`` in the contention-free model, from ``hint`` where given (its devices and
    its ops' start times in the model, which the solver repairs and improves).

    >>> from policies.testing import random_dag
    >>> from hwmodels import RooflineCost, get_cluster
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = Problem(random_dag(10, seed=3), c, RooflineCost(c))
    >>> solve(p, seconds=10).status
    'OPTIMAL'
    """
    from ortools.sat.python import cp_model

    program = _Program(problem)
    if hint is not None:
        program.hint(hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.solve(program.model)
    name = solver.status_name(status)
    bound = max(0.0, solver.best_objective_bound) * TICK
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Solved(None, np.inf, bound, name)
    where, sequence = program.solution(solver)
    found = Plan.from_sequence(problem.graph, problem.devices, np.asarray(where),
                               np.asarray(sequence), policy="cpsat")
    return Solved(found, schedule_length(problem, where, sequence), bound, name)


class _Program:
    """The CP-SAT model of ``problem``: a Boolean per unit and device that can run it, each
    op's start and end, an optional interval per op and device, and the makespan."""

    def __init__(self, problem: Problem) -> None:
        from ortools.sat.python import cp_model

        self.problem = p = problem
        self.model = m = cp_model.CpModel()
        self.lead = np.asarray(p.node_of)
        ticks = np.floor(np.where(np.isfinite(p.times), p.times, 0.0) / TICK).astype(np.int64)
        self.ticks = ticks
        able_ops = np.isfinite(p.times)
        self.able = {u: [d for d in range(len(p.devices)) if able_ops[self.lead == u, d].all()]
                     for u in p.units()}
        horizon = self._horizon()
        self.on = {(u, d): m.new_bool_var(f"on_{u}_{d}") for u, ds in self.able.items()
                   for d in ds}
        for u, ds in self.able.items():
            m.add_exactly_one(self.on[u, d] for d in ds)
        self.start = [m.new_int_var(0, horizon, f"start_{i}") for i in range(p.n)]
        self.end = [m.new_int_var(0, horizon, f"end_{i}") for i in range(p.n)]
        per_device: list[list[cp_model.IntervalVar]] = [[] for _ in p.devices]
        for i in range(p.n):
            u = int(self.lead[i])
            m.add(self.end[i] == self.start[i]
                  + sum(int(ticks[i, d]) * self.on[u, d] for d in self.able[u]))
            for d in self.able[u]:
                if ticks[i, d] > 0:  # an op of no time holds no device
                    per_device[d].append(m.new_optional_interval_var(
                        self.start[i], int(ticks[i, d]), self.end[i], self.on[u, d],
                        f"run_{i}_{d}"))
        for intervals in per_device:
            m.add_no_overlap(intervals)
        self._edges()
        makespan = m.new_int_var(0, horizon, "makespan")
        m.add_max_equality(makespan, self.end)
        m.minimize(makespan)

    def _horizon(self) -> int:
        """An end no least plan passes: every op on its slowest device, one after another,
        each tensor paying its slowest transfer."""
        p, slowest = self.problem, 0
        for i in range(p.n):
            slowest += int(self.ticks[i].max())
            for _, t in p.succs[i]:
                slowest += max(self._ticks(p.comm(t, a, b)) for a in range(len(p.devices))
                               for b in range(len(p.devices)))
        return slowest + 1

    @staticmethod
    def _ticks(seconds: float) -> int:
        return int(np.floor(seconds / TICK))

    def _edges(self) -> None:
        """Each reader starts after its producer ends, and after the tensor's transfer
        where the two units sit on different devices."""
        p, m, on = self.problem, self.model, self.on
        for i in range(p.n):
            for j, t in p.succs[i]:
                m.add(self.start[j] >= self.end[i])
                a, b = int(self.lead[i]), int(self.lead[j])
                if a == b:
                    continue
                for da in self.able[a]:
                    for db in self.able[b]:
                        ticks = self._ticks(p.comm(t, da, db)) if da != db else 0
                        if ticks > 0:
                            m.add(self.start[j] >= self.end[i] + ticks).only_enforce_if(
                                [on[a, da], on[b, db]])

    def hint(self, plan: Plan) -> None:
        """Hint ``plan``'s devices and its ops' starts and ends in the model (in ticks)."""
        p = self.problem
        device = {d: k for k, d in enumerate(p.devices)}
        where = [device[plan.placement[n]] for n in p.names]
        for (u, d), var in self.on.items():
            self.model.add_hint(var, where[u] == d)
        free, end = [0] * len(p.devices), [0] * p.n
        position = {n: k for k, n in enumerate(p.names)}
        for name in _merged(plan.graph, plan):  # each device's order kept
            i = position[name]
            d = where[i]
            ready = max((end[k] + self._ticks(p.comm(t, where[k], d)) for k, t in p.preds[i]),
                        default=0)
            begin = max(free[d], ready)
            end[i] = free[d] = begin + int(self.ticks[i, d])
            self.model.add_hint(self.start[i], begin)
            self.model.add_hint(self.end[i], end[i])

    def solution(self, solver: cp_model.CpSolver) -> tuple[list[int], list[int]]:
        """Each op's device and the ops in order of their starts (ties in the graph's
        order, which is topological: an op of no time starts where its reader does)."""
        value = solver.value
        where = [0] * self.problem.n
        for (u, d), var in self.on.items():
            if value(var):
                where[u] = d
        where = [where[int(lead)] for lead in self.lead]
        starts = [value(s) for s in self.start]
        return where, sorted(range(self.problem.n), key=lambda i: (starts[i], i))
