"""Lower bounds on the makespan of any plan of a graph on a cluster.

* :func:`critical_path_bound`: the longest path when every op runs on its fastest device and
  communication is free.
* :func:`work_bound`: the work of every op at its fastest, spread evenly over every compute
  stream of the cluster.
* :func:`relaxation_bound`: a linear program that couples the two and adds communication:
  each op split over the kinds of device (a fraction on each, its time the mix of
  theirs; the ops of a co-placement group split alike), every path of the graph and every
  kind's load within the makespan, and within the windows the critical path leaves for
  the ops that fork from it and join it again, and a tensor whose producer and reader sit
  on different kinds arriving no sooner than its fastest transfer. Tighter on
  heterogeneous clusters (where the fastest device cannot run everything at once), dearer
  to compute (an LP of ops x kinds + edges x kinds + windows x kinds rows; a few tenths
  of a second to a second at 600-1,000 ops on four devices).
* :func:`segment_bound`: transfers priced on the path that sets the critical path bound:
  that path cut into segments, each the least time, found by an exact mixed-integer
  program over every device, from one op of the path ending to a later one ending, with
  every op between them (descendant of the one, ancestor of the other) placed and
  ordered, its transfers paid; the segments summed, the first from the path's start.
  Tighter where the path's fork-joins cannot spread without transfers (on identical
  devices, where the others count their branches' work only once it exceeds the
  devices' streams), dearest of the three (a program of up to ``ops`` ops per segment:
  tens of seconds at 800 ops on four devices).

All hold for the simulator's model: an op never runs faster than on its fastest device,
never before its producers end (and a tensor from another device has arrived), and a stream
runs one op at a time. Each op is priced at its least time on each device
(:func:`least_times`): a collective at 0, since the simulator runs the steps it lowers to;
a cost model that prices an op by where the others run gives the least of the contexts it
can tell apart (:meth:`hwmodels.cost.CostModel.least_op_times`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.problem import times_by_device
from workloads.graph import Graph

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["SEGMENT_NODES", "SEGMENT_OPS", "critical_path_bound", "fastest_times",
           "least_times", "lower_bound", "relaxation_bound", "segment_bound", "work_bound"]

#: What the LP's answer is reduced by (relative) so that the solver's tolerances never lift
#: it above a makespan that can be reached.
LP_SLACK = 1e-6
#: :func:`segment_bound`'s ops per segment at most, and branch-and-bound nodes per segment
#: (beyond which the solver's proven bound on the segment is taken).
SEGMENT_OPS, SEGMENT_NODES = 24, 2000
#: What a segment's least time (in units of its program's horizon) is reduced by, so that the
#: solver's integrality and feasibility tolerances never lift it above a reachable one.
MILP_SLACK = 1e-5

#: The most path ops apart two ends of a window of :func:`relaxation_bound` are (an
#: Inception-v3 module's branches join up to 16 ops down its longest path).
WINDOW_SPAN = 16


def least_times(graph: Graph, cluster: Cluster, cost: CostModel) -> np.ndarray:
    """Each op's least time on each device (ops x devices, ``graph.arrays`` order): the
    cost model's :meth:`~hwmodels.cost.CostModel.least_op_times`, infinite where it cannot
    price the op on the device, and 0 for a collective op, which the simulator runs as the
    steps and transfers it lowers to (:func:`policies.collectives.lower`).

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("workstation")
    >>> least_times(build_model("mlp"), c, RooflineCost(c)).shape
    (7, 2)
    """
    a = graph.arrays
    times = times_by_device(graph, cluster, cost, lambda d: cost.least_op_times(graph, d))
    if graph.collectives:
        times[[a.position[name] for name in graph.collectives]] = 0.0
    return times


def fastest_times(graph: Graph, cluster: Cluster, cost: CostModel) -> np.ndarray:
    """Each op's time on its fastest device, in ``graph.arrays`` order (see
    :func:`least_times`)."""
    return np.asarray(least_times(graph, cluster, cost).min(axis=1))


def critical_path_bound(graph: Graph, cluster: Cluster, cost: CostModel) -> float:
    """Longest path of fastest op times, communication free.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> g, cost = build_model("mlp"), RooflineCost(c)  # a chain: the sum of its ops
    >>> fastest = sum(min(cost.op_time(op, d) for d in c.device_names) for op in g)
    >>> critical_path_bound(g, c, cost) == fastest
    True
    """
    return _critical_path(graph, fastest_times(graph, cluster, cost))


def _critical_path(graph: Graph, times: np.ndarray) -> float:
    """The longest path of these op times (``graph.arrays`` order), communication free."""
    return max(_longest_paths(graph, times)[0], default=0.0)


def _longest_paths(graph: Graph, times: np.ndarray) -> tuple[list[float], list[int]]:
    """Each op's end on the longest path of these op times (``graph.arrays`` order) that
    ends with it, and its predecessor on that path (the first of the latest; -1 for none)."""
    a = graph.arrays
    fastest = times.tolist()
    finish = [0.0] * len(a.names)
    before = [-1] * len(a.names)
    preds: list[list[int]] = [[] for _ in a.names]
    for src, dst in zip(a.edge_src.tolist(), a.edge_dst.tolist(), strict=True):
        preds[dst].append(src)
    for i in range(len(a.names)):  # arrays order is topological
        for p in preds[i]:
            if before[i] < 0 or finish[p] > finish[before[i]]:
                before[i] = p
        finish[i] = fastest[i] + (finish[before[i]] if before[i] >= 0 else 0.0)
    return finish, before


def work_bound(graph: Graph, cluster: Cluster, cost: CostModel) -> float:
    """Total fastest work over the number of compute streams in the cluster."""
    return _work(cluster, fastest_times(graph, cluster, cost))


def _work(cluster: Cluster, times: np.ndarray) -> float:
    """These op times' total over the number of compute streams in the cluster."""
    streams = sum(d.compute_streams for d in cluster.devices)
    return float(times.sum()) / streams


