"""Several jobs (tenants) on one cluster: :func:`simulate_jobs`.

The fabric — device streams, copy engines, link channels, memory — is shared; each job
keeps its own state: its Plan's wiring (:mod:`sim.wiring`), its progress on every device
(a *view* of the device: the job's op order there and how far it has got), its memory
there. Views of one device share its stream and copy-engine lists, so the event loop of
:mod:`sim.engine` runs unchanged; only the issue rule differs: the queued ops of all jobs
on a device are ordered by a sharing policy (:mod:`sim.sharing`).

Memory of co-located jobs adds up. A job whose allocation would take a device past its
capacity (its slice's, under a partitioning policy with memory slices) fails there and
then, as a process out of device memory does: it is marked infeasible with the reason,
its memory is released, its running ops finish and it starts nothing more; the others go
on. Under ``exclusive`` a job waits for its devices instead of sharing them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.collectives import lower
from policies.plans import Plan
from sim.engine import IssueOrder, Simulation, simulate
from sim.hosts import shared_hosts
from sim.memory import MemoryAccounts
from sim.options import LINK_MODELS, LINK_REGISTRY, require
from sim.result import TraceColumns
from sim.sharing import SharingPolicy, make_sharing
from sim.wiring import Wiring, combine, wire
from workloads.collect import gc_paused
from workloads.errors import PlacementError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Job", "SharedRun", "TenantResult", "jain_index", "simulate_jobs"]


@dataclass(frozen=True)
class Job:
    """A Plan submitted at ``arrival_s`` with a ``weight`` (fair share) and a
    ``priority`` (larger first). ``name`` defaults to ``job<i>``."""

    plan: Plan
    name: str = ""
    arrival_s: float = 0.0
    weight: float = 1.0
    priority: int = 0

    def __post_init__(self) -> None:
        who = f"job {self.name or '?'!r}"
        if not (math.isfinite(self.arrival_s) and self.arrival_s >= 0):
            raise PlacementError(f"{who}: arrival_s must be a finite number >= 0, got "
                                 f"{self.arrival_s!r}")
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise PlacementError(f"{who}: weight must be a finite number > 0, got "
                                 f"{self.weight!r}")
        if not (isinstance(self.priority, int) and -2**63 <= self.priority < 2**63):
            raise PlacementError(f"{who}: priority must be a 64-bit integer, got "
                                 f"{self.priority!r}")


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)``: 1 when all are equal, 1/n when
    one takes everything.

    >>> jain_index([2.0, 2.0]), round(jain_index([1.0, 0.0]), 2)
    (1.0, 0.5)
    """
    x = np.asarray(values, dtype=float)
    if not len(x) or not np.any(x):
        return float("nan") if not len(x) else 1.0
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


