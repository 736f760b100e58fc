"""What placement policies share: a graph and cluster flattened into numbers.

:class:`Problem` holds op times per device (``inf`` where a device cannot run an op, e.g. a
dtype it lacks), predecessor and successor lists, communication times, and the memory model
memory-aware policies honour. :class:`MemoryBook` keeps that account per device.

The memory model is conservative, so a plan that respects it cannot run out of memory in the
simulator: an op charges its device its resident state, its outputs and its workspace, as
if nothing were ever freed, and a device pays once for every remote tensor it receives.

Co-placement groups (:attr:`workloads.Graph.groups`) are part of the problem: an op's time
is infinite on a device that cannot run every op of its group; each group has a *lead*, its
first op that is not a bare source, whose placement decides the group's device; the group's
sources with no inputs (a layer's ``parameter`` op) *float*: list schedulers do not schedule
them, they land where their lead does. The first op of a group placed reserves the whole
group's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.load import ClusterLoad
from workloads.errors import OutOfMemory, PlacementError, UnsupportedOp
from workloads.graph import Graph

if TYPE_CHECKING:
    from policies.compiled import Tables
    from policies.plans import Plan
    from workloads.graph import Op

__all__ = ["MemoryBook", "Pins", "Problem", "model_makespan", "out_of_memory", "times_by_device",
           "plan_memory_used", "schedule_length"]


def times_by_device(graph: Graph, cluster: Cluster, cost: CostModel,
                    column: Callable[[str], list[float]]) -> np.ndarray:
    """``times[i, d]``: ``column(device)`` for each device, ops in ``graph.arrays`` order;
    where the model refuses a column, each op priced alone (:meth:`CostModel.op_time`),
    infinite where it cannot run. An op no device runs is refused by name.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c, g = get_cluster("workstation"), build_model("mlp")
    >>> cost = RooflineCost(c)
    >>> times_by_device(g, c, cost, lambda d: cost.least_op_times(g, d)).shape
    (7, 2)
    """
    names = graph.arrays.names
    columns = []
    for d in cluster.device_names:
        try:
            columns.append(column(d))
        except UnsupportedOp:
            columns.append([_alone(cost, graph.op(name), d) for name in names])
    times = np.asarray(columns, dtype=float).T.reshape(len(names), len(columns))
    unplaceable = np.flatnonzero(np.isinf(times).all(axis=1))
    if len(unplaceable):
        name = names[int(unplaceable[0])]
        raise PlacementError(f"op {name!r} ({graph.op(name).dtype}) can run on no device "
                             f"of cluster {cluster.name!r}")
    return times


def _alone(cost: CostModel, op: Op, device: str) -> float:
    try:
        return cost.op_time(op, device)
    except UnsupportedOp:
        return float("inf")


class Problem:
    """Numbers for one (graph, cluster, cost) triple; ops indexed in topological order."""

    def __init__(self, graph: Graph, cluster: Cluster, cost: CostModel,
                 load: ClusterLoad | None = None) -> None:
        self.graph, self.cluster, self.cost = graph, cluster, cost
        load = load or ClusterLoad()
        #: Seconds of other jobs' work queued on each device (tenant-aware placement).
        self.busy = [load.busy(d) for d in cluster.device_names]
        a = graph.arrays
        self.names = a.names
        self.n = len(a.names)
        self.devices = cluster.device_names
        self.times = self._op_times()
        self.preds: list[list[tuple[int, int]]] = [[] for _ in range(self.n)]
        self.succs: list[list[tuple[int, int]]] = [[] for _ in range(self.n)]
        for src, dst, tensor in zip(a.edge_src.tolist(), a.edge_dst.tolist(),
                                    a.edge_tensor.tolist(), strict=True):
            self.preds[dst].append((src, tensor))
            self.succs[src].append((dst, tensor))
        self.tensor_bytes = a.tensor_bytes.tolist()
        self.tensor_names = a.tensor_names
        self.op_memory = (a.param_bytes + a.alloc_bytes).tolist()
        self.capacity = [max(0, d.memory_bytes - load.held(d.name)) for d in cluster.devices]
        self._init_groups(graph)
        self._by_size = type(cost).tensor_transfer_time is CostModel.tensor_transfer_time
        self._comm: dict[tuple[int, int, int], float] = {}
        self._comm_rows: dict[tuple[int, int], np.ndarray] = {}

    def _op_times(self) -> np.ndarray:
        """``times[i, d]``: seconds op ``i`` takes on device ``d`` (inf if it cannot run)."""
        graph, cost, names = self.graph, self.cost, self.names
        return times_by_device(graph, self.cluster, cost,
                               lambda d: cost.op_times(graph, dict.fromkeys(names, d)))

    def _init_groups(self, graph: Graph) -> None:
        #: group index of each op (-1: none); the ops of each group; each group's lead.
        self.group: list[int] = graph.group_index.tolist()
        self.members: list[list[int]] = []
        self.lead: list[int] = []
        self.floating = [False] * self.n
        position = self.graph.arrays.position
        for ops in graph.groups.values():
            idx = sorted(position[name] for name in ops)
            bare = [i for i in idx if not self.preds[i]
                    and graph.op(self.names[i]).op_class == "source"]
            lead = next((i for i in idx if i not in bare), idx[0])
            for i in bare:
                self.floating[i] = i != lead
            self.members.append(idx)
            self.lead.append(lead)
            able = np.isfinite(self.times[idx]).all(axis=0)
            if not able.any():
                name = graph.op(self.names[lead]).attrs["colocate"]
                raise PlacementError(f"co-placement group {name!r}: no device of cluster "
                                     f"{self.cluster.name!r} runs all its ops")
            self.times[np.ix_(np.asarray(idx), np.flatnonzero(~able))] = np.inf
        #: Each op's representative: its group's lead, or itself.
        self.node_of = [i if g < 0 else self.lead[g] for i, g in enumerate(self.group)]

    def group_memory(self, g: int) -> int:
        return sum(self.op_memory[i] for i in self.members[g])

    @cached_property
    def node_work(self) -> np.ndarray:
        """Mean op time gathered onto each op's representative (0 for other members)."""
        work = np.zeros(self.n)
        np.add.at(work, self.node_of, np.nan_to_num(self.mean_times))
        return work

    @cached_property
    def node_times(self) -> np.ndarray:
        """Op times per device gathered onto representatives (0 for other members)."""
        times = np.zeros_like(self.times)
        np.add.at(times, self.node_of, self.times)
        return times

    def units(self) -> list[int]:
        """The ops a placement decides (in order): each op outside a group, and each group's
        lead, which its group follows.

        >>> from hwmodels import RooflineCost, get_cluster
        >>> from workloads import build_model, training_graph
        >>> c = get_cluster("workstation")
        >>> p = Problem(training_graph(build_model("mlp", batch=8), "sgd"), c, RooflineCost(c))
        >>> len(p.units()), p.n  # fc1's weights, forward, backward and update: one unit
        (9, 21)
        """
        return [i for i in range(self.n) if self.node_of[i] == i]

    def follow_leads(self, where: list[int]) -> list[int]:
        """``where`` with every op of a group on the device of the group's lead."""
        return [where[r] for r in self.node_of]

    @cached_property
    def mean_times(self) -> np.ndarray:
        """Mean op time over the devices that can run it."""
        finite = np.where(np.isinf(self.times), np.nan, self.times)
        return np.nanmean(finite, axis=1)

    @cached_property
    def speed(self) -> np.ndarray:
        """Relative speed of each device: total work / its time for the work it can run."""
        runnable = np.where(np.isinf(self.times), 0.0, self.times)
        total = runnable.sum(axis=0)
        return np.where(total > 0, total.max() / np.maximum(total, 1e-300), 1.0)

    def waiting(self) -> list[int]:
        """Inputs each op waits for (floating ops are done from the start)."""
        return [sum(not self.floating[s] for s, _ in preds) for preds in self.preds]

    @cached_property
    def tables(self) -> Tables:
        """The graph and its costs as flat arrays, for the compiled list scheduler
        (:mod:`policies.compiled`)."""
        from policies.compiled import Tables

        return Tables.of(self)

    @cached_property
    def comm_table(self) -> np.ndarray | None:
        """Transfer times by class of tensor, source and destination, for the compiled
        list scheduler (:func:`policies.compiled.comm_table`)."""
        from policies.compiled import comm_table

        return comm_table(self)

    def comm(self, tensor: int, src: int, dst: int) -> float:
        """Seconds to move tensor ``tensor`` from device ``src`` to device ``dst``."""
        if src == dst:
            return 0.0
        key = (self.tensor_bytes[tensor] if self._by_size else -1 - tensor, src, dst)
        value = self._comm.get(key)
        if value is None:
            value = self.cost.tensor_transfer_time(
                self.tensor_names[tensor], self.tensor_bytes[tensor], self.devices[src],
                self.devices[dst])
            self._comm[key] = value
        return value

    def comm_row(self, tensor: int, src: int) -> np.ndarray:
        """Seconds to move ``tensor`` from device ``src`` to each device (0 to itself)."""
        key = (self.tensor_bytes[tensor] if self._by_size else -1 - tensor, src)
        row = self._comm_rows.get(key)
        if row is None:
            row = np.array([self.comm(tensor, src, d) for d in range(len(self.devices))])
            self._comm_rows[key] = row
        return row

    def mean_comm(self, tensor: int) -> float:
        return self.cost.mean_transfer_time(self.tensor_names[tensor],
                                            self.tensor_bytes[tensor], self.devices)

    @cached_property
    def bfs_rank(self) -> np.ndarray:
        """Each op's position in Baechi's topological order: Kahn's algorithm with a FIFO
        queue, sources in graph order, successors in edge order (``assign_topo_order`` in
        Baechi's ``placer_utils.py``)."""
        from collections import deque

        pending = [len(preds) for preds in self.preds]
        queue = deque(i for i in range(self.n) if not pending[i])
        rank = np.zeros(self.n, dtype=np.int64)
        position = 0
        while queue:
            i = queue.popleft()
            rank[i], position = position, position + 1
            for j, _ in self.succs[i]:
                pending[j] -= 1
                if pending[j] == 0:
                    queue.append(j)
        return rank

    def upward_rank(self) -> list[float]:
        """HEFT's ``rank_u``: mean time plus the costliest mean-cost path to an exit."""
        rank = [0.0] * self.n
        for i in range(self.n - 1, -1, -1):
            tail = max((self.mean_comm(t) + rank[j] for j, t in self.succs[i]), default=0.0)
            rank[i] = float(self.mean_times[i]) + tail
        return rank

    @cached_property
    def optimistic_costs(self) -> np.ndarray:
        """PEFT's optimistic cost table (Arabnejad and Barbosa, IEEE TPDS 2014), ops x
        devices: with op ``i`` on device ``k``, the longest over its successors ``j`` of the
        shortest way to finish ``j`` and every path after it, each op on the device best
        for it, a mean transfer where ``j``'s device is not ``k`` (0 for an exit op)::

            OCT(i, k) = max_j min_w [OCT(j, w) + t(j, w) + (w != k) * c(i, j)]

        >>> from hwmodels import RooflineCost, get_cluster
        >>> from workloads import build_model
        >>> c = get_cluster("workstation")
        >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
        >>> bool((p.optimistic_costs[-1] == 0).all())  # the last op has no successor
        True
        """
        table = np.zeros_like(self.times)
        for i in range(self.n - 1, -1, -1):
            for j, t in self.succs[i]:
                ahead = table[j] + self.times[j]  # inf where j cannot run
                # j on device k itself, or on the best device and a transfer from k
                reach = np.minimum(ahead, ahead.min() + self.mean_comm(t))
                np.maximum(table[i], reach, out=table[i])
        return table

    def downward_rank(self) -> list[float]:
        """CPOP's ``rank_d``: the costliest mean-cost path from an entry, excluding the op."""
        rank = [0.0] * self.n
        for i in range(self.n):
            rank[i] = max((rank[p] + float(self.mean_times[p]) + self.mean_comm(t)
                           for p, t in self.preds[i]), default=0.0)
        return rank