def lower_bound(graph: Graph, cluster: Cluster, cost: CostModel) -> float:
    """The larger of :func:`critical_path_bound` and :func:`work_bound`."""
    return _floor(graph, cluster, fastest_times(graph, cluster, cost))


def _floor(graph: Graph, cluster: Cluster, fastest: np.ndarray) -> float:
    """:func:`lower_bound` from each op's time on its fastest device."""
    return max(_critical_path(graph, fastest), _work(cluster, fastest))


def relaxation_bound(graph: Graph, cluster: Cluster, cost: CostModel, *,
                     windows: bool = True) -> float:
    """The least makespan of the linear relaxation of placing and ordering ``graph``: no
    plan's simulated makespan is shorter, and it is at least :func:`lower_bound`.

    Devices that run every op alike, with as many streams, form a class. Op ``i`` is
    spread over the classes that can run it (fractions ``x[i, k]`` summing to one), taking
    ``sum_k x[i, k] t[i, k]``; the ops of a co-placement group share one set of
    fractions, over the classes that can run each of them; an op starts after each
    producer ends, plus, for an edge, the fastest transfer of its tensor between any two
    devices times ``z >= x[src, k] - x[dst, k]`` (every class); every op ends by the
    makespan ``T``, and each class's share of the work fits in ``T`` times its compute
    streams. So does its share of the ops of a window, in the window's time: the ops
    between two ops of the longest path of fastest times (descendants of the one,
    ancestors of the other, at most :data:`WINDOW_SPAN` path ops apart) between the one's
    end and the other's start, a path op's ancestors before its start, its descendants
    between its end and ``T`` (a window between two path ops that adds only a path op to
    the one a path op narrower is left out: it follows from that one). Every plan's run
    is one solution (its ops' times, starts and classes: ``z`` is 1 only where an edge's
    ends sit in different classes, so on different devices; a group's ops all in its
    device's class; a window's ops run in it), so ``T`` is a lower bound. A homogeneous
    cluster is one class: there only a window's work beyond its streams lifts the bound
    above :func:`lower_bound` (a fork of four 1 s ops between two on two devices: 4
    against 3). The windows make the program about ten times slower to solve (5.8 s
    against 0.4 s on a 2,700-op Adam step on two kinds of device, growing about as the
    square of the ops): ``windows=False`` leaves them out.
    Solved by HiGHS (``scipy.optimize.linprog``), less a relative :data:`LP_SLACK`.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads import build_model, training_graph
    >>> c = get_cluster("workstation")  # a Xeon and an L4 on PCIe
    >>> g, cost = training_graph(build_model("resnet50", batch=8), "adam"), RooflineCost(c)
    >>> relaxation_bound(g, c, cost) / lower_bound(g, c, cost) > 1.01
    True
    """
    import scipy.sparse as sp  # scipy's solver only where the relaxation is asked for
    from scipy.optimize import linprog

    times = least_times(graph, cluster, cost)
    floor = _floor(graph, cluster, times.min(axis=1))
    a = graph.arrays
    n = len(a.names)
    if n == 0:
        return floor
    crossing = _fastest_crossings(graph, cluster, cost)
    # in units of the floor (T near 1), or of the longest crossing where ops take no time
    unit = floor if floor > 0 else float(crossing.max(initial=0.0))
    if unit <= 0:
        return floor
    with np.errstate(over="ignore"):
        times, crossing = times / unit, crossing / unit
    if not np.isfinite(crossing).all():  # a transfer past what a float holds in these units
        return floor  # (a subnormal op time): no program to solve
    times, streams = _device_classes(cluster, times)
    n_dev = len(streams)
    able = np.isfinite(times)
    t = np.where(able, times, 0.0)
    src, dst, e = a.edge_src, a.edge_dst, len(a.edge_src)
    # columns: x[i, k] (i * n_dev + k: op i's share on device class k), start[i], z[edge], T
    start, z, makespan = n * n_dev, n * n_dev + n, n * n_dev + n + e
    rows = _Rows()
    # the ops of a co-placement group share one device in every plan: one set of shares
    share_of = _group_representatives(graph)
    x_cols = share_of[:, None] * n_dev + np.arange(n_dev)  # ops x classes
    able = _group_able(share_of, able)
    # an edge's reader starts after its producer's end and, apart, the crossing
    rows.add(np.repeat(np.arange(e), n_dev), x_cols[src].ravel(), t[src].ravel())
    rows.add(np.arange(e), start + src, np.ones(e))
    rows.add(np.arange(e), start + dst, -np.ones(e))
    rows.add(np.arange(e), z + np.arange(e), crossing)
    rows.close(e)
    # every op ends by T
    rows.add(np.repeat(np.arange(n), n_dev), x_cols.ravel(), t.ravel())
    rows.add(np.arange(n), start + np.arange(n), np.ones(n))
    rows.add(np.arange(n), np.full(n, makespan), -np.ones(n))
    rows.close(n)
    # each class's work within T times its streams
    rows.add(np.tile(np.arange(n_dev), n), x_cols.ravel(), t.ravel())
    rows.add(np.arange(n_dev), np.full(n_dev, makespan), -streams)
    rows.close(n_dev)
    # z[edge] >= x[src, k] - x[dst, k] on every class
    pair = np.arange(e * n_dev)
    rows.add(pair, x_cols[src].ravel(), np.ones(e * n_dev))
    rows.add(pair, x_cols[dst].ravel(), -np.ones(e * n_dev))
    rows.add(pair, z + np.repeat(np.arange(e), n_dev), -np.ones(e * n_dev))
    rows.close(e * n_dev)
    n_vars = makespan + 1
    if windows:
        path = _path(*_longest_paths(graph, times.min(axis=1)))
        n_vars = _window_rows(rows, graph, path, x_cols, t, streams, start, makespan)
    reps = np.unique(share_of)
    spread = sp.csr_matrix((np.ones(len(reps) * n_dev),
                            (np.repeat(np.arange(len(reps)), n_dev), x_cols[reps].ravel())),
                           shape=(len(reps), n_vars))
    upper = np.full(n_vars, np.inf)
    upper[:start] = np.where(able.ravel(), 1.0, 0.0)  # no share where it cannot run
    objective = np.zeros(n_vars)
    objective[makespan] = 1.0
    res = linprog(objective, A_ub=rows.matrix(n_vars), b_ub=np.zeros(rows.count),
                  A_eq=spread, b_eq=np.ones(len(reps)),
                  bounds=np.column_stack((np.zeros(n_vars), upper)), method="highs")
    if res.status != 0:  # feasible and bounded by design; HiGHS refuses programs scaled
        return floor     # past about 1e15 (a transfer that long against the floor)
    return max(floor, float(res.fun) * unit * (1 - LP_SLACK))


