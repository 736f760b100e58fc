"""Search over list-scheduling priorities: the ``keyed`` phase of :class:`policies.search.MCMC`.

A plan is encoded by one priority per op (a *random key*, Bean, ORSA J. Computing 1994) and
decoded by HEFT's list scheduler with insertion (:meth:`policies.listsched.HEFT.decode`): the
ready op of highest priority goes to the device where, in the contention-free model, it
finishes first plus PEFT's optimistic cost of the rest of the graph from there
(:attr:`policies.problem.Problem.optimistic_costs`; Arabnejad and Barbosa, IEEE TPDS 2014),
so an op is not sent where it ends early but its successors would wait for transfers
(:data:`SELECT`).
A move multiplies a few priorities by ``exp(sigma · z)``, ``z`` standard normal, and the
decoded plan is kept when the evaluator scores it no slower than the current one. Unlike a
move of one op, which leaves every other op where it was, a changed priority re-decodes the
whole schedule, so the ops after it follow to where they now finish first.

The decoded plan depends on the priorities only through the order the scheduler takes ops
in (:func:`policies.listsched.ready_order`), which is also the plan's priority; a move that
gives an order already decoded (scored or screened out) is neither decoded nor scored again
(and not counted), the search drawing at most ``TRIES · SCREEN`` moves per evaluation of
its budget.

Each evaluation scores the best of up to :data:`SCREEN` decoded moves by the scheduler's own
estimate (its contention-free makespan, which decoding gives for nothing), the first whose
estimate is no worse than the current plan's if one comes before: the evaluator's budget
goes to the moves the list scheduler's model favours, at the price of decoding more. Where
``left()`` turns false, no further move is decoded.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from policies.listsched import HEFT, Timeline, ready_order
from policies.plans import Placement, Plan
from policies.problem import Problem

__all__ = ["KEY_RATE", "KEY_SIGMA", "SCREEN", "SELECT", "TRIES", "PredictedFinish", "key_search"]

#: Each move multiplies each op's priority, with probability KEY_RATE (at least one op), by
#: ``exp(KEY_SIGMA · z)``: KEY_SIGMA chosen on ``benchmarks/search_tuning.py``'s cells.
KEY_SIGMA, KEY_RATE = 0.1, 0.05
#: Moves drawn per move that may be decoded (``TRIES · SCREEN`` per evaluation of the
#: budget), at most, before the search ends: on a graph with few orders most give one
#: already decoded.
TRIES = 4
#: Moves decoded per evaluation, at most (see the module): on ``benchmarks/search_tuning.py``'s
#: cells 4 against 1 (each move scored) lifted the gain over the best heuristic on the three
#: with room by 0.8, 1.0 and 0.2 points (means of four seeds; median of the six +2.0%
#: against +1.5%); on the small graphs it cost optima (32 of 40 against 35), where the
#: priority search does not run by default.
SCREEN = 4
#: How the decoder picks an op's device: ``"optimistic"``, PEFT's least finish time plus
#: optimistic cost, or ``"earliest"``, HEFT's least finish time. On
#: ``benchmarks/search_tuning.py``'s cells (means of four seeds) PEFT's choice lifted the
#: gain over the best heuristic on two of the four heterogeneous cells (+4.0% to +4.2%,
#: +6.0% to +6.7%; the other two the same to a tenth of a point) and left the two of
#: identical devices as they were: there the optimistic cost is the same everywhere and the
#: two choose alike.
#: On the small graphs, searched by priorities too there, it reached 33 optima of 40
#: against 32.
SELECT = "optimistic"


def key_search(problem: Problem, score: Callable[[Plan], float], left: Callable[[], bool],
               rng: np.random.Generator, evals: int, policy: str = "mcmc"
               ) -> tuple[float, Plan] | None:
    """Hill-climb over list-scheduling priorities from HEFT's upward ranks (decoded, the
    first plan scored) for up to ``evals`` scored plans, fewer where ``left()`` turns
    false: the best score and plan, or None where nothing was scored. ``score`` scores and
    counts one plan. Where that first plan does not fit (an infinite score) the search
    stops there: the decoder places without regard to memory, so its neighbours would not
    fit either. On devices that differ it may end slower than HEFT's own plan, which it
    does not score (``mcmc`` scores it among its starts).

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
    if evals < 1 or not left():
        return None
    moves = _Decoded(problem, policy, left, rng)
    current = np.asarray(problem.upward_rank(), dtype=float)
    order = ready_order(problem, current.tolist())
    best_plan, estimate = moves.decode(current.tolist(), order)
    now = best = score(best_plan)
    moves.seen.add(_digest(order))
    scored, drawn = 1, 0
    while scored < evals and drawn < TRIES * SCREEN * evals and math.isfinite(now) \
            and left():
        found, tries = moves.screened(current, estimate)
        drawn += tries
        if found is None:
            continue
        keys, candidate, guess = found
        seconds = score(candidate)
        scored += 1
        if seconds <= now:
            current, now, estimate = keys, seconds, guess
            if seconds < best:
                best, best_plan = seconds, candidate
    return best, best_plan


