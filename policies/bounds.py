"""Lower bounds on the makespan of any plan of a graph on a cluster.

* :func:`critical_path_bound`: the longest path when every op runs on its fastest device and
  communication is free.
* :func:`work_bound`: the work of every op at its fastest, spread evenly over every compute
  stream of the cluster.
* :func:`relaxation_bound`: a linear program that couples the two and adds communication:
  each op split over the kinds of device (a fraction on each, its time the mix of
  theirs; the ops of a co-placement group split alike), every path of the graph and every
  kind's load within the makespan, and a tensor whose producer and reader sit on different
  kinds arriving no sooner than its fastest transfer. Tighter on heterogeneous clusters
  (where the fastest device cannot run everything at once), dearer to compute (an LP of
  ops x kinds + edges x kinds rows; a tenth of a second to a few tenths at 600-1,000 ops
  on four devices).

All hold for the simulator's model: an op never runs faster than on its fastest device,
never before its producers end (and a tensor from another device has arrived), and a stream
runs one op at a time. Each op is priced at its least time on each device
(:func:`least_times`): a collective at 0, since the simulator runs the steps it lowers to;
a cost model that prices an op by where the others run gives the least of the contexts it
can tell apart (:meth:`hwmodels.cost.CostModel.least_op_times`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.problem import times_by_device
from workloads.graph import Graph

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["critical_path_bound", "fastest_times", "least_times", "lower_bound",
           "relaxation_bound", "work_bound"]

#: What the LP's answer is reduced by (relative) so that the solver's tolerances never lift
#: it above a makespan that can be reached.
LP_SLACK = 1e-6


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
    a = graph.arrays
    fastest = times.tolist()
    finish = [0.0] * len(a.names)
    preds: list[list[int]] = [[] for _ in a.names]
    for src, dst in zip(a.edge_src.tolist(), a.edge_dst.tolist(), strict=True):
        preds[dst].append(src)
    for i in range(len(a.names)):  # arrays order is topological
        finish[i] = fastest[i] + max((finish[p] for p in preds[i]), default=0.0)
    return max(finish, default=0.0)


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


def relaxation_bound(graph: Graph, cluster: Cluster, cost: CostModel) -> float:
    """The least makespan of the linear relaxation of placing and ordering ``graph``: no
    plan's simulated makespan is shorter, and it is at least :func:`lower_bound`.

    Devices that run every op alike, with as many streams, form a class. Op ``i`` is
    spread over the classes that can run it (fractions ``x[i, k]`` summing to one), taking
    ``sum_k x[i, k] t[i, k]``; the ops of a co-placement group share one set of
    fractions, over the classes that can run each of them; an op starts after each
    producer ends, plus, for an edge, the fastest transfer of its tensor between any two
    devices times ``z >= x[src, k] - x[dst, k]`` (every class); every op ends by the
    makespan ``T``, and each class's share of the work fits in ``T`` times its compute
    streams. Every plan's run is one solution (its ops' times, starts and classes: ``z``
    is 1 only where an edge's ends sit in different classes, so on different devices; a
    group's ops all in its device's class), so ``T`` is a lower bound. A homogeneous
    cluster is one class, and the bound is :func:`lower_bound` there.
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
    times, crossing = times / unit, crossing / unit
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