def segment_bound(graph: Graph, cluster: Cluster, cost: CostModel, *, ops: int = SEGMENT_OPS,
                  node_limit: int = SEGMENT_NODES) -> float:
    """A lower bound that pays for the transfers of the critical path's fork-joins, and at
    least :func:`lower_bound`.

    Take the longest path of fastest op times (the one :func:`critical_path_bound` gives),
    from its first op ``p0`` to its last. Cut it at ops ``c0 = p0, c1, ...``, each segment
    holding at most ``ops`` ops *between* its ends (descendants of ``c[k]`` that are
    ancestors of ``c[k+1]``, ``c[k+1]`` itself included) and ending, of the path's ops
    within that limit, at the one fewest ops are concurrent with (the furthest on a tie),
    so that a fork-join is cut as seldom as the limit allows. Every such op starts after
    ``c[k]`` ends and ends before ``c[k+1]`` does, so in any plan ``c[k+1]`` ends at least
    the least time in which those ops can run after ``c[k]`` ends: each at its least time
    on the device it is given, a device's ops one at a time (per stream: a device of more
    than one stream keeps none apart), a tensor crossing between devices arriving no sooner
    than its transfer without contention (:meth:`hwmodels.cost.CostModel.tensor_transfer_time`;
    free into and out of a collective op, which the simulator lowers to transfers of its
    own), a co-placement group's ops on one device. Inputs from outside the segment are
    taken as there at its start, on every device, and no other work holds a device: both
    only lower it. That least time is a mixed-integer program
    (:class:`policies.optimal.Schedules`, HiGHS) solved to its proven bound within
    ``node_limit`` nodes; a segment of more than ``ops`` ops between two consecutive ops
    of the path counts that step's critical path time. The bound is the segments' sum, the
    first counting ``p0``'s own time too (it starts the path, at 0 at the earliest). The
    program grows with the square of the devices (a crossing variable for each edge and
    ordered pair of devices): the bound is meant for clusters of a few devices.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from workloads.zoo.sequence import bert_base
    >>> c = get_cluster("quad-v100-nvlink")  # four V100s on NVLink
    >>> g, cost = bert_base(batch=8, layers=2), RooflineCost(c)
    >>> segment_bound(g, c, cost, ops=12) / lower_bound(g, c, cost) > 1.05
    True
    """
    if ops < 1:
        raise ValueError(f"segment_bound: ops must be at least 1, got {ops}")
    times = least_times(graph, cluster, cost)
    fastest = times.min(axis=1)
    floor = _floor(graph, cluster, fastest)
    if len(fastest) == 0 or len(cluster.devices) < 2:
        return floor
    edges = _Edges(graph, cluster, cost, times)
    finish, before = _longest_paths(graph, fastest)
    path = _path(finish, before)
    total, k = finish[path[0]], 0
    while k < len(path) - 1:
        end, between = edges.segment(path, k, ops)
        step = finish[path[end]] - finish[path[k]]
        if len(between) <= ops:  # the path's first op starts at 0: its time counts there
            least = edges.least_time(path[k], between, node_limit, counted=k == 0)
            step = max(step, least - (total if k == 0 else 0.0))
        total, k = total + step, end
    return max(floor, total)