@dataclass
class TenantResult:
    """What a shared run reports: one row per job in :attr:`jobs` (``job, arrival_s,
    start_s, end_s, alone_s, slowdown, feasible, reason, weight, priority``), and per run
    the makespan, each device's utilisation and peak memory, Jain's index over the
    slowdowns of the jobs that finished, and the Trace (its ``job`` column names each
    row's job)."""

    sharing: str
    links: str
    makespan_s: float
    jobs: pd.DataFrame
    utilization: dict[str, float]
    busy_s: dict[str, float]
    peak_memory_bytes: dict[str, int]
    memory_capacity_bytes: dict[str, int]
    fairness: float
    columns: TraceColumns = field(repr=False)
    memory_log: list[float] = field(repr=False)
    devices: tuple[str, ...] = ()

    @property
    def trace(self) -> pd.DataFrame:
        return self.columns.frame("")

    @property
    def feasible(self) -> bool:
        return bool(self.jobs["feasible"].all())

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (what ``placelab tenants --json`` prints)."""
        rows = self.jobs.to_dict(orient="records")
        return {"sharing": self.sharing, "links": self.links, "makespan_s": self.makespan_s,
                "fairness": None if math.isnan(self.fairness) else self.fairness,
                "feasible": self.feasible, "utilization": self.utilization,
                "peak_memory_bytes": self.peak_memory_bytes,
                "jobs": [{k: _json(v) for k, v in row.items()} for row in rows]}


def _json(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


class JobAccounts(MemoryAccounts):
    """Memory when several jobs share the devices: a job's views of a device are its
    accounts (parameters arrive with the job, leave when it ends); a device's use is the
    sum over the jobs that have not failed. A job that allocates past the device's capacity
    (past its slice's, where a partition slices memory) fails alone."""

    run: SharedRun

    def __init__(self, run: SharedRun, resident: np.ndarray) -> None:
        super().__init__(run, resident)
        n = run.n_physical
        self.overflow = ""
        self.used = [0] * len(run.devices)  # parameters arrive with their job
        self.peak = [-1] * len(run.devices)  # so every allocation is checked
        self.device_peak = [0] * n
        self.device_capacity = self.capacity[:n]
        self.memory_slices = run.sharing.partitioned and run.sharing.memory_slices
        self.timeline = []

    def over_peak(self, d: int, used: int, op: int, transfer: int | None) -> None:
        run = self.run
        j, p = d // run.n_physical, run.physical(d)
        total = self.device_use(p)
        self.device_peak[p] = max(self.device_peak[p], total)
        if run.dead[j]:
            return
        if self.memory_slices:
            if used > self.capacity[d]:
                run.fail(j, d, used, self.capacity[d], self.cause(op, transfer),
                         "its slice's")
        elif total > self.device_capacity[p]:
            run.fail(j, d, total, self.device_capacity[p], self.cause(op, transfer),
                     "the device's")

    def device_use(self, p: int) -> int:
        """Bytes in use on physical device ``p`` by the jobs that have not failed."""
        run, n = self.run, self.run.n_physical
        return sum(self.used[j * n + p] for j in range(len(run.jobs)) if not run.dead[j])


class SharedRun(Simulation):
    """Several jobs on one fabric, in each job's plan order, ordered between jobs by a
    :class:`~sim.sharing.SharingPolicy`. Device index ``v`` is job ``v // n`` 's view of
    physical device ``v % n``. Its issue order is :class:`SharedOrder`; a failed job
    sends nothing more (its running ops still finish)."""

    memory_accounts = JobAccounts
    memory: JobAccounts

    def __init__(self, jobs: Sequence[Job], wirings: Sequence[Wiring], cluster: Cluster,
                 sharing: SharingPolicy) -> None:
        names = cluster.device_names
        n = len(names)
        self.jobs, self.sharing, self.n_physical = list(jobs), sharing, n
        w = combine(wirings, n)
        slices = self._slices(wirings, n) if sharing.partitioned else None
        if slices is not None:
            w = replace(w, op_time=w.op_time / slices[w.op_dev])
        self.op_job = np.repeat(np.arange(len(jobs)), [x.n_ops for x in wirings]).tolist()
        self.t_job = np.repeat(np.arange(len(jobs)), [len(x.t_src) for x in wirings]).tolist()
        self.op_count = [x.n_ops for x in wirings]
        super().__init__(w, cluster, [names[v % n] for v in range(n * len(jobs))])
        self._share_fabric(slices)
        self.devices_of = [frozenset(v % n for v in range(j * n, (j + 1) * n)
                                     if self.order[v] or self.resident[v])
                           for j in range(len(jobs))]
        by_arrival = sorted(range(len(jobs)), key=lambda j: (jobs[j].arrival_s, j))
        self.rank = [0] * len(jobs)
        for r, j in enumerate(by_arrival):
            self.rank[j] = r
        self.arrived: list[int] = []
        self.admitted = [False] * len(jobs)
        self.dead = [False] * len(jobs)
        self.reason = [""] * len(jobs)
        self.left = list(self.op_count)
        self.end_s = [math.nan] * len(jobs)
        self.killed_at: dict[int, int] = {}
        # The ops waiting for each device (per view under a partition), by view: a view's
        # entry is its device's queue.
        queues: list[dict[int, int]] = [{} for _ in range(n if slices is None
                                                          else n * len(jobs))]
        self.queue = [queues[v if slices is not None else v % n]
                      for v in range(n * len(jobs))]
        self.queued_at = [0.0] * len(self.names)
        self.seq = [0] * len(self.names)
        self._seq = 0
        self.share_state = sharing.new_state(self)

    # -- the fabric ---------------------------------------------------------------------

    def _slices(self, wirings: Sequence[Wiring], n: int) -> np.ndarray:
        """Each view's share of its device: its job's weight over the weights of the
        jobs using that device."""
        uses = np.array([[bool(len(w.order[d])) or bool(w.resident[d]) for d in range(n)]
                         for w in wirings])
        weights = np.array([job.weight for job in self.jobs])[:, None] * uses
        total = weights.sum(axis=0)
        share = np.divide(weights, total, out=np.ones_like(weights), where=total > 0)
        return np.where(share > 0, share, 1.0).ravel()

    def _share_fabric(self, slices: np.ndarray | None) -> None:
        n = self.n_physical
        copy = self.copy_free[:n]
        self.copy_free = [copy[v % n] for v in range(len(self.devices))]
        self.slice = [1.0] * len(self.devices) if slices is None else slices.tolist()
        if slices is None:
            streams = self.free_streams[:n]
            self.free_streams = [streams[v % n] for v in range(len(self.devices))]
            return
        for v, share in enumerate(self.slice):
            count = max(1, int(len(self.free_streams[v]) * share + 1e-9))
            self.free_streams[v] = list(range(count - 1, -1, -1))
            if self.sharing.memory_slices:
                self.capacity[v] = int(self.capacity[v] * share)

    def physical(self, v: int) -> int:
        return v % self.n_physical

    def done_on(self, job: int, op: int) -> bool:
        """Whether ``job`` has begun all its ops on the device ``op`` is on (or failed)."""
        v = job * self.n_physical + self.physical(self.op_dev[op])
        return self.dead[job] or self.next[v] >= len(self.order[v])

    def unfinished_before(self, job: int) -> list[int]:
        """Jobs that arrived before ``job`` and have not finished or failed."""
        return [j for j in range(len(self.jobs)) if self.rank[j] < self.rank[job]
                and math.isnan(self.end_s[j])]

    # -- a job that runs out of memory fails alone --------------------------------------

    def fail(self, j: int, d: int, used: int, capacity: int, what: str, whose: str) -> None:
        """Job ``j`` ran out of memory on view ``d`` (``what`` allocated ``used`` bytes
        past ``whose`` capacity): it sends and starts nothing more."""
        self.reason[j] = (f"out of memory on device {self.devices[d]!r} at "
                          f"t={self.env.now:.6g} s ({what}): needs {used} bytes, "
                          f"{whose} capacity is {capacity}")
        self.dead[j] = True
        self.end_s[j] = self.env.now
        for p in range(self.n_physical):
            self.queue[j * self.n_physical + p].pop(j * self.n_physical + p, None)
            self.timeline.extend((self.env.now, j * self.n_physical + p, 0))
        self.killed_at[j] = len(self.timeline)
        self._admit_arrived()

    # -- jobs arrive, begin, end --------------------------------------------------------

    def compose(self, order: IssueOrder | type[IssueOrder], links: Any,
                hosts: tuple[list[int], list[float], list[int] | None] | None = None
                ) -> SharedRun:
        super().compose(order, links, hosts)
        self._send = self.start_transfer
        self.start_transfer = self._gated
        return self

    def _gated(self, k: int) -> None:
        if not self.dead[self.t_job[k]]:
            self._send(k)

    def run(self) -> None:
        for j, job in enumerate(self.jobs):
            self.env.schedule(job.arrival_s, self._arrive, j)
        super().run()

    def _arrive(self, j: int) -> None:
        self.arrived.append(j)
        self._admit_arrived()

    def _admit_arrived(self) -> None:
        for j in sorted(self.arrived, key=self.rank.__getitem__):
            if self.sharing.admits(self, j):
                self.arrived.remove(j)
                self._admit(j)

    def _admit(self, j: int) -> None:
        self.admitted[j] = True
        n, now = self.n_physical, self.env.now
        views = range(j * n, (j + 1) * n)
        for v in views:
            if self.resident[v]:
                self.used[v] += self.resident[v]
                self.timeline.extend((now, v, self.used[v]))
                self._new_peak(v, self.used[v], -1, None)
        if not self.dead[j]:
            if not self.op_count[j]:
                self._finish_job(j)
            for v in views:
                self._queue_head(v)
                self.try_start(v)

    def _finish_job(self, j: int) -> None:
        self.end_s[j] = self.env.now
        n = self.n_physical
        for v in range(j * n, (j + 1) * n):
            if self.resident[v]:
                self.used[v] -= self.resident[v]
                self.timeline.extend((self.env.now, v, self.used[v]))
        self._admit_arrived()

    def _op_done(self, op: int) -> None:
        super()._op_done(op)
        j = self.op_job[op]
        self.left[j] -= 1
        if self.left[j] == 0 and not self.dead[j]:
            self._finish_job(j)

    def _queue_head(self, v: int) -> None:
        """Queue view ``v``'s next op if its job may run and the op's inputs are there."""
        j = v // self.n_physical
        if not self.admitted[j] or self.dead[j] or self.next[v] >= len(self.order[v]):
            return
        op = self.order[v][self.next[v]]
        queue = self.queue[v]
        if self.pending[op] == 0 and v not in queue:
            queue[v] = op
            self.queued_at[op], self.seq[op] = self.env.now, self._seq
            self._seq += 1
            self.sharing.queued(self, op)

    # -- result -------------------------------------------------------------------------

    def tenant_result(self, sharing: str, links: str, alone: list[float]) -> TenantResult:
        import pandas as pd

        n = self.n_physical
        ran = self.next  # per view, ops begun
        duration = np.asarray(self.op_time, dtype=float) * np.asarray(self.slice)[
            np.asarray(self.op_dev, dtype=np.int64)]
        start = np.asarray(self.start, dtype=float)
        op_job = np.asarray(self.op_job, dtype=np.int64)
        began = np.zeros(len(self.names), dtype=bool)
        for v, count in enumerate(ran):
            began[self.order[v][:count]] = True
        end = start + np.asarray(self.op_time, dtype=float)
        rows = []
        for j, job in enumerate(self.jobs):
            mine = (op_job == j) & began
            first = float(start[mine].min()) if mine.any() else math.nan
            finished = not self.dead[j] and not math.isnan(self.end_s[j])
            reason = self.reason[j] or ("" if finished else
                                        f"only {int(mine.sum())} of {self.op_count[j]} ops ran")
            done = self.end_s[j] if finished else math.nan
            rows.append({"job": self._name(j), "arrival_s": job.arrival_s, "start_s": first,
                         "end_s": done, "alone_s": alone[j],
                         "slowdown": (done - job.arrival_s) / alone[j]
                         if finished and alone[j] > 0 else math.nan,
                         "feasible": not reason, "reason": reason, "weight": job.weight,
                         "priority": job.priority, "ops": self.op_count[j]})
        jobs = pd.DataFrame(rows)
        t_end = max(self.t_end, default=0.0)
        makespan = max(float(end[began].max()) if began.any() else 0.0, t_end)
        phys = np.asarray(self.op_dev, dtype=np.int64) % n
        busy = np.bincount(phys[began], weights=duration[began], minlength=n)
        names = self.cluster.device_names
        streams = [self.cluster.device(d).compute_streams for d in names]
        done = jobs.loc[jobs["feasible"], "slowdown"].to_numpy(dtype=float)
        return TenantResult(
            sharing=sharing, links=links, makespan_s=makespan, jobs=jobs,
            utilization={d: float(b / (makespan * s)) if makespan > 0 else 0.0
                         for d, b, s in zip(names, busy, streams, strict=True)},
            busy_s=dict(zip(names, busy.tolist(), strict=True)),
            peak_memory_bytes=dict(zip(names, self.memory.device_peak, strict=True)),
            memory_capacity_bytes={d: self.cluster.device(d).memory_bytes for d in names},
            fairness=jain_index(done), columns=self._shared_columns(end, began),
            memory_log=self._device_log(), devices=tuple(names))

    def _name(self, j: int) -> str:
        return self.jobs[j].name or f"job{j}"

    def _shared_columns(self, end: np.ndarray, began: np.ndarray) -> TraceColumns:
        n = self.n_physical
        ran = np.flatnonzero(began)
        sent = np.flatnonzero(np.asarray(self.t_end) > 0) if self.t_end else \
            np.zeros(0, np.int64)
        return TraceColumns(
            devices=tuple(self.cluster.device_names),
            names=tuple(self.names[i] for i in ran.tolist()),
            op_device=np.asarray(self.op_dev, dtype=np.int64)[ran] % n,
            op_stream=np.asarray(self.stream, dtype=np.int64)[ran],
            op_start=np.asarray(self.start, dtype=float)[ran], op_end=end[ran],
            op_flops=self.op_flops[ran], op_bytes=self.op_bytes[ran],
            transfer_names=tuple(self.transfer_names[k] for k in sent.tolist()),
            transfer_src=np.asarray(self.t_src, dtype=np.int64)[sent] % n,
            transfer_dst=np.asarray(self.t_dst, dtype=np.int64)[sent] % n,
            transfer_engine=np.asarray(self.t_engine, dtype=np.int64)[sent],
            transfer_channels=tuple(self.t_channels[k] for k in sent.tolist()),
            transfer_start=np.asarray(self.t_start, dtype=float)[sent],
            transfer_end=np.asarray(self.t_end, dtype=float)[sent],
            transfer_bytes=np.asarray(self.t_bytes, dtype=np.int64)[sent],
            jobs=tuple(self._name(j) for j in range(len(self.jobs))),
            op_job=np.asarray(self.op_job, dtype=np.int64)[ran],
            transfer_job=np.asarray(self.t_job, dtype=np.int64)[sent],
            collective=frozenset(name for job in self.jobs for name in job.plan.step_of))

    def _device_log(self) -> list[float]:
        """Memory per physical device over time (flat triples), from the views' logs; a
        failed job's view counts nothing after its failure."""
        n = self.n_physical
        last = [0] * len(self.devices)
        total = [0] * n
        out: list[float] = []
        log = self.timeline
        cutoff = {j * n + p: at for j, at in self.killed_at.items() for p in range(n)}
        for i in range(0, len(log), 3):
            t, v, used = log[i], int(log[i + 1]), int(log[i + 2])
            if v in cutoff and i >= cutoff[v]:
                continue
            p = v % n
            total[p] += used - last[v]
            last[v] = used
            out.extend((t, p, total[p]))
        return out


class SharedOrder(IssueOrder):
    """The issue order of several jobs: each view queues its next op in plan order once
    its inputs are there, and a freed stream goes to the queued op the run's sharing
    policy ranks first."""

    name = "shared"
    run: SharedRun

    def attach(self, run: Simulation) -> None:
        if not isinstance(run, SharedRun):
            raise TypeError(f"SharedOrder: expected a SharedRun, got {type(run).__name__}")
        super().attach(run)
        self.ready = self._ready

    def _ready(self, op: int) -> None:
        run = self.run
        v = run.op_dev[op]
        if run.next[v] < len(run.order[v]) and run.order[v][run.next[v]] == op:
            run._queue_head(v)

    def try_start(self, d: int) -> None:
        run = self.run
        queue, free, sharing = run.queue[d], run.free_streams[d], run.sharing
        while free and queue:
            v = min(queue, key=lambda u: sharing.key(run, queue[u]))
            op = queue.pop(v)
            run.next[v] += 1
            sharing.started(run, op)
            run.start_op(op, v, free.pop())
            run._queue_head(v)


def simulate_jobs(jobs: Sequence[Job | Plan], cluster: Cluster, cost: CostModel, *,
                  sharing: str | SharingPolicy = "fifo",
                  links: str = "fcfs") -> TenantResult:
    """Run several jobs on one cluster, sharing devices by ``sharing`` (see
    :mod:`sim.sharing`) and links by ``links`` (as :func:`sim.simulate`). Each job's
    slowdown is against running its plan alone on the same cluster (simulated here).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = plan(build_model("resnet50", batch=8), c, "single_device")
    >>> r = simulate_jobs([Job(p, "a"), Job(p, "b")], c, RooflineCost(c), sharing="fifo")
    >>> round(float(r.jobs["slowdown"].max()), 1), r.fairness < 1
    (2.0, True)
    """
    require(links, LINK_REGISTRY, LINK_MODELS, "simulate_jobs", "links")
    policy = make_sharing(sharing)
    given = [j if isinstance(j, Job) else Job(j) for j in jobs]
    if not given:
        raise PlacementError("simulate_jobs: expected at least one job, got none")
    named = [replace(j, name=j.name or f"job{i}") for i, j in enumerate(given)]
    for job in named:
        job.plan.validate(cluster)
    named = [replace(j, plan=lower(j.plan, cluster)) for j in named]
    seen: set[str] = set()
    for job in named:
        if job.name in seen:
            raise PlacementError(f"simulate_jobs: job names must be unique, got "
                                 f"{job.name!r} twice")
        seen.add(job.name)
        job.plan.validate(cluster)
    cost.check_cluster(cluster, "simulate_jobs")
    alone = [simulate(j.plan, cluster, cost, job=j.name, links=links).makespan_s
             for j in named]
    hosts, n = shared_hosts(cluster), len(cluster.devices)
    views = range(n * len(named))
    with gc_paused():
        run = SharedRun(named, [wire(j.plan, cluster, cost) for j in named], cluster, policy)
        run.compose(SharedOrder, LINK_REGISTRY.make(links),
                    None if hosts is None else
                    ([hosts[0][v % n] for v in views], hosts[1], [v % n for v in views]))
        run.run()
        return run.tenant_result(policy.name, links, alone)
