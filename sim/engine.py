"""The discrete-event simulator: a Plan executed on a Cluster under a CostModel.

Events are callbacks on an event queue of its own (:mod:`sim.events`), one per op and one
per transfer; there is no generator process per op. A run is one :class:`Simulation`
composed of parts chosen per run: an issue order, a link model (:mod:`sim.links`) and, on
shared hosts, :class:`sim.hosts.HostSharing`. State lives in flat per-op arrays so that
the hot path is a few list operations per event. The composition nearly every run uses
(plan order, ``fcfs``, ``none`` or ``fair`` links, no shared hosts) runs instead as a
:class:`CompiledRun`: the same model in compiled code (:mod:`sim.compiled`), equal to the
bit.

Model (documented in ``docs/simulator.md`` and tested in ``tests/sim``):

* **Compute.** A device has ``compute_streams`` streams; an op occupies one stream for its
  cost-model time. ``order="plan"`` (default) issues each device's ops in plan order: the next
  op starts once its inputs are on the device and a stream is free (later ready ops wait
  behind it). ``order="priority"`` instead starts the ready op of highest plan priority
  (ties: topological position). Ops sharing a device on different streams do not slow each
  other down.
* **Transfers.** A transfer needs one copy engine of the source device and every link
  channel of its route for its whole duration (the path is held at the bottleneck rate, the
  same ``latency + bytes / bottleneck`` the cost model charges — not store-and-forward). A
  full-duplex link has a channel per direction, a half-duplex link one in all. Each copy
  engine and channel serves one transfer at a time, first come first served: a transfer
  starts when all of them are free. Compute and transfers overlap.
* **Memory.** Resident state (``param_bytes``) of every op placed on a device from the start;
  an op's outputs and workspace from its start; workspace freed at its end; a tensor freed
  when its last local reader and last outgoing transfer are done (one nobody reads, when its
  producer ends); a received copy from the transfer's request until its last reader ends.
  Exceeding capacity makes the run infeasible (first overflow: device, op, time, needed and
  available bytes); the simulation still completes so the result shows how far over it went.
* **Shared hosts.** Devices of a host with a slowdown (``Cluster.host_slowdown``) slow each
  other's ops while they compute at once (:mod:`sim.hosts`).
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.collectives import lower
from policies.plans import Plan
from sim.events import EventQueue
from sim.hosts import HostSharing, shared_hosts
from sim.links import FairSharing, FirstComeFirstServed, NoContention, bind
from sim.memory import MemoryAccounts
from sim.options import LINK_MODELS, LINK_REGISTRY, ORDER_REGISTRY, ORDERS, require
from sim.result import SimResult, TraceColumns
from sim.wiring import Wiring, wire
from workloads.collect import gc_paused
from workloads.errors import PlacementError
from workloads.plugin import Plugin

if TYPE_CHECKING:
    from sim.compiled import FairInputs, PlanInputs
    from sim.links import LinkModel

#: The link models the compiled loop runs (:class:`CompiledRun`).
_COMPILED_LINKS = (FirstComeFirstServed, NoContention, FairSharing)

__all__ = ["ORDERS", "CompiledRun", "IssueOrder", "PlanOrder", "PriorityOrder", "Simulation",
           "compiles", "evaluator", "fair_inputs", "simulate"]


class IssueOrder(Plugin, ABC):
    """How a device picks its next op: one part of a :class:`Simulation`.

    A part is made from its declared parameters alone (:class:`workloads.plugin.Plugin`;
    ``ORDER_REGISTRY.make("name:key=value")``) and bound to one run by :meth:`attach`.
    :meth:`try_start` is the whole interface: start what may start on device ``d`` (called
    whenever a stream frees or an op there becomes ready). :attr:`ready`, where not None, is
    told of each op once all its inputs are on its device.
    """

    name: ClassVar[str] = ""
    family = "issue order"
    error = PlacementError
    ready: Callable[[int], None] | None = None
    run: Simulation

    def attach(self, run: Simulation) -> None:
        """Bind to ``run`` before it begins (a part serves one run: :func:`sim.links.bind`)."""
        bind(self, run)

    @abstractmethod
    def try_start(self, d: int) -> None:
        """Start what may start on device ``d``."""


class PlanOrder(IssueOrder):
    """Each device starts its ops in plan order; a ready op waits behind an unready one."""

    name = "plan"

    def try_start(self, d: int) -> None:
        run = self.run
        order, free, pending = run.order[d], run.free_streams[d], run.pending
        nxt = run.next[d]
        start_op = run.start_op
        while free and nxt < len(order) and pending[order[nxt]] == 0:
            start_op(order[nxt], d, free.pop())
            nxt += 1
        run.next[d] = nxt


class PriorityOrder(IssueOrder):
    """Each device starts its ready op of highest plan priority (ties: topological)."""

    name = "priority"

    def attach(self, run: Simulation) -> None:
        super().attach(run)
        plan = run.plan
        if plan is None or not plan.priority:
            raise PlacementError(f"simulate: order 'priority' needs op priorities in the "
                                 f"plan; policy {getattr(plan, 'policy', '')!r} gave none")
        self.key = [(-plan.priority.get(name, 0.0), i) for i, name in enumerate(run.names)]
        self.queues: list[list[tuple[float, int]]] = [[] for _ in run.devices]
        self.ready = self._ready

    def _ready(self, op: int) -> None:
        heapq.heappush(self.queues[self.run.op_dev[op]], self.key[op])

    def try_start(self, d: int) -> None:
        run = self.run
        queue, free = self.queues[d], run.free_streams[d]
        while free and queue:
            op = heapq.heappop(queue)[1]
            run.next[d] += 1
            run.start_op(op, d, free.pop())


class Simulation:
    """One run: the state of a plan on a fabric, and the parts that decide what happens.

    The parts (:meth:`compose`): an :class:`IssueOrder` (which op a device starts), a link
    model (:class:`sim.links.LinkModel`: how transfers share copy engines and links) and,
    where a cluster's devices share a host, :class:`sim.hosts.HostSharing`. Memory is
    accounted by a :class:`sim.memory.MemoryAccounts` (``memory_accounts``; per job in
    :class:`sim.tenants.SharedRun`).

    Device indices are positions in ``devices``: a cluster's devices for one job; for
    several (:mod:`sim.tenants`), one per job and device, whose streams and copy engines
    are the physical device's own lists, shared.
    """

    memory_accounts: ClassVar[type[MemoryAccounts]] = MemoryAccounts

    def __init__(self, w: Wiring, cluster: Cluster, devices: Sequence[str],
                 plan: Plan | None = None) -> None:
        self.env = EventQueue()
        self.plan, self.cluster = plan, cluster
        self.devices = list(devices)
        self.n_dev = len(self.devices)
        self._adopt(w)
        self.next = [0] * self.n_dev
        self.free_streams = [list(range(cluster.device(d).compute_streams - 1, -1, -1))
                             for d in self.devices]
        self.copy_free = [[0.0] * cluster.device(d).copy_engines for d in self.devices]
        n = len(self.names)
        self.start, self.stream = [0.0] * n, [0] * n
        self._init_memory(w)
        # bound once: a bound method made per event would be one more allocation each
        self.on_op_done: Callable[[int], None] = self._op_done
        self.start_op: Callable[[int, int, int], None] = self._start_op
        self.ready: Callable[[int], None] | None = None
        self._inline_plan_order = False

    def compose(self, order: IssueOrder | type[IssueOrder], links: LinkModel | type[LinkModel],
                hosts: tuple[list[int], list[float], list[int] | None] | None = None
                ) -> Simulation:
        """Bind the parts (each made, or its class made without parameters): an issue
        order, a link model and, where devices share a host, their hosts (per device index
        its host, per host its slowdown, per device index the physical device it is a view
        of)."""
        self.issue = order() if isinstance(order, type) else order
        self.issue.attach(self)
        self.ready = self.issue.ready
        self.try_start = self.issue.try_start
        # plan order is short enough to run inline at each op's end (half the events)
        self._inline_plan_order = type(self.issue) is PlanOrder
        self.links = links() if isinstance(links, type) else links
        self.links.attach(self)
        self.start_transfer: Callable[[int], None] = self.links.start
        if hosts is not None:
            self.hosts = HostSharing(self, *hosts)
        return self

    def _adopt(self, w: Wiring) -> None:
        """The wiring's columns as Python lists: the hot path indexes lists, not arrays
        (the arrays are not kept: a run holds one copy of its state)."""
        self.transfer_names = w.transfer_names
        self.op_flops, self.op_bytes = w.op_flops, w.op_bytes
        self.names = w.names
        self.op_dev: list[int] = w.op_dev.tolist()
        self.op_time: list[float] = w.op_time.tolist()
        self.order: list[list[int]] = [o.tolist() for o in w.order]
        self.read_ids: list[int] = w.read_ids.tolist()
        self.read_off: list[int] = w.read_off.tolist()
        self.pending: list[int] = w.pending.tolist()
        self.wake: list[int] = w.wake.tolist()
        self.wake_off: list[int] = w.wake_off.tolist()
        self.own_ids: list[int] = w.own_ids.tolist()
        self.out_off: list[int] = w.out_off.tolist()
        self.alloc: list[int] = w.alloc.tolist()
        self.workspace: list[int] = w.workspace.tolist()
        self.refs: list[int] = w.refs.tolist()
        self.key_bytes: list[int] = w.key_bytes.tolist()
        self.send: list[int] = w.send.tolist()
        self.send_off: list[int] = w.send_off.tolist()
        self.t_src: list[int] = w.t_src.tolist()
        self.t_dst: list[int] = w.t_dst.tolist()
        self.t_bytes: list[int] = w.t_bytes.tolist()
        self.t_key: list[int] = w.t_key.tolist()
        self.t_duration: list[float] = w.t_duration.tolist()
        self.t_readers: list[int] = w.t_readers.tolist()
        self.t_readers_off: list[int] = w.t_readers_off.tolist()
        self.t_channels = w.t_channels
        m = len(self.t_src)
        self.t_start, self.t_end, self.t_engine = [0.0] * m, [0.0] * m, [0] * m

    def _init_memory(self, w: Wiring) -> None:
        """Compose the memory part; the hot path works on its lists directly."""
        m = self.memory = self.memory_accounts(self, w.resident)
        self.capacity, self.used, self.resident = m.capacity, m.used, m.resident
        self.peak, self.timeline = m.peak, m.timeline
        self._new_peak = m.over_peak

    # -- memory -------------------------------------------------------------------------

    def receive(self, k: int) -> None:
        """A received copy holds memory on its destination from the transfer's request
        (in every link model)."""
        dst = self.t_dst[k]
        used = self.used[dst] + self.t_bytes[k]
        self.used[dst] = used
        self.timeline.extend((self.env.now, dst, used))
        if used > self.peak[dst]:
            self._new_peak(dst, used, -1, k)

    def _release(self, key: int, d: int) -> None:
        left = self.refs[key] - 1
        self.refs[key] = left
        if left == 0:
            self.used[d] -= self.key_bytes[key]
            self.timeline.extend((self.env.now, d, self.used[d]))

    # -- events -------------------------------------------------------------------------

    def begin(self) -> None:
        """Start what may start at time 0 (the events run with ``env``)."""
        if self.ready is not None:
            for i, pending in enumerate(self.pending):
                if pending == 0:
                    self.ready(i)
        for d in range(len(self.devices)):
            self.try_start(d)

    def run(self) -> None:
        self.begin()
        self.env.run()

    def _start_op(self, op: int, d: int, stream: int) -> None:
        env = self.env
        now = env.now
        alloc = self.alloc[op]
        if alloc:
            used = self.used[d] + alloc
            self.used[d] = used
            self.timeline.extend((now, d, used))
            if used > self.peak[d]:
                self._new_peak(d, used, op, None)
        self.start[op] = now
        self.stream[op] = stream
        env.schedule(self.op_time[op], self.on_op_done, op)

    def _op_done(self, op: int) -> None:
        d = self.op_dev[op]
        self.free_streams[d].append(self.stream[op])
        used, log, now = self.used, self.timeline.extend, self.env.now
        workspace = self.workspace[op]
        if workspace:
            used[d] -= workspace
            log((now, d, used[d]))
        refs, nbytes = self.refs, self.key_bytes
        for key in self.read_ids[self.read_off[op]:self.read_off[op + 1]]:
            left = refs[key] - 1
            refs[key] = left
            if left == 0:
                used[d] -= nbytes[key]
                log((now, d, used[d]))
        for key in self.own_ids[self.out_off[op]:self.out_off[op + 1]]:
            if refs[key] == 0:
                used[d] -= nbytes[key]
                log((now, d, used[d]))
        pending, ready = self.pending, self.ready
        for reader in self.wake[self.wake_off[op]:self.wake_off[op + 1]]:
            pending[reader] -= 1
            if pending[reader] == 0 and ready is not None:
                ready(reader)
        first, last = self.send_off[op], self.send_off[op + 1]
        if first < last:
            for k in self.send[first:last]:
                self.start_transfer(k)
        if not self._inline_plan_order:
            self.try_start(d)
            return
        order, free, nxt = self.order[d], self.free_streams[d], self.next[d]
        if free and nxt < len(order) and pending[order[nxt]] == 0:  # PlanOrder, inlined
            start_op = self.start_op
            while free and nxt < len(order) and pending[order[nxt]] == 0:
                start_op(order[nxt], d, free.pop())
                nxt += 1
            self.next[d] = nxt

    def finish_transfer(self, k: int) -> None:
        """Transfer ``k`` has arrived (the link model says when): free its source copy,
        wake its readers."""
        self._release(self.t_key[k], self.t_src[k])
        pending, ready = self.pending, self.ready
        for reader in self.t_readers[self.t_readers_off[k]:self.t_readers_off[k + 1]]:
            pending[reader] -= 1
            if pending[reader] == 0 and ready is not None:
                ready(reader)
        self.try_start(self.t_dst[k])

    # -- result -------------------------------------------------------------------------

    def result(self, job: str) -> SimResult:
        ran = sum(self.next)
        duration = np.asarray(self.op_time, dtype=float)
        self.end = np.asarray(self.start, dtype=float) + duration
        self.busy = np.bincount(np.asarray(self.op_dev, dtype=np.int64), weights=duration,
                                minlength=self.n_dev).tolist()
        makespan = max(float(self.end.max()) if len(self.end) else 0.0,
                       max(self.t_end, default=0.0))
        reason = self.memory.overflow
        if ran < len(self.names):
            reason = reason or f"only {ran} of {len(self.names)} ops ran"
        streams = [self.cluster.device(d).compute_streams for d in self.devices]
        return SimResult(
            makespan_s=makespan, feasible=not reason, reason=reason,
            busy_s=dict(zip(self.devices, self.busy, strict=True)),
            utilization={d: (b / (makespan * s) if makespan > 0 else 0.0)
                         for d, b, s in zip(self.devices, self.busy, streams, strict=True)},
            transfer_bytes=sum(self.t_bytes),
            peak_memory_bytes=dict(zip(self.devices, self.peak, strict=True)),
            memory_capacity_bytes=dict(zip(self.devices, self.capacity, strict=True)),
            resident_bytes=dict(zip(self.devices, self.resident, strict=True)),
            memory_log=self.timeline, devices=tuple(self.devices), plan=self.plan,
            cluster=self.cluster.name, job=job, columns=self._columns(),
        )

    def _columns(self) -> TraceColumns:
        return TraceColumns(
            devices=tuple(self.devices), names=self.names,
            op_device=np.asarray(self.op_dev, dtype=np.int64),
            op_stream=np.asarray(self.stream, dtype=np.int64),
            op_start=np.asarray(self.start, dtype=float), op_end=self.end,
            op_flops=self.op_flops, op_bytes=self.op_bytes,
            transfer_names=self.transfer_names,
            transfer_src=np.asarray(self.t_src, dtype=np.int64),
            transfer_dst=np.asarray(self.t_dst, dtype=np.int64),
            transfer_engine=np.asarray(self.t_engine, dtype=np.int64),
            transfer_channels=tuple(self.t_channels),
            transfer_start=np.asarray(self.t_start, dtype=float),
            transfer_end=np.asarray(self.t_end, dtype=float),
            transfer_bytes=np.asarray(self.t_bytes, dtype=np.int64),
            collective=frozenset(self.plan.step_of) if self.plan else frozenset())


class CompiledRun(Simulation):
    """A :class:`Simulation` of plan order and ``fcfs``, ``none`` or ``fair`` links (``fair``:
    the part to run, given) on devices that share no host, its events run by compiled code
    (:mod:`sim.compiled`) on the plan's arrays (:class:`sim.slots.Slots`, no
    :class:`Wiring`): the same model, the same result to the bit, without a Python call per
    event. :func:`simulate` runs every such composition so.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> p = plan(build_model("mlp"), c, "round_robin")
    >>> fast = CompiledRun(p, c, cost, contention=True)
    >>> slow = Simulation(wire(p, c, cost), c, c.device_names, p)
    >>> _ = slow.compose(PlanOrder, FirstComeFirstServed)
    >>> fast.run(); slow.run()
    >>> fast.start == slow.start and fast.t_end == slow.t_end and fast.peak == slow.peak
    True
    """

    def __init__(self, plan: Plan, cluster: Cluster, cost: CostModel, *,
                 contention: bool, fair: FairSharing | None = None) -> None:
        from sim.slots import Slots  # numba: paid by the first run that needs it

        self.env = EventQueue()
        self.plan, self.cluster, self.contention = plan, cluster, contention
        self.devices = list(cluster.device_names)
        self.n_dev = len(self.devices)
        self.slots = Slots(plan.graph, cluster, cost, many=False)
        self.inputs = self.slots.inputs(plan)
        a = plan.graph.arrays
        self.names, self.op_flops = a.names, a.flops.astype(np.int64)
        self.op_bytes = a.moved_bytes.astype(np.int64)
        self.op_dev, self.op_time = self.inputs.op_dev.tolist(), self.inputs.op_time.tolist()
        # plan.transfers' numbers, in its order
        self.number = self.slots.transfer_numbers(self.inputs)
        self.transfer_names = tuple(t.name for t in plan.transfers)
        tensor = self.inputs.k_tensor[self.number]
        self.t_src = self.inputs.op_dev[a.tensor_producer[tensor]].tolist()
        self.t_dst = self.inputs.k_dst[self.number].tolist()
        self.t_bytes = a.tensor_bytes[tensor].astype(np.int64).tolist()
        names, route, off = self.slots.channel_names(), self.inputs.route, self.inputs.route_off
        by_route = [tuple(names[c] for c in route[off[r]:off[r + 1]])
                    for r in range(len(off) - 1)]
        self.t_channels = tuple(by_route[r] for r in self.inputs.k_route[self.number].tolist())
        self.memory = MemoryAccounts(self, self.slots.resident(self.inputs))
        self.capacity, self.used, self.resident = (self.memory.capacity, self.memory.used,
                                                   self.memory.resident)
        self.peak, self.timeline = self.memory.peak, self.memory.timeline
        # under fair links, the flows laid out as the Python loop's part lays them out for
        # this plan (in plan.transfers order, so ties end alike)
        self.fair = None if fair is None else fair_inputs(fair, cluster, self.inputs,
                                                          self.number, a.tensor_producer)

    def run(self) -> None:
        from sim import compiled

        g, p = self.slots.columns, self.inputs
        s = self.slots.state(p, record=True, overflowed=bool(self.memory.overflow))
        compiled.begin(g, p, s, self.contention, self.fair)
        compiled.advance(g, p, s, self.contention, 2**62, self.fair)
        self.start, self.stream = s.start.tolist(), s.stream.tolist()
        self.next = (s.nxt - p.order_off[:-1]).tolist()
        self.t_start = s.t_start[self.number].tolist()
        self.t_end = s.t_end[self.number].tolist()
        self.t_engine = s.t_engine[self.number].tolist()
        self.used[:], self.peak[:] = s.used.tolist(), s.peak.tolist()
        log = s.log[:s.count[2]]
        timeline: list[float] = [0.0] * (3 * len(log))  # (time, device, bytes), as ints
        timeline[0::3] = log[:, 0].tolist()
        timeline[1::3] = log[:, 1].astype(np.int64).tolist()
        timeline[2::3] = log[:, 2].astype(np.int64).tolist()
        self.timeline[:] = timeline
        d, op, k, used = s.over.tolist()
        if d >= 0:
            self.env.now = float(s.over_at[0])
            transfer = None if k < 0 else int(np.flatnonzero(self.number == k)[0])
            self.memory.over_peak(d, used, op, transfer)
            self.peak[d] = int(s.peak[d])



def compiles(issue: IssueOrder, link_model: LinkModel, hosts: object) -> bool:
    """Whether the compiled loop (:class:`CompiledRun`) runs this composition: ops issued
    in plan order, a link model it has (``fcfs``, ``none``, ``fair``), and no devices
    sharing a host (``hosts``: :func:`sim.hosts.shared_hosts`'s answer, None for none).

    >>> from sim.links import FairSharing
    >>> compiles(PlanOrder(), FairSharing(), None)
    True
    """
    return hosts is None and type(issue) is PlanOrder and type(link_model) in _COMPILED_LINKS

def simulate(plan: Plan, cluster: Cluster, cost: CostModel, *, job: str = "job0",
             order: str = "plan", links: str = "fcfs") -> SimResult:
    """Execute ``plan`` on ``cluster`` in simulated time and return the result.

    ``order`` is ``"plan"`` (each device follows the plan's order) or ``"priority"`` (each
    device starts its highest-priority ready op; needs ``plan.priority``). ``links`` is
    ``"fcfs"`` (each copy engine and link channel carries one transfer at a time, first come
    first served), ``"fair"`` (latency a pure delay, bandwidth shared max-min fairly among
    the flows on each link, as flow-level network simulators share it; see
    :mod:`sim.links`) or ``"none"`` (no contention: the model a list scheduler plans with, so
    its ``estimated_makespan_s`` is reproduced).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan as make_plan
    >>> from workloads import build_model
    >>> cluster = get_cluster("quad-v100-nvlink")
    >>> p = make_plan(build_model("resnet50", batch=8), cluster, "heft")
    >>> r = simulate(p, cluster, RooflineCost(cluster), links="none")
    >>> abs(r.makespan_s - p.estimated_makespan_s) <= 1e-9 * r.makespan_s  # HEFT's own model
    True
    """
    require(order, ORDER_REGISTRY, ORDERS, "simulate", "order")
    require(links, LINK_REGISTRY, LINK_MODELS, "simulate", "links")
    plan.validate(cluster)
    cost.check_cluster(cluster, "simulate")
    plan = lower(plan, cluster)
    hosts = shared_hosts(cluster)
    issue, link_model = ORDER_REGISTRY.make(order), LINK_REGISTRY.make(links)
    with gc_paused():
        if compiles(issue, link_model, hosts):
            run: Simulation = CompiledRun(
                plan, cluster, cost, contention=type(link_model) is FirstComeFirstServed,
                fair=link_model if isinstance(link_model, FairSharing) else None)
        else:
            run = Simulation(wire(plan, cluster, cost), cluster, cluster.device_names, plan)
            run.compose(issue, link_model, None if hosts is None else (*hosts, None))
        run.run()
        result = run.result(job)
    result.cost_sources = _sources(cost, plan, np.asarray(run.op_dev, dtype=np.int64),
                                   np.asarray(run.op_time, dtype=float))
    return result


def fair_inputs(part: FairSharing, cluster: Cluster, inputs: PlanInputs, number: np.ndarray,
                producer: np.ndarray) -> FairInputs:
    """``part``'s layout (:meth:`~sim.links.FairSharing.layout`) of the transfers
    ``number`` of ``inputs`` in that order (their tensors made by ``producer``, the graph's
    ``tensor_producer``), as the compiled loop takes it: its flow table, each number's
    flow and each flow's number, latency and volume."""
    from sim.compiled import FairInputs

    tensor = inputs.k_tensor[number]
    flows, latency, volume = part.layout(
        cluster, cluster.device_names, inputs.op_dev[producer[tensor]].tolist(),
        inputs.k_dst[number].tolist(), inputs.k_duration[number].tolist())
    flow_of = np.full(len(inputs.k_tensor), -1, np.int64)
    flow_of[number] = np.arange(len(number))
    return FairInputs(flows.floats, flows.ints, flow_of, number.astype(np.int64),
                      np.asarray(latency, np.float64), np.asarray(volume, np.float64))


def evaluator(cluster: Cluster, cost: CostModel, *, links: str = "fcfs",
              order: str = "plan") -> Callable[[Plan], float]:
    """The simulator as a search policy's evaluator (:func:`policies.plan`'s
    ``evaluate``): a plan's simulated makespan, infinity where it runs out of memory.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan as make_plan
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> p = make_plan(build_model("mlp", batch=8), c, "mcmc:evals=20", cost,
    ...               evaluate=evaluator(c, cost))
    >>> p.info["score_s"] == simulate(p, c, cost).makespan_s
    True
    """
    require(order, ORDER_REGISTRY, ORDERS, "evaluator", "order")
    require(links, LINK_REGISTRY, LINK_MODELS, "evaluator", "links")

    def evaluate(p: Plan) -> float:
        result = simulate(p, cluster, cost, links=links, order=order)
        return result.makespan_s if result.feasible else math.inf

    return evaluate


def _sources(cost: CostModel, plan: Plan, op_dev: np.ndarray, op_time: np.ndarray
             ) -> dict[str, dict[str, float]]:
    """What priced the ops (:meth:`CostModel.sources`); one label without asking each op
    where the model has one source."""
    from sim.result import source_shares

    if type(cost).sources is CostModel.sources:
        total = float(op_time.sum())
        return {cost.source_name: {"ops": len(op_time), "seconds": total,
                                   "share": 1.0 if total > 0 else 0.0}}
    return source_shares(cost.sources(plan.graph, op_dev), op_time)
