"""Measuring several plans on a machine whose speed drifts: in turns.

A shared machine has slow phases lasting seconds to minutes. Measured one after the other,
a plan caught by such a phase is slow in all its runs; measured in turns (each plan a
share of its repeats, then the next plan, and round again), a phase falls on one turn of
each plan, and the median over all repeats passes it by. Validation measures its plans
this way.

>>> from policies import plan
>>> from runtime import NumpyEngine
>>> from workloads import build_model
>>> engine = NumpyEngine(devices=1)
>>> p = plan(build_model("mlp", batch=2), engine.cluster(), "single_device")
>>> [len(r.makespans_s) for r, _ in run_in_turns([p, p], engine, repeats=4, rounds=2)]
[4, 4]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from runtime.engine import Engine

if TYPE_CHECKING:
    from policies.plans import Plan
    from runtime.executor import RunResult

__all__ = ["run_in_turns"]


def run_in_turns(plans: Sequence[Plan], engine: Engine, *, repeats: int, rounds: int,
                 warmup: int = 1, seed: int = 0, min_seconds: float = 0.0,
                 max_repeats: int = 500, after_turn: Callable[[], None] = lambda: None,
                 progress: Callable[[Iterable[Any]], Iterable[Any]] = iter
                 ) -> list[tuple[RunResult, float]]:
    """Each plan's runs, ``repeats`` of them taken in ``rounds`` turns over all the plans
    (``after_turn`` called as each turn ends); with each, how far apart its turns' medians
    lie (the slowest over the fastest, less one: the machine's own noise). A plan whose
    repeats take less than ``min_seconds`` runs more often, to that much time in all (at
    most ``max_repeats``)."""
    from runtime.executor import RunResult, execute

    counts = []
    for p in plans:
        count = repeats
        if min_seconds > 0:  # a short step runs more often, to the same total time
            probe = execute(p, engine, warmup=warmup, repeats=1, seed=seed).makespan_s
            count = max(repeats, min(max_repeats, math.ceil(min_seconds / max(probe, 1e-6))))
        counts.append(count)
    runs: list[list[RunResult]] = [[] for _ in plans]
    for turn, i in progress([(t, i) for t in range(rounds) for i in range(len(plans))]):
        share = counts[i] // rounds + (turn < counts[i] % rounds)
        if share:
            runs[i].append(execute(plans[i], engine, warmup=warmup, repeats=share,
                                   seed=seed))
        if i == len(plans) - 1:
            after_turn()
    return [(RunResult.combine(done), max(r.makespan_s for r in done)
             / min(r.makespan_s for r in done) - 1) for done in runs]