class _Decoded:
    """The priority search's moves, each decoded into a plan by the list scheduler
    (:data:`SELECT`'s choice of device), with the orders decoded so far (``seen``)."""

    def __init__(self, problem: Problem, policy: str, left: Callable[[], bool],
                 rng: np.random.Generator) -> None:
        self.problem, self.policy, self.left, self.rng = problem, policy, left, rng
        self.scheduler = PredictedFinish() if SELECT == "optimistic" else HEFT()
        self.seen: set[bytes] = set()

    def decode(self, priority: list[float], order: list[int]) -> tuple[Plan, float]:
        """The plan these priorities give (``order``: the order they take ops in) and the
        scheduler's estimate of its makespan."""
        estimate, placed = self.scheduler.decode_estimate(self.problem, priority, order)
        return self._plan(placed, order), estimate

    def _plan(self, placed: Callable[[], Placement], order: list[int]) -> Plan:
        """The plan of a list schedule (made and checked only for the move scored)."""
        schedule = placed()
        assert schedule.order is not None  # a list schedule orders every device
        return Plan(self.problem.graph, schedule.devices, schedule.order, policy=self.policy,
                    priority=_priority(self.problem, order))

    def screened(self, current: np.ndarray, estimate: float
                 ) -> tuple[tuple[np.ndarray, Plan, float] | None, int]:
        """Of up to :data:`SCREEN` moves from ``current`` that give orders not yet seen,
        decoded (no more once ``left()`` turns false), the first whose estimate is no
        worse than ``estimate`` (the current plan's), else the one of lowest estimate: its
        keys, plan and estimate (None where every move gave an order seen), and the moves
        drawn."""
        chosen: tuple[np.ndarray, Callable[[], Placement], float, list[int]] | None = None
        tries = 0
        while tries < SCREEN:
            if chosen is not None and not self.left():
                break
            tries += 1
            keys = _moved(current, self.rng)
            priority = keys.tolist()
            order = ready_order(self.problem, priority)
            digest = _digest(order)
            if digest in self.seen:
                continue  # the same plan as one decoded
            self.seen.add(digest)
            guess, placed = self.scheduler.decode_estimate(self.problem, priority, order)
            if chosen is None or guess < chosen[2]:
                chosen = (keys, placed, guess, order)
            if guess <= estimate:
                break
        if chosen is None:
            return None, tries
        keys, placed, guess, order = chosen
        return (keys, self._plan(placed, order), guess), tries


class PredictedFinish(HEFT):
    """HEFT's list scheduler with PEFT's choice of device: the least finish time plus the
    op's optimistic cost there (:attr:`~policies.problem.Problem.optimistic_costs`). Under
    PEFT's own priorities, each op's mean optimistic cost, it is PEFT.

    >>> from hwmodels import RooflineCost, get_cluster
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")  # identical devices: it chooses as HEFT does
    >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
    >>> PredictedFinish().decode(p, p.upward_rank()) == HEFT().decode(p, p.upward_rank())
    True
    """

    def prepare(self, p: Problem, priority: list[float]) -> np.ndarray:
        # above each op's least, so that where every device's is the same (identical
        # devices) the finish times compare exactly as HEFT's, unrounded by a large term
        costs = p.optimistic_costs
        return np.asarray(costs - costs.min(axis=1, keepdims=True))

    def choose(self, p: Problem, op: int, ready: list[float], lines: list[Timeline],
               state: Any = None) -> tuple[float, int]:
        return self.least_finish(p, op, ready, lines, state[op].tolist())

    def ahead(self, p: Problem, state: Any) -> np.ndarray:
        return np.asarray(state)


def _digest(order: list[int]) -> bytes:
    """A short fingerprint of an order (kept for every plan decoded: orders are long)."""
    return hashlib.blake2b(np.asarray(order, dtype=np.int64).tobytes(), digest_size=16).digest()


def _priority(problem: Problem, order: list[int]) -> dict[str, float]:
    """Priorities that give ``order`` back (floating ops, done from the start, first)."""
    out = dict.fromkeys(problem.names, float(problem.n + 1))
    ranks = map(float, range(problem.n, problem.n - len(order), -1))
    out.update(zip(map(problem.names.__getitem__, order), ranks, strict=True))
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
