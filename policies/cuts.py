"""Graph-cut policies: METIS k-way partitioning, Kernighan-Lin and spectral recursive
bisection, and Stone's two-processor min-cut assignment.

They decide placement only; the Plan orders each device topologically (by upward rank).
Vertex weight is an op's mean time, edge weight the bytes its tensors carry; part sizes
follow device speed where the method allows it. A co-placement group is one vertex (its
lead) carrying the work and the edges of all its ops.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping

import networkx as nx
import numpy as np
import pymetis
import scipy.sparse as sp
from scipy.sparse.csgraph import laplacian
from scipy.sparse.linalg import eigsh

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from policies.base import Param, PlacementPolicy, Seed, make_rng, register_policy, seed_int
from policies.load import ClusterLoad
from policies.plans import Placement
from policies.problem import Problem
from workloads.graph import Graph

__all__ = ["KernighanLin", "Metis", "Spectral", "StoneMinCut"]


def _edges(p: Problem) -> dict[tuple[int, int], int]:
    """Undirected pairs of vertices (ops, a group as its lead) and the bytes between them."""
    weights: dict[tuple[int, int], int] = {}
    node = p.node_of
    for j in range(p.n):
        for i, t in p.preds[j]:
            a, b = node[i], node[j]
            if a != b:
                key = (min(a, b), max(a, b))
                weights[key] = weights.get(key, 0) + p.tensor_bytes[t]
    return weights


def _finish(p: Problem, parts: list[int]) -> Placement:
    """Placement from parts (read at each vertex), moving any vertex its part's device
    cannot run to the fastest device that can; priorities are upward ranks."""
    where = list(parts)
    for i in p.units():
        if not np.isfinite(p.times[i, where[i]]):
            where[i] = int(np.argmin(p.node_times[i]))
    where = p.follow_leads(where)
    rank = p.upward_rank()
    return Placement({p.names[i]: p.devices[d] for i, d in enumerate(where)},
                     priority={p.names[i]: r for i, r in enumerate(rank)})


@register_policy
class Metis(PlacementPolicy):
    """k-way METIS (pymetis): minimise the bytes cut with part weights proportional to
    device speed. ``seed`` fixes METIS's randomisation."""

    name = "metis"

    params = (Param("seed", "seed", 0, doc="fixes the random draws"),)

    def __init__(self, seed: Seed = 0) -> None:
        self.seed = self.checked("seed", seed)

    load_aware = True

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        return self._partition(Problem(graph, cluster, cost))

    def place_under_load(self, graph: Graph, cluster: Cluster, cost: CostModel,
                         load: ClusterLoad) -> Placement:
        """Part sizes that let every device finish together after the work others queued
        on it (:func:`targets`); a device already busy past that gets no part."""
        return self._partition(Problem(graph, cluster, cost, load))

    def _partition(self, p: Problem) -> Placement:
        n_dev = len(p.devices)
        weights = _edges(p)
        vertices = p.units()
        if n_dev == 1 or len(vertices) <= n_dev or not weights:
            return _finish(p, _balance(p))
        index = {op: k for k, op in enumerate(vertices)}
        adjacency: list[list[tuple[int, int]]] = [[] for _ in vertices]
        top = max(weights.values())
        for (i, j), w in weights.items():
            scaled = max(1, round(w / top * 10_000))
            adjacency[index[i]].append((index[j], scaled))
            adjacency[index[j]].append((index[i], scaled))
        xadj, adjncy, ew = [0], [], []
        for row in adjacency:
            adjncy += [j for j, _ in row]
            ew += [w for _, w in row]
            xadj.append(len(adjncy))
        work = p.node_work[vertices]
        vw = np.maximum(1, np.round(work / max(work.max(), 1e-300) * 100_000)).astype(int)
        share = targets(p)
        used = np.flatnonzero(share > 0)  # METIS takes no empty target
        where = [int(used[0])] * p.n
        if len(used) > 1:
            options = pymetis.Options(seed=-1 if self.seed is None else seed_int(self.seed))
            graph_csr = pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy)
            with _c_output_to_stderr():
                _, parts = pymetis.part_graph(len(used), graph_csr, vweights=vw.tolist(),
                                              eweights=ew, tpwgts=share[used].tolist(),
                                              options=options)
            for op, part in zip(vertices, parts, strict=True):
                where[op] = int(used[part])
        return _finish(p, where)


