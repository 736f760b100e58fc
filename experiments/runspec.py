"""One cell of an experiment: a :class:`RunSpec` with a stable hash, and the pure
:func:`run_one` that turns it into a results row.

A spec carries everything a worker needs and nothing it must share with its parent: the
graph by zoo name (or a graph file's content), the cluster by its definition (so a cluster
registered on one machine runs on another), the policy with its parameters, the cost model
(a file it reads by its content hash), the link model and the seed. Its hash is the same in
every process and on every machine.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwmodels.spec import Cluster
from workloads.errors import PlacelabError

__all__ = ["RESULT_COLUMNS", "RunSpec", "Simulated", "WALL_COLUMNS", "blank_row", "provenance",
           "run_one", "simulate_spec"]

#: Columns of every results row, in order. Wall-clock columns (``WALL_COLUMNS``) differ
#: between two runs of the same spec; every other column is a function of the spec.
RESULT_COLUMNS: tuple[str, ...] = (
    "model", "batch", "seq_len", "dtype", "step", "cluster", "variant", "policy", "cost", "links",
    "order", "seed", "makespan_s", "lower_bound_s", "makespan_over_bound", "feasible", "reason",
    "error", "transfer_bytes", "compute_s", "transfer_s", "peak_memory_bytes",
    "devices_used", "mean_utilization",
    "solver_status", "solver_gap", "policy_params", "spec_hash", "cluster_hash",
    "cost_hash", "placelab_version", "git_sha", "placement_s", "simulation_s", "cell_s",
)
WALL_COLUMNS: tuple[str, ...] = ("placement_s", "simulation_s", "cell_s")


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


@dataclass(frozen=True)
class RunSpec:
    """One simulated run: graph source, passes, cluster, policy, cost model, link model,
    issue order (``plan`` or ``priority``, see :func:`sim.simulate`), seed.

    Build one with :meth:`make`, which resolves the cluster by name and attaches its
    definition; ``spec.key`` is its stable hash.

    >>> spec = RunSpec.make("mlp", "workstation", "heft", batch=8)
    >>> spec.key == RunSpec.make("mlp", "workstation", "heft", batch=8).key
    True
    >>> run_one(spec)["feasible"]
    True
    """

    model: str
    cluster: str
    policy: str
    batch: int = 1
    seq_len: int | None = None
    dtype: str = "fp32"
    train: bool = False
    optimizer: str = "sgd"
    colocate: str = "ops"
    passes: tuple[str, ...] = ()
    cost: str = "roofline"
    cost_file: str | None = None
    cost_hash: str = ""
    links: str = "fcfs"
    order: str = "plan"
    seed: int | None = None
    variant: str = ""
    cluster_toml: str = field(default="", repr=False)
    graph_json: str | None = field(default=None, repr=False)
    #: where ``graph_json`` was read (named by its errors; not part of the key)
    graph_file: str | None = field(default=None, repr=False)

    @classmethod
    def make(cls, model: str, cluster: str | Cluster, policy: str, *,
             graph_file: str | Path | None = None, cost_file: str | Path | None = None,
             batch: int = 1, seq_len: int | None = None, dtype: str = "fp32",
             train: bool = False, optimizer: str = "sgd", colocate: str = "ops",
             passes: tuple[str, ...] = (), cost: str = "roofline", links: str = "fcfs",
             order: str = "plan", seed: int | None = None, variant: str = "") -> RunSpec:
        """A spec for zoo model ``model`` (or the graph in ``graph_file``, ``model`` then
        naming it) on ``cluster`` (a name, or a :class:`~hwmodels.Cluster` itself); the
        other fields as the class has them."""
        from hwmodels.registry import get_cluster
        from workloads.zoo import MODELS, check_size

        c = get_cluster(cluster) if isinstance(cluster, str) else cluster
        if graph_file is None:
            MODELS.get(model)  # a typo is refused here, not recorded as a failed cell
        check_size(model, batch, seq_len)  # and a size no table column can hold
        _check_cost(cost, None if cost_file is None else str(cost_file), c)
        graph_json = None
        if graph_file is not None:
            from workloads.graph import read_graph_text

            graph_json = read_graph_text(graph_file)
        cost_hash = ""
        if cost_file is not None:
            cost_hash = _file_hash(cost_file)
        return cls(model=model, cluster=c.name, policy=policy, batch=batch, seq_len=seq_len,
                   dtype=dtype, train=train, optimizer=optimizer, colocate=colocate,
                   passes=tuple(passes), cost=cost,
                   cost_file=None if cost_file is None else str(cost_file),
                   cost_hash=cost_hash, links=links, order=order, seed=seed, variant=variant,
                   cluster_toml=cluster_toml(c), graph_json=graph_json,
                   graph_file=None if graph_file is None else str(graph_file))

    @functools.cached_property
    def key(self) -> str:
        """SHA-256 of the spec (the graph and cluster by the hashes of their definitions)."""
        data = dataclasses.asdict(self)
        data["cluster_toml"] = _sha(self.cluster_toml)
        data["graph_json"] = None if self.graph_json is None else _sha(self.graph_json)
        data["passes"] = list(self.passes)
        del data["graph_file"]  # the graph is its content
        return _sha(json.dumps(data, sort_keys=True))

    def built_cluster(self) -> Cluster:
        """The cluster rebuilt from the definition the spec carries (once per process)."""
        return _cluster(self.cluster_toml, self.cluster)

    @property
    def step(self) -> str:
        return f"train.{self.optimizer}" if self.train else "forward"


def cluster_toml(cluster: Cluster) -> str:
    """The cluster and its device models as hardware TOML (what a worker rebuilds it from)."""
    from hwmodels.toml_io import dumps

    models = {d.model: d for d in cluster.devices}
    return dumps(list(models.values()), [cluster])


@functools.lru_cache(maxsize=64)
def _check_cost(cost: str, cost_file: str | None, cluster: Cluster) -> None:
    """Refuse an unknown cost model, or one without the file it reads, before any run
    (once per cost model, file and cluster)."""
    from hwmodels.cost import make_cost_model

    make_cost_model(cost, cluster, cost_file)


def _file_hash(path: str | Path) -> str:
    from workloads.io import read_text

    return _sha(read_text(path, PlacelabError, "cost file"))


@functools.lru_cache(maxsize=16)
def _cluster(text: str, name: str) -> Cluster:
    from hwmodels.toml_io import loads

    return loads(text, source=f"cluster {name!r}").clusters[name]


@functools.lru_cache(maxsize=8)
def _graph(model: str, batch: int, seq_len: int | None, dtype: str, train: bool,
           optimizer: str, colocate: str, passes: tuple[str, ...],
           graph_json: str | None, source: str) -> Any:
    """The spec's graph, built once per process for every cell that shares it."""
    from workloads.graph import Graph
    from workloads.passes import PassManager
    from workloads.training import training_graph
    from workloads.zoo import build_model

    if graph_json is not None:
        graph = Graph.from_json(graph_json, source=source)
    else:
        graph = build_model(model, batch=batch, seq_len=seq_len, dtype=dtype)
    if train:
        graph = training_graph(graph, optimizer, colocate=colocate)
    if passes:
        graph, _ = PassManager(list(passes)).run(graph)
    return graph


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, str]:
    """The placelab version and, when run from a git checkout, its commit."""
    import subprocess
    from importlib.metadata import PackageNotFoundError, version

    try:
        placelab = version("placelab")
    except PackageNotFoundError:
        placelab = "unknown"
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return {"placelab_version": placelab, "git_sha": sha}


