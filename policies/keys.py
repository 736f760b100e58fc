"""Search over list-scheduling priorities: the ``keyed`` phase of :class:`policies.search.MCMC`.

A plan is encoded by one priority per op (a *random key*, Bean, ORSA J. Computing 1994) and
decoded by HEFT's list scheduler (:meth:`policies.listsched.HEFT.decode`): the ready op of
highest priority goes to the device where it finishes first in the contention-free model.
A move multiplies a few priorities by ``exp(sigma · z)``, ``z`` standard normal, and the
decoded plan is kept when the evaluator scores it no slower than the current one. Unlike a
move of one op, which leaves every other op where it was, a changed priority re-decodes the
whole schedule, so the ops after it follow to where they now finish first.

The decoded plan depends on the priorities only through the order the scheduler takes ops
in (:func:`policies.listsched.ready_order`), which is also the plan's priority; a move that
leaves that order as it was gives a plan already scored, which is neither decoded nor scored
again (and not counted), up to :data:`TRIES` moves per evaluation.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import numpy as np

from policies.plans import Plan
from policies.problem import Problem

__all__ = ["KEY_RATE", "KEY_SIGMA", "TRIES", "key_search"]

#: Each move multiplies each op's priority, with probability KEY_RATE (at least one op), by
#: ``exp(KEY_SIGMA · z)``: KEY_SIGMA chosen on ``benchmarks/search_tuning.py``'s cells.
KEY_SIGMA, KEY_RATE = 0.1, 0.05
#: Moves per evaluation, at most, that may give plans already scored before the search ends.
TRIES = 4


def key_search(problem: Problem, score: Callable[[Plan], float], left: Callable[[], bool],
               rng: np.random.Generator, evals: int, policy: str = "mcmc"
               ) -> tuple[float, Plan] | None:
    """Hill-climb over HEFT's priorities from the upward ranks (HEFT's own plan, the first
    scored) for up to ``evals`` scored plans, fewer where ``left()`` turns false: the best
    score and plan, or None where nothing was scored. ``score`` scores and counts one plan.
    Where HEFT's plan does not fit (an infinite score) the search stops there: HEFT places
    without regard to memory, so its neighbours would not fit either.

    >>> from hwmodels import RooflineCost, get_cluster
    >>> from policies import plan
    >>> from policies.search import contention_free
    >>> from workloads import build_model
    >>> g, c = build_model("mlp", batch=8), get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> evaluate = contention_free(c, cost)
    >>> seconds, p = key_search(Problem(g, c, cost), evaluate, lambda: True,
    ...                         np.random.default_rng(0), 20)
    >>> seconds <= evaluate(plan(g, c, "heft", cost))
    True
    """
    from policies.listsched import HEFT, ready_order

    heft = HEFT()

    def decode(priority: list[float], order: list[int]) -> Plan:
        placed = heft.decode(problem, priority, order)
        assert placed.order is not None  # a list schedule orders every device
        return Plan(problem.graph, placed.devices, placed.order, policy=policy,
                    priority=_priority(problem, order))

    if evals < 1 or not left():
        return None
    current = np.asarray(problem.upward_rank(), dtype=float)
    order = ready_order(problem, current.tolist())
    best_plan = decode(current.tolist(), order)
    now = best = score(best_plan)
    seen = {_digest(order)}
    scored, tries = 1, 0
    while scored < evals and tries < TRIES * evals and math.isfinite(now) and left():
        tries += 1
        keys = _moved(current, rng)
        priority = keys.tolist()
        order = ready_order(problem, priority)
        digest = _digest(order)
        if digest in seen:
            continue  # the same plan as one scored
        seen.add(digest)
        candidate = decode(priority, order)
        seconds = score(candidate)
        scored += 1
        if seconds <= now:
            current, now = keys, seconds
            if seconds < best:
                best, best_plan = seconds, candidate
    return best, best_plan


def _digest(order: list[int]) -> bytes:
    """A short fingerprint of an order (kept for every plan scored: orders are long)."""
    return hashlib.blake2b(np.asarray(order, dtype=np.int64).tobytes(), digest_size=16).digest()


def _priority(problem: Problem, order: list[int]) -> dict[str, float]:
    """Priorities that give ``order`` back (floating ops, done from the start, first)."""
    out = {name: float(problem.n + 1) for name in problem.names}
    for k, op in enumerate(order):
        out[problem.names[op]] = float(problem.n - k)
    return out


def _moved(keys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``keys`` with a few (each with probability :data:`KEY_RATE`, at least one) scaled
    by ``exp(KEY_SIGMA · z)``."""
    chosen = rng.random(len(keys)) < KEY_RATE
    if not chosen.any():
        chosen[int(rng.integers(len(keys)))] = True
    out = keys.copy()
    out[chosen] *= np.exp(KEY_SIGMA * rng.standard_normal(int(chosen.sum())))
    return out
