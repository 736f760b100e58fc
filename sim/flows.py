"""The flows of the ``fair`` link model (:class:`sim.links.FairSharing`): who crosses which
channel, bytes left, rates and foreseen ends, and max-min fair rates by progressive filling,
compiled with numba.

A flow that starts or ends changes the rates of its component only (the flows linked to it
through shared channels, transitively). Behind one switch that component holds nearly every
active flow, so each start or end re-rates hundreds or thousands of flows: in Python that cost
grew to minutes at 10k ops (SimGrid, whose lazy max-min system works the same way, does it in
compiled code). The arithmetic is the Python model's, operation for operation, so rates and
times are equal to the bit: each channel's flows in the order they started, the component
in the order a depth-first walk from the changed channels meets them, the bottleneck
channel by (share, first seen), bytes settled at the old rate before a new one applies.

All state lives in two arrays, one of floats and one of integers, cut into named views inside
the compiled code: a call from Python then unpacks two arrays, not thirty.

The module imports numba, so :mod:`sim.links` imports it only when a run shares links fairly.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

__all__ = ["FlowTable", "finish_flows", "max_min_rates", "start_flow"]

_INF = np.inf
# The integer array begins with a header: n flows, c channels, hops per flow (widest),
# m memberships, active flows, scan_up_to, channels touched in a turn, then the boundaries
# of the float views and of the integer views (``_bounds``): the one place the layout lives.
_FIXED = 8

# Per flow (n), per channel (c), per membership (m), heap (c + m + 1), in this order.
_FLOATS = ("remaining", "settled", "rate", "end", "new_rate", "capacity", "left",
           "heap_share")
_INTS = ("n_hops", "active", "where", "comp", "done", "in_comp", "rated", "tie", "hops",
         "members",
         "offset", "count", "stack", "seen_list", "rank", "by_rank", "unrated", "seen",
         "touched", "touched_list", "heap_rank")
_Views = namedtuple("_Views", _FLOATS + _INTS + ("header",))  # type: ignore[misc]
_HEADER = _FIXED + len(_FLOATS) + 1 + len(_INTS) + 1


def _bounds(n: int, c: int, width: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each float view and each integer view begins and ends, in its array."""
    heap = c + m + 1
    floats = [n] * 5 + [c] * 2 + [heap]
    ints = [n] * 8 + [n * width, m] + [c] * 10 + [heap]
    return (np.cumsum([0, *floats]), _HEADER + np.cumsum([0, *ints]))


