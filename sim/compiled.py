"""The simulator's event loop, compiled, for plan order with the built-in link models
(``fcfs``, ``none``, ``fair``), one job, no shared hosts.

:class:`sim.engine.Simulation` runs any composition of parts with a Python callback per
event; for the compositions nearly every run uses (the defaults of :func:`sim.simulate` and
of a search's evaluator, and fair links) this module runs the same events in compiled code
(numba). It is the same model operation for operation, so every time, engine, peak and
memory record equals the Python loop's to the bit: events are due at ``now + delay`` and
those due at the same time run in the order they were scheduled (the heap's key is time and
sequence number, as :class:`sim.events.EventQueue`'s); streams are taken from the end of a
device's free list; a transfer takes its source's first copy engine that frees soonest
(``fcfs``) or waits in its source's queue for an engine, then for its route's latency,
while its flow's rate comes from the fair model's own compiled filling (:mod:`sim.flows`,
ticks booked as :class:`sim.links.FairSharing` books them); an op sends its transfers in
the order :attr:`policies.plans.Plan.transfers` lists them.
``tests/sim/test_compiled.py`` checks every column against the Python loop on random plans.

The loop reads what a graph fixes (:class:`GraphColumns`: its edges, tensors, routes) and,
of a plan (:class:`PlanInputs`), each op's device and time, each device's order and the
transfer each edge that crosses devices reads; the rest it works out as it goes. A
transfer's number names a (tensor, destination) pair for every plan of the graph that
:class:`sim.slots.Slots` has laid out, so a run's state means the same under each. A run's
whole state lives in :class:`State`'s arrays and :func:`advance` runs a given number of
events: a copy of the state taken between two calls resumes later from there (what
:mod:`sim.delta` snapshots).

The module imports numba; :mod:`sim.engine` imports it on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from sim.flows import _views, finish_flows, start_flow

__all__ = ["FairInputs", "GraphColumns", "PlanInputs", "State", "advance", "begin", "new_state",
           "start_refs"]


@dataclass(frozen=True, eq=False)
class GraphColumns:
    """What one graph on one cluster fixes for the loop (integers int64). Edges are
    indexed as in ``graph.arrays`` (grouped by reader: ``in_off``); ``out_edges`` lists
    each op's out-edges (CSR by ``out_off``) in the order :attr:`Plan.transfers` meets
    them."""

    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_tensor: np.ndarray
    in_off: np.ndarray
    out_edges: np.ndarray
    out_off: np.ndarray
    own_off: np.ndarray        #: each op's output tensors (consecutive; CSR)
    producer: np.ndarray       #: per tensor
    tensor_bytes: np.ndarray
    alloc: np.ndarray
    workspace: np.ndarray
    in_degree: np.ndarray
    param_bytes: np.ndarray
    streams: np.ndarray
    copy_engines: np.ndarray
    capacity: np.ndarray


@dataclass(frozen=True, eq=False)
class PlanInputs:
    """What the loop reads of one plan: each op's device index and seconds, each device's
    order (op positions, laid end to end: CSR by ``order_off``), and its transfers: the
    one each edge reads (``edge_k``, -1 for an edge within a device), and per transfer
    number its tensor, destination, seconds and route (``k_duration``, ``k_route``: those
    of this plan's transfers), a route's channels being ``route`` (CSR by ``route_off``)
    among ``n_channels``. Keys name a tensor's copies: tensor ``t`` on its producer's
    device is ``t``, the copy transfer ``k`` brings is ``n_tensors + k`` (``key_bytes``:
    each key's bytes)."""

    op_dev: np.ndarray
    op_time: np.ndarray
    order: np.ndarray
    order_off: np.ndarray
    edge_k: np.ndarray
    k_tensor: np.ndarray
    k_dst: np.ndarray
    k_duration: np.ndarray
    k_route: np.ndarray
    route: np.ndarray
    route_off: np.ndarray
    n_channels: int
    key_bytes: np.ndarray


@dataclass(frozen=True, eq=False)
class FairInputs:
    """What the ``fair`` link model adds (:class:`sim.links.FairSharing`, whose flows are
    :class:`sim.flows.FlowTable`): the table's two arrays, the flow of each transfer number
    and the number of each flow, and per flow its latency and the bytes that then flow."""

    floats: np.ndarray
    ints: np.ndarray
    flow_of: np.ndarray
    number_of: np.ndarray
    latency: np.ndarray
    volume: np.ndarray


#: The arrays a run without fair links passes in their place (one type for the loop).
_NO_FAIR = FairInputs(np.zeros(1), np.zeros(1, np.int64), np.zeros(1, np.int64),
                      np.zeros(1, np.int64), np.zeros(1), np.zeros(1))


@dataclass(eq=False)
class State:
    """Everything a run changes. ``clock`` is (now, latest end so far); ``count`` is (next
    sequence number, events in the heap, memory records written, events run); the heap
    holds each event's time, sequence number and subject (an op ``i`` as ``i``, a transfer
    ``k`` as ``-1 - k``); ``over`` is the first overflow (device, op or -1, transfer or -1,
    bytes; device -1 while none, -2 if memory ran out before the first event) and
    ``over_at`` its time; ``log`` the memory record as (time, device, bytes) rows, kept
    only where it has rows; ``mark`` is scratch, all zero between events. Per transfer
    number: ``t_start``, ``t_end``, ``t_engine``, ``mark``; per key: ``refs``. Under fair
    links ``clock`` also holds the earliest foreseen end of a flow."""

    clock: np.ndarray
    count: np.ndarray
    heap_t: np.ndarray
    heap_s: np.ndarray
    heap_x: np.ndarray
    nxt: np.ndarray
    free: np.ndarray
    n_free: np.ndarray
    copy_free: np.ndarray
    link_free: np.ndarray
    used: np.ndarray
    peak: np.ndarray
    pending: np.ndarray
    refs: np.ndarray
    start: np.ndarray
    stream: np.ndarray
    t_start: np.ndarray
    t_end: np.ndarray
    t_engine: np.ndarray
    over: np.ndarray
    over_at: np.ndarray
    log: np.ndarray
    mark: np.ndarray
    free_eng: np.ndarray    #: fair links: each device's free copy engines (a stack)
    n_free_eng: np.ndarray
    wait_next: np.ndarray   #: fair links: each source's transfers waiting for an engine
    wait_ends: np.ndarray   #: (first, last) per device, -1 where none waits
    booked: np.ndarray      #: fair links: the ticks booked (a heap of times)
    todo: np.ndarray        #: fair links: the transfers the last tick ended, in order
    fair_count: np.ndarray  #: ticks booked, ended transfers done, ended, tick to book



def start_refs(g: GraphColumns, p: PlanInputs) -> np.ndarray:
    """What holds each key at the start of ``p``'s run: each reader of the copy it reads,
    and on its producer's device each transfer of the tensor."""
    refs = np.zeros(len(p.key_bytes), np.int64)
    _start_refs(g.edge_tensor, p.edge_k, len(g.producer), refs)
    return refs


def new_state(g: GraphColumns, p: PlanInputs, refs: np.ndarray, resident: np.ndarray, *,
              overflowed: bool, record: bool) -> State:
    """A run's state before its first event: ``refs`` holders per key (:func:`start_refs`),
    ``resident`` bytes per device; ``record``: keep the memory record."""
    n_dev, n, m = len(g.streams), len(p.op_dev), len(p.k_tensor)
    free = np.zeros((n_dev, max(int(g.streams.max(initial=1)), 1)), np.int64)
    copy_free = np.full((n_dev, max(int(g.copy_engines.max(initial=1)), 1)), np.inf)
    for d in range(n_dev):
        s = int(g.streams[d])
        free[d, :s] = np.arange(s - 1, -1, -1)  # popped from the end: stream 0 first
        copy_free[d, :int(g.copy_engines[d])] = 0.0
    rows = (n_dev + 3 * n + len(p.key_bytes) + len(g.edge_src) + 2 * m) if record else 0
    engines = int(g.copy_engines.max(initial=1))
    free_eng = np.zeros((n_dev, max(engines, 1)), np.int64)
    for d in range(n_dev):
        e = int(g.copy_engines[d])
        free_eng[d, :e] = np.arange(e - 1, -1, -1)  # popped from the end: engine 0 first
    return State(
        clock=np.array([0.0, 0.0, np.inf]), count=np.zeros(4, np.int64),
        heap_t=np.zeros(n + m + 1), heap_s=np.zeros(n + m + 1, np.int64),
        heap_x=np.zeros(n + m + 1, np.int64),
        nxt=p.order_off[:-1].copy(), free=free, n_free=g.streams.copy(), copy_free=copy_free,
        link_free=np.zeros(p.n_channels), used=np.asarray(resident, np.int64).copy(),
        peak=np.asarray(resident, np.int64).copy(), pending=g.in_degree.copy(), refs=refs,
        start=np.zeros(n), stream=np.zeros(n, np.int64), t_start=np.zeros(m),
        t_end=np.zeros(m), t_engine=np.zeros(m, np.int64),
        over=np.array([-2 if overflowed else -1, -1, -1, 0], np.int64), over_at=np.zeros(1),
        log=np.zeros((rows, 3)), mark=np.zeros(m, np.int8), free_eng=free_eng,
        n_free_eng=g.copy_engines.copy(), wait_next=np.full(m, -1, np.int64),
        wait_ends=np.full((n_dev, 2), -1, np.int64), booked=np.zeros(m + 1),
        todo=np.zeros(m + 1, np.int64), fair_count=np.zeros(4, np.int64))


def begin(g: GraphColumns, p: PlanInputs, s: State, contention: bool,
          fair: FairInputs | None = None) -> None:
    """Log the start and start what may start at time 0."""
    _advance(*_args(g, p, s, contention, fair, 0, True))


def advance(g: GraphColumns, p: PlanInputs, s: State, contention: bool, events: int,
            fair: FairInputs | None = None) -> int:
    """Run up to ``events`` more events (``fair`` links given ``fair``, else ``fcfs`` links
    if ``contention``, else ``none``); how many ran (fewer only at the run's end).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from sim.slots import Slots
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> slots = Slots(build_model("mlp"), c, RooflineCost(c))
    >>> p = slots.inputs(plan(slots.graph, c, "round_robin"))
    >>> s = slots.state(p, record=False)
    >>> begin(slots.columns, p, s, True)
    >>> advance(slots.columns, p, s, True, 5), int(s.count[1]) > 0  # five events, more to come
    (5, True)
    >>> advance(slots.columns, p, s, True, 10**9) > 0, int(s.count[1])  # the rest
    (True, 0)
    >>> bool((s.nxt == p.order_off[1:]).all())  # every op ran
    True
    """
    return int(_advance(*_args(g, p, s, contention, fair, events, False)))


def _args(g: GraphColumns, p: PlanInputs, s: State, contention: bool,
          fair: FairInputs | None, events: int, starting: bool) -> tuple[object, ...]:
    f = _NO_FAIR if fair is None else fair
    return (g.edge_src, g.edge_dst, g.edge_tensor, g.in_off, g.out_edges, g.out_off,
            g.own_off, g.producer, g.tensor_bytes, g.alloc, g.workspace, p.route,
            p.route_off, g.capacity, p.op_dev, p.op_time, p.order, p.order_off, p.edge_k,
            p.k_tensor, p.k_dst, p.k_duration, p.k_route, p.key_bytes, contention,
            fair is not None, f.floats, f.ints, f.flow_of, f.number_of, f.latency, f.volume,
            s.free_eng, s.n_free_eng, s.wait_next, s.wait_ends, s.booked, s.todo,
            s.fair_count, s.clock, s.count, s.heap_t, s.heap_s, s.heap_x, s.nxt, s.free, s.n_free,
            s.copy_free, s.link_free, s.used, s.peak, s.pending, s.refs, s.start, s.stream,
            s.t_start, s.t_end, s.t_engine, s.over, s.over_at, s.log, s.mark, events,
            starting)


# -- compiled ------------------------------------------------------------------------------

@njit(cache=True)
def _start_refs(edge_tensor, edge_k, n_tensors, refs):
    for e in range(len(edge_tensor)):
        t = edge_tensor[e]
        k = edge_k[e]
        if k < 0:
            refs[t] += 1
        else:
            if refs[n_tensors + k] == 0:
                refs[t] += 1  # the transfer holds the source's copy
            refs[n_tensors + k] += 1


@njit(cache=True)
def _push(heap_t, heap_s, heap_x, count, t, x):
    """Schedule ``x`` at ``t`` with the next sequence number (a binary heap on (t, seq))."""
    seq = count[0]
    count[0] = seq + 1
    i = count[1]
    count[1] = i + 1
    while i > 0:
        parent = (i - 1) // 2
        pt = heap_t[parent]
        if pt < t or (pt == t and heap_s[parent] < seq):
            break
        heap_t[i], heap_s[i], heap_x[i] = pt, heap_s[parent], heap_x[parent]
        i = parent
    heap_t[i], heap_s[i], heap_x[i] = t, seq, x


@njit(cache=True)
def _pop(heap_t, heap_s, heap_x, count):
    """The earliest event (time, subject), taken off the heap."""
    t, x = heap_t[0], heap_x[0]
    size = count[1] - 1
    count[1] = size
    if size > 0:
        lt, ls, lx = heap_t[size], heap_s[size], heap_x[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            right = child + 1
            if right < size and (heap_t[right] < heap_t[child] or (
                    heap_t[right] == heap_t[child] and heap_s[right] < heap_s[child])):
                child = right
            ct = heap_t[child]
            if lt < ct or (lt == ct and ls < heap_s[child]):
                break
            heap_t[i], heap_s[i], heap_x[i] = ct, heap_s[child], heap_x[child]
            i = child
        heap_t[i], heap_s[i], heap_x[i] = lt, ls, lx
    return t, x


@njit(cache=True)
def _log(log, count, now, d, u):
    """One memory record, where the run keeps them."""
    n = count[2]
    if n < log.shape[0]:
        log[n, 0] = now
        log[n, 1] = d
        log[n, 2] = u
        count[2] = n + 1


@njit(cache=True)
def _grow(d, u, op, k, now, peak, capacity, over, over_at):
    """Device ``d`` holds ``u`` bytes: a new peak; the first past its capacity is the
    overflow."""
    if u > peak[d]:
        peak[d] = u
        if u > capacity[d] and over[0] == -1:
            over[0], over[1], over[2], over[3] = d, op, k, u
            over_at[0] = now


@njit(cache=True)
def _begin(k, src, clock, count, heap_t, heap_s, heap_x, flow_of, f_latency, free_eng,
           n_free_eng, t_start, t_engine):
    """Fair links: transfer ``k`` takes a copy engine of ``src`` and waits out its route's
    latency."""
    n_free_eng[src] -= 1
    t_engine[k] = free_eng[src, n_free_eng[src]]
    t_start[k] = clock[0]
    _push(heap_t, heap_s, heap_x, count, clock[0] + f_latency[flow_of[k]], -1 - k)


@njit(cache=True)
def _free_engine(k, clock, count, heap_t, heap_s, heap_x, op_dev, producer, k_tensor,
                 flow_of, f_latency, free_eng, n_free_eng, wait_next, wait_ends, t_start,
                 t_end, t_engine):
    """Fair links: transfer ``k`` has arrived; its engine goes to the first transfer waiting
    at its source."""
    now = clock[0]
    t_end[k] = now
    if now > clock[1]:
        clock[1] = now
    src = op_dev[producer[k_tensor[k]]]
    free_eng[src, n_free_eng[src]] = t_engine[k]
    n_free_eng[src] += 1
    first = wait_ends[src, 0]
    if first >= 0:
        wait_ends[src, 0] = wait_next[first]
        if wait_ends[src, 0] < 0:
            wait_ends[src, 1] = -1
        _begin(first, src, clock, count, heap_t, heap_s, heap_x, flow_of, f_latency,
               free_eng, n_free_eng, t_start, t_engine)


@njit(cache=True)
def _book_tick(clock, count, heap_t, heap_s, heap_x, booked, fair_count, tick):
    """Fair links: a tick at the earliest foreseen end unless one is booked by then."""
    soonest = clock[2]
    if soonest < np.inf and (fair_count[0] == 0 or soonest < booked[0]):
        i = fair_count[0]
        fair_count[0] = i + 1
        while i > 0 and booked[(i - 1) // 2] > soonest:
            booked[i] = booked[(i - 1) // 2]
            i = (i - 1) // 2
        booked[i] = soonest
        _push(heap_t, heap_s, heap_x, count, clock[0] + (soonest - clock[0]), tick)


@njit(cache=True)
def _pop_booked(booked, fair_count):
    """Fair links: the earliest booked tick is firing."""
    size = fair_count[0] - 1
    fair_count[0] = size
    last = booked[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and booked[child + 1] < booked[child]:
            child += 1
        if last <= booked[child]:
            break
        booked[i] = booked[child]
        i = child
    if size > 0:
        booked[i] = last


@njit(cache=True)
def _advance(edge_src, edge_dst, edge_tensor, in_off, out_edges, out_off, own_off, producer,
             tensor_bytes, alloc, workspace, route, route_off, capacity, op_dev, op_time,
             order, order_off, edge_k, k_tensor, k_dst, k_duration, k_route, key_bytes,
             contention, fair, f_floats, f_ints, flow_of, number_of, f_latency, f_volume,
             free_eng, n_free_eng, wait_next, wait_ends, booked, todo, fair_count,
             clock, count, heap_t,
             heap_s, heap_x, nxt, free, n_free, copy_free, link_free, used, peak, pending,
             refs, start, stream, t_start, t_end, t_engine, over, over_at, log, mark, events,
             starting):
    """Run up to ``events`` events (``starting``: first log the start and start what may
    start at time 0). One function, its helpers taking few arrays: a call that passes
    many arrays costs a reference count each, more than the event's own work."""
    n_dev = len(used)
    n_tensors = len(producer)
    if starting:
        for d in range(n_dev):
            _log(log, count, 0.0, d, used[d])
    first = n_dev if starting else 0  # devices to start before the first event
    tick = -1 - len(k_tensor)  # the fair model's tick: a subject no transfer has
    ran = 0
    while True:
        d = -1
        arrived = -1  # a transfer whose copy is now on its destination
        if first > 0:
            d = n_dev - first
            first -= 1
        elif fair_count[1] < fair_count[2]:  # the flows the last tick ended, in order
            arrived = todo[fair_count[1]]
            fair_count[1] += 1
            _free_engine(arrived, clock, count, heap_t, heap_s, heap_x, op_dev, producer,
                         k_tensor, flow_of, f_latency, free_eng, n_free_eng, wait_next,
                         wait_ends, t_start, t_end, t_engine)
        elif fair_count[3]:  # then the next tick
            fair_count[3] = 0
            _book_tick(clock, count, heap_t, heap_s, heap_x, booked, fair_count, tick)
        elif ran < events and count[1] > 0:
            now, x = _pop(heap_t, heap_s, heap_x, count)
            clock[0] = now
            ran += 1
            if x >= 0:  # op x ends
                d = op_dev[x]
                free[d, n_free[d]] = stream[x]
                n_free[d] += 1
                w = workspace[x]
                if w:
                    used[d] -= w
                    _log(log, count, now, d, used[d])
                for e in range(in_off[x], in_off[x + 1]):  # the copies it read
                    key = edge_tensor[e] if edge_k[e] < 0 else n_tensors + edge_k[e]
                    refs[key] -= 1
                    if refs[key] == 0:
                        used[d] -= key_bytes[key]
                        _log(log, count, now, d, used[d])
                for t in range(own_off[x], own_off[x + 1]):  # outputs nobody holds
                    if refs[t] == 0:
                        used[d] -= key_bytes[t]
                        _log(log, count, now, d, used[d])
                for j in range(out_off[x], out_off[x + 1]):
                    e = out_edges[j]
                    k = edge_k[e]
                    if k < 0:  # a reader here
                        pending[edge_dst[e]] -= 1
                        continue
                    dst = k_dst[k]
                    if mark[k]:
                        continue  # sent already, to an earlier reader there
                    mark[k] = 1
                    if fair:  # hold its bytes on the destination, then wait for an engine
                        u = used[dst] + tensor_bytes[edge_tensor[e]]
                        used[dst] = u
                        _log(log, count, now, dst, u)
                        _grow(dst, u, -1, k, now, peak, capacity, over, over_at)
                        if n_free_eng[d] > 0:
                            _begin(k, d, clock, count, heap_t, heap_s, heap_x, flow_of,
                                   f_latency, free_eng, n_free_eng, t_start, t_engine)
                        else:  # first come first served: last in its source's queue
                            if wait_ends[d, 1] >= 0:
                                wait_next[wait_ends[d, 1]] = k
                            else:
                                wait_ends[d, 0] = k
                            wait_ends[d, 1] = k
                            wait_next[k] = -1
                        continue
                    # transfer k's tensor is ready: book its copy engine and channels
                    # (fcfs) or nothing (none), hold its bytes on the destination
                    duration = k_duration[k]
                    engine = 0
                    begin = now
                    if contention:
                        begin = copy_free[d, 0]
                        for c in range(1, copy_free.shape[1]):  # unused: +inf, never first
                            if copy_free[d, c] < begin:
                                begin, engine = copy_free[d, c], c
                        pair = k_route[k]
                        for h in range(route_off[pair], route_off[pair + 1]):
                            if link_free[route[h]] > begin:
                                begin = link_free[route[h]]
                        if now > begin:
                            begin = now
                        end = begin + duration
                        copy_free[d, engine] = end
                        for h in range(route_off[pair], route_off[pair + 1]):
                            link_free[route[h]] = end
                    else:
                        end = now + duration
                    t_start[k], t_end[k], t_engine[k] = begin, end, engine
                    if end > clock[1]:
                        clock[1] = end
                    u = used[dst] + tensor_bytes[edge_tensor[e]]
                    used[dst] = u
                    _log(log, count, now, dst, u)
                    _grow(dst, u, -1, k, now, peak, capacity, over, over_at)
                    _push(heap_t, heap_s, heap_x, count, now + (end - now), -1 - k)
                for j in range(out_off[x], out_off[x + 1]):
                    if edge_k[out_edges[j]] >= 0:
                        mark[edge_k[out_edges[j]]] = 0
            elif not fair:  # transfer -1 - x arrives
                arrived = -1 - x
            elif x == tick:  # flows may be due
                _pop_booked(booked, fair_count)
                if clock[2] <= now * (1 + 1e-9) + 1e-15:  # due within a rounding of now
                    n, _, _, soonest = finish_flows(now, f_floats, f_ints)
                    clock[2] = soonest
                    ended = _views(f_floats, f_ints).done
                    for i in range(n):
                        todo[i] = number_of[ended[i]]
                    fair_count[1], fair_count[2], fair_count[3] = 0, n, 1
                else:
                    _book_tick(clock, count, heap_t, heap_s, heap_x, booked, fair_count, tick)
            else:  # transfer -1 - x's latency is over: its bytes flow
                k = -1 - x
                f = flow_of[k]
                if f_volume[f] <= 0.0:
                    arrived = k
                    _free_engine(k, clock, count, heap_t, heap_s, heap_x, op_dev, producer,
                                 k_tensor, flow_of, f_latency, free_eng, n_free_eng,
                                 wait_next, wait_ends, t_start, t_end, t_engine)
                else:
                    _, soonest = start_flow(f, f_volume[f], now, f_floats, f_ints)
                    clock[2] = soonest
                    _book_tick(clock, count, heap_t, heap_s, heap_x, booked, fair_count, tick)
        else:
            break
        if arrived >= 0:  # free its source copy, wake its readers
            now = clock[0]
            t, d = k_tensor[arrived], k_dst[arrived]
            src = op_dev[producer[t]]
            refs[t] -= 1
            if refs[t] == 0:
                used[src] -= key_bytes[t]
                _log(log, count, now, src, used[src])
            made = producer[t]
            for j in range(out_off[made], out_off[made + 1]):
                if edge_k[out_edges[j]] == arrived:
                    pending[edge_dst[out_edges[j]]] -= 1
        if d < 0:
            continue
        # start device d's next ops in plan order while a stream is free and the next
        # op's inputs are there
        now = clock[0]
        i = nxt[d]
        last = order_off[d + 1]
        while n_free[d] > 0 and i < last and pending[order[i]] == 0:
            op = order[i]
            n_free[d] -= 1
            a = alloc[op]
            if a:
                u = used[d] + a
                used[d] = u
                _log(log, count, now, d, u)
                _grow(d, u, op, -1, now, peak, capacity, over, over_at)
            start[op] = now
            stream[op] = free[d, n_free[d]]
            end = now + op_time[op]
            if end > clock[1]:
                clock[1] = end
            _push(heap_t, heap_s, heap_x, count, end, op)
            i += 1
        nxt[d] = i
    count[3] += ran
    return ran