class _Edges:
    """A graph's edges into each op and each op's ancestors and descendants
    (``graph.arrays`` positions, :func:`_closures`), for :func:`segment_bound`."""

    def __init__(self, graph: Graph, cluster: Cluster, cost: CostModel,
                 times: np.ndarray) -> None:
        a = graph.arrays
        self.graph, self.cluster, self.cost, self.times = graph, cluster, cost, times
        n = len(a.names)
        self.preds: list[list[int]] = [[] for _ in range(n)]
        for e, dst in enumerate(a.edge_dst.tolist()):
            self.preds[dst].append(e)
        self.src, self.dst = a.edge_src.tolist(), a.edge_dst.tolist()
        self.anc, self.desc = _closures(graph)
        self.free = np.zeros(n, bool)  # collectives: their transfers are their own
        self.free[[a.position[name] for name in graph.collectives]] = True

    def between(self, first: int, last: int) -> set[int]:
        """The descendants of op ``first`` that are ancestors of op ``last``, with it."""
        return set(_bits(self.desc[first] & (self.anc[last] | 1 << last)))

    def segment(self, path: list[int], k: int, ops: int) -> tuple[int, set[int]]:
        """The segment from ``path[k]`` and the ops between its ends: of the ends with at
        most ``ops`` ops between, the one fewest ops of the window are concurrent with
        (neither between ``path[k]`` and it nor its descendants, of the ops between
        ``path[k]`` and the first end past the limit, or the path's last op), the furthest
        on a tie: a cut inside a fork-join would leave the join's other branches out of
        both segments. A step of more than ``ops`` ops between is a segment alone."""
        ends = [(k + 1, self.between(path[k], path[k + 1]))]
        window = ends[0][1]
        for j in range(k + 2, len(path)):
            window = self.between(path[k], path[j])
            if len(window) > ops:
                break
            ends.append((j, window))
        if len(ends[0][1]) > ops:
            return ends[0]

        def concurrent(end: tuple[int, set[int]]) -> int:
            return len(window - end[1] - self.below(path[end[0]], window))

        return min(reversed(ends), key=concurrent)

    def below(self, op: int, within: set[int]) -> set[int]:
        """The descendants of ``op`` in ``within`` (the ops between two others, so every
        path from ``op`` to one of them stays within)."""
        return {j for j in within if self.desc[op] >> j & 1}

    def least_time(self, first: int, between: set[int], node_limit: int,
                   counted: bool = False) -> float:
        """The least time from op ``first`` ending (``counted``: starting) to the last of
        ``between`` ending (see :func:`segment_bound`): the program's proven bound, less
        :data:`MILP_SLACK`."""
        from policies.optimal import Schedules  # HiGHS's MILP only where asked for

        members = [first, *sorted(between)]
        local = {op: i for i, op in enumerate(members)}
        times = self.times[members].copy()
        if not counted:  # done: it only sends
            times[0] = np.where(np.isfinite(times[0]), 0.0, np.inf)
        edges = [(local[self.src[e]], local[v], self._crossing(e))
                 for v in members[1:] for e in self.preds[v] if self.src[e] in local]
        leader: dict[int, int] = {}  # each group's first member here leads it
        lead = [leader.setdefault(g, i) if g >= 0 else i
                for i, g in enumerate(self.graph.group_index[members].tolist())]
        overlap = np.array([d.compute_streams > 1 for d in self.cluster.devices])
        model = Schedules(times, edges, lead, overlap)
        dual = getattr(model.solve(node_limit), "mip_dual_bound", None)
        if dual is None or not np.isfinite(dual):
            return 0.0
        return max(0.0, (float(dual) - MILP_SLACK) * model.scale)

    def _crossing(self, e: int) -> np.ndarray:
        """Edge ``e``'s tensor's transfer time between each pair of devices."""
        names = self.cluster.device_names
        out = np.zeros((len(names), len(names)))
        if self.free[self.src[e]] or self.free[self.dst[e]]:
            return out
        a = self.graph.arrays
        tensor = int(a.edge_tensor[e])
        for d, f in itertools.permutations(range(len(names)), 2):
            out[d, f] = self.cost.tensor_transfer_time(
                a.tensor_names[tensor], int(a.tensor_bytes[tensor]), names[d], names[f])
        return out