class FlowTable:
    """The active flows of one run, indexed by transfer, with the channels each crosses.

    Flow ``k`` crosses the channels ``routes[route_of[k]]`` (``routes[k]`` without
    ``route_of``), as indices into ``capacity`` (bytes per second). ``scan_up_to`` is the
    number of channels up to which a filling finds each bottleneck by a scan rather than a
    heap (the same channel either way; a scan is faster for a few hundred). Flows ending at
    the same time end in the order of ``tie`` (their index without it). :meth:`start`
    begins a flow and :meth:`finish` ends the flows due; both re-rate what the change touches
    and return the earliest foreseen end (infinity when none). ``rate`` (bytes per second,
    by transfer) is a view of the current rates.

    >>> table = FlowTable([[0], [0]], [10.0])
    >>> table.start(0, 100.0, 0.0), table.start(1, 50.0, 0.0)
    ((10.0, True), (10.0, True))
    >>> done, _, soonest = table.finish(10.0); done, soonest
    ([1], 15.0)
    """

    def __init__(self, routes: list[list[int]], capacity: list[float], *,
                 route_of: np.ndarray | None = None, scan_up_to: int = 256,
                 tie: np.ndarray | None = None) -> None:
        width = max(1, max(map(len, routes), default=1))
        table = np.full((len(routes), width), -1, dtype=np.int64)
        for r, route in enumerate(routes):
            table[r, :len(route)] = route
        of = np.arange(len(routes)) if route_of is None else np.asarray(route_of, np.int64)
        flat = table[of]
        n, c = len(flat), len(capacity)
        n_hops = np.fromiter(map(len, routes), np.int64, len(routes))[of]
        use = np.bincount(flat[flat >= 0], minlength=c).astype(np.int64)
        m = int(use.sum())
        floats, ints = _bounds(n, c, width, m)
        self.floats = np.zeros(floats[-1])
        self.ints = np.zeros(ints[-1], dtype=np.int64)
        self.ints[:_HEADER] = (n, c, width, m, 0, scan_up_to, 0, 0, *floats, *ints)
        view = self._view(floats, ints)
        view["capacity"][:] = capacity
        view["end"][:] = _INF
        view["where"][:] = -1
        view["rank"][:] = -1
        view["n_hops"][:] = n_hops
        view["hops"][:] = flat.ravel()
        view["tie"][:] = np.arange(n) if tie is None else tie
        # Each channel's active flows, in the order they started, in a segment of its own
        # as long as the number of transfers that ever cross it.
        view["offset"][:] = np.cumsum(use) - use
        self.rate, self._done, self._new_rate = view["rate"], view["done"], view["new_rate"]

    def _view(self, floats: np.ndarray, ints: np.ndarray) -> dict[str, np.ndarray]:
        out = {name: self.floats[floats[i]:floats[i + 1]] for i, name in enumerate(_FLOATS)}
        return out | {name: self.ints[ints[i]:ints[i + 1]] for i, name in enumerate(_INTS)}

    def views(self) -> dict[str, np.ndarray]:
        """The named views of the table's arrays (the boundaries its header holds)."""
        k = len(_FLOATS) + 1
        return self._view(self.ints[_FIXED:_FIXED + k], self.ints[_FIXED + k:_HEADER])

    def start(self, k: int, volume: float, now: float) -> tuple[float, bool]:
        """Flow ``k`` starts with ``volume`` bytes: re-rate its component. Returns the
        earliest foreseen end and whether any flow was rated (not so for a flow that
        crosses no channel: it never ends)."""
        rated, soonest = start_flow(k, volume, now, self.floats, self.ints)
        return soonest, rated

    def finish(self, now: float) -> tuple[list[int], bool, float]:
        """End the flows due by ``now`` (their foreseen end within a rounding of it), in order
        of end and index; re-rate the flows that shared a channel with them. Returns those
        flows, whether any was re-rated, and the earliest foreseen end."""
        n, first, rated, soonest = finish_flows(now, self.floats, self.ints)
        return self.done(n, first), rated, soonest

    def done(self, n: int, first: int) -> list[int]:
        """The ``n`` flows the last :func:`finish_flows` ended, the first of them ``first``."""
        return [first] if n == 1 else self._done[:n].tolist()


def max_min_rates(routes: list[list[int]], capacity: list[float], *,
                  scan_up_to: int = 256) -> list[float]:
    """Max-min fair rates of flows that cross the given channels (indices into
    ``capacity``, each route at least one channel), by the progressive filling of
    :class:`FlowTable`, the flows taken in the order given (a tie goes to the channel seen
    first); ``scan_up_to`` as for :class:`FlowTable`.

    >>> max_min_rates([[0], [0, 1], [1]], [10.0, 4.0])
    [8.0, 2.0, 2.0]
    """
    if any(not route for route in routes):
        raise ValueError("max_min_rates: every route must cross at least one channel, got "
                         f"an empty route at index {[len(r) for r in routes].index(0)}")
    table = FlowTable(routes, capacity, scan_up_to=scan_up_to)
    _fill_all(table.floats, table.ints)
    return table._new_rate.tolist()


# -- compiled kernels ---------------------------------------------------------------------------


