"""Tenant studies: job lists from TOML, Poisson job streams, tenant-aware placement.

A tenant spec names a cluster, how jobs share it and the jobs::

    cluster = "dgx-a100"
    sharing = "weighted_fair"      # a sim.sharing policy, with parameters: "priority:preempt=false"
    links = "fair"                 # fcfs | fair | none
    policy = "heft"                # each job's placement policy unless it names its own
    aware = true                   # place each job around the load of those before it

    [[jobs]]
    name = "bert"
    model = "bert_base"            # a zoo model, or graph = "file.json"
    batch = 8
    train = true
    arrival_s = 0.0
    weight = 2.0
    priority = 1

    [stream]                       # Poisson arrivals, seeded, added to the jobs
    rate_per_s = 40.0
    count = 6
    seed = 0
    mix = [{model = "resnet50", batch = 32, train = true}, {model = "mlp", batch = 64}]

:func:`stream_jobs` draws the stream; :func:`write_jobs` writes any job list as a spec
that replays it exactly (no stream left to draw).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from workloads.errors import PlacelabError
from workloads.schema import Schema

if TYPE_CHECKING:
    from hwmodels.cost import CostModel
    from hwmodels.spec import Cluster
    from policies.load import ClusterLoad
    from policies.plans import Plan
    from sim.result import SimResult
    from sim.tenants import Job, TenantResult

__all__ = ["JobEntry", "TenantError", "TenantFile", "build_jobs", "estimate_load",
           "load_tenants", "run_tenants", "stream_jobs", "write_jobs"]


class TenantError(PlacelabError):
    """A tenant spec that cannot be read or run."""


class Workload(Schema):
    """What a job runs (a zoo model or a graph file) and how it is placed."""

    model: str | None = None
    graph: str | None = None
    # upper bounds where a larger value can only be a mistake
    batch: int = Field(default=1, ge=1, le=2**24)
    seq_len: int | None = Field(default=None, ge=1, le=2**24)
    train: bool = False
    optimizer: str = "sgd"
    policy: str | None = None


class JobEntry(Workload):
    """One job of a tenant spec."""

    name: str = ""
    arrival_s: float = Field(default=0.0, ge=0)
    weight: float = Field(default=1.0, gt=0)
    priority: int = Field(default=0, ge=-2**31, le=2**31 - 1)


class Stream(Schema):
    """Poisson arrivals: ``count`` jobs, exponential gaps of mean ``1 / rate_per_s``,
    each drawn uniformly from ``mix``, from ``start_s``."""

    rate_per_s: float = Field(gt=0)
    count: int = Field(ge=1, le=10_000)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    start_s: float = Field(default=0.0, ge=0)
    mix: list[Workload] = Field(min_length=1)


class TenantFile(Schema):
    """A tenant spec: the cluster, the sharing and link models, the jobs."""

    cluster: str
    sharing: str = "fifo"
    links: Literal["fcfs", "fair", "none"] = "fcfs"
    cost: str = "roofline"
    policy: str = "heft"
    aware: bool = False
    jobs: list[JobEntry] = Field(default_factory=list)
    stream: Stream | None = None


def load_tenants(path: str | Path) -> TenantFile:
    """A tenant spec file, checked against :class:`TenantFile`."""
    from workloads.io import read_text
    from workloads.schema import load_toml, validate

    text = read_text(path, TenantError, "tenant spec")
    doc = validate(TenantFile, load_toml(text, source=str(path), error=TenantError),
                   source=str(path), error=TenantError)
    if not doc.jobs and doc.stream is None:
        raise TenantError(f"{path}: jobs: expected at least one job or a stream, got none")
    for where, w in _workloads(doc):
        if (w.model is None) == (w.graph is None):
            raise TenantError(f"{path}: {where}: expected one of model or graph, got "
                              f"{'both' if w.model else 'neither'}")
    return doc


def _workloads(doc: TenantFile) -> list[tuple[str, Workload]]:
    out: list[tuple[str, Workload]] = [(f"jobs[{i}]", j) for i, j in enumerate(doc.jobs)]
    if doc.stream is not None:
        out += [(f"stream.mix[{i}]", w) for i, w in enumerate(doc.stream.mix)]
    return out


def stream_jobs(stream: Stream, *, prefix: str = "s") -> list[JobEntry]:
    """The stream's jobs: arrival gaps exponential with mean ``1 / rate_per_s`` and
    workloads drawn uniformly from the mix, all from one seeded generator.

    >>> s = Stream(rate_per_s=10.0, count=3, seed=1, mix=[Workload(model="mlp")])
    >>> [j.name for j in stream_jobs(s)], stream_jobs(s) == stream_jobs(s)
    (['s0', 's1', 's2'], True)
    """
    rng = np.random.default_rng(stream.seed)
    gaps = rng.exponential(1.0 / stream.rate_per_s, size=stream.count)
    picks = rng.integers(len(stream.mix), size=stream.count)
    arrivals = stream.start_s + np.cumsum(gaps) - gaps[0]  # the first arrives at start_s
    return [JobEntry(**stream.mix[int(k)].model_dump(), name=f"{prefix}{i}",
                     arrival_s=float(t)) for i, (t, k) in enumerate(zip(arrivals, picks,
                                                                        strict=True))]


def all_jobs(doc: TenantFile) -> list[JobEntry]:
    """The spec's jobs and its stream's, by arrival (named ``job<i>`` where unnamed)."""
    jobs = list(doc.jobs) + (stream_jobs(doc.stream) if doc.stream is not None else [])
    named = [j if j.name else j.model_copy(update={"name": f"job{i}"})
             for i, j in enumerate(jobs)]
    return sorted(named, key=lambda j: j.arrival_s)


def write_jobs(path: str | Path, doc: TenantFile, jobs: list[JobEntry]) -> Path:
    """A spec that replays ``jobs`` exactly on ``doc``'s cluster and settings."""
    import tomli_w

    from workloads.io import write_text_atomic

    data = doc.model_dump(exclude={"jobs", "stream"})
    data["jobs"] = [{k: v for k, v in j.model_dump().items() if v is not None}
                    for j in jobs]
    return write_text_atomic(path, tomli_w.dumps(data))