@contextlib.contextmanager
def _c_output_to_stderr() -> Iterator[None]:
    """What C code prints to standard output meanwhile goes to standard error: METIS
    prints notes there ("Cannot bisect a graph with 0 vertices!" where it leaves a part
    empty, its partition still valid), which would break a command's JSON on standard
    output. C's buffer is flushed before the output is put back, so nothing printed
    meanwhile lands on standard output later. The descriptor is the process's: one thread
    at a time redirects it (a lock), and what another thread writes to standard output
    meanwhile (the partitioning takes milliseconds) goes to standard error too."""
    flush = _c_flush()
    with _REDIRECTING:
        if sys.stdout is not None:
            sys.stdout.flush()
        flush()
        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            yield
        finally:
            flush()
            os.dup2(saved, 1)
            os.close(saved)


def _c_flush() -> Callable[[], None]:
    """Flushes C's output buffers (``fflush(NULL)``) where the process's C library can be
    loaded by name ``None`` (POSIX); elsewhere (Windows) nothing: the redirection still
    holds, only what C buffered may land after it."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):
        return lambda: None
    return lambda: libc.fflush(None)


#: Held while standard output is redirected (:func:`_c_output_to_stderr`).
_REDIRECTING = threading.Lock()


def targets(p: Problem) -> np.ndarray:
    """Each device's share of the work: with speeds ``s`` and queued seconds ``b``, the
    shares ``s (T - b) / W`` under which every device finishes at the same time ``T``
    (water filling; a device busy past ``T`` gets none). Without load: ``s / sum(s)``.

    ``W`` is the work in seconds on the slowest device (speed 1), so
    ``T = (W + sum s b) / sum s`` over the devices that get a share.
    """
    speed, busy = p.speed, np.asarray(p.busy, dtype=float)
    work = float(np.where(np.isinf(p.times), 0.0, p.times).sum(axis=0).max())
    if work <= 0:
        return speed / speed.sum()
    use = np.ones(len(speed), dtype=bool)
    while True:
        finish = (work + (speed * busy)[use].sum()) / speed[use].sum()
        share = np.where(use, speed * np.maximum(finish - busy, 0.0), 0.0)
        if (share[use] > 0).all():
            return share / share.sum()
        use &= share > 0


def _balance(p: Problem) -> list[int]:
    """Longest op first onto the device that would finish it earliest (no edges to cut)."""
    load = np.asarray(p.busy, dtype=float)
    parts = [0] * p.n
    for i in np.argsort(-p.node_work, kind="stable").tolist():
        if p.node_of[i] == i:
            d = int(np.argmin(load + p.node_times[i]))
            parts[i] = d
            load[d] += p.node_times[i, d]
    return parts


class _Bisection(PlacementPolicy):
    """Recursive bisection: split the ops in two, the devices in two, and recurse."""

    @abstractmethod
    def split(self, p: Problem, edges: Mapping[tuple[int, int], int], ops: list[int],
              fraction: float) -> tuple[list[int], list[int]]:
        """The ops of the first devices (about ``fraction`` of the work) and the rest;
        ``edges`` holds the bytes between op pairs."""

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        parts = [0] * p.n
        self._recurse(p, _edges(p), p.units(), list(range(len(p.devices))), parts)
        return _finish(p, parts)

    def _recurse(self, p: Problem, edges: Mapping[tuple[int, int], int], ops: list[int],
                 devices: list[int], parts: list[int]) -> None:
        if len(devices) == 1 or len(ops) < 2:
            for op in ops:
                parts[op] = devices[0]
            return
        half = len(devices) // 2
        first, second = devices[:half], devices[half:]
        fraction = float(p.speed[first].sum() / p.speed[devices].sum())
        left, right = self.split(p, edges, ops, fraction)
        self._recurse(p, edges, left, first, parts)
        self._recurse(p, edges, right, second, parts)


@register_policy
class KernighanLin(_Bisection):
    """Recursive Kernighan-Lin bisection (networkx) of the byte-weighted op graph; halves
    are equal in op count, as the method makes them. ``seed`` fixes its start."""

    name = "kernighan_lin"

    params = (Param("seed", "seed", 0, doc="fixes the random draws"),)

    def __init__(self, seed: Seed = 0) -> None:
        self.seed = self.checked("seed", seed)

    def split(self, p: Problem, edges: Mapping[tuple[int, int], int], ops: list[int],
              fraction: float) -> tuple[list[int], list[int]]:
        g = nx.Graph()
        g.add_nodes_from(ops)
        inside = set(ops)
        g.add_weighted_edges_from((i, j, w) for (i, j), w in edges.items()
                                  if i in inside and j in inside)
        seed = None if self.seed is None else seed_int(self.seed)
        a, b = nx.algorithms.community.kernighan_lin_bisection(g, weight="weight", seed=seed)
        return sorted(a), sorted(b)


@register_policy
class Spectral(_Bisection):
    """Recursive spectral bisection: order ops by the Fiedler vector of the byte-weighted
    Laplacian (scipy) and cut where the first half holds its devices' share of the work.
    ``seed`` fixes ARPACK's start vector on graphs too large for a dense solve."""

    name = "spectral"

    params = (Param("seed", "seed", 0, doc="fixes the random draws"),)

    def __init__(self, seed: Seed = 0) -> None:
        self.seed = self.checked("seed", seed)

    def split(self, p: Problem, edges: Mapping[tuple[int, int], int], ops: list[int],
              fraction: float) -> tuple[list[int], list[int]]:
        index = {op: k for k, op in enumerate(ops)}
        rows, cols, vals = [], [], []
        for (i, j), w in edges.items():
            if i in index and j in index:
                rows += [index[i], index[j]]
                cols += [index[j], index[i]]
                vals += [float(w), float(w)]
        m = len(ops)
        if not vals:
            order = list(range(m))
        else:
            a = sp.csr_matrix((np.asarray(vals) / max(vals), (rows, cols)), shape=(m, m))
            lap = laplacian(a)
            if m <= 400:
                _, vecs = np.linalg.eigh(lap.toarray())
            else:  # a fixed start vector: ARPACK's default is random
                start = make_rng(self.seed).random(m)
                _, vecs = eigsh(lap, k=2, sigma=-1e-3, which="LM", v0=start)
            fiedler = vecs[:, 1]
            pivot = fiedler[np.argmax(np.abs(fiedler) > 1e-12)]
            fiedler = fiedler * (1.0 if pivot >= 0 else -1.0)  # eigenvectors have no sign
            order = np.lexsort((np.arange(m), np.round(fiedler, 9))).tolist()
        work = p.node_work[[ops[k] for k in order]]
        cut = int(np.searchsorted(np.cumsum(work), fraction * work.sum()))
        cut = min(max(cut, 1), m - 1)
        left = sorted(ops[k] for k in order[:cut])
        right = sorted(ops[k] for k in order[cut:])
        return left, right


