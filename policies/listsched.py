"""List schedulers: HEFT and CPOP (Topcuoglu, Hariri and Wu, IEEE TPDS 2002), ETF (Hwang,
Chow, Anger and Lee, SIAM J. Comput. 1989), and Baechi's memory-constrained m-ETF and m-SCT
(Jeon et al., SoCC 2020).

Each schedules ops in its own model (op times from the cost model); the Plan keeps each
device's op order and the model's makespan as ``estimated_makespan_s``. Transfers in that
model either all run at once without contention (``transfers="free"``: HEFT's, CPOP's and
Hwang et al.'s model) or, as in Baechi's code, queue on one channel per device shared by
its sends and receives, a tensor received once by a device serving every later reader
there (``transfers="channel"``, see :class:`Channels`). The simulator then runs the plan
with the cluster's real copy engines and links.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import Param, PlacementPolicy, register_policy
from policies.budget import ScheduleBook
from policies.load import ClusterLoad
from policies.plans import Placement
from policies.problem import MemoryBook, Pins, Problem
from workloads.errors import OutOfMemory
from workloads.graph import Graph

__all__ = ["BUDGETS", "CPOP", "ETF", "HEFT", "METF", "MSCT", "TIES", "TRANSFERS",
           "Channels", "ready_order"]


class Timeline:
    """Busy intervals of one device, sorted, with insertion into idle gaps.

    >>> line = Timeline()
    >>> line.insert(0.0, 2.0, 0); line.insert(3.0, 5.0, 1)
    >>> line.earliest_start(0.5, 1.0), line.earliest_start(0.5, 1.5)
    (2.0, 5.0)
    """

    #: Gaps looked at one by one before the rest are tested at once (arrays).
    SCAN = 1

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.ops: list[int] = []
        # the same starts and ends as arrays, kept up to date by each insert (a shift in
        # place): rebuilt from the lists after each insert instead, HEFT and CPOP took
        # 1.22x and 1.13x the time (benchmarks/placement_quality.py --part 3)
        self._s, self._e = np.empty(16), np.empty(16)

    def earliest_start(self, ready: float, duration: float) -> float:
        starts, ends = self.starts, self.ends
        i = bisect.bisect_right(ends, ready)
        start = ready if i == 0 else max(ready, ends[i - 1])
        n = len(starts)
        stop = min(n, i + self.SCAN)
        while i < stop:
            if start + duration <= starts[i]:
                return start
            start = max(start, ends[i])
            i += 1
        if i == n:
            return start
        # Past the first interval after ``ready`` a candidate start is the end before the
        # gap (ends are sorted), so the rest of the scan is one comparison of arrays, with
        # the same sums and comparisons as the loop.
        s, e = self._s, self._e
        fits = e[i - 1:n - 1] + duration <= s[i:n]
        j = int(fits.argmax())
        return float(e[i - 1 + j]) if fits[j] else ends[n - 1]

    def insert(self, start: float, end: float, op: int) -> None:
        # After the intervals that end by ``start``: an empty interval at the start of a
        # busy one goes before it, so ends stay sorted too.
        i = bisect.bisect_right(self.ends, start)
        n = len(self.starts)
        self.starts.insert(i, start)
        self.ends.insert(i, end)
        self.ops.insert(i, op)
        if n == len(self._s):  # full: twice the room
            self._s = np.concatenate((self._s, np.empty(n)))
            self._e = np.concatenate((self._e, np.empty(n)))
        s, e = self._s, self._e
        s[i + 1:n + 1], e[i + 1:n + 1] = s[i:n], e[i:n]  # numpy copies overlapping slices
        s[i], e[i] = start, end


def _data_ready_row(p: Problem, op: int, where: list[int], finish: list[float]
                    ) -> np.ndarray:
    """When ``op``'s inputs could be on each device: the latest producer's finish plus its
    tensor's transfer (a producer with no device yet floats: it will join its group,
    costing nothing here)."""
    ready: np.ndarray | None = None
    for s, t in p.preds[op]:
        arrival = finish[s] + p.comm_row(t, where[s]) if where[s] >= 0 else \
            np.full(len(p.devices), finish[s])
        ready = arrival if ready is None else np.maximum(ready, arrival)
    return np.zeros(len(p.devices)) if ready is None else ready


def _placement(p: Problem, where: list[int], orders: list[list[int]],
               finish: list[float], priority: list[float]) -> Placement:
    floats = [i for i in range(p.n) if p.floating[i]]
    orders = [[i for i in floats if where[i] == d] + ops for d, ops in enumerate(orders)]
    names = p.names
    return Placement(
        dict(zip(names, map(p.devices.__getitem__, where), strict=True)),
        order={p.devices[d]: tuple(map(names.__getitem__, ops))
               for d, ops in enumerate(orders) if ops},
        priority=dict(zip(names, priority, strict=True)),
        estimated_makespan_s=max(finish, default=0.0))


class _InsertionScheduler(PlacementPolicy):
    """Static-priority list scheduling with insertion: the highest-priority ready op goes
    where :meth:`choose` says (by default, where it finishes earliest)."""

    def priorities(self, p: Problem) -> list[float]:
        return p.upward_rank()

    def prepare(self, p: Problem, priority: list[float]) -> Any:
        """Hook before scheduling: what :meth:`choose` needs besides the schedule so far
        (CPOP's critical path and its device); kept per call, never on the instance."""
        return None

    def choose(self, p: Problem, op: int, ready: list[float], lines: list[Timeline],
               state: Any = None) -> tuple[float, int]:
        return self.least_finish(p, op, ready, lines)

    #: Whether :meth:`decode` runs compiled (:mod:`policies.compiled`) where it can: where
    #: :meth:`choose` is :meth:`least_finish` plus at most :meth:`ahead`'s term per op and
    #: device, which a class says by defining ``ahead`` beside its ``choose``; a subclass
    #: that overrides ``choose``, ``ahead`` or ``least_finish`` alone runs interpreted.
    compiled: ClassVar[bool] = True

    def ahead(self, p: Problem, state: Any) -> np.ndarray | None:
        """What :meth:`choose` adds to each op's finish on each device (ops x devices), or
        None: nothing."""
        return None

    @staticmethod
    def least_finish(p: Problem, op: int, ready: list[float], lines: list[Timeline],
                     ahead: list[float] | None = None) -> tuple[float, int]:
        """The start and device where ``op`` finishes first, with insertion (plus
        ``ahead[d]`` on device ``d`` where given), the first such device on a tie."""
        best = (float("inf"), float("inf"), 0)  # (finish plus ahead, start, device)
        for d, line in enumerate(lines):
            duration = p.times[op, d]
            start = line.earliest_start(ready[d], duration)
            finish = start + duration if ahead is None else start + duration + ahead[d]
            if finish < best[0]:
                best = (finish, start, d)
        return best[1], best[2]

    load_aware = True

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        return self._schedule(Problem(graph, cluster, cost))

    def place_under_load(self, graph: Graph, cluster: Cluster, cost: CostModel,
                         load: ClusterLoad) -> Placement:
        """Each device is taken from time 0 for the seconds of work others queued there."""
        return self._schedule(Problem(graph, cluster, cost, load))

    def _schedule(self, p: Problem) -> Placement:
        return self.decode(p, self.priorities(p))

    def decode(self, p: Problem, priority: list[float],
               order: list[int] | None = None) -> Placement:
        """The schedule that ``priority`` gives: the highest-priority ready op first
        (:func:`ready_order`, or ``order`` where the caller has it already), each where
        :meth:`choose` says. A search over priorities (:mod:`policies.keys`) decodes each
        candidate so.

        >>> from hwmodels import RooflineCost, get_cluster
        >>> from workloads import build_model
        >>> g, c = build_model("mlp", batch=8), get_cluster("quad-v100-nvlink")
        >>> p = Problem(g, c, RooflineCost(c))
        >>> HEFT().decode(p, p.upward_rank()) == HEFT().place(g, c, RooflineCost(c))
        True
        """
        return self.decode_estimate(p, priority, order)[1]()

    def decode_estimate(self, p: Problem, priority: list[float], order: list[int] | None = None
                        ) -> tuple[float, Callable[[], Placement]]:
        """:meth:`decode`'s estimated makespan, and a function that gives its schedule: a
        search that screens decoded moves by their estimates builds only the schedule it
        takes (the schedule's dicts cost about as much as the compiled decoding)."""
        state = self.prepare(p, priority)
        if order is None:
            order = ready_order(p, priority)
        if self.compiled and _ahead_covers_choose(type(self)):
            from policies import compiled  # numba: loaded on first use

            done = compiled.decode(p, np.asarray(order, dtype=np.int64), self.ahead(p, state))
            if done is not None:
                where, orders, finish = done
                return float(finish.max()) if len(finish) else 0.0, lambda: _placement(
                    p, where.tolist(), orders, finish.tolist(), priority)
        placed = self.decode_interpreted(p, priority, order, state)
        assert placed.estimated_makespan_s is not None  # a list schedule estimates it
        return placed.estimated_makespan_s, lambda: placed

    def decode_interpreted(self, p: Problem, priority: list[float], order: list[int],
                           state: Any) -> Placement:
        """:meth:`decode` in Python, op by op through :meth:`choose` (``state``: what
        :meth:`prepare` gave): what the compiled schedule is checked against, and the
        schedule of a :meth:`choose` it cannot run."""
        lines = [Timeline() for _ in p.devices]
        for line, busy in zip(lines, p.busy, strict=True):
            if busy > 0:  # other jobs' work (op -1, left out of orders), queued from before
                line.insert(float("-inf"), busy, -1)  # now: nothing, not even 0 s, fits ahead
        where, finish = [-1] * p.n, [0.0] * p.n
        pins = Pins(p)
        for op in order:
            ready = _data_ready_row(p, op, where, finish).tolist()
            d = pins.of(op)
            if d >= 0:
                start = lines[d].earliest_start(ready[d], float(p.times[op, d]))
            else:
                start, d = self.choose(p, op, ready, lines, state)
            end = start + float(p.times[op, d])
            lines[d].insert(start, end, op)
            where[op], finish[op] = d, end
            pins.fix(op, d, where)
        return _placement(p, where, [[i for i in line.ops if i >= 0] for line in lines],
                          finish, priority)


def _ahead_covers_choose(cls: type) -> bool:
    """Whether ``cls`` defines ``ahead`` in the class that defines its ``choose``, and
    keeps the base's ``least_finish``: then its choice is the one compiled."""
    def owner(name: str) -> type:
        return next(k for k in cls.__mro__ if name in vars(k))

    return owner("ahead") is owner("choose") and owner("least_finish") is _InsertionScheduler


def ready_order(p: Problem, priority: list[float]) -> list[int]:
    """The order a static-priority list scheduler takes ops in: each time, the ready op
    of highest priority (ties to the lower index); floating ops, done from the start, are
    left out. It depends on the priorities and the graph only, not on where ops go.

    >>> from hwmodels import RooflineCost, get_cluster
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
    >>> ready_order(p, [0.0] * p.n) == sorted(ready_order(p, [0.0] * p.n))  # a chain
    True
    """
    from policies import compiled  # numba: loaded on first use

    return compiled.ready_order(p, np.asarray(priority, dtype=np.float64)).tolist()


@register_policy
class HEFT(_InsertionScheduler):
    """Upward rank, then the device of earliest finish with insertion."""

    name = "heft"


@register_policy
class CPOP(_InsertionScheduler):
    """Priority ``rank_u + rank_d``; ops on the critical path all go to the one device that
    runs that path fastest, the others to their earliest-finish device."""

    name = "cpop"

    def priorities(self, p: Problem) -> list[float]:
        up, down = p.upward_rank(), p.downward_rank()
        return [u + d for u, d in zip(up, down, strict=True)]

    def prepare(self, p: Problem, priority: list[float]) -> tuple[set[int], int]:
        """The critical path's ops and the one device that finishes that path first (after
        the work other jobs queued there)."""
        length = max(priority, default=0.0)
        critical = {i for i, v in enumerate(priority) if abs(v - length) <= 1e-9 * length}
        on_path = sorted(critical)
        finish = np.asarray(p.busy) + p.times[on_path].sum(axis=0)
        return critical, int(np.argmin(finish)) if on_path else 0

    def choose(self, p: Problem, op: int, ready: list[float], lines: list[Timeline],
               state: Any = None) -> tuple[float, int]:
        critical, cp_device = state
        if op in critical and np.isfinite(p.times[op, cp_device]):
            return lines[cp_device].earliest_start(ready[cp_device],
                                                   float(p.times[op, cp_device])), cp_device
        return super().choose(p, op, ready, lines)


class _ReadyPool:
    """Ready ops with, per device, when their inputs could be there (rows of arrays)."""

    def __init__(self, n_devices: int) -> None:
        self.ops: list[int] = []
        self.index: dict[int, int] = {}  # op -> its row
        self.rows = np.zeros((16, n_devices))
        self.need = np.zeros((16, n_devices))
        self.fav = np.full(16, -1)
        self.epoch = np.zeros(16, dtype=np.int64)  # the schedule's epoch of each estimate
        self.array = np.zeros(16, dtype=np.int64)  # ``ops`` as an array (its first rows)

    def add(self, op: int, ready: np.ndarray, need: np.ndarray, fav: int,
            epoch: int = 0) -> None:
        k = len(self.ops)
        if k == len(self.rows):
            self.rows = np.vstack([self.rows, np.zeros_like(self.rows)])
            self.need = np.vstack([self.need, np.zeros_like(self.need)])
            self.fav = np.concatenate([self.fav, np.full_like(self.fav, -1)])
            self.epoch = np.concatenate([self.epoch, np.zeros_like(self.epoch)])
        if k == len(self.array):
            self.array = np.concatenate([self.array, np.zeros_like(self.array)])
        self.ops.append(op)
        self.array[k] = op
        self.index[op] = k
        self.rows[k], self.need[k], self.fav[k], self.epoch[k] = ready, need, fav, epoch

    def remove(self, k: int) -> None:
        last = len(self.ops) - 1
        del self.index[self.ops[k]]
        if k != last:
            self.ops[k] = self.ops[last]
            self.array[k] = self.ops[last]
            self.index[self.ops[k]] = k
            self.rows[k], self.need[k] = self.rows[last], self.need[last]
            self.fav[k], self.epoch[k] = self.fav[last], self.epoch[last]
        self.ops.pop()


class Channels:
    """Baechi's transfer model: one channel per device, used by its sends and receives
    alike. A tensor ``t`` of an op ending at ``e`` on device ``s``, read on ``d``, is sent
    from ``max(e, channel[s])`` and received from ``max(send start, channel[d])``; each
    takes the contention-free transfer time ``c`` on its channel, and the tensor is on
    ``d`` at the receive's end. Once received, a tensor is cached on ``d``: later readers
    there wait for nothing more. A dry run estimates each input on its own (as Baechi's
    ``get_ready_ts`` does); :meth:`commit` books them one after another."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.free = np.zeros(len(p.devices))
        self.cached: dict[tuple[int, int], float] = {}
        self.cached_on: dict[int, dict[int, float]] = {}  # tensor -> device -> arrival

    def _arrival(self, t: int, s: int, d: int, end: float, book: bool) -> float:
        cached = self.cached.get((t, d))
        if cached is not None:
            return cached
        c = self.p.comm(t, s, d)
        send = max(end, self.free[s])
        recv = max(send, self.free[d])
        if book:
            self.free[s] = send + c
            self.free[d] = recv + c
            self.cached[(t, d)] = recv + c
            self.cached_on.setdefault(t, {})[d] = recv + c
        return recv + c

    def ready_row(self, op: int, where: list[int], finish: list[float]) -> np.ndarray:
        """:meth:`ready` (a dry run) on every device at once."""
        p = self.p
        row = np.zeros(len(p.devices))
        free = self.free
        for s, t in p.preds[op]:
            src = where[s]
            if src < 0:
                continue
            send = max(finish[s], float(free[src]))
            arrival = np.maximum(send, free) + p.comm_row(t, src)
            arrival[src] = finish[s]
            for d, at in self.cached_on.get(t, {}).items():
                arrival[d] = at
            np.maximum(row, arrival, out=row)
        return row

    def ready(self, op: int, d: int, where: list[int], finish: list[float], *,
              book: bool = False) -> float:
        """When ``op``'s inputs are all on device ``d`` (``book``: reserve the channels)."""
        ready = 0.0
        for s, t in self.p.preds[op]:
            src = where[s]
            if src < 0:  # a floating producer joins its group: nothing to move
                continue
            at = finish[s] if src == d else self._arrival(t, src, d, finish[s], book)
            ready = max(ready, at)
        return ready


#: How an ETF-style scheduler models transfers (see the module's docstring).
TRANSFERS = ("free", "channel")

#: How m-ETF and m-SCT count memory: along their own schedule, freeing a tensor once its
#: readers are scheduled (``schedule``, Baechi's; :class:`~policies.budget.ScheduleBook`),
#: or as if nothing were freed (``conservative``: a plan within it cannot run out of
#: memory in the simulator; :class:`~policies.problem.MemoryBook`).
BUDGETS = ("schedule", "conservative")

#: How ETF-style schedulers break ties: ``level`` (the op of larger upward rank, on the
#: device where it finishes first) or ``topo`` (Baechi's: the op earlier in its BFS
#: topological order, on the device where it starts first, the lowest-numbered on a tie).
TIES = ("level", "topo")


class _EtfState:
    """One ETF run's working state (kept per call, never on the policy)."""

    def __init__(self, p: Problem, book: MemoryBook | ScheduleBook, fav: dict[int, int],
                 channels: Channels | None) -> None:
        self.p, self.book, self.fav, self.channels = p, book, fav, channels
        self.pins = Pins(p)
        self.pool = _ReadyPool(len(p.devices))
        self.where, self.finish = [-1] * p.n, [0.0] * p.n
        self.favourite_of = {parent: child for child, parent in fav.items()}
        #: Counts the commits that moved transfers or copies: an estimate made in the
        #: current epoch is current.
        self.epoch = 0
        self.last = [-1] * len(p.devices)  # the op each device ran last


@register_policy
class ETF(PlacementPolicy):
    """Earliest Task First: repeatedly start the ready op that can start soonest. With
    ``ties="level"`` (the default here) ties go to the op of larger static level (upward
    rank), and an op's start is taken on the device where it would finish first, so an idle
    slow device does not attract work a fast one would finish sooner (on identical devices
    this is Hwang et al.'s ETF); ``ties="topo"`` is Baechi's rule (see :data:`TIES`)."""

    name = "etf"
    load_aware = True

    params: ClassVar[tuple[Param, ...]] = (
              Param("ties", "str", "level", choices=TIES,
                    doc="how ties between ready ops break (see TIES)"),
              Param("transfers", "str", "free", choices=TRANSFERS,
                    doc="transfers in the scheduler's model (see TRANSFERS)"))

    #: The memory budget of a memory-aware subclass (see BUDGETS); none here.
    budget = "conservative"

    def __init__(self, ties: str = "level", transfers: str = "free") -> None:
        self.ties = self.checked("ties", ties)
        self.transfers = self.checked("transfers", transfers)

    def favourite_parents(self, p: Problem) -> tuple[dict[int, int], dict[str, Any]]:
        """Ops to keep near their parent (m-SCT), and what to report of choosing them;
        none here."""
        return {}, {}

    def keeps_favourites(self) -> str:
        """How favourite children are kept: ``wait`` or ``pin`` (m-SCT); none here."""
        return "pin"

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        return self._schedule(Problem(graph, cluster, cost))

    def place_under_load(self, graph: Graph, cluster: Cluster, cost: CostModel,
                         load: ClusterLoad) -> Placement:
        """Each device free only after the work others queued there; their memory taken."""
        return self._schedule(Problem(graph, cluster, cost, load))

    def _schedule(self, p: Problem) -> Placement:
        n_dev = len(p.devices)
        level = np.asarray(p.upward_rank())
        fav, report = self.favourite_parents(p)
        book = ScheduleBook(p, self.name) if self.budget == "schedule" else \
            MemoryBook(p, self.name)
        s = _EtfState(p, book, fav, Channels(p) if self.transfers == "channel" else None)
        free = np.asarray(p.busy, dtype=float)
        capacity = np.asarray(p.capacity, dtype=float)
        orders: list[list[int]] = [[] for _ in range(n_dev)]
        pending = p.waiting()
        for i in range(p.n):
            if not pending[i] and not p.floating[i]:
                self._admit(s, i)
        for _ in range(p.n - sum(p.floating)):
            k, d, start = self._current_pick(s, free, capacity, level)
            op = s.pool.ops[k]
            s.pool.remove(k)
            if any(s.where[src] not in (-1, d) for src, _ in p.preds[op]):
                s.epoch += 1  # transfers booked, copies made: estimates may have moved
            if s.channels is not None:  # the inputs' transfers, booked one after another
                start = max(start, s.channels.ready(op, d, s.where, s.finish, book=True))
            end = start + float(p.times[op, d])
            s.book.commit(op, d, s.where)
            s.where[op], s.finish[op], free[d] = d, end, end
            s.last[d] = op
            orders[d].append(op)
            landed = s.pins.fix(op, d, s.where)
            mates = set(landed)  # group mates already ready, in the pool's order
            for mate in [w for w in s.pool.ops if w in mates] if mates else ():
                s.pool.remove(s.pool.index[mate])
                self._admit(s, mate)
            for succ, _ in p.succs[op]:
                pending[succ] -= 1
                if pending[succ] == 0:
                    self._admit(s, succ)
        placed = _placement(p, s.where, orders, s.finish, level.tolist())
        if self.memory_aware:
            peaks = s.book.peak if isinstance(s.book, ScheduleBook) else s.book.used
            report = {**report, "budget": self.budget,
                      "budget_peak_bytes": dict(zip(p.devices, peaks, strict=True))}
        return dataclasses.replace(placed, info=report or None)

    def _current_pick(self, s: _EtfState, free: np.ndarray, capacity: np.ndarray,
                      level: np.ndarray) -> tuple[int, int, float]:
        """:meth:`_pick` on estimates brought up to date where it matters. With Baechi's
        channels an op's ready times only grow after it is admitted (channels only get
        busier, and a cached copy arrived no sooner than the estimate), so a stale row is
        a lower bound: the pick is right once the chosen op's row is current. Memory needs
        are refreshed the same way for the chosen op, and for every op before giving up."""
        p, pool = s.p, s.pool
        lazy = s.channels is not None or (self.memory_aware and self.budget == "schedule")
        refreshed_all = not lazy
        best: tuple[np.ndarray, np.ndarray] | None = None
        changed = -1
        awake = self._awake(s, free, capacity) if s.fav and \
            self.keeps_favourites() == "wait" else {}
        ops = pool.array[:len(pool.ops)]
        room = capacity - np.asarray(s.book.used, dtype=float) if self.memory_aware \
            else capacity
        while True:
            try:
                k, d, start, best = self._pick(p, pool, free, capacity, s.book, level,
                                               best, changed, awake, (ops, room))
            except OutOfMemory:
                book = s.book
                if refreshed_all and not (isinstance(book, ScheduleBook) and book.roomy):
                    if isinstance(book, ScheduleBook):
                        book.roomy = True
                    raise
                if refreshed_all and isinstance(book, ScheduleBook):
                    book.roomy = False  # nothing fits with headroom: place without it
                for j, waiting in enumerate(pool.ops):
                    pool.rows[j], pool.need[j] = self._estimates(s, waiting, pool.need[j])
                pool.epoch[:len(pool.ops)] = s.epoch
                refreshed_all, best = True, None
                continue
            if not lazy or pool.epoch[k] == s.epoch:
                return k, d, start
            row, need = self._estimates(s, pool.ops[k], pool.need[k])
            pool.epoch[k] = s.epoch
            if np.array_equal(row, pool.rows[k]) and np.array_equal(need, pool.need[k]):
                if isinstance(s.book, ScheduleBook) and not s.book.roomy:
                    s.book.roomy = True  # the relaxed needs are stale from here on
                    for j, waiting in enumerate(pool.ops):
                        pool.need[j] = self._estimates(s, waiting, pool.need[j])[1]
                return k, d, start
            pool.rows[k], pool.need[k], changed = row, need, k

    def _awake(self, s: _EtfState, free: np.ndarray, capacity: np.ndarray
               ) -> dict[int, int]:
        """Devices that wait for a favourite child: device -> the child's pool index.
        A device waits when the favourite child of the last op it ran is ready and starts
        there no later than on any other device (Baechi's SCT)."""
        pool, awake = s.pool, {}
        room = capacity - np.asarray(s.book.used, dtype=float)
        for d, last in enumerate(s.last):
            child = s.favourite_of.get(last, -1) if last >= 0 else -1
            if child < 0 or child not in pool.index:
                continue
            k = pool.index[child]
            if pool.epoch[k] != s.epoch:
                pool.rows[k], pool.need[k] = self._estimates(s, child, pool.need[k])
                pool.epoch[k] = s.epoch
            start = np.maximum(pool.rows[k], free)
            if self.memory_aware:
                start[pool.need[k] > room] = np.inf
            if np.isfinite(start[d]) and start[d] == start.min():
                awake[d] = k
        return awake

    def _estimates(self, s: _EtfState, op: int, need: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """``op``'s ready row and memory need row as they stand now."""
        memory = self.memory_aware and self.budget == "schedule"
        return self._ready_row(s, op), self._need_row(s, op) if memory else need

    def _need_row(self, s: _EtfState, op: int) -> np.ndarray:
        if isinstance(s.book, ScheduleBook):
            return s.book.need_row(op, s.where)
        return np.array([s.book.need(op, d, s.where) for d in range(len(s.p.devices))],
                        dtype=float)

    def _ready_row(self, s: _EtfState, op: int) -> np.ndarray:
        """When ``op``'s inputs could be on each device (inf where it may not go)."""
        p, n_dev = s.p, len(s.p.devices)
        if s.channels is None:
            ready = _data_ready_row(p, op, s.where, s.finish)
        else:
            ready = s.channels.ready_row(op, s.where, s.finish)
        ready[np.isinf(p.times[op])] = np.inf
        pin = s.pins.of(op)
        if pin >= 0:
            ready[np.arange(n_dev) != pin] = np.inf
        return ready

    def _admit(self, s: _EtfState, op: int) -> None:
        n_dev = len(s.p.devices)
        need = self._need_row(s, op) if self.memory_aware else np.zeros(n_dev)
        parent = s.fav.get(op)
        pin = s.where[parent] if parent is not None and self.keeps_favourites() == "pin" \
            else -1
        s.pool.add(op, self._ready_row(s, op), need, pin, s.epoch)

    def _pick(self, p: Problem, pool: _ReadyPool, free: np.ndarray, capacity: np.ndarray,
              book: MemoryBook | ScheduleBook, level: np.ndarray,
              best: tuple[np.ndarray, np.ndarray] | None = None, only: int = -1,
              awake: dict[int, int] | None = None,
              context: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[int, int, float, tuple[np.ndarray, np.ndarray]]:
        """The ready op that starts first, its device and start, and every pooled op's
        (device, start) it chose among; given ``best`` from a previous call, only pooled
        op ``only`` is looked at again (its estimates changed, nothing else did).
        ``context``: the pool's ops as an array and each device's free bytes, when the
        caller holds them already."""
        ops = np.asarray(pool.ops) if context is None else context[0]
        if context is None:
            used = np.asarray(book.used, dtype=float) if self.memory_aware else free
            room = capacity - used
        else:
            room = context[1]
        if best is None:
            device, first_start = self._firsts(p, pool, free, room, ops,
                                               np.arange(len(pool.ops)), awake or {})
        else:
            device, first_start = best
            one = np.array([only])
            device[one], first_start[one] = self._firsts(p, pool, free, room, ops, one,
                                                         awake or {})
        top = first_start.min()
        if not np.isfinite(top):
            raise book.fail(int(ops[np.argmax(level[ops])]))
        tied = np.flatnonzero(first_start == top)
        if len(tied) == 1:
            pick = tied[0]
        elif self.ties == "topo":
            pick = tied[np.argmin(p.bfs_rank[ops[tied]])]
        else:
            pick = tied[np.lexsort((ops[tied], -level[ops[tied]]))[0]]
        return int(pick), int(device[pick]), float(top), (device, first_start)

    def _firsts(self, p: Problem, pool: _ReadyPool, free: np.ndarray, room: np.ndarray,
                ops: np.ndarray, rows: np.ndarray, awake: dict[int, int]
                ) -> tuple[np.ndarray, np.ndarray]:
        """For pooled ops ``rows``: the device each would take, and its start there
        (``room``: bytes free per device; ``awake``: devices waiting for a favourite
        child, on which any other op starts no sooner than it is urgent)."""
        start = np.maximum(pool.rows[rows], free)
        if self.memory_aware:
            start[pool.need[rows] > room] = np.inf
        if awake:
            finite = np.where(np.isfinite(start), start, -np.inf)
            urgent = finite.max(axis=1)
            for d, child in awake.items():
                others = rows != child
                start[others, d] = np.maximum(start[others, d], urgent[others])
        fav = pool.fav[rows]
        kept = np.flatnonzero(fav >= 0)
        if len(kept):  # a favourite child stays with its parent while it can
            cols = fav[kept]
            stay = start[kept, cols]
            ok = np.isfinite(stay)
            start[kept[ok]] = np.inf
            start[kept[ok], cols[ok]] = stay[ok]
        if self.ties == "topo":  # where it starts first; argmin takes the lowest index
            device = np.argmin(start, axis=1)
        else:  # where it would finish first
            device = np.argmin(start + p.times[ops[rows]], axis=1)
        return device, start[np.arange(len(rows)), device]


@register_policy
class METF(ETF):
    """Memory-constrained ETF (Baechi's m-ETF): a device is a candidate only while the op
    fits in what is left of its memory; never exceeds a device's capacity. Ties as Baechi
    breaks them (``ties="topo"``) unless told otherwise."""

    name = "m_etf"
    memory_aware = True
    params = (Param("ties", "str", "topo", choices=TIES,
                    doc="how ties between ready ops break (see TIES)"),
              Param("transfers", "str", "channel", choices=TRANSFERS,
                    doc="transfers in the scheduler's model (see TRANSFERS)"),
              Param("budget", "str", "schedule", choices=BUDGETS,
                    doc="how memory is counted (see BUDGETS)"))

    def __init__(self, ties: str = "topo", transfers: str = "channel",
                 budget: str = "schedule") -> None:
        super().__init__(ties, transfers)
        self.budget = self.checked("budget", budget)


@register_policy
class MSCT(ETF):
    """Memory-constrained Small Communication Time scheduling (Baechi's m-SCT, after Hanen
    and Munier): an LP relaxation (scipy HiGHS) picks each op's favourite child, the one its
    output should not have to travel to. With ``favourites="wait"`` (Baechi's rule), a
    device whose last op's favourite child is ready and would start there no later than
    anywhere else waits for it, starting meanwhile only ops that are *urgent* (whose latest
    start over the devices has come); with ``"pin"`` (placelab's earlier rule) a favourite
    child goes to its parent's device whenever memory allows, however late. The LP is
    rounded as Baechi rounds it (``rounding="baechi"``: an edge at 0.5 or more is a
    favourite, later edges in graph order overriding earlier ones at the same parent or
    child) or by a greedy matching on the LP's values (``"matching"``)."""

    name = "m_sct"
    memory_aware = True
    params = (*METF.params,
              Param("favourites", "str", "wait", choices=("wait", "pin"),
                    doc="how a favourite child is kept near its parent (see the class)"),
              Param("rounding", "str", "baechi", choices=("baechi", "matching"),
                    doc="how the LP's favourite-child values are rounded"))

    def __init__(self, ties: str = "topo", transfers: str = "channel",
                 budget: str = "schedule", favourites: str = "wait",
                 rounding: str = "baechi") -> None:
        super().__init__(ties, transfers)
        self.budget = self.checked("budget", budget)
        self.favourites = self.checked("favourites", favourites)
        self.rounding = self.checked("rounding", rounding)

    def favourite_parents(self, p: Problem) -> tuple[dict[int, int], dict[str, Any]]:
        """Favourite children (child -> parent) from the relaxed LP; where the LP fails,
        none, and the Plan's ``info["sct_lp"]`` says why."""
        pairs: dict[tuple[int, int], float] = {}
        for i in range(p.n):  # edges in graph order: by parent, then child
            if p.floating[i]:  # a floating op joins its group, wherever that is
                continue
            for j, t in p.succs[i]:
                pairs[(i, j)] = pairs.get((i, j), 0.0) + p.mean_comm(t)
        if not pairs:
            return {}, {"sct_lp": "no edges: no favourite children"}
        x, status = _favourite_lp(p, list(pairs), list(pairs.values()))
        if x is None:
            return {}, {"sct_lp": f"failed ({status}): scheduled without favourite children"}
        chosen = _round_baechi if self.rounding == "baechi" else _round_matching
        return chosen(list(pairs), x.tolist()), {"sct_lp": "optimal"}

    def keeps_favourites(self) -> str:
        return self.favourites


def _round_baechi(edges: list[tuple[int, int]], x: list[float]) -> dict[int, int]:
    """Baechi's rounding: every edge at 0.5 or more, in order, makes its child the parent's
    favourite, replacing the parent's earlier favourite and the child's earlier parent."""
    child_of: dict[int, int] = {}
    parent_of: dict[int, int] = {}
    for (i, j), value in zip(edges, x, strict=True):
        if value < 0.5:
            continue
        if i in child_of:
            parent_of.pop(child_of[i], None)
        if j in parent_of:
            child_of.pop(parent_of[j], None)
        child_of[i], parent_of[j] = j, i
    return parent_of


def _round_matching(edges: list[tuple[int, int]], x: list[float]) -> dict[int, int]:
    """Largest LP values first, at most one favourite per parent and parent per child."""
    favourite: dict[int, int] = {}
    taken: set[int] = set()
    for (i, j), value in sorted(zip(edges, x, strict=True), key=lambda e: -e[1]):
        if value >= 0.5 and j not in favourite and i not in taken:
            favourite[j] = i
            taken.add(i)
    return favourite


def _favourite_lp(p: Problem, edges: list[tuple[int, int]], comm: list[float]
                  ) -> tuple[np.ndarray | None, str]:
    """Relaxed SCT program: minimise C subject to ``s_j >= s_i + p_i + c_ij (1 - x_ij)``,
    ``C >= s_i + p_i``, at most one favourite child per op and parent per op, x in [0, 1].
    Returns x per edge (None where the solver fails) and the solver's word on it."""
    n, e = p.n, len(edges)
    w = np.nan_to_num(p.mean_times, nan=0.0)
    src = np.array([i for i, _ in edges])
    dst = np.array([j for _, j in edges])
    c = np.asarray(comm)
    rows_e = np.arange(e)
    # variables: s (n), x (e), C (1)
    prec = sp.coo_matrix((np.concatenate([np.ones(e), -np.ones(e), -c]),
                          (np.concatenate([rows_e, rows_e, rows_e]),
                           np.concatenate([src, dst, n + rows_e]))), shape=(e, n + e + 1))
    child = sp.coo_matrix((np.ones(e), (src, n + rows_e)), shape=(n, n + e + 1))
    parent = sp.coo_matrix((np.ones(e), (dst, n + rows_e)), shape=(n, n + e + 1))
    finish = sp.coo_matrix((np.concatenate([np.ones(n), -np.ones(n)]),
                            (np.concatenate([np.arange(n), np.arange(n)]),
                             np.concatenate([np.arange(n), np.full(n, n + e)]))),
                           shape=(n, n + e + 1))
    a = sp.vstack([prec, child, parent, finish]).tocsr()
    b = np.concatenate([-(w[src] + c), np.ones(n), np.ones(n), -w])
    objective = np.zeros(n + e + 1)
    objective[-1] = 1.0
    bounds = [(0, None)] * n + [(0, 1)] * e + [(0, None)]
    res = linprog(objective, A_ub=a, b_ub=b, bounds=bounds, method="highs")
    if res.status != 0:
        return None, str(res.message)
    return res.x[n:n + e], "optimal"