def _policy(spec: RunSpec) -> Any:
    """The spec's policy; its seed goes to a seeded policy whose spec does not set one."""
    from policies.base import make_policy, policy_parameters

    text = spec.policy
    if spec.seed is not None and "seed=" not in text and "seed" in policy_parameters(
            text.partition(":")[0]):
        text += ("," if ":" in text else ":") + f"seed={spec.seed}"
    return make_policy(text)


def _cost(spec: RunSpec, cluster: Cluster) -> Any:
    from hwmodels.cost import make_cost_model

    if spec.cost_file is not None:
        found = _file_hash(spec.cost_file)
        if found != spec.cost_hash:
            raise PlacelabError(f"run {spec.key[:12]}: cost file {spec.cost_file!r} must have "
                                f"content hash {spec.cost_hash[:12]}, got {found[:12]}")
    return make_cost_model(spec.cost, cluster, spec.cost_file)


@dataclasses.dataclass(frozen=True)
class Simulated:
    """What :func:`simulate_spec` made of a spec: the graph, the plan, the simulation's
    result, and the cluster, cost model, policy and lower bound they were made with."""

    graph: Any
    plan: Any
    result: Any
    cluster: Cluster
    cost: Any
    policy: Any
    lower_bound_s: float
    simulation_s: float