def estimate_load(placed: list[tuple[float, SimResult]], at_s: float) -> ClusterLoad:
    """What jobs already placed hold at ``at_s``, from their runs alone shifted to their
    arrival: per device, the seconds of their ops still to run there, and the peak memory
    of every job not yet finished.

    Contention between them is not modelled: it is the estimate a scheduler can make
    without simulating the whole mix.
    """
    from policies.load import ClusterLoad

    busy: dict[str, float] = {}
    held: dict[str, int] = {}
    for arrival, run in placed:
        if arrival + run.makespan_s <= at_s:
            continue
        trace = run.trace
        ops = trace[trace["kind"] == "compute"]
        left = (ops["end_s"] + arrival - np.maximum(ops["start_s"] + arrival, at_s)).clip(
            lower=0.0)
        for device, seconds in left.groupby(ops["device"]).sum().items():
            busy[device] = busy.get(device, 0.0) + float(seconds)
        for device, peak in run.peak_memory_bytes.items():
            held[device] = held.get(device, 0) + int(peak)
    return ClusterLoad(busy, held)


def _graph(entry: Workload) -> Any:
    from workloads.graph import Graph
    from workloads.io import read_text
    from workloads.training import training_graph
    from workloads.zoo import build_model

    if entry.graph is not None:
        from workloads.errors import GraphError

        graph = Graph.from_json(read_text(entry.graph, GraphError, "graph file"),
                                source=entry.graph)
    else:
        graph = build_model(str(entry.model), batch=entry.batch, seq_len=entry.seq_len)
    if entry.train:
        graph = training_graph(graph, entry.optimizer)
    return graph


def build_jobs(jobs: list[JobEntry], cluster: Cluster, cost: CostModel, *, policy: str,
               links: str = "fcfs", aware: bool = False) -> list[Job]:
    """Each entry placed by its own policy or ``policy``, in arrival order; with
    ``aware``, around the load of the jobs placed before it, as :func:`estimate_load`
    sees it at its arrival (their runs alone simulated with ``links``)."""
    from policies.base import plan
    from sim.engine import simulate
    from sim.tenants import Job

    placed: list[tuple[float, SimResult]] = []
    out: list[Job] = []
    for entry in jobs:
        graph = _graph(entry)
        load = estimate_load(placed, entry.arrival_s) if aware else None
        p: Plan = plan(graph, cluster, entry.policy or policy, cost, load=load)
        placed.append((entry.arrival_s, simulate(p, cluster, cost, links=links)))
        out.append(Job(p, entry.name, entry.arrival_s, entry.weight, entry.priority))
    return out


def run_tenants(doc: TenantFile, *, sharing: str | None = None, aware: bool | None = None,
                jobs: list[JobEntry] | None = None) -> TenantResult:
    """Place and simulate the spec's jobs (``sharing`` and ``aware`` override the spec's).

    >>> doc = TenantFile(cluster="quad-v100-nvlink", jobs=[
    ...     JobEntry(model="mlp", batch=32, name="a"),
    ...     JobEntry(model="mlp", batch=32, name="b", arrival_s=1e-5)])
    >>> r = run_tenants(doc, sharing="weighted_fair")
    >>> r.jobs["job"].tolist(), r.feasible
    (['a', 'b'], True)
    """
    from hwmodels.cost import make_cost_model
    from hwmodels.registry import get_cluster
    from sim.sharing import make_sharing
    from sim.tenants import simulate_jobs

    cluster = get_cluster(doc.cluster)
    shares = make_sharing(sharing or doc.sharing)
    cost = make_cost_model(doc.cost, cluster)
    built = build_jobs(all_jobs(doc) if jobs is None else jobs, cluster, cost,
                       policy=doc.policy, links=doc.links,
                       aware=doc.aware if aware is None else aware)
    return simulate_jobs(built, cluster, cost, sharing=shares, links=doc.links)
