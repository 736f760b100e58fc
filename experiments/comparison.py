"""Compare placement policies on models and clusters: one simulated run per combination."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd

from hwmodels.cost import make_cost_model
from hwmodels.registry import get_cluster
from hwmodels.spec import Cluster
from policies.base import POLICIES, make_policy, plan
from policies.bounds import lower_bound
from sim.engine import simulate
from workloads.errors import PlacementError
from workloads.graph import Graph
from workloads.passes import PassManager
from workloads.training import training_graph
from workloads.zoo import build_model

__all__ = ["RESULT_COLUMNS", "compare", "run_one"]

RESULT_COLUMNS: tuple[str, ...] = (
    "model", "batch", "step", "cluster", "policy", "makespan_s", "lower_bound_s",
    "makespan_over_bound",
    "feasible", "reason", "placement_s", "simulation_s", "transfer_bytes",
    "peak_memory_bytes", "devices_used", "mean_utilization", "speedup_vs_single_device",
    "solver_status", "solver_gap",
)


def _step(graph: Graph) -> str:
    """``forward``, or ``train.<optimizer>`` for a training graph."""
    return graph.name.split(".", 1)[1] if "." in graph.name else "forward"


def run_one(graph: Graph, cluster: Cluster, policy: str, *, cost: str = "roofline",
            batch: int | None = None) -> dict[str, object]:
    """Plan and simulate one combination; the row :func:`compare` tabulates. A policy that
    cannot place the graph (out of memory, too large for it) gives a row with
    ``feasible=False`` and its reason, not an exception."""
    cost_model = make_cost_model(cost, cluster)
    try:
        p = plan(graph, cluster, make_policy(policy), cost_model)
    except PlacementError as err:
        return {"model": graph.name.split(".")[0], "batch": batch, "step": _step(graph),
                "cluster": cluster.name, "policy": policy, "makespan_s": float("nan"),
                "lower_bound_s": lower_bound(graph, cluster, cost_model),
                "makespan_over_bound": float("nan"), "feasible": False, "reason": str(err),
                "placement_s": float("nan"), "simulation_s": float("nan"),
                "transfer_bytes": 0, "peak_memory_bytes": 0, "devices_used": 0,
                "mean_utilization": float("nan"), "solver_status": None, "solver_gap": None}
    start = time.perf_counter()
    result = simulate(p, cluster, cost_model)
    elapsed = time.perf_counter() - start
    bound = lower_bound(graph, cluster, cost_model)
    used = [d for d in cluster.device_names if d in p.order]
    return {
        "model": graph.name.split(".")[0], "batch": batch, "step": _step(graph),
        "cluster": cluster.name, "policy": policy,
        "makespan_s": result.makespan_s, "lower_bound_s": bound,
        "makespan_over_bound": result.makespan_s / bound if bound > 0 else float("nan"),
        "feasible": result.feasible,
        "reason": result.reason, "placement_s": p.placement_s, "simulation_s": elapsed,
        "transfer_bytes": result.transfer_bytes,
        "peak_memory_bytes": max(result.peak_memory_bytes.values()),
        "devices_used": len(used),
        "mean_utilization": sum(result.utilization[d] for d in used) / len(used),
        "solver_status": p.info.get("status"), "solver_gap": p.info.get("mip_gap"),
    }


def compare(models: Sequence[str], clusters: Sequence[str] | str,
            policies: Sequence[str] | str = "all", *, batch: int = 1,
            cost: str = "roofline", train: bool = False, optimizer: str = "sgd",
            colocate: str = "ops", passes: Sequence[str] = ()) -> pd.DataFrame:
    """Every model x cluster x policy, simulated; one row each (see ``RESULT_COLUMNS``).

    ``speedup_vs_single_device`` is the single-device makespan over the row's makespan
    (present when ``single_device`` is among the policies). ``train`` simulates a whole
    training step (``workloads.training_graph`` with ``optimizer`` and ``colocate``) instead
    of a forward pass.

    >>> df = compare(["mlp"], "workstation", ["single_device", "heft"], batch=8)
    >>> list(df["policy"])
    ['single_device', 'heft']
    """
    clusters = [clusters] if isinstance(clusters, str) else list(clusters)
    names = POLICIES.names() if policies == "all" else list(policies)
    for what, items in (("models", models), ("clusters", clusters), ("policies", names)):
        _check_names(what, items)
    for name in names:
        make_policy(name)
    rows = []
    for model in models:
        graph = build_model(model, batch=batch)
        if train:
            graph = training_graph(graph, optimizer, colocate=colocate)
        if passes:
            graph, _ = PassManager(passes).run(graph)
        for cluster_name in clusters:
            cluster = get_cluster(cluster_name)
            for policy in names:
                rows.append(run_one(graph, cluster, policy, cost=cost, batch=batch))
    df = pd.DataFrame(rows)
    keys = list(zip(df["model"], df["step"], df["cluster"], strict=True))
    base = {k: m for k, p, m in zip(keys, df["policy"], df["makespan_s"], strict=True)
            if p == "single_device"}
    df["speedup_vs_single_device"] = [base.get(k, float("nan")) / m
                                      for k, m in zip(keys, df["makespan_s"], strict=True)]
    return df[list(RESULT_COLUMNS)]


def _check_names(what: str, names: Sequence[str]) -> None:
    """A list of names to compare: not empty, no name twice (rows would collide)."""
    if not names:
        raise PlacementError(f"compare: {what} must name at least one, got none")
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:
        raise PlacementError(f"compare: {what} must name each once, got {twice[0]!r} twice")