@njit(cache=True)
def _views(floats, ints):
    """The named views of the two arrays, cut at the boundaries the header holds."""
    n, width = ints[0], ints[2]
    f = floats
    a = ints[_FIXED:_FIXED + len(_FLOATS) + 1]  # float boundaries
    b = ints[_FIXED + len(_FLOATS) + 1:_HEADER]  # integer boundaries
    i = ints
    return _Views(
        f[a[0]:a[1]], f[a[1]:a[2]], f[a[2]:a[3]], f[a[3]:a[4]], f[a[4]:a[5]], f[a[5]:a[6]],
        f[a[6]:a[7]], f[a[7]:a[8]],
        i[b[0]:b[1]], i[b[1]:b[2]], i[b[2]:b[3]], i[b[3]:b[4]], i[b[4]:b[5]], i[b[5]:b[6]],
        i[b[6]:b[7]], i[b[7]:b[8]], i[b[8]:b[9]].reshape((n, width)), i[b[9]:b[10]],
        i[b[10]:b[11]], i[b[11]:b[12]], i[b[12]:b[13]], i[b[13]:b[14]], i[b[14]:b[15]],
        i[b[15]:b[16]], i[b[16]:b[17]], i[b[17]:b[18]], i[b[18]:b[19]], i[b[19]:b[20]],
        i[b[20]:b[21]],
        ints[:_HEADER])


@njit(cache=True)
def _soonest(v):
    soonest = _INF
    for i in range(v.header[4]):
        e = v.end[v.active[i]]
        if e < soonest:
            soonest = e
    return soonest


@njit(cache=True)
def start_flow(k, volume, now, floats, ints):
    """:meth:`FlowTable.start` on the table's arrays (``table.floats``, ``table.ints``),
    returning (rated, soonest): a run calls it once per transfer."""
    v = _views(floats, ints)
    v.remaining[k], v.settled[k], v.rate[k], v.end[k] = volume, now, 0.0, _INF
    v.where[k] = v.header[4]
    v.active[v.header[4]] = k
    v.header[4] += 1
    alone = True
    for h in range(v.n_hops[k]):
        c = v.hops[k, h]
        alone = alone and v.count[c] == 0
        v.members[v.offset[c] + v.count[c]] = k
        v.count[c] += 1
    if v.n_hops[k] == 0:
        return False, _soonest(v)
    if alone:  # what the filling gives a component of one flow, without the walk
        v.rate[k] = _narrowest(v, k)
        v.end[k] = now + max(volume, 0.0) / v.rate[k]
    else:
        _reshare(v, v.hops[k, :v.n_hops[k]].copy(), now)
    return True, _soonest(v)


@njit(cache=True)
def finish_flows(now, floats, ints):
    """:meth:`FlowTable.finish` on the table's arrays, returning (how many ended, the first of
    them or -1, re-rated, soonest); :meth:`FlowTable.done` lists them."""
    v = _views(floats, ints)
    done, end, touched, ended = v.done, v.end, v.touched, v.touched_list
    # Due by now within a rounding: waiting for a remainder that rounding left would stall
    # time (a tick too small to move the clock).
    limit = now * (1 + 1e-9) + 1e-15
    n = 0
    for i in range(v.header[4]):
        k = v.active[i]
        if end[k] <= limit:
            done[n] = k
            n += 1
    tie = v.tie
    for i in range(1, n):  # by (end, tie): few at a time
        k = done[i]
        j = i - 1
        while j >= 0 and (end[done[j]] > end[k] or (end[done[j]] == end[k]
                                                      and tie[done[j]] > tie[k])):
            done[j + 1] = done[j]
            j -= 1
        done[j + 1] = k
    n_ended = 0
    for i in range(n):
        k = done[i]
        for h in range(v.n_hops[k]):
            c = v.hops[k, h]
            _leave(v, c, k)
            if not touched[c]:
                touched[c] = True
                ended[n_ended] = c
                n_ended += 1
        last = v.active[v.header[4] - 1]
        v.active[v.where[k]] = last
        v.where[last] = v.where[k]
        v.where[k] = -1
        v.header[4] -= 1
        end[k] = _INF
    shared = False
    for i in range(n_ended):
        touched[ended[i]] = False
        shared = shared or v.count[ended[i]] > 0
    if shared:
        _reshare(v, ended[:n_ended].copy(), now)
    return n, done[0] if n else -1, shared, _soonest(v)