class MemoryBook:
    """Bytes committed per device under the conservative model of :class:`Problem`."""

    def __init__(self, problem: Problem, policy: str) -> None:
        self.p = problem
        self.policy = policy
        self.used = [0] * len(problem.devices)
        self.received: set[tuple[int, int]] = set()
        self.reserved = [False] * len(problem.members)

    def need(self, op: int, d: int, where: list[int]) -> int:
        """Bytes placing ``op`` on device ``d`` adds, given earlier ops' devices (-1: not
        placed yet). The first op of a group placed reserves for the whole group: its
        ops' memory and every tensor they read from outside it, wherever that will be
        made (later ops of the group then need nothing, so none can be stranded)."""
        p = self.p
        g = p.group[op]
        if g >= 0 and self.reserved[g]:
            return 0
        ops = [op] if g < 0 else p.members[g]
        remote = {tensor for o in ops for src, tensor in p.preds[o]
                  if where[src] != d and (tensor, d) not in self.received
                  and (g < 0 or p.group[src] != g)}
        own = p.op_memory[op] if g < 0 else p.group_memory(g)
        return own + sum(p.tensor_bytes[t] for t in remote)

    def fits(self, op: int, d: int, where: list[int]) -> bool:
        return self.used[d] + self.need(op, d, where) <= self.p.capacity[d]

    def commit(self, op: int, d: int, where: list[int]) -> None:
        p = self.p
        self.used[d] += self.need(op, d, where)
        g = p.group[op]
        if g >= 0:
            self.reserved[g] = True
        for src, tensor in p.preds[op]:
            if where[src] != d and (g < 0 or p.group[src] != g):
                self.received.add((tensor, d))

    def fail(self, op: int, where: list[int] | None = None,
             passed: Mapping[int, str] | None = None) -> OutOfMemory:
        """:func:`out_of_memory` for ``op``, saying per device what stops it: no room
        for what it brings there (its group, inputs from elsewhere; with ``where``), no
        way to run it, or the policy's own rule (``passed``: device -> why)."""
        p, why = self.p, dict(passed or {})
        for d in range(len(p.devices)):
            if not np.isfinite(p.times[op, d]):
                why[d] = "cannot run it"
            elif where is not None and (need := self.need(op, d, where)) != p.op_memory[op] \
                    and not self.fits(op, d, where):
                why[d] = f"needs {need} with its group and inputs"
        return out_of_memory(p, self.policy, op, p.op_memory[op], self.used, why)


