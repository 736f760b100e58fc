"""The discrete-event simulator: a Plan executed on a Cluster under a CostModel.

Events are simpy timeouts with callbacks, one per op and one per transfer; no generator
process per op. Each device runs its ops in plan order on its compute streams (the next op
in order starts once its inputs are on the device and a stream is free). A transfer holds
every link channel of its route for its whole duration (the path at the bottleneck rate,
as ``CostModel.transfer_time`` charges it); a full-duplex link has one channel per
direction, a half-duplex link one in all, and each channel carries one transfer at a time,
first come first served.

Memory per device: resident state (``param_bytes``) of every op placed there from the start;
an op's outputs and workspace from its start; workspace freed at its end; a tensor freed
when its last local reader and last outgoing transfer are done (a tensor nobody reads is
freed when its producer ends); a copy on the receiving device from the transfer's start
until its last reader there ends. Exceeding a device's capacity makes the run infeasible;
the simulation still completes so the result shows how far over it went.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.plans import Plan
from sim.result import SimResult, TraceRows

__all__ = ["simulate"]


@dataclass
class _Transfer:
    name: str
    nbytes: int
    src: int
    dst: int
    duration: float
    channels: tuple[str, ...]
    consumers: list[int]
    key: tuple[int, int]          # (tensor, src device) whose reference it holds
    dst_key: tuple[int, int]      # (tensor, dst device) it creates


@dataclass
class _Memory:
    capacity: list[int]
    names: list[str]
    used: list[int]
    peak: list[int] = field(default_factory=list)
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    overflow: str = ""

    def __post_init__(self) -> None:
        self.peak = list(self.used)
        for device, used in enumerate(self.used):
            self.timeline.append((0.0, device, used))
            if used > self.capacity[device] and not self.overflow:
                self.overflow = (
                    f"out of memory on device {self.names[device]!r} at t=0 s (resident "
                    f"parameters): needs {used} bytes, has {self.capacity[device]}")

    def change(self, now: float, device: int, delta: int, what: str) -> None:
        used = self.used[device] + delta
        self.used[device] = used
        self.timeline.append((now, device, used))
        if used > self.peak[device]:
            self.peak[device] = used
            if used > self.capacity[device] and not self.overflow:
                self.overflow = (
                    f"out of memory on device {self.names[device]!r} at t={now:.6g} s "
                    f"({what}): needs {used} bytes, has {self.capacity[device]}")


class _Simulation:
    """State of one run; indices stand for ops and devices in the hot loop."""

    def __init__(self, plan: Plan, cluster: Cluster, cost: CostModel, job: str) -> None:
        self.env = simpy.Environment()
        self.job = job
        graph = plan.graph
        self.devices = list(cluster.device_names)
        dev_index = {d: i for i, d in enumerate(self.devices)}
        self.ops = list(graph.topological_order())
        op_index = {name: i for i, name in enumerate(self.ops)}
        self.op_dev = [dev_index[plan.placement[n]] for n in self.ops]
        self.op_time = [cost.op_time(graph.op(n), plan.placement[n]) for n in self.ops]
        self.op_cost = [(graph.op(n).flops, graph.op(n).bytes_read + graph.op(n).bytes_written)
                        for n in self.ops]
        self.workspace = [graph.op(n).workspace_bytes for n in self.ops]
        self.order = [[op_index[n] for n in plan.order.get(d, ())] for d in self.devices]
        self.next = [0] * len(self.devices)
        self.streams = [[True] * cluster.device(d).compute_streams for d in self.devices]
        self.busy = [0.0] * len(self.devices)
        self.link_free: dict[str, float] = {}
        self.rows = TraceRows()
        self._wire(plan, cluster, cost, op_index, dev_index)

    def _wire(self, plan: Plan, cluster: Cluster, cost: CostModel,
              op_index: dict[str, int], dev_index: dict[str, int]) -> None:
        graph = plan.graph
        tensors = {name: i for i, name in enumerate(t.name for op in graph for t in op.outputs)}
        self.outputs = [[(tensors[t.name], t.nbytes) for t in graph.op(n).outputs]
                        for n in self.ops]
        self.reads: list[list[tuple[int, int]]] = [[] for _ in self.ops]
        self.pending = [0] * len(self.ops)
        self.local_readers: list[list[int]] = [[] for _ in self.ops]
        self.refs: dict[tuple[int, int], int] = {}
        self.nbytes: dict[int, int] = {}
        for i, outputs in enumerate(self.outputs):
            for t, nb in outputs:
                self.refs[(t, self.op_dev[i])] = 0
                self.nbytes[t] = nb
        for edge in graph.edges():
            src, dst = op_index[edge.src], op_index[edge.dst]
            key = (tensors[edge.tensor.name], self.op_dev[dst])
            self.reads[dst].append(key)
            self.refs[key] = self.refs.get(key, 0) + 1
            self.pending[dst] += 1
            if self.op_dev[src] == self.op_dev[dst]:
                self.local_readers[src].append(dst)
        self.sends: list[list[_Transfer]] = [[] for _ in self.ops]
        for t in plan.transfers:
            src_dev, dst_dev = dev_index[t.src], dev_index[t.dst]
            tensor = tensors[t.tensor]
            self.refs[(tensor, src_dev)] += 1
            self.sends[op_index[t.producer]].append(_Transfer(
                name=t.name, nbytes=t.nbytes, src=src_dev, dst=dst_dev,
                duration=cost.transfer_time(t.nbytes, t.src, t.dst),
                channels=tuple(h.channel for h in cluster.route(t.src, t.dst)),
                consumers=[op_index[c] for c in t.consumers], key=(tensor, src_dev),
                dst_key=(tensor, dst_dev)))
        resident = [0] * len(self.devices)
        for i, name in enumerate(self.ops):
            resident[self.op_dev[i]] += graph.op(name).param_bytes
        self.memory = _Memory([cluster.device(d).memory_bytes for d in self.devices],
                              self.devices, resident)

    # -- events -------------------------------------------------------------------------

    def run(self) -> None:
        for d in range(len(self.devices)):
            self._try_start(d)
        self.env.run()

    def _try_start(self, d: int) -> None:
        order, streams = self.order[d], self.streams[d]
        while self.next[d] < len(order) and self.pending[order[self.next[d]]] == 0:
            try:
                stream = streams.index(True)
            except ValueError:
                return
            op = order[self.next[d]]
            self.next[d] += 1
            streams[stream] = False
            self._start_op(op, d, stream)

    def _start_op(self, op: int, d: int, stream: int) -> None:
        now, duration = self.env.now, self.op_time[op]
        alloc = sum(nb for _, nb in self.outputs[op]) + self.workspace[op]
        if alloc:
            self.memory.change(now, d, alloc, f"op {self.ops[op]!r} starts")
        flops, moved = self.op_cost[op]
        self.rows.add(self.job, self.ops[op], "compute", self.devices[d], "", "",
                      f"{self.devices[d]}/stream{stream}", now, now + duration, flops, moved)
        self.busy[d] += duration
        event = self.env.timeout(duration, (op, stream))
        event.callbacks.append(self._op_done)

    def _op_done(self, event: simpy.Event) -> None:
        op, stream = event.value
        d, now = self.op_dev[op], self.env.now
        self.streams[d][stream] = True
        if self.workspace[op]:
            self.memory.change(now, d, -self.workspace[op], f"op {self.ops[op]!r} ends")
        for key in self.reads[op]:
            self._release(key, now)
        for t, _ in self.outputs[op]:
            if self.refs[(t, d)] == 0:
                self._release((t, d), now, drop=False)
        for reader in self.local_readers[op]:
            self.pending[reader] -= 1
        touched = {d}
        for transfer in self.sends[op]:
            self._start_transfer(transfer)
        for reader in self.local_readers[op]:
            touched.add(self.op_dev[reader])
        for dev in sorted(touched):
            self._try_start(dev)

    def _release(self, key: tuple[int, int], now: float, drop: bool = True) -> None:
        if drop:
            self.refs[key] -= 1
        if self.refs[key] == 0:
            self.memory.change(now, key[1], -self.nbytes[key[0]], "tensor freed")

    def _start_transfer(self, t: _Transfer) -> None:
        now = self.env.now
        start = max([now] + [self.link_free.get(c, 0.0) for c in t.channels])
        end = start + t.duration
        for channel in t.channels:
            self.link_free[channel] = end
        self.memory.change(now, t.dst, t.nbytes, f"transfer {t.name!r} requested")
        self.rows.add(self.job, t.name, "transfer", "", self.devices[t.src],
                      self.devices[t.dst], ",".join(t.channels), start, end, 0, t.nbytes)
        event = self.env.timeout(end - now, t)
        event.callbacks.append(self._transfer_done)

    def _transfer_done(self, event: simpy.Event) -> None:
        t: _Transfer = event.value
        self._release(t.key, self.env.now)
        for reader in t.consumers:
            self.pending[reader] -= self.reads[reader].count(t.dst_key)
        self._try_start(t.dst)

    # -- result -------------------------------------------------------------------------

    def result(self, plan: Plan, cluster: Cluster) -> SimResult:
        trace = self.rows.frame()
        makespan = float(trace["end_s"].max()) if len(trace) else 0.0
        done = sum(self.next)
        reason = self.memory.overflow
        if done < len(self.ops):
            reason = reason or f"only {done} of {len(self.ops)} ops ran"
        capacity = [len(s) for s in self.streams]
        return SimResult(
            makespan_s=makespan, feasible=not reason, reason=reason,
            busy_s=dict(zip(self.devices, self.busy, strict=True)),
            utilization={d: (b / (makespan * c) if makespan > 0 else 0.0)
                         for d, b, c in zip(self.devices, self.busy, capacity, strict=True)},
            transfer_bytes=plan.transfer_bytes,
            peak_memory_bytes=dict(zip(self.devices, self.memory.peak, strict=True)),
            memory_capacity_bytes=dict(zip(self.devices, self.memory.capacity, strict=True)),
            trace=trace, memory_timeline=self.memory.timeline, devices=tuple(self.devices),
            plan=plan, cluster=cluster.name,
        )


def simulate(plan: Plan, cluster: Cluster, cost: CostModel, *, job: str = "job0") -> SimResult:
    """Execute ``plan`` on ``cluster`` in simulated time and return the result.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan as make_plan
    >>> from workloads import build_model
    >>> cluster = get_cluster("quad-v100-nvlink")
    >>> p = make_plan(build_model("resnet50", batch=8), cluster, "heft")
    >>> r = simulate(p, cluster, RooflineCost(cluster))
    >>> r.feasible and r.makespan_s > 0
    True
    """
    plan.validate(cluster)
    run = _Simulation(plan, cluster, cost, job)
    run.run()
    return run.result(plan, cluster)
