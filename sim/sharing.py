"""Sharing policies: how several jobs share a device (:func:`sim.tenants.simulate_jobs`).

A policy orders the ops that wait for a device: each job offers its next op in plan
order on a device once that op's inputs are there (it is *queued*); when a stream frees,
the queued op of smallest :meth:`SharingPolicy.key` starts. Two hooks see ops queue and
start; :meth:`SharingPolicy.admits` says when an arrived job may begin; a *partitioned*
policy instead splits each device into fixed slices, one per job.

Built-ins (registered by name, loaded on first lookup; third-party policies come in
through the ``placelab.sharing`` entry point group):

* ``exclusive`` — a device belongs to one job at a time: a job begins once, on every
  device it uses, no earlier-arrived unfinished job wants that device.
* ``fifo`` — ops of all jobs share the streams, first queued first served.
* ``weighted_fair`` — start-time fair queueing (Goyal, Vin and Cheng, SIGCOMM 1996) over
  ops: an op's start tag is ``max(V, F_job)``, its finish tag ``start + time / weight``,
  the smallest start tag goes first and the device's virtual time ``V`` is the start tag
  of the last op begun; device time divides in proportion to weights.
* ``priority`` — the queued op of the job of highest priority (ties: earlier arrival).
  With ``preempt=false`` a job that has started on a device keeps it, whenever it has an
  op queued there, until its last op on that device has begun.
* ``partition`` — spatial sharing as MIG or MPS provide it: each device splits into
  slices, one per job using it, sized by weight: a slice has that share of the
  compute (ops take ``time / share``), of the streams (at least one) and, with
  ``memory=true``, of the memory. Links and copy engines stay shared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from workloads.errors import PlacementError
from workloads.params import Param
from workloads.plugin import Plugin
from workloads.registry import Registry

if TYPE_CHECKING:
    from sim.tenants import SharedRun

__all__ = ["SHARING", "Exclusive", "Fifo", "Partition", "Priority", "SharingPolicy",
           "WeightedFair", "make_sharing", "register_sharing"]


class SharingPolicy(Plugin, ABC):
    """Orders queued ops of several jobs on a device. :meth:`key` is required; the hooks
    default to doing nothing. Per-run state lives in the object :meth:`new_state` returns
    (kept by the run), so one instance may serve several runs."""

    family = "sharing policy"
    error = PlacementError
    #: Each device splits into fixed slices, one per job (no queueing between jobs).
    partitioned: ClassVar[bool] = False

    @property
    def memory_slices(self) -> bool:
        """A partition's slices each hold their share of the device's memory."""
        return False

    @abstractmethod
    def key(self, run: SharedRun, op: int) -> tuple[Any, ...]:
        """Sort key of queued op ``op``: the smallest starts first."""

    def new_state(self, run: SharedRun) -> Any:
        """What the policy keeps for one run (passed back as ``run.share_state``)."""
        return None

    def queued(self, run: SharedRun, op: int) -> None:
        """``op`` has joined its device's queue (at ``run.env.now``)."""
        return None

    def started(self, run: SharedRun, op: int) -> None:
        """``op`` has left the queue and started."""
        return None

    def admits(self, run: SharedRun, job: int) -> bool:
        """Whether arrived job ``job`` may begin now (asked in arrival order)."""
        return True


_BUILTIN = {"exclusive": "sim.sharing:Exclusive", "fifo": "sim.sharing:Fifo",
            "weighted_fair": "sim.sharing:WeightedFair", "priority": "sim.sharing:Priority",
            "partition": "sim.sharing:Partition"}
SHARING: Registry[type[SharingPolicy]] = Registry("sharing policy", "placelab.sharing",
                                                  builtins=_BUILTIN)


def register_sharing(cls: type[SharingPolicy]) -> type[SharingPolicy]:
    """Class decorator: register ``cls`` under ``cls.name`` (a duplicate is an error)."""
    SHARING.register(cls.name, cls)
    return cls


