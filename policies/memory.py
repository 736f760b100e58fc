"""Baechi's m-TOPO (Jeon et al., SoCC 2020): topological order, devices filled in turn; and
placelab's variant that shares work by device speed."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import PlacementPolicy, register_policy
from policies.plans import Placement
from policies.problem import MemoryBook, Pins, Problem
from workloads.graph import Graph

__all__ = ["MTopo", "MTopoSpeed"]


@register_policy
class MTopo(PlacementPolicy):
    """Baechi's m-TOPO (``TopoUniform`` in its code): the ops in Baechi's topological order
    fill the devices one after another, each up to an even memory cap (the memory of all
    ops over the number of devices, plus the largest op's), never going back to an earlier
    device; a co-placement group lands where its lead does, with all its memory. Refuses
    with :class:`OutOfMemory` when ops are left after the last device."""

    name = "m_topo"
    memory_aware = True

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        book = MemoryBook(p, self.name)
        own = [p.op_memory[i] if p.group[i] < 0 else p.group_memory(p.group[i])
               for i in range(p.n)]  # a group's lead brings the whole group
        cap = sum(p.op_memory) // len(p.devices) + max(own, default=0)
        filled = [0] * len(p.devices)  # the even share counts ops' own memory, as Baechi's
        current = 0

        passed: dict[int, str] = {}  # devices m-TOPO has left, and why

        def choose(op: int, where: list[int]) -> int:
            nonlocal current
            while current < len(p.devices) and not (
                    np.isfinite(p.times[op, current]) and filled[current] + own[op] <= cap
                    and book.fits(op, current, where)):
                if filled[current] + own[op] > cap:
                    passed[current] = (f"its even share, {cap} bytes, was full; m_topo "
                                       f"never returns to a device it left")
                current += 1
            if current == len(p.devices):
                raise book.fail(op, where, passed)
            filled[current] += own[op]
            return current

        return _fill(p, book, np.argsort(p.bfs_rank, kind="stable").tolist(), choose)


def _fill(p: Problem, book: MemoryBook, order: list[int],
          choose: Callable[[int, list[int]], int]) -> Placement:
    """Place ops in ``order``: a group's first op where ``choose`` says, its other ops
    with it (where they must fit), floating ops where their group lands."""
    where = [-1] * p.n
    pins = Pins(p)
    for op in order:
        if p.floating[op]:
            continue
        d = pins.of(op)
        if d < 0:
            d = choose(op, where)
        elif not book.fits(op, d, where):
            raise book.fail(op, where, {other: f"its co-placement group is on {p.devices[d]}"
                                        for other in range(len(p.devices)) if other != d})
        book.commit(op, d, where)
        where[op] = d
        pins.fix(op, d, where)
    return Placement({p.names[i]: p.devices[d] for i, d in enumerate(where)})


@register_policy
class MTopoSpeed(PlacementPolicy):
    """placelab's m-TOPO variant: walks the ops in topological order and keeps putting them
    on the current device until its share of the work (proportional to its speed) is
    reached or the next op would not fit in its memory; then moves to the next device. An
    op that fits nowhere further on goes to any device with room; if none has room,
    :class:`OutOfMemory` says so. A co-placement group counts as one op, where its lead
    comes, with all its work. It balances work by device speed where Baechi's balances
    memory."""

    name = "m_topo_speed"
    memory_aware = True

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        book = MemoryBook(p, self.name)
        share = p.speed / p.speed.sum() * float(np.nan_to_num(p.mean_times).sum())
        current, done = 0, 0.0

        def choose(op: int, where: list[int]) -> int:
            nonlocal current, done
            d = self._device(p, book, op, current, done, share, where)
            if d != current:
                current, done = d, 0.0
            done += float(p.node_times[op, d])
            return d

        return _fill(p, book, list(range(p.n)), choose)

    @staticmethod
    def _device(p: Problem, book: MemoryBook, op: int, current: int, done: float,
                share: np.ndarray, where: list[int]) -> int:
        n_dev = len(p.devices)
        full = done >= share[current] and current < n_dev - 1
        for d in range(current + (1 if full else 0), n_dev):
            if np.isfinite(p.times[op, d]) and book.fits(op, d, where):
                return d
        for d in range(n_dev):  # earlier devices with room left
            if np.isfinite(p.times[op, d]) and book.fits(op, d, where):
                return d
        raise book.fail(op, where)