def _path(finish: list[float], before: list[int]) -> list[int]:
    """The longest path (the first of the longest) from :func:`_longest_paths`' answer,
    its first op first."""
    path = [max(range(len(finish)), key=finish.__getitem__)]
    while before[path[-1]] >= 0:
        path.append(before[path[-1]])
    return path[::-1]


def _window_rows(rows: _Rows, graph: Graph, path: list[int], x_cols: np.ndarray,
                 t: np.ndarray, streams: np.ndarray, start: int, makespan: int) -> int:
    """Add :func:`relaxation_bound`'s windows to ``rows``: ``x_cols`` the shares' columns
    (ops x classes), ``start`` the first start column, ``makespan`` the makespan's column.
    The loads of the ops before and after each path op (per class) are columns of their
    own after ``makespan``, each the nearer path op's plus the ops it adds, so the rows
    hold each op once per class and side. Returns the number of columns in all."""
    n_dev = len(streams)
    anc, desc = _closures(graph)
    for first, last, inside in _windows(anc, desc, path, WINDOW_SPAN):
        for k in range(n_dev):  # inside's load <= streams * (start[last] - end[first])
            rows.row([*x_cols[inside, k], start + last, start + first, *x_cols[first]],
                     [*t[inside, k], -streams[k], streams[k], *(streams[k] * t[first])])
    heads, tails = makespan + 1, makespan + 1 + len(path) * n_dev
    for j, op in enumerate(path):
        ancestors = _bits(anc[op] & ~(anc[path[j - 1]] if j else 0))  # new since the last
        descendants = _bits(desc[op] & ~(desc[path[j + 1]] if j + 1 < len(path) else 0))
        for k in range(n_dev):
            head, tail = heads + j * n_dev + k, tails + j * n_dev + k
            # each load at least the nearer one's (none at the path's ends) and its ops'
            rows.row([*x_cols[ancestors, k], head, *([head - n_dev] if j else [])],
                     [*t[ancestors, k], -1.0, *([1.0] if j else [])])
            final = j + 1 == len(path)
            rows.row([*x_cols[descendants, k], tail, *([] if final else [tail + n_dev])],
                     [*t[descendants, k], -1.0, *([] if final else [1.0])])
            # the ops before op fit before its start; those after it, after its end
            rows.row([head, start + op], [1.0, -streams[k]])
            rows.row([tail, makespan, start + op, *x_cols[op]],
                     [1.0, -streams[k], streams[k], *(streams[k] * t[op])])
    return tails + len(path) * n_dev