def make_sharing(spec: str | SharingPolicy) -> SharingPolicy:
    """A sharing policy from ``name`` or ``name:key=value,...``.

    >>> make_sharing("priority:preempt=false")
    Priority(preempt=False)
    """
    if isinstance(spec, SharingPolicy):
        return spec
    policy: SharingPolicy = SHARING.make(spec)
    return policy


class _Arrival(SharingPolicy):
    """First queued, first served (ties: the job that arrived first)."""

    def key(self, run: SharedRun, op: int) -> tuple[Any, ...]:
        return (run.queued_at[op], run.seq[op])


@register_sharing
class Fifo(_Arrival):
    """Ops of all jobs share the streams first come first served."""

    name = "fifo"


@register_sharing
class Exclusive(_Arrival):
    """A device belongs to one job at a time, in order of arrival."""

    name = "exclusive"

    def admits(self, run: SharedRun, job: int) -> bool:
        wants = run.devices_of[job]
        return not any(wants & run.devices_of[other] for other in run.unfinished_before(job))


class _FairState:
    def __init__(self, n_jobs: int, n_dev: int) -> None:
        self.virtual = [0.0] * n_dev
        self.finish = [[0.0] * n_dev for _ in range(n_jobs)]
        self.tag: dict[int, float] = {}


@register_sharing
class WeightedFair(SharingPolicy):
    """Start-time fair queueing over ops, in proportion to job weights."""

    name = "weighted_fair"

    def new_state(self, run: SharedRun) -> _FairState:
        return _FairState(len(run.jobs), run.n_physical)

    def queued(self, run: SharedRun, op: int) -> None:
        s: _FairState = run.share_state
        j, p = run.op_job[op], run.physical(run.op_dev[op])
        start = max(s.virtual[p], s.finish[j][p])
        s.finish[j][p] = start + run.op_time[op] / run.jobs[j].weight
        s.tag[op] = start

    def started(self, run: SharedRun, op: int) -> None:
        s: _FairState = run.share_state
        p = run.physical(run.op_dev[op])
        s.virtual[p] = max(s.virtual[p], s.tag.pop(op))

    def key(self, run: SharedRun, op: int) -> tuple[Any, ...]:
        return (run.share_state.tag[op], run.seq[op])


@register_sharing
class Priority(SharingPolicy):
    """Strict priority between jobs; ``preempt`` decides whether a higher-priority job
    takes a device at the next op boundary or waits for the holder's last op there."""

    name = "priority"
    params = (Param("preempt", "bool", True,
                    doc="a higher-priority job takes the device at the next op boundary"),)

    def __init__(self, preempt: bool = True) -> None:
        self.preempt = self.params[0].check(self.name, preempt, what="sharing policy")

    def new_state(self, run: SharedRun) -> list[int]:
        return [-1] * run.n_physical  # the job holding each device (preempt=False)

    def key(self, run: SharedRun, op: int) -> tuple[Any, ...]:
        j = run.op_job[op]
        job = run.jobs[j]
        held = 0
        if not self.preempt:
            holder = run.share_state[run.physical(run.op_dev[op])]
            held = 0 if holder == j or holder < 0 or run.done_on(holder, op) else 1
        return (held, -job.priority, run.rank[j], run.queued_at[op], run.seq[op])

    def started(self, run: SharedRun, op: int) -> None:
        if not self.preempt:
            p = run.physical(run.op_dev[op])
            holder = run.share_state[p]
            if holder < 0 or (holder != run.op_job[op] and run.done_on(holder, op)):
                run.share_state[p] = run.op_job[op]


@register_sharing
class Partition(_Arrival):
    """Each device split into slices by weight among the jobs that use it."""

    name = "partition"
    partitioned = True
    params = (Param("memory", "bool", True,
                    doc="each slice also gets its share of the device's memory (MIG); "
                        "false: memory stays shared (MPS)"),)

    def __init__(self, memory: bool = True) -> None:
        self.memory = self.params[0].check(self.name, memory, what="sharing policy")

    @property
    def memory_slices(self) -> bool:
        return bool(self.memory)