def out_of_memory(p: Problem, policy: str, op: int, needs: int, used: list[int],
                  why: Mapping[int, str] | None = None) -> OutOfMemory:
    """The error a memory-aware policy raises when ``op`` fits on no device: each
    device's free bytes, and where it is not the memory alone, what else stops it."""
    free = ", ".join(f"{name} {cap - u}" + (f" ({(why or {})[d]})" if d in (why or {}) else "")
                     for d, (name, cap, u) in enumerate(zip(p.devices, p.capacity, used,
                                                            strict=True)))
    return OutOfMemory(f"policy {policy!r}: op {p.names[op]!r} needs {needs} bytes and "
                       f"fits on no device (bytes free: {free})")


class Pins:
    """Co-placement as a schedule grows: the first op of a group placed fixes the group's
    device, and the group's floating ops land there."""

    def __init__(self, problem: Problem) -> None:
        self.p = problem
        self.device = [-1] * len(problem.members)

    def of(self, op: int) -> int:
        """The device ``op`` must go to (-1: free)."""
        g = self.p.group[op]
        return -1 if g < 0 else self.device[g]

    def fix(self, op: int, d: int, where: list[int]) -> list[int]:
        """Record ``op`` on ``d``; return the group's other ops that now have a device."""
        g = self.p.group[op]
        if g < 0 or self.device[g] >= 0:
            return []
        self.device[g] = d
        landed = [m for m in self.p.members[g] if m != op]
        for m in landed:
            if self.p.floating[m]:
                where[m] = d
        return landed