@njit(cache=True)
def _narrowest(v, k):
    r = v.capacity[v.hops[k, 0]]
    for h in range(1, v.n_hops[k]):
        r = min(r, v.capacity[v.hops[k, h]])
    return r


@njit(cache=True)
def _leave(v, c, k):
    """Take flow ``k`` off channel ``c``, keeping the others in the order they started."""
    members, start, stop = v.members, v.offset[c], v.offset[c] + v.count[c]
    i = start
    while members[i] != k:
        i += 1
    for j in range(i, stop - 1):
        members[j] = members[j + 1]
    v.count[c] -= 1


@njit(cache=True)
def _reshare(v, seeds, now):
    """Settle the component of ``seeds`` at its old rates, fill it anew, foresee its ends."""
    n_flows, n_seen = _component(v, seeds)
    comp, new_rate, rate, remaining, settled = v.comp, v.new_rate, v.rate, v.remaining, v.settled
    if n_flows == 1:  # alone: its narrowest channel (capacity / 1, as filling has it)
        new_rate[comp[0]] = _narrowest(v, comp[0])
    else:
        _fill(v, n_flows)
    for i in range(n_flows):
        k = comp[i]
        remaining[k] -= rate[k] * (now - settled[k])
        settled[k] = now
        rate[k] = new_rate[k]
        v.end[k] = now + max(remaining[k], 0.0) / new_rate[k]
        v.in_comp[k] = 0
    for i in range(n_seen):
        v.seen[v.seen_list[i]] = 0


@njit(cache=True)
def _component(v, seeds):
    """The active flows linked to ``seeds`` through shared channels, into ``comp`` in the
    order a depth-first walk (last seed first) meets them; the channels seen into
    ``seen_list``."""
    seen, stack, seen_list, in_comp, comp = v.seen, v.stack, v.seen_list, v.in_comp, v.comp
    top = 0
    for c in seeds:
        seen[c] = 1
        stack[top] = c
        seen_list[top] = c
        top += 1
    n_seen, n_flows = top, 0
    while top:
        top -= 1
        c = stack[top]
        for j in range(v.offset[c], v.offset[c] + v.count[c]):
            k = v.members[j]
            if in_comp[k]:
                continue
            in_comp[k] = 1
            comp[n_flows] = k
            n_flows += 1
            for h in range(v.n_hops[k]):
                d = v.hops[k, h]
                if not seen[d]:
                    seen[d] = 1
                    stack[top] = d
                    top += 1
                    seen_list[n_seen] = d
                    n_seen += 1
    return n_flows, n_seen