def simulate_spec(spec: RunSpec) -> Simulated:
    """Plan and simulate ``spec`` (what :func:`run_one` and ``placelab simulate`` do):
    errors are raised, not recorded.

    >>> s = simulate_spec(RunSpec.make("mlp", "workstation", "heft", batch=8))
    >>> s.result.makespan_s >= s.lower_bound_s > 0
    True
    """
    from policies.base import plan
    from policies.bounds import lower_bound
    from sim.delta import search_evaluator
    from sim.engine import simulate

    cluster = spec.built_cluster()
    graph = _graph(spec.model, spec.batch, spec.seq_len, spec.dtype, spec.train,
                   spec.optimizer, spec.colocate, spec.passes, spec.graph_json,
                   spec.graph_file or f"graph {spec.model!r}")
    cost = _cost(spec, cluster)
    policy = _policy(spec)
    bound = lower_bound(graph, cluster, cost)
    # a search scores its candidates by what the simulator will say of them
    p = plan(graph, cluster, policy, cost,
             evaluate=search_evaluator(graph, cluster, cost, links=spec.links, order=spec.order)
             if policy.scores_plans else None)
    start = time.perf_counter()
    result = simulate(p, cluster, cost, links=spec.links, order=spec.order)
    return Simulated(graph, p, result, cluster, cost, policy, bound,
                     time.perf_counter() - start)


def _simulate(spec: RunSpec) -> dict[str, Any]:
    s = simulate_spec(spec)
    p, result, bound = s.plan, s.result, s.lower_bound_s
    used = [d for d in s.cluster.device_names if d in p.order]
    return {
        "cluster_hash": s.cluster.definition_hash,
        # what the graph is, passes included (a ``train`` pass)
        "step": s.graph.meta.get("step", spec.step),
        "policy_params": json.dumps(s.policy.get_params(), sort_keys=True),
        "lower_bound_s": bound,
        "makespan_s": result.makespan_s, "feasible": result.feasible,
        "reason": result.reason, "placement_s": p.placement_s,
        "simulation_s": s.simulation_s,
        "makespan_over_bound": result.makespan_s / bound if bound > 0 else None,
        "transfer_bytes": result.transfer_bytes,
        "compute_s": sum(result.busy_s.values()),
        "transfer_s": _transfer_seconds(result),
        "peak_memory_bytes": max(result.peak_memory_bytes.values()),
        "devices_used": len(used),
        "mean_utilization": sum(result.utilization[d] for d in used) / len(used),
        "solver_status": p.info.get("status"), "solver_gap": p.info.get("mip_gap"),
    }


def _transfer_seconds(result: Any) -> float:
    """Time transfers spent moving (start to end, summed): with ``compute_s``, the
    communication share of a plan."""
    columns = result.columns
    if columns is None or not len(columns.transfer_start):
        return 0.0
    return float((columns.transfer_end - columns.transfer_start).sum())


def blank_row(spec: RunSpec) -> dict[str, Any]:
    """The row of ``spec`` before it runs: what the spec says, no result yet."""
    row: dict[str, Any] = dict.fromkeys(RESULT_COLUMNS)
    row.update(model=spec.model, batch=spec.batch, seq_len=spec.seq_len, dtype=spec.dtype,
               step=spec.step,
               cluster=spec.cluster, variant=spec.variant, policy=spec.policy, cost=spec.cost,
               links=spec.links, order=spec.order, seed=spec.seed, spec_hash=spec.key,
               cost_hash=spec.cost_hash or _sha(spec.cost), error="", transfer_bytes=0,
               peak_memory_bytes=0, devices_used=0, **provenance())
    return row


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Plan and simulate ``spec``: one results row (``RESULT_COLUMNS``). Never raises: a plan
    a policy cannot make (out of memory, too large for it) is ``feasible=False`` with its
    reason; any other failure too, with the exception in ``error``."""
    start = time.perf_counter()
    row = blank_row(spec)
    try:
        row.update(_simulate(spec))
    except PlacelabError as err:
        row.update(feasible=False, reason=str(err))
    except Exception as err:
        row.update(feasible=False, reason=f"error: {type(err).__name__}",
                   error=f"{type(err).__name__}: {err}")
    row["cell_s"] = time.perf_counter() - start
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in row.items()}