def plan_memory_used(p: Problem, plan: Plan) -> list[int]:
    """Bytes per device (in ``p.devices`` order) that ``plan``'s placement holds under
    the conservative model: an upper bound of the simulator's peak."""
    book = MemoryBook(p, plan.policy)
    index = {d: k for k, d in enumerate(p.devices)}
    where = [index[plan.placement[name]] for name in p.names]
    for op in range(p.n):
        book.commit(op, where[op], where)
    return book.used


def schedule_length(p: Problem, where: list[int], sequence: list[int]) -> float:
    """Length of the schedule that runs ops in ``sequence`` (a topological order) on devices
    ``where``, each as early as its device and inputs allow, transfers without contention:
    the model list schedulers and the MILP optimise."""
    free = [0.0] * len(p.devices)
    finish = [0.0] * p.n
    for o in sequence:
        d = where[o]
        ready = max((finish[i] + p.comm(t, where[i], d) for i, t in p.preds[o]), default=0.0)
        finish[o] = max(free[d], ready) + float(p.times[o, d])
        free[d] = finish[o]
    return max(finish, default=0.0)


def model_makespan(plan: Plan, cluster: Cluster, cost: CostModel,
                   problem: Problem | None = None) -> float:
    """:func:`schedule_length` of a Plan, its devices' orders merged by the plan's global
    order (each device's order is kept; ops start as early as possible). ``problem``: the
    plan's graph, cluster and cost as numbers, where the caller has them already."""
    p = problem or Problem(plan.graph, cluster, cost)
    index = {name: i for i, name in enumerate(p.names)}
    dev = {d: k for k, d in enumerate(p.devices)}
    where = [dev[plan.placement[name]] for name in p.names]
    queues = {d: [index[n] for n in ops] for d, ops in plan.order.items()}
    done = [False] * p.n
    sequence: list[int] = []
    heads = dict.fromkeys(queues, 0)
    while len(sequence) < p.n:
        progressed = False
        for d, ops in queues.items():
            while heads[d] < len(ops) and all(done[i] for i, _ in p.preds[ops[heads[d]]]):
                op = ops[heads[d]]
                sequence.append(op)
                done[op] = True
                heads[d] += 1
                progressed = True
        if not progressed:
            raise PlacementError(f"plan of policy {plan.policy!r}: device orders deadlock")
    return schedule_length(p, where, sequence)
