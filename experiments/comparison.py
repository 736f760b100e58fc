"""Compare placement policies on models and clusters: one simulated cell per combination,
run through the sweep machinery (:class:`~experiments.sweep.Experiment`)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor

import pandas as pd

from experiments.runspec import RESULT_COLUMNS as RUN_COLUMNS
from experiments.runspec import RunSpec, run_one
from experiments.sweep import Experiment
from policies.base import POLICIES, make_policy
from workloads.errors import PlacementError

__all__ = ["RESULT_COLUMNS", "compare", "run_one"]

#: A comparison's columns: every run's (``experiments.runspec.RESULT_COLUMNS``) and the
#: speedup over the single-device plan of the same model, step and cluster.
RESULT_COLUMNS: tuple[str, ...] = (*RUN_COLUMNS, "speedup_vs_single_device")


def compare(models: Sequence[str], clusters: Sequence[str] | str,
            policies: Sequence[str] | str = "all", *, batch: int = 1,
            cost: str = "roofline", train: bool = False, optimizer: str = "sgd",
            colocate: str = "ops", passes: Sequence[str] = (), links: str = "fcfs",
            workers: int | None = 1, executor: Executor | None = None) -> pd.DataFrame:
    """Every model x cluster x policy, simulated; one row each (see ``RESULT_COLUMNS``).

    ``speedup_vs_single_device`` is the single-device makespan over the row's makespan
    (present when ``single_device`` is among the policies). ``train`` simulates a whole
    training step (``workloads.training_graph`` with ``optimizer`` and ``colocate``) instead
    of a forward pass. Cells run in this process by default; ``workers`` or ``executor``
    spread them (see :meth:`Experiment.run`).

    >>> df = compare(["mlp"], "workstation", ["single_device", "heft"], batch=8)
    >>> list(df["policy"])
    ['single_device', 'heft']
    """
    clusters = [clusters] if isinstance(clusters, str) else list(clusters)
    names = [n for n in POLICIES.names() if POLICIES.get(n).in_all] if policies == "all" \
        else list(policies)
    for what, items in (("models", models), ("clusters", clusters), ("policies", names)):
        _check_names(what, items)
    for name in names:
        make_policy(name)
    specs = [RunSpec.make(model, cluster, policy, batch=batch, train=train,
                          optimizer=optimizer, colocate=colocate, passes=tuple(passes),
                          cost=cost, links=links)
             for model in models for cluster in clusters for policy in names]
    df = Experiment(specs).run(executor, workers=workers, progress=False)
    keys = list(zip(df["model"], df["step"], df["cluster"], strict=True))
    makespan = df["makespan_s"].astype(float)  # a cell with no plan has none (NaN)
    base = {k: m for k, p, m in zip(keys, df["policy"], makespan, strict=True)
            if p == "single_device"}
    df["speedup_vs_single_device"] = [base.get(k, float("nan")) / m
                                      for k, m in zip(keys, makespan, strict=True)]
    return df[list(RESULT_COLUMNS)]


def _check_names(what: str, names: Sequence[str]) -> None:
    """A list of names to compare: not empty, no name twice (rows would collide)."""
    if not names:
        raise PlacementError(f"compare: {what} must name at least one, got none")
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:
        raise PlacementError(f"compare: {what} must name each once, got {twice[0]!r} twice")
