"""The discrete-event simulator: a Plan executed on a Cluster under a CostModel.

Events are simpy timeouts with callbacks, one per op and one per transfer; there is no
generator process per op. State lives in flat per-op arrays so that the hot path is a few
list operations per event.

Model (documented in the README and tested in ``tests/sim``):

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
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import simpy
from simpy.events import NORMAL

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.plans import Plan
from sim.result import SimResult
from workloads.arrays import GraphArrays
from workloads.errors import PlacementError

__all__ = ["ORDERS", "simulate"]

ORDERS: tuple[str, ...] = ("plan", "priority")


class _Transfer:
    __slots__ = ("channels", "consumers", "dst", "dst_key", "duration", "end", "engine",
                 "index", "key", "nbytes", "src", "start")

    def __init__(self, index: int, nbytes: int, src: int, dst: int, duration: float,
                 channels: tuple[str, ...], consumers: list[int], key: int,
                 dst_key: int) -> None:
        self.index, self.nbytes, self.src, self.dst = index, nbytes, src, dst
        self.duration, self.channels, self.consumers = duration, channels, consumers
        self.key, self.dst_key = key, dst_key
        self.start = self.end = 0.0
        self.engine = 0


class _Simulation:
    """One run in plan order; :class:`_PrioritySimulation` overrides the issue rule."""

    def __init__(self, plan: Plan, cluster: Cluster, cost: CostModel) -> None:
        self.env = simpy.Environment()
        self.plan, self.cluster = plan, cluster
        arrays = plan.graph.arrays
        self.names = arrays.names
        self.devices = list(cluster.device_names)
        self.n_dev = len(self.devices)
        dev_index = {d: i for i, d in enumerate(self.devices)}
        placement = plan.placement
        op_dev = np.fromiter((dev_index[placement[n]] for n in self.names), np.int64,
                             len(self.names))
        self.op_dev: list[int] = op_dev.tolist()
        self.op_time = cost.op_times(plan.graph, placement)
        self.order = [[arrays.position[n] for n in plan.order.get(d, ())]
                      for d in self.devices]
        self.next = [0] * self.n_dev
        self.free_streams = [list(range(cluster.device(d).compute_streams - 1, -1, -1))
                             for d in self.devices]
        self.copy_free = [[0.0] * cluster.device(d).copy_engines for d in self.devices]
        self.link_free: dict[str, float] = {}
        n = len(self.names)
        self.start, self.end, self.stream = [0.0] * n, [0.0] * n, [0] * n
        self.busy = [0.0] * self.n_dev
        self._wire(arrays, op_dev, cost, dev_index)
        self._init_memory(arrays, op_dev, cluster)

    def _wire(self, a: GraphArrays, op_dev: np.ndarray, cost: CostModel,
              dev_index: dict[str, int]) -> None:
        """Flat per-op lists: the copies each op reads, the local readers it wakes, the
        transfers it sends. A key names a tensor's copy on one device."""
        n, n_dev = len(a.names), self.n_dev
        dst_dev = op_dev[a.edge_dst]
        keys = a.edge_tensor * n_dev + dst_dev
        own = np.arange(len(a.tensor_bytes)) * n_dev + op_dev[a.tensor_producer]
        t_tensor = np.fromiter((a.tensor_index[t.tensor] for t in self.plan.transfers),
                               np.int64, len(self.plan.transfers))
        t_src = np.fromiter((dev_index[t.src] for t in self.plan.transfers), np.int64,
                            len(self.plan.transfers))
        # Dense ids for the (tensor, device) copies that exist, so counts live in a list.
        unique = np.unique(np.concatenate((keys, own)))
        read_ids = np.searchsorted(unique, keys)
        own_ids = np.searchsorted(unique, own)
        send_ids = np.searchsorted(unique, t_tensor * n_dev + t_src)
        refs = np.bincount(read_ids, minlength=len(unique))
        refs += np.bincount(send_ids, minlength=len(unique))
        self.refs: list[int] = refs.tolist()
        self.key_bytes: list[int] = a.tensor_bytes[unique // n_dev].tolist()
        self.key_ids = unique
        # Per-op ranges into flat lists (no list object per op: less to build and to scan).
        counts = np.bincount(a.edge_dst, minlength=n)
        self.read_ids, self.read_off = read_ids.tolist(), np.concatenate(
            ([0], np.cumsum(counts))).tolist()
        self.pending = counts.tolist()
        local = op_dev[a.edge_src] == dst_dev
        by_src = np.argsort(a.edge_src[local], kind="stable")
        self.wake = a.edge_dst[local][by_src].tolist()
        self.wake_off = np.concatenate(
            ([0], np.cumsum(np.bincount(a.edge_src[local], minlength=n)))).tolist()
        self.own_ids, self.out_off = own_ids.tolist(), a.out_offsets.tolist()
        self._send_ids = send_ids.tolist()
        self.alloc = a.alloc_bytes.tolist()
        self.workspace = a.workspace_bytes.tolist()
        self.sends: dict[int, list[_Transfer]] = {}
        self.transfers: list[_Transfer] = []
        routes: dict[tuple[str, str], tuple[str, ...]] = {}
        durations: dict[tuple[int, str, str], float] = {}
        # Transfer time depends on size alone unless the model says otherwise: memoise it.
        by_size = type(cost).tensor_transfer_time is CostModel.tensor_transfer_time
        position = a.position
        dst_ids = np.searchsorted(unique, t_tensor * n_dev + np.fromiter(
            (dev_index[t.dst] for t in self.plan.transfers), np.int64,
            len(self.plan.transfers))).tolist()
        for k, t in enumerate(self.plan.transfers):
            src, dst = dev_index[t.src], dev_index[t.dst]
            pair = (t.src, t.dst)
            if pair not in routes:
                routes[pair] = tuple(h.channel for h in self.cluster.route(t.src, t.dst))
            if by_size:
                size = (t.nbytes, t.src, t.dst)
                if size not in durations:
                    durations[size] = cost.transfer_time(t.nbytes, t.src, t.dst)
                duration = durations[size]
            else:
                duration = cost.tensor_transfer_time(t.tensor, t.nbytes, t.src, t.dst)
            transfer = _Transfer(k, t.nbytes, src, dst, duration, routes[pair],
                                 [position[c] for c in t.consumers], self._send_ids[k],
                                 dst_ids[k])
            self.sends.setdefault(position[t.producer], []).append(transfer)
            self.transfers.append(transfer)

    def _init_memory(self, a: GraphArrays, op_dev: np.ndarray, cluster: Cluster) -> None:
        self.capacity = [cluster.device(d).memory_bytes for d in self.devices]
        resident = np.bincount(op_dev, weights=a.param_bytes, minlength=self.n_dev)
        self.used = [int(x) for x in resident]
        self.resident = list(self.used)
        self.peak = list(self.used)
        # (time, device, bytes) triples laid flat: numbers only, nothing for the GC to scan
        self.timeline: list[float] = [x for d, u in enumerate(self.used) for x in (0.0, d, u)]
        self.overflow = ""
        for d, used in enumerate(self.used):
            if used > self.capacity[d]:
                self._overflow(d, used, "resident parameters")
                break

    # -- memory -------------------------------------------------------------------------

    def _overflow(self, d: int, used: int, what: str) -> None:
        self.overflow = (f"out of memory on device {self.devices[d]!r} at "
                         f"t={self.env.now:.6g} s ({what}): needs {used} bytes, has "
                         f"{self.capacity[d]}")

    def _new_peak(self, d: int, used: int, op: int, transfer: _Transfer | None) -> None:
        self.peak[d] = used
        if used > self.capacity[d] and not self.overflow:
            what = (f"op {self.names[op]!r} starts" if transfer is None else
                    f"transfer {self.plan.transfers[transfer.index].name!r} requested")
            self._overflow(d, used, what)

    def _release(self, key: int, d: int) -> None:
        left = self.refs[key] - 1
        self.refs[key] = left
        if left == 0:
            self.used[d] -= self.key_bytes[key]
            self.timeline.extend((self.env.now, d, self.used[d]))

    # -- issue rule (overridden for priority order) -------------------------------------

    #: Called with an op once all its inputs are on its device (None: nothing to do).
    _ready: Callable[[int], None] | None = None

    def _try_start(self, d: int) -> None:
        order, free, pending = self.order[d], self.free_streams[d], self.pending
        nxt = self.next[d]
        while free and nxt < len(order) and pending[order[nxt]] == 0:
            self._start_op(order[nxt], d, free.pop())
            nxt += 1
        self.next[d] = nxt

    # -- events -------------------------------------------------------------------------

    def run(self) -> None:
        if self._ready is not None:
            for i, pending in enumerate(self.pending):
                if pending == 0:
                    self._ready(i)
        for d in range(len(self.devices)):
            self._try_start(d)
        self.env.run()

    def _start_op(self, op: int, d: int, stream: int) -> None:
        env = self.env
        now, duration = env.now, self.op_time[op]
        alloc = self.alloc[op]
        if alloc:
            used = self.used[d] + alloc
            self.used[d] = used
            self.timeline.extend((now, d, used))
            if used > self.peak[d]:
                self._new_peak(d, used, op, None)
        self.start[op], self.end[op], self.stream[op] = now, now + duration, stream
        self.busy[d] += duration
        event = simpy.Event(env)
        event._ok, event._value = True, op
        event.callbacks.append(self._op_done)
        env.schedule(event, NORMAL, duration)

    def _op_done(self, event: simpy.Event) -> None:
        op: int = event._value
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
        pending, ready = self.pending, self._ready
        for reader in self.wake[self.wake_off[op]:self.wake_off[op + 1]]:
            pending[reader] -= 1
            if pending[reader] == 0 and ready is not None:
                ready(reader)
        sends = self.sends.get(op)
        if sends:
            for transfer in sends:
                self._start_transfer(transfer)
        order, nxt = self.order[d], self.next[d]
        if (nxt < len(order) and pending[order[nxt]] == 0) or ready is not None:
            self._try_start(d)

    def _start_transfer(self, t: _Transfer) -> None:
        now = self.env.now
        engines = self.copy_free[t.src]
        engine = min(range(len(engines)), key=engines.__getitem__)
        start = max(now, engines[engine], *[self.link_free.get(c, 0.0) for c in t.channels])
        end = start + t.duration
        engines[engine] = end
        for channel in t.channels:
            self.link_free[channel] = end
        t.start, t.end, t.engine = start, end, engine
        used = self.used[t.dst] + t.nbytes
        self.used[t.dst] = used
        self.timeline.extend((now, t.dst, used))
        if used > self.peak[t.dst]:
            self._new_peak(t.dst, used, -1, t)
        event = simpy.Event(self.env)
        event._ok, event._value = True, t
        event.callbacks.append(self._transfer_done)
        self.env.schedule(event, NORMAL, end - now)

    def _transfer_done(self, event: simpy.Event) -> None:
        t: _Transfer = event._value
        self._release(t.key, t.src)
        pending = self.pending
        for reader in t.consumers:
            pending[reader] -= 1
            if pending[reader] == 0 and self._ready is not None:
                self._ready(reader)
        self._try_start(t.dst)

    # -- result -------------------------------------------------------------------------

    def result(self, job: str) -> SimResult:
        ran = sum(self.next)
        makespan = max(max(self.end, default=0.0),
                       max((t.end for t in self.transfers), default=0.0))
        reason = self.overflow
        if ran < len(self.names):
            reason = reason or f"only {ran} of {len(self.names)} ops ran"
        streams = [self.cluster.device(d).compute_streams for d in self.devices]
        return SimResult(
            makespan_s=makespan, feasible=not reason, reason=reason,
            busy_s=dict(zip(self.devices, self.busy, strict=True)),
            utilization={d: (b / (makespan * s) if makespan > 0 else 0.0)
                         for d, b, s in zip(self.devices, self.busy, streams, strict=True)},
            transfer_bytes=self.plan.transfer_bytes,
            peak_memory_bytes=dict(zip(self.devices, self.peak, strict=True)),
            memory_capacity_bytes=dict(zip(self.devices, self.capacity, strict=True)),
            resident_bytes=dict(zip(self.devices, self.resident, strict=True)),
            memory_log=self.timeline, devices=tuple(self.devices), plan=self.plan,
            cluster=self.cluster.name, job=job, _run=self,
        )


class _PrioritySimulation(_Simulation):
    """Each device starts its ready op of highest plan priority."""

    def __init__(self, plan: Plan, cluster: Cluster, cost: CostModel) -> None:
        super().__init__(plan, cluster, cost)
        if not plan.priority:
            raise PlacementError(f"simulate: order 'priority' needs op priorities in the "
                                 f"plan; policy {plan.policy!r} gave none")
        self.key = [(-plan.priority.get(name, 0.0), i) for i, name in enumerate(self.names)]
        self.queues: list[list[tuple[float, int]]] = [[] for _ in self.devices]

    def _ready(self, op: int) -> None:
        heapq.heappush(self.queues[self.op_dev[op]], self.key[op])

    def _try_start(self, d: int) -> None:
        queue, free = self.queues[d], self.free_streams[d]
        while free and queue:
            op = heapq.heappop(queue)[1]
            self.next[d] += 1
            self._start_op(op, d, free.pop())


def simulate(plan: Plan, cluster: Cluster, cost: CostModel, *, job: str = "job0",
             order: str = "plan") -> SimResult:
    """Execute ``plan`` on ``cluster`` in simulated time and return the result.

    ``order`` is ``"plan"`` (each device follows the plan's order) or ``"priority"`` (each
    device starts its highest-priority ready op; needs ``plan.priority``).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan as make_plan
    >>> from workloads import build_model
    >>> cluster = get_cluster("quad-v100-nvlink")
    >>> p = make_plan(build_model("resnet50", batch=8), cluster, "heft")
    >>> r = simulate(p, cluster, RooflineCost(cluster))
    >>> r.feasible and r.makespan_s > 0
    True
    """
    if order not in ORDERS:
        raise PlacementError(f"simulate: order must be one of {', '.join(ORDERS)}, "
                             f"got {order!r}")
    plan.validate(cluster)
    with _gc_paused():
        run = (_Simulation if order == "plan" else _PrioritySimulation)(plan, cluster, cost)
        run.run()
        return run.result(job)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a run allocates many short-lived objects and no
    reference cycles, and generation scans would otherwise cost about a fifth of its time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
