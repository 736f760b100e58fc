"""HEFT's list scheduler with insertion, compiled (numba): the order a static-priority list
scheduler takes ops in (:func:`policies.listsched.ready_order`), the schedule it builds
(:meth:`policies.listsched.HEFT.decode`, and :class:`policies.keys.PredictedFinish`'s, whose
choice of device adds a term per op and device), and the length of a schedule in a given
order (:func:`policies.problem.schedule_length`, with which ``mcmc``'s chain screens its
moves).

The priority search (:mod:`policies.keys`) decodes hundreds of candidate schedules per
search, and the interpreted loop spent most of a search's time there. This is the same
model operation for operation, so every start, finish and choice equals the interpreted
scheduler's to the bit: a device's busy intervals kept sorted, an op put in the first gap
after its inputs are ready where it fits (:class:`policies.listsched.Timeline`), a
tensor's arrival its producer's finish plus its transfer time, the first device of least
finish on a tie, the first op of a co-placement group fixing the group's device.
``tests/policies/test_compiled.py`` checks both against the interpreted ones (and the order
against networkx) on random graphs, clusters and priorities.

The module imports numba; :mod:`policies.listsched` imports it on first use. Its functions
are compiled on first use and cached beside it (about 8 s once on a 2-core machine, then
about a second to load in a new process).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from policies.problem import Problem
from workloads.errors import PlacementError

__all__ = ["MAX_TABLE", "Tables", "comm_table", "decode", "ready_order", "schedule_length"]

#: Transfer times tabulated at most (classes of tensor x devices x devices; 16 MB): past
#: it the interpreted scheduler, which prices only the transfers it meets, runs instead.
#: The cost model prices an entry in a few microseconds, so a table that large takes
#: seconds: about what one interpreted schedule of such a graph spends pricing transfers
#: (2,000 ops of 1,500 sizes on 32 devices: 5.5 s against 5.0 s).
MAX_TABLE = 2_000_000


@dataclass(frozen=True)
class Tables:
    """A :class:`~policies.problem.Problem`'s graph and op times as flat arrays (CSR
    edges), for the compiled loops; its transfer times are :func:`comm_table`'s."""

    times: np.ndarray  #: ops x devices seconds
    pred_ptr: np.ndarray
    pred_src: np.ndarray
    pred_class: np.ndarray  #: each in-edge's row of :func:`comm_table`
    sample: np.ndarray  #: a tensor of each class (all of a class cost alike)
    succ_ptr: np.ndarray
    succ_dst: np.ndarray
    pending: np.ndarray  #: inputs each op waits for (floating producers are done)
    floating: np.ndarray
    group: np.ndarray
    member_ptr: np.ndarray
    member_op: np.ndarray
    busy: np.ndarray

    @classmethod
    def of(cls, p: Problem) -> Tables:
        """The tables of ``p``: a class of tensor per size where the cost model prices
        transfers by size (as :meth:`Problem.comm_row` caches them), else per tensor."""
        pred_ptr, pred_pairs = _csr(p.preds)
        succ_ptr, succ_pairs = _csr(p.succs)
        tensors = pred_pairs[:, 1]
        keys = np.asarray(p.tensor_bytes, dtype=np.int64)[tensors] if p._by_size else tensors
        classes, pred_class = np.unique(keys, return_inverse=True)
        pred_class = pred_class.astype(np.int64).reshape(-1)
        sample = np.zeros(len(classes), dtype=np.int64)
        sample[pred_class] = tensors
        members = [m for g in p.members for m in g]
        return cls(
            times=np.ascontiguousarray(p.times, dtype=np.float64),
            pred_ptr=pred_ptr, pred_src=np.ascontiguousarray(pred_pairs[:, 0]),
            pred_class=pred_class, sample=sample,
            succ_ptr=succ_ptr, succ_dst=np.ascontiguousarray(succ_pairs[:, 0]),
            pending=np.asarray(p.waiting(), dtype=np.int64),
            floating=np.asarray(p.floating, dtype=np.bool_),
            group=np.asarray(p.group, dtype=np.int64),
            member_ptr=np.cumsum([0] + [len(g) for g in p.members], dtype=np.int64),
            member_op=np.asarray(members, dtype=np.int64),
            busy=np.asarray(p.busy, dtype=np.float64))