@register_policy
class StoneMinCut(PlacementPolicy):
    """Stone (IEEE TSE 1977): the assignment to two processors minimising total compute plus
    communication time is a minimum s-t cut (networkx max-flow). Exact for that objective.
    On a cluster of more than two devices it uses the first CPU and the fastest other
    device (a CPU + accelerator pair), or the two fastest devices if there is no CPU."""

    name = "stone_mincut"

    def place(self, graph: Graph, cluster: Cluster, cost: CostModel) -> Placement:
        p = Problem(graph, cluster, cost)
        if len(p.devices) == 1:
            return _finish(p, [0] * p.n)
        a, b = self.pair(p, cluster)
        g = nx.DiGraph()
        times = p.node_times
        for i in p.units():
            # s side = device a: cutting s->i puts i on b, cutting i->t puts i on a.
            if np.isfinite(times[i, b]):
                g.add_edge("s", i, capacity=float(times[i, b]))
            else:
                g.add_edge("s", i)  # no capacity: infinite, i cannot go to b
            if np.isfinite(times[i, a]):
                g.add_edge(i, "t", capacity=float(times[i, a]))
            else:
                g.add_edge(i, "t")
        for j in range(p.n):
            for i, t in p.preds[j]:
                u0, v0 = p.node_of[i], p.node_of[j]
                if u0 == v0:
                    continue
                c = (p.comm(t, a, b) + p.comm(t, b, a)) / 2
                for u, v in ((u0, v0), (v0, u0)):
                    old = g.get_edge_data(u, v, {}).get("capacity", 0.0)
                    g.add_edge(u, v, capacity=old + c)
        _, (side_a, _) = nx.minimum_cut(g, "s", "t")
        return _finish(p, [a if i in side_a else b for i in range(p.n)])

    @staticmethod
    def pair(p: Problem, cluster: Cluster) -> tuple[int, int]:
        fastest = np.argsort(-p.speed, kind="stable").tolist()
        cpus = [i for i, d in enumerate(cluster.devices) if d.kind == "cpu"]
        if cpus:
            other = next(i for i in fastest if i != cpus[0])
            return cpus[0], other
        return fastest[0], fastest[1]