@njit(cache=True)
def _fill(v, n_flows):
    """Progressive filling over ``comp[:n_flows]`` (whole components): the channel with the
    smallest fair share (the first seen on a tie) fixes the rate of its flows; take them off
    their channels and repeat."""
    hops, n_hops, comp, rank, by_rank = v.hops, v.n_hops, v.comp, v.rank, v.by_rank
    left, unrated, shares, ranks = v.left, v.unrated, v.heap_share, v.heap_rank
    n_ranks = 0
    for i in range(n_flows):
        k = comp[i]
        for h in range(n_hops[k]):
            c = hops[k, h]
            if rank[c] < 0:
                rank[c] = n_ranks
                by_rank[n_ranks] = c
                n_ranks += 1
    # The bottleneck is the open channel (flows left to rate) of smallest (share, rank): found
    # by a scan of the open channels when they are few, else from a heap of (share, rank)
    # entries pushed whenever a share changes, stale ones skipped. Both pick the same one.
    scan = n_ranks <= v.header[5]
    size = 0
    for r in range(n_ranks):
        c = by_rank[r]
        left[c] = v.capacity[c]
        unrated[c] = v.count[c]
        if scan:  # ranks lists the open channels, shares holds each rank's share
            ranks[r] = r
            shares[r] = left[c] / unrated[c]
        else:
            size = _push(shares, ranks, size, left[c] / unrated[c], r)
    n_open, n_rated = n_ranks, 0
    while n_rated < n_flows:
        if scan:
            share, at, i = _INF, -1, 0
            while i < n_open:
                r = ranks[i]
                if unrated[by_rank[r]] == 0:  # closed: drop it from the scan
                    n_open -= 1
                    ranks[i] = ranks[n_open]
                    continue
                if at < 0 or shares[r] < share or (shares[r] == share and r < ranks[at]):
                    share, at = shares[r], i
                i += 1
            c = by_rank[ranks[at]]
        else:
            share, r = shares[0], ranks[0]
            size = _pop(shares, ranks, size)
            c = by_rank[r]
            if unrated[c] == 0 or share != left[c] / unrated[c]:
                continue  # stale: the channel's share changed after this entry
        n_rated += _rate_channel(v, c, share)
        for i in range(v.header[6]):  # the channels this turn touched
            d = v.touched_list[i]
            v.touched[d] = 0
            if not unrated[d]:
                continue
            if scan:
                shares[rank[d]] = left[d] / unrated[d]
            else:
                size = _push(shares, ranks, size, left[d] / unrated[d], rank[d])
    for i in range(n_flows):
        v.rated[comp[i]] = 0
    for r in range(n_ranks):
        rank[by_rank[r]] = -1


@njit(cache=True)
def _rate_channel(v, c, share):
    """Give ``share`` to channel ``c``'s flows not yet rated and take it off their channels;
    the channels touched go to ``touched_list[:header[6]]``. Returns how many were rated."""
    n_rated = n_touched = 0
    for j in range(v.offset[c], v.offset[c] + v.count[c]):
        k = v.members[j]
        if v.rated[k]:
            continue
        v.rated[k] = 1
        v.new_rate[k] = share
        n_rated += 1
        for h in range(v.n_hops[k]):
            d = v.hops[k, h]
            v.left[d] -= share
            v.unrated[d] -= 1
            if not v.touched[d]:
                v.touched[d] = 1
                v.touched_list[n_touched] = d
                n_touched += 1
    v.header[6] = n_touched
    return n_rated


@njit(cache=True)
def _fill_all(floats, ints):
    """Every flow started at once and filled in index order."""
    v = _views(floats, ints)
    for k in range(len(v.n_hops)):
        v.comp[k] = k
        for h in range(v.n_hops[k]):
            c = v.hops[k, h]
            v.members[v.offset[c] + v.count[c]] = k
            v.count[c] += 1
    _fill(v, len(v.n_hops))


@njit(cache=True)
def _before(share_a, rank_a, share_b, rank_b):
    return share_a < share_b or (share_a == share_b and rank_a < rank_b)


@njit(cache=True)
def _push(shares, ranks, size, share, rank):
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if not _before(share, rank, shares[parent], ranks[parent]):
            break
        shares[i], ranks[i] = shares[parent], ranks[parent]
        i = parent
    shares[i], ranks[i] = share, rank
    return size + 1


@njit(cache=True)
def _pop(shares, ranks, size):
    size -= 1
    share, rank = shares[size], ranks[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and _before(shares[child + 1], ranks[child + 1], shares[child],
                                        ranks[child]):
            child += 1
        if not _before(shares[child], ranks[child], share, rank):
            break
        shares[i], ranks[i] = shares[child], ranks[child]
        i = child
    if size:
        shares[i], ranks[i] = share, rank
    return size
