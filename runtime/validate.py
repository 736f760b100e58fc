"""Validation: run plans for real and simulate the same plans, and say how far apart they are.

For every graph and policy: the measured step time (median over repeats, and the spread),
the simulated one, their relative error; the per-op error (the real and simulated traces
joined on the op's name); measured and simulated peak memory per device and the largest
relative gap; and per graph, whether the simulator orders the plans as the measurements do
(Kendall's tau, scipy). The simulation uses the engine's own cluster: calibrated when the
engine was built from a calibration file, the catalog's uncalibrated CPU otherwise.

>>> from runtime import NumpyEngine
>>> from workloads import build_model
>>> rows = validate(NumpyEngine(devices=2), {"mlp": build_model("mlp", batch=2)},
...                 ["single_device", "round_robin"], repeats=1, warmup=0)
>>> list(rows["policy"]), bool((rows["measured_s"] > 0).all())
(['single_device', 'round_robin'], True)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hwmodels.calibrated import SOURCES
from runtime.engine import Engine
from runtime.turns import run_in_turns
from workloads.errors import PlacelabError
from workloads.graph import Graph

if TYPE_CHECKING:
    import pandas as pd

    from hwmodels.cost import CostModel
    from policies.plans import Plan
    from runtime.executor import RunResult

__all__ = ["OP_COLUMNS", "engine_cost", "op_errors", "op_table", "order_kept",
           "rank_agreement", "validate"]

#: The columns of :func:`op_table`.
OP_COLUMNS = ("op", "kind", "device", "measured_s", "predicted_s", "error", "source")


def _joined(measured: Mapping[str, float], simulated: pd.DataFrame
            ) -> tuple[pd.Series, pd.Series]:
    """Each op's busy time for real and its simulated duration, by name: the ops that
    took measurable time in both."""
    import pandas as pd

    ops = simulated[simulated["kind"] == "compute"]
    sim = (ops["end_s"] - ops["start_s"]).groupby(ops["name"]).sum()
    real = pd.Series(measured, dtype=float)
    both = real.index.intersection(sim.index)
    real, sim = real[both], sim[both]
    keep = (real > 1e-7) & (sim > 0)
    return real[keep], sim[keep]


def op_errors(measured: Mapping[str, float], simulated: pd.DataFrame) -> np.ndarray:
    """Relative error of each op's simulated duration against how long it kept its device
    busy for real (``RunResult.op_busy_s``: ops that took measurable time, joined on the
    op's name)."""
    real, sim = _joined(measured, simulated)
    return np.abs(sim.to_numpy() / real.to_numpy() - 1)


def op_table(plan: Plan, measured: Mapping[str, float], simulated: pd.DataFrame,
             cost: CostModel) -> pd.DataFrame:
    """Per op of ``plan`` that took measurable time both for real and in the simulation
    (the ops :func:`op_errors` joins), graph order: its kind, its device, how long it kept
    the device busy for real (``measured_s``, from ``RunResult.op_busy_s``), how long the
    simulation ran it (``predicted_s``, from the trace ``simulated``), the relative
    ``error``, and which of ``cost``'s sources priced it (``source``): where a model is
    off, op by op.

    >>> from policies import plan
    >>> from runtime import NumpyEngine, execute
    >>> from sim.engine import simulate
    >>> from workloads import build_model
    >>> engine = NumpyEngine(devices=1)
    >>> cost = engine_cost(engine)
    >>> p = plan(build_model("mlp", batch=2), engine.cluster(), "single_device", cost)
    >>> ran = execute(p, engine, repeats=1)
    >>> table = op_table(p, ran.op_busy_s, simulate(p, engine.cluster(), cost).trace, cost)
    >>> sorted(set(table["kind"])), set(table["source"])
    (['linear', 'relu', 'softmax'], {'roofline'})
    """
    import pandas as pd

    real, sim = _joined(measured, simulated)
    graph = plan.graph
    names = graph.arrays.names
    sources = dict(zip(names, cost.sources(graph, plan.placement), strict=True))
    rows = [{"op": name, "kind": graph.op(name).kind, "device": plan.placement[name],
             "measured_s": float(real[name]), "predicted_s": float(sim[name]),
             "error": float(sim[name] / real[name] - 1), "source": sources[name]}
            for name in names if name in real.index]
    return pd.DataFrame(rows, columns=list(OP_COLUMNS))


def rank_agreement(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Kendall's tau between predicted and measured times (None for fewer than 2 plans)."""
    if len(predicted) < 2:
        return None
    from scipy.stats import kendalltau

    tau = kendalltau(predicted, measured).statistic
    return None if math.isnan(tau) else float(tau)


def engine_cost(engine: Engine, profiles: str | Path | None = "default") -> CostModel:
    """The cost model of the engine's cluster: the calibration's where the engine has one
    (its fitted models, and the profile database ``profiles``: ``"default"`` for the
    user's, None for none), the roofline over the catalog spec otherwise."""
    from hwmodels.calibrated import CalibratedCost
    from hwmodels.cost import RooflineCost

    calibration = getattr(engine, "calibration", None)
    cluster = engine.cluster()
    if not calibration:
        return RooflineCost(cluster)
    return CalibratedCost(cluster, calibration, profiles=profiles)


def order_kept(predicted: Sequence[float], low: Sequence[float], high: Sequence[float]
               ) -> bool:
    """Whether no two plans are ordered by the simulator against the measurements: a pair
    the prediction calls faster one way while every measured repeat of it was slower than
    every repeat of the other (a pair closer than the machine's noise contradicts nothing).

    >>> order_kept([1.0, 2.0], low=[1.0, 1.9], high=[1.2, 2.1])
    True
    >>> order_kept([1.0, 2.0], low=[3.0, 1.0], high=[3.1, 1.1])
    False
    """
    n = len(predicted)
    return not any(predicted[i] < predicted[j] and low[i] > high[j]
                   for i in range(n) for j in range(n))


def _row(graph: str, policy: str, engine: Engine, plan: Any,
         run: tuple[RunResult, float], baselines: Mapping[str, CostModel],
         slower: float | None, cost: CostModel,
         on_ops: Callable[[str, str, pd.DataFrame], None] | None) -> dict[str, Any]:
    from sim.engine import simulate

    cluster = engine.cluster()
    measured, spread = run
    predicted = simulate(plan, cluster, cost)
    if on_ops is not None:
        on_ops(graph, policy, op_table(plan, measured.op_busy_s, predicted.trace, cost))
    others: dict[str, float] = {}
    for name, cost in baselines.items():  # the same run, predicted by another model
        seconds = simulate(plan, cluster, cost).makespan_s
        others |= {f"{name}_s": seconds, f"{name}_error": seconds / measured.makespan_s - 1}
    errors = op_errors(measured.op_busy_s, predicted.trace)
    memory = [abs(predicted.peak_memory_bytes[d] / measured.peak_memory_bytes[d] - 1)
              for d in engine.devices if measured.peak_memory_bytes[d] > 0]
    low, high = measured.spread_s
    return {
        "graph": graph, "policy": policy, "cluster": cluster.name,
        "devices_used": len(set(plan.placement.values())),
        "measured_s": measured.makespan_s, "measured_min_s": low, "measured_max_s": high,
        "repeats": len(measured.makespans_s), "round_spread": spread,
        "predicted_s": predicted.makespan_s,
        "error": predicted.makespan_s / measured.makespan_s - 1,
        "slower": slower,
        "error_at_speed": (None if slower is None
                           else predicted.makespan_s * slower / measured.makespan_s - 1),
        "op_error_median": float(np.median(errors)) if len(errors) else None,
        "op_error_p90": float(np.quantile(errors, 0.9)) if len(errors) else None,
        "measured_peak_bytes": max(measured.peak_memory_bytes.values()),
        "predicted_peak_bytes": max(predicted.peak_memory_bytes.values()),
        "memory_error_max": max(memory) if memory else None,
        **{f"from_{name.replace(' ', '_')}": predicted.cost_sources.get(name, {}).get(
            "share", 0.0) for name in SOURCES}, **others,
    }


def validate(engine: Engine, graphs: Mapping[str, Graph], policies: Sequence[str], *,
             repeats: int = 5, warmup: int = 1, seed: int = 0,
             baselines: Mapping[str, CostModel] | None = None, min_seconds: float = 0.0,
             speed: Callable[[], float] | None = None, rounds: int = 3,
             progress: Callable[[Iterable[Any]], Iterable[Any]] = iter,
             cost: CostModel | None = None,
             on_ops: Callable[[str, str, pd.DataFrame], None] | None = None) -> pd.DataFrame:
    """One row per (graph, policy); ``rank_tau`` repeats the graph's Kendall tau and
    ``order_kept`` whether the simulator orders no two of its plans against the
    measurements (see :func:`order_kept`).
    ``baselines`` (name -> a cost model bound to the engine's cluster) predict the same
    runs too: columns ``<name>_s`` and ``<name>_error``. Every plan of every graph runs
    in ``rounds`` turns (:func:`runtime.turns.run_in_turns`); a plan whose repeats take
    less than ``min_seconds`` runs more times (at most 500), so a short step is measured
    over as long as a long one; ``repeats`` records how many, ``round_spread`` how far apart the
    medians of its turns lie. ``speed`` (how much slower the machine runs now than when it
    was calibrated, e.g. a reference graph's time over its time then) is asked after each
    turn: columns ``slower`` (the median of its answers) and ``error_at_speed``, the error
    of the prediction scaled by it. ``cost`` prices the plans and their simulation (the
    engine's own model, :func:`engine_cost`, by default); columns ``from_profile``,
    ``from_shape_table``, ``from_predictor`` and ``from_roofline`` give the share of the
    predicted op time each source priced. ``on_ops``, where given, is called with each
    graph's label, the policy and the run's :func:`op_table` (each op measured against its
    prediction)."""
    import pandas as pd

    from policies.base import plan

    if rounds < 1:
        raise PlacelabError(f"validate: rounds must be >= 1, got {rounds}")
    cost = cost or engine_cost(engine)
    cases = [(name, policy) for name in graphs for policy in policies]
    plans = [plan(graphs[name], engine.cluster(), policy, cost) for name, policy in cases]
    speeds: list[float] = []
    measured = run_in_turns(plans, engine, repeats=repeats, warmup=warmup, seed=seed,
                            min_seconds=min_seconds, rounds=min(rounds, repeats),
                            after_turn=lambda: speeds.append(speed()) if speed else None,
                            progress=progress)
    slower = statistics.median(speeds) if speeds else None
    rows = [_row(name, policy, engine, p, m, baselines or {}, slower, cost, on_ops)
            for (name, policy), p, m in zip(cases, plans, measured, strict=True)]
    df = pd.DataFrame(rows)
    groups = df.groupby("graph", sort=False)
    df["rank_tau"] = df["graph"].map({name: rank_agreement(list(g["predicted_s"]),
                                                           list(g["measured_s"]))
                                      for name, g in groups})
    df["order_kept"] = df["graph"].map({name: order_kept(
        list(g["predicted_s"]), list(g["measured_min_s"]), list(g["measured_max_s"]))
        for name, g in groups})
    return df