def _csr(lists: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and (op, tensor) pairs of per-op edge lists, in their order."""
    ptr = np.cumsum([0] + [len(row) for row in lists], dtype=np.int64)
    pairs = np.asarray([pair for row in lists for pair in row], dtype=np.int64)
    return ptr, pairs.reshape(-1, 2)


def comm_table(p: Problem) -> np.ndarray | None:
    """Seconds to move each class of tensor (:attr:`Tables.pred_class`) from each device
    to each, from ``p``'s own cache; None where the table would exceed :data:`MAX_TABLE`
    entries or a time (of an op or a transfer) is not a number: the interpreted scheduler
    then runs, as before.
    Built once per Problem (:attr:`Problem.comm_table`)."""
    t, k = p.tables, len(p.devices)
    if len(t.sample) * k * k > MAX_TABLE or np.isnan(t.times).any():
        return None
    table = np.zeros((len(t.sample), k, k))
    for c, tensor in enumerate(t.sample.tolist()):
        for src in range(k):
            table[c, src] = p.comm_row(tensor, src)
    return None if np.isnan(table).any() else table


def ready_order(p: Problem, priority: np.ndarray) -> np.ndarray:
    """:func:`policies.listsched.ready_order`, compiled: each time the ready op of highest
    priority (ties to the lower index), floating ops left out.

    >>> from hwmodels import RooflineCost, get_cluster
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
    >>> ready_order(p, np.zeros(p.n)).tolist() == list(range(p.n))  # a chain
    True
    """
    keys = np.asarray(priority, dtype=np.float64)
    if keys.shape != (p.n,):
        raise ValueError(f"ready order: expected {p.n} priorities, got {keys.size}")
    if np.isnan(keys).any():
        name = p.names[int(np.flatnonzero(np.isnan(keys))[0])]
        raise PlacementError(f"ready order: op {name!r} has priority NaN, expected a number")
    t = p.tables
    return _ready_order(t.pending, t.succ_ptr, t.succ_dst, t.floating, keys)


def decode(p: Problem, order: np.ndarray, ahead: np.ndarray | None = None
           ) -> tuple[np.ndarray, list[list[int]], np.ndarray] | None:
    """The insertion list schedule of ops taken in ``order``: each op's device and finish,
    and each device's ops in time order; ``ahead[op, d]`` (where given) is added to the
    finish time when choosing ``op``'s device. None where :func:`comm_table` gives none.

    >>> from hwmodels import RooflineCost, get_cluster
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
    >>> where, orders, finish = decode(p, ready_order(p, np.asarray(p.upward_rank())))
    >>> set(where.tolist()), orders[0] == list(range(p.n))  # a chain stays on one device
    ({0}, True)
    """
    t, comm = p.tables, p.comm_table
    if comm is None:
        return None
    order = np.asarray(order, dtype=np.int64)
    if len(order) and (order.min() < 0 or order.max() >= p.n
                       or np.bincount(order, minlength=p.n).max() > 1):
        raise ValueError(f"decode: expected an order of distinct ops 0 to {p.n - 1}")
    use = ahead is not None
    extra = np.ascontiguousarray(ahead, dtype=np.float64) if use else np.zeros((1, 1))
    where, finish, lines, counts = _decode(
        order, t.times, t.pred_ptr, t.pred_src, t.pred_class, comm, t.group, t.floating,
        t.member_ptr, t.member_op, t.busy, extra, use)
    orders = [[op for op in row[:n].tolist() if op >= 0] for row, n in
              zip(lines, counts.tolist(), strict=True)]
    return where, orders, finish


def schedule_length(p: Problem, where: np.ndarray, sequence: np.ndarray, *,
                    check: bool = True) -> float | None:
    """:func:`policies.problem.schedule_length`, compiled: the length of the schedule that
    runs ops in ``sequence`` (a topological order) on devices ``where``, each as early as
    its device and inputs allow, transfers without contention. None where
    :func:`comm_table` gives none. ``check=False`` skips the indices' range check, for
    int64 arrays in range by construction (a search's own moves, many times a second).

    >>> from hwmodels import RooflineCost, get_cluster
    >>> from policies.problem import schedule_length as interpreted
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> p = Problem(build_model("mlp", batch=8), c, RooflineCost(c))
    >>> where, sequence = np.arange(p.n) % 2, np.arange(p.n)
    >>> schedule_length(p, where, sequence) == interpreted(p, where.tolist(), list(range(p.n)))
    True
    """
    t, comm = p.tables, p.comm_table
    if comm is None:
        return None
    where = np.asarray(where, dtype=np.int64)
    sequence = np.asarray(sequence, dtype=np.int64)
    # the compiled loop checks no index: out of range it would read past the arrays
    if check and (where.shape != (p.n,) or (p.n and not 0 <= where.min() <= where.max()
                                            < len(p.devices))):
        raise ValueError(f"schedule length: expected a device 0 to {len(p.devices) - 1} "
                         f"for each of {p.n} ops")
    if check and len(sequence) and (sequence.min() < 0 or sequence.max() >= p.n):
        raise ValueError(f"schedule length: expected a sequence of ops 0 to {p.n - 1}")
    return float(_schedule_length(sequence, where, t.times, t.pred_ptr, t.pred_src,
                                  t.pred_class, comm, len(p.devices)))


@njit(cache=True)
def _schedule_length(sequence: np.ndarray, where: np.ndarray, times: np.ndarray,
                     pred_ptr: np.ndarray, pred_src: np.ndarray, pred_class: np.ndarray,
                     comm: np.ndarray, devices: int) -> float:  # pragma: no cover
    """The loop of :func:`schedule_length`, operation for operation as the interpreted one."""
    free = np.zeros(devices)
    finish = np.zeros(times.shape[0])
    longest = 0.0
    for o in sequence:
        d = where[o]
        ready = 0.0
        for e in range(pred_ptr[o], pred_ptr[o + 1]):
            s = pred_src[e]
            ready = max(ready, finish[s] + comm[pred_class[e], where[s], d])
        finish[o] = max(free[d], ready) + times[o, d]
        free[d] = finish[o]
        longest = max(longest, finish[o])
    return longest


@njit(cache=True)
def _ready_order(pending: np.ndarray, succ_ptr: np.ndarray, succ_dst: np.ndarray,
                 floating: np.ndarray, priority: np.ndarray) -> np.ndarray:  # pragma: no cover
    n = len(pending)
    left = pending.copy()
    heap_key = np.empty(n)
    heap_op = np.empty(n, dtype=np.int64)
    size = 0
    for i in range(n):
        if left[i] == 0 and not floating[i]:
            size = _push(heap_key, heap_op, size, -priority[i], i)
    out = np.empty(n, dtype=np.int64)
    taken = 0
    while size > 0:
        op = heap_op[0]
        size = _pop(heap_key, heap_op, size)
        out[taken] = op
        taken += 1
        for k in range(succ_ptr[op], succ_ptr[op + 1]):
            j = succ_dst[k]
            left[j] -= 1
            if left[j] == 0:
                size = _push(heap_key, heap_op, size, -priority[j], j)
    return out[:taken]


@njit(cache=True)
def _before(key: np.ndarray, op: np.ndarray, a: int, b: int) -> bool:  # pragma: no cover
    """Heap entry ``a`` before entry ``b``: the lower key, then the lower op."""
    return key[a] < key[b] or (key[a] == key[b] and op[a] < op[b])


@njit(cache=True)
def _swap(key: np.ndarray, op: np.ndarray, a: int, b: int) -> None:  # pragma: no cover
    key[a], key[b] = key[b], key[a]
    op[a], op[b] = op[b], op[a]


@njit(cache=True)
def _push(key: np.ndarray, op: np.ndarray, size: int, k: float, i: int
          ) -> int:  # pragma: no cover
    key[size], op[size] = k, i
    child = size
    while child > 0:
        parent = (child - 1) // 2
        if not _before(key, op, child, parent):
            break
        _swap(key, op, child, parent)
        child = parent
    return size + 1


@njit(cache=True)
def _pop(key: np.ndarray, op: np.ndarray, size: int) -> int:  # pragma: no cover
    size -= 1
    key[0], op[0] = key[size], op[size]
    parent = 0
    while True:
        first = parent
        for child in (2 * parent + 1, 2 * parent + 2):
            if child < size and _before(key, op, child, first):
                first = child
        if first == parent:
            return size
        _swap(key, op, parent, first)
        parent = first


@njit(cache=True)
def _earliest_start(starts: np.ndarray, ends: np.ndarray, n: int, ready: float,
                    duration: float) -> float:  # pragma: no cover
    """:meth:`policies.listsched.Timeline.earliest_start` over one device's ``n``
    intervals."""
    i = np.searchsorted(ends[:n], ready, side="right")
    start = ready if i == 0 else max(ready, ends[i - 1])
    while i < n:
        if start + duration <= starts[i]:
            return start
        start = max(start, ends[i])
        i += 1
    return start


@njit(cache=True)
def _insert(starts: np.ndarray, ends: np.ndarray, ops: np.ndarray, n: int, start: float,
            end: float, op: int) -> None:  # pragma: no cover
    """:meth:`policies.listsched.Timeline.insert`: after the intervals that end by
    ``start``."""
    i = np.searchsorted(ends[:n], start, side="right")
    for k in range(n, i, -1):
        starts[k], ends[k], ops[k] = starts[k - 1], ends[k - 1], ops[k - 1]
    starts[i], ends[i], ops[i] = start, end, op


@njit(cache=True)
def _decode(order: np.ndarray, times: np.ndarray, pred_ptr: np.ndarray,
            pred_src: np.ndarray, pred_class: np.ndarray, comm: np.ndarray,
            group: np.ndarray, floating: np.ndarray, member_ptr: np.ndarray,
            member_op: np.ndarray, busy: np.ndarray, ahead: np.ndarray, use_ahead: bool
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    n, k = times.shape
    starts = np.empty((k, n + 1))
    ends = np.empty((k, n + 1))
    lines = np.empty((k, n + 1), dtype=np.int64)
    counts = np.zeros(k, dtype=np.int64)
    for d in range(k):
        if busy[d] > 0:  # other jobs' work, queued from before: nothing fits ahead of it
            _insert(starts[d], ends[d], lines[d], 0, -np.inf, busy[d], -1)
            counts[d] = 1
    where = np.full(n, -1, dtype=np.int64)
    finish = np.zeros(n)
    pinned = np.full(len(member_ptr) - 1, -1, dtype=np.int64)
    ready = np.empty(k)
    for op in order:
        _data_ready(op, where, finish, pred_ptr, pred_src, pred_class, comm, ready)
        g = group[op]
        d = pinned[g] if g >= 0 else -1
        if d >= 0:
            start = _earliest_start(starts[d], ends[d], counts[d], ready[d], times[op, d])
        else:
            start, d = _least_finish(op, times, starts, ends, counts, ready, ahead,
                                     use_ahead)
        end = start + times[op, d]
        _insert(starts[d], ends[d], lines[d], counts[d], start, end, op)
        counts[d] += 1
        where[op], finish[op] = d, end
        if g >= 0 and pinned[g] < 0:  # the group's first op placed: the group goes there
            pinned[g] = d
            for m in member_op[member_ptr[g]:member_ptr[g + 1]]:
                if m != op and floating[m]:
                    where[m] = d
    return where, finish, lines, counts


@njit(cache=True)
def _data_ready(op: int, where: np.ndarray, finish: np.ndarray, pred_ptr: np.ndarray,
                pred_src: np.ndarray, pred_class: np.ndarray, comm: np.ndarray,
                ready: np.ndarray) -> None:  # pragma: no cover
    """When ``op``'s inputs could be on each device (into ``ready``), as
    ``policies.listsched._data_ready_row`` (NaN as ``np.maximum`` keeps it)."""
    ready[:] = 0.0
    for e in range(pred_ptr[op], pred_ptr[op + 1]):
        s = pred_src[e]
        for d in range(len(ready)):
            arrival = finish[s] + comm[pred_class[e], where[s], d] if where[s] >= 0 \
                else finish[s]
            if e == pred_ptr[op] or np.isnan(arrival) or arrival > ready[d]:
                ready[d] = arrival


@njit(cache=True)
def _least_finish(op: int, times: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  counts: np.ndarray, ready: np.ndarray, ahead: np.ndarray, use_ahead: bool
                  ) -> tuple[float, int]:  # pragma: no cover
    """:meth:`policies.listsched.HEFT.least_finish`: the start and device where ``op``
    finishes first (plus ``ahead[op]`` where used), the first such device on a tie."""
    best, best_start, best_device = np.inf, np.inf, 0
    for d in range(times.shape[1]):
        duration = times[op, d]
        start = _earliest_start(starts[d], ends[d], counts[d], ready[d], duration)
        finish = start + duration + ahead[op, d] if use_ahead else start + duration
        if finish < best:
            best, best_start, best_device = finish, start, d
    return best_start, best_device