def _closures(graph: Graph) -> tuple[list[int], list[int]]:
    """Each op's ancestors and descendants (``graph.arrays`` positions) as bit sets (a
    quarter of the ops squared in bytes: 25 MB at 10,000 ops)."""
    a = graph.arrays
    n = len(a.names)
    anc, desc = [0] * n, [0] * n  # each op's producers and readers first
    for src, dst in zip(a.edge_src.tolist(), a.edge_dst.tolist(), strict=True):
        anc[dst] |= 1 << src
        desc[src] |= 1 << dst
    for i in range(n):  # positions are topological: each closes over closed ones
        for j in _bits(anc[i]):
            anc[i] |= anc[j]
    for i in reversed(range(n)):
        for j in _bits(desc[i]):
            desc[i] |= desc[j]
    return anc, desc


def _windows(anc: list[int], desc: list[int], path: list[int], span: int,
             ) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(first, last, ops)``: path ops at most ``span`` apart and the ops between them
    (descendants of the one, ancestors of the other), where these hold an op off the path
    that the window one path op narrower lacks (else its load follows from that one's and
    the path op's own time; a chain of path ops alone, from precedence)."""
    on_path = sum(1 << op for op in path)
    for i, first in enumerate(path):
        narrower = 0
        for last in path[i + 1:i + 1 + span]:
            ops = desc[first] & anc[last]
            grown, narrower = ops & ~narrower & ~on_path, ops
            if grown:
                yield first, last, np.array(_bits(ops))


def _bits(bits: int) -> list[int]:
    """The positions of a bit set's ones, lowest first."""
    out = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def _group_representatives(graph: Graph) -> np.ndarray:
    """Each op's representative (``graph.arrays`` order): the first op of its
    co-placement group, or itself."""
    rep = np.arange(len(graph.arrays.names))
    group = graph.group_index
    grouped = group >= 0
    first = np.full(len(graph.groups), len(rep))  # arrays order is topological
    np.minimum.at(first, group[grouped], rep[grouped])
    rep[grouped] = first[group[grouped]]
    return rep


def _group_able(share_of: np.ndarray, able: np.ndarray) -> np.ndarray:
    """``able`` (ops x classes) with each op able only where every op of its group is."""
    every = np.ones_like(able)
    np.logical_and.at(every, share_of, able)
    return every[share_of]


def _device_classes(cluster: Cluster, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Devices that run every op in the same time with as many streams, merged into
    classes: each class's op times (ops x classes) and its streams in all."""
    streams = [d.compute_streams for d in cluster.devices]
    classes: dict[tuple[int, bytes], list[int]] = {}
    for k, s in enumerate(streams):
        classes.setdefault((s, times[:, k].tobytes()), []).append(k)
    ks = [members[0] for members in classes.values()]
    return times[:, ks], np.array([len(m) * streams[m[0]] for m in classes.values()], float)


class _Rows:
    """A sparse matrix built from blocks of (row, column, value) triples, row blocks
    closed in turn."""

    def __init__(self) -> None:
        self.count = 0
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> None:
        self.parts.append((rows + self.count, cols, values))

    def close(self, rows: int) -> None:
        self.count += rows

    def row(self, cols: list[int], values: list[float]) -> None:
        """One row of its own, closed."""
        self.add(np.zeros(len(cols), int), np.array(cols, int), np.array(values, float))
        self.close(1)

    def matrix(self, n_vars: int) -> sp.csr_matrix:
        import scipy.sparse as sp

        r, c, v = (np.concatenate(x) for x in zip(*self.parts, strict=True))
        return sp.csr_matrix((v, (r, c)), shape=(self.count, n_vars))


def _fastest_crossings(graph: Graph, cluster: Cluster, cost: CostModel) -> np.ndarray:
    """Per edge of ``graph.arrays``, the least time its tensor takes between any two
    distinct devices (0 on a cluster of one, and into or out of a collective op)."""
    a = graph.arrays
    names = cluster.device_names
    pairs = [(s, d) for s in names for d in names if s != d]
    if not pairs or not len(a.edge_tensor):
        return np.zeros(len(a.edge_tensor))
    by_size = (type(cost).tensor_transfer_time is CostModel.tensor_transfer_time
               and type(cost).transfer_time is CostModel.transfer_time)
    if by_size:  # latency + bytes / bottleneck bandwidth on each pair's route
        latency = np.array([cluster.latency(s, d) for s, d in pairs])
        bandwidth = np.array([cluster.bandwidth(s, d) for s, d in pairs])
        sizes, back = np.unique(a.tensor_bytes[a.edge_tensor], return_inverse=True)
        least = (latency[None, :] + sizes[:, None] / bandwidth[None, :]).min(axis=1)
    else:
        tensors, back = np.unique(a.edge_tensor, return_inverse=True)
        least = np.array([min(cost.tensor_transfer_time(a.tensor_names[k],
                                                        int(a.tensor_bytes[k]), s, d)
                              for s, d in pairs) for k in tensors.tolist()])
    crossing = least[back]
    if graph.collectives:  # a collective's members hold its tensors: no transfer is owed
        member = np.zeros(len(a.names), bool)
        member[[a.position[name] for name in graph.collectives]] = True
        crossing[member[a.edge_src] | member[a.edge_dst]] = 0.0
    return crossing
