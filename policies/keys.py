"""Search over list-scheduling priorities: the ``keyed`` phase of :class:`policies.search.MCMC`.

A plan is encoded by one priority per op (a *random key*, Bean, ORSA J. Computing 1994) and
decoded by HEFT's list scheduler (:meth:`policies.listsched.HEFT.decode`): the ready op of
highest priority goes to the device where it finishes first in the contention-free model.
A move multiplies a few priorities by ``exp(sigma · z)``, ``z`` standard normal, and the
decoded plan is kept when the evaluator scores it no slower than the current one. Unlike a
move of one op, which leaves every other op where it was, a changed priority re-decodes the
whole schedule, so the ops after it follow to where they now finish first.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from policies.plans import Plan
from policies.problem import Problem
from workloads.graph import Graph

__all__ = ["KEY_RATE", "KEY_SIGMA", "key_search"]

#: Each move multiplies each op's priority, with probability KEY_RATE (at least one op), by
#: ``exp(KEY_SIGMA · z)``; chosen on ``benchmarks/search_tuning.py``'s cells.
KEY_SIGMA, KEY_RATE = 0.1, 0.05


def key_search(graph: Graph, problem: Problem, score: Callable[[Plan], float],
               left: Callable[[], bool], rng: np.random.Generator, evals: int
               ) -> tuple[float, Plan]:
    """Hill-climb over HEFT's priorities for up to ``evals`` scored plans (fewer when
    ``left()`` turns false), from the upward ranks (HEFT's own plan, the first scored):
    the best score and plan found. ``score`` scores and counts one plan.

    >>> from hwmodels import RooflineCost, get_cluster
    >>> from policies import plan
    >>> from policies.search import contention_free
    >>> from workloads import build_model
    >>> g, c = build_model("mlp", batch=8), get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> evaluate = contention_free(c, cost)
    >>> seconds, p = key_search(g, Problem(g, c, cost), evaluate, lambda: True,
    ...                         np.random.default_rng(0), 20)
    >>> seconds <= evaluate(plan(g, c, "heft", cost))
    True
    """
    from policies.listsched import HEFT

    heft = HEFT()
    current = np.asarray(problem.upward_rank(), dtype=float)

    def decode(keys: np.ndarray) -> Plan:
        placed = heft.decode(problem, keys.tolist())
        assert placed.order is not None  # a list schedule orders every device
        return Plan(graph, placed.devices, placed.order, policy="mcmc",
                    priority=placed.priority)

    best_plan = decode(current)
    now = best = score(best_plan)
    for _ in range(evals - 1):
        if not left():
            break
        keys = _moved(current, rng)
        candidate = decode(keys)
        seconds = score(candidate)
        if seconds <= now:
            current, now = keys, seconds
            if seconds < best:
                best, best_plan = seconds, candidate
    return best, best_plan


def _moved(keys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``keys`` with a few (each with probability :data:`KEY_RATE`, at least one) scaled
    by ``exp(KEY_SIGMA · z)``."""
    chosen = rng.random(len(keys)) < KEY_RATE
    if not chosen.any():
        chosen[int(rng.integers(len(keys)))] = True
    out = keys.copy()
    out[chosen] *= np.exp(KEY_SIGMA * rng.standard_normal(int(chosen.sum())))
    return out
