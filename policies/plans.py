"""The :class:`Plan`: what a policy decided, in the form both executors take.

A plan holds the graph, the device of every op, the order of ops on each device and the
transfers that cross devices. It is validated on construction (every op placed once, the
ops of each co-placement group on one device, each device order consistent with the
dependencies, no cross-device deadlock) and against a cluster with :meth:`Plan.validate`.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from hwmodels.spec import Cluster
from workloads.collect import gc_paused
from workloads.errors import PlacementError
from workloads.graph import Graph

__all__ = ["Placement", "Plan", "Transfer", "order_by_priority", "priorities_from_order",
           "split_by_device"]

FORMAT = "placelab.plan"
VERSION = 1


@dataclass(frozen=True)
class Transfer:
    """One tensor copied from the producer's device to a consumer's device.

    A tensor read by several ops on one remote device crosses once.
    """

    name: str
    tensor: str
    nbytes: int
    src: str
    dst: str
    producer: str
    consumers: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "tensor": self.tensor, "nbytes": self.nbytes,
                "src": self.src, "dst": self.dst, "producer": self.producer,
                "consumers": list(self.consumers)}


@dataclass(frozen=True)
class Placement:
    """What a policy proposes: op -> device, and optionally an order and priorities.

    Without ``order``, :func:`policies.plan` orders each device by ``priority`` (higher
    first) within a topological order.
    """

    devices: Mapping[str, str]
    order: Mapping[str, Sequence[str]] | None = None
    priority: Mapping[str, float] | None = None
    #: The policy's own prediction of the makespan (list schedulers have one), if any.
    estimated_makespan_s: float | None = None
    #: Anything else the policy reports (a solver's status and gap, ...): JSON values.
    info: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class _Sequenced:
    """The arrays a plan was made from (:meth:`Plan.from_sequence`): the devices used, in
    order of first use along ``sequence``; each op's device as an index into them; the
    global order's op positions; and each device's order as op positions (empty for a
    device given but unused)."""

    used: tuple[str, ...]
    codes: np.ndarray
    sequence: np.ndarray
    positions: dict[str, np.ndarray]

    @classmethod
    def of(cls, graph: Graph, devices: tuple[str, ...], codes: np.ndarray,
           sequence: np.ndarray) -> _Sequenced | None:
        """The arrays, where they make a plan the constructor would take: ``codes`` a
        device for each op, ``sequence`` each op once with every edge going forward, each
        co-placement group on one device, no collectives (None otherwise). Indices in range
        (:func:`_out_of_range`, which :meth:`Plan.from_sequence` checks first)."""
        a = graph.arrays
        n = len(a.names)
        if graph.collectives or len(set(devices)) < len(devices) or "" in devices \
                or codes.shape != (n,) or sequence.shape != (n,) or n == 0:
            return None
        at = np.full(n, -1, np.int64)
        at[sequence] = np.arange(n)
        if (at < 0).any() or not (at[a.edge_src] < at[a.edge_dst]).all():
            return None  # an op missing (so another twice), or an edge going back
        grouped = np.flatnonzero(graph.group_index >= 0)
        if len(grouped):
            first = np.full(len(graph.groups), -1, np.int64)
            first[graph.group_index[grouped]] = codes[grouped]
            if not (first[graph.group_index[grouped]] == codes[grouped]).all():
                return None
        along = codes[sequence]
        present, first_at = np.unique(along, return_index=True)
        used_codes = present[np.argsort(first_at)]
        used = tuple(devices[c] for c in used_codes.tolist())
        remap = np.full(len(devices), -1, np.int64)
        remap[used_codes] = np.arange(len(used_codes))
        by_device = np.argsort(along, kind="stable")
        bounds = np.searchsorted(along[by_device], np.arange(1, len(devices)))
        positions = dict(zip(devices, np.split(sequence[by_device], bounds), strict=True))
        for ids in positions.values():
            ids.setflags(write=False)  # shared by every caller of order_positions
        local = remap[codes]
        local.setflags(write=False)
        return cls(used, local, sequence, positions)


def _out_of_range(n: int, k: int, codes: np.ndarray, sequence: np.ndarray) -> str:
    """What is wrong with arrays for a plan of ``n`` ops on ``k`` devices that no plan's
    lists can say (empty where nothing is)."""
    if codes.ndim != 1 or sequence.ndim != 1:
        return (f"expected one-dimensional arrays, got {codes.ndim} dimensions of device "
                f"indices and {sequence.ndim} of op indices")
    whole = [x for x in (codes, sequence) if len(x) and not np.issubdtype(x.dtype, np.integer)]
    if whole:
        return f"expected whole-number indices, got an array of {whole[0].dtype}"
    if len(codes) > n:
        return f"expected a device index for each of {n} ops, got {len(codes)}"
    bad = np.flatnonzero((codes < 0) | (codes >= k))
    if len(bad):
        return (f"op {int(bad[0])} has device index {int(codes[bad[0]])}, expected "
                + (f"0 to {k - 1}" if k else "none: no devices given"))
    bad = np.flatnonzero((sequence < 0) | (sequence >= n))
    if len(bad):
        return (f"the order lists op index {int(sequence[bad[0]])}, expected 0 to {n - 1}")
    return ""


def priorities_from_order(ranked: Sequence[str]) -> dict[str, float]:
    """Priorities under which the ready op first in ``ranked`` goes first (``len(ranked)``
    for the first, down to 1 for the last).

    >>> priorities_from_order(["a", "b", "c"])
    {'a': 3.0, 'b': 2.0, 'c': 1.0}
    """
    return dict(zip(ranked, map(float, range(len(ranked), 0, -1)), strict=True))


def order_by_priority(graph: Graph, devices: Mapping[str, str],
                      priority: Mapping[str, float] | None = None,
                      device_groups: Mapping[str, Sequence[str]] | None = None,
                      ) -> dict[str, tuple[str, ...]]:
    """Per-device orders drawn from one topological order that prefers high priority (a
    collective, on each device of its group).

    Every device order is a restriction of the same global order, so no deadlock can arise.
    """
    if priority is None:
        ranked = graph.topological_order()
    else:
        index = {name: i for i, name in enumerate(graph.topological_order())}
        ranked = tuple(nx.lexicographical_topological_sort(
            graph.to_networkx(), key=lambda n: (-priority.get(n, 0.0), index[n])))
    if device_groups:
        order: dict[str, list[str]] = {}
        for name in ranked:
            for d in device_groups.get(name, (devices[name],)):
                order.setdefault(d, []).append(name)
        return {d: tuple(ops) for d, ops in order.items()}
    return split_by_device(ranked, devices)


def split_by_device(ranked: Sequence[str],
                     devices: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """``ranked`` (a topological order) split into one subsequence per device, devices in
    order of first use (sorted in numpy, not looped over in Python: plans reach a million
    ops).

    >>> split_by_device(["a", "b", "c"], {"a": "d1", "b": "d0", "c": "d1"})
    {'d1': ('a', 'c'), 'd0': ('b',)}
    """
    placed = list(map(devices.__getitem__, ranked))
    used = tuple(dict.fromkeys(placed))
    if not used:
        return {}
    index = {d: i for i, d in enumerate(used)}
    codes = np.fromiter(map(index.__getitem__, placed), np.int64, len(placed))
    by_device = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[by_device], np.arange(1, len(used))).tolist()
    names = np.array(ranked, dtype=object)[by_device]
    return {d: tuple(part.tolist()) for d, part in zip(used, np.split(names, bounds),
                                                        strict=True)}


class Plan:
    """A validated placement and schedule of ``graph``.

    >>> from policies import plan
    >>> from hwmodels import get_cluster
    >>> from workloads import build_model
    >>> p = plan(build_model("mlp"), get_cluster("workstation"), "round_robin")
    >>> Plan.from_json(p.to_json()) == p
    True
    """

    def __init__(self, graph: Graph, placement: Mapping[str, str],
                 order: Mapping[str, Sequence[str]], *, policy: str = "",
                 priority: Mapping[str, float] | None = None,
                 placement_s: float = 0.0,
                 estimated_makespan_s: float | None = None,
                 info: Mapping[str, Any] | None = None, cluster: str = "",
                 cluster_hash: str = "",
                 device_groups: Mapping[str, Sequence[str]] | None = None) -> None:
        self.graph = graph
        #: Each collective op's device group, member ``m`` on ``device_groups[op][m]``; the
        #: op is placed on the group's first device and ordered on every member's.
        self.device_groups: dict[str, tuple[str, ...]] = {
            op: tuple(group) for op, group in (device_groups or {}).items()}
        #: In a plan lowered by :func:`policies.collectives.lower`: each step op's
        #: collective (not serialised: a lowered plan is the executors' own).
        self.step_of: dict[str, str] = {}
        #: The cluster the plan was made for, by name and definition hash (empty: any
        #: cluster that has the plan's devices).
        self.cluster, self.cluster_hash = cluster, cluster_hash
        names = graph.names
        self.placement = dict(
            zip(names, map(placement.get, names, itertools.repeat("")), strict=True))
        self.order = {d: tuple(ops) for d, ops in order.items()}
        self.policy = policy
        self.priority = dict(priority or {})
        self.placement_s = placement_s
        self.estimated_makespan_s = estimated_makespan_s
        self.info: dict[str, Any] = dict(info or {})
        self._sequenced: _Sequenced | None = None
        with gc_paused():
            self._check_placed(placement)
            self._check_device_groups()
            self._check_groups()
            self._check_order()

    @classmethod
    def from_sequence(cls, graph: Graph, devices: Sequence[str], codes: np.ndarray,
                      sequence: np.ndarray, *, policy: str = "") -> Plan:
        """The plan of ``graph`` with op ``i`` (``graph.arrays`` order) on
        ``devices[codes[i]]`` and every device's ops in the order of ``sequence`` (the ops'
        ``graph.arrays`` positions, one topological order of them all), under priorities
        that give that order back: what :func:`split_by_device` and the constructor make
        of the same lists, checked in arrays. Its placement, orders and priorities are
        worked out as dicts when first asked for: a search scores many plans whose
        evaluator reads only their arrays (:meth:`device_codes`, :meth:`order_positions`).
        Indices that are not whole numbers or are out of range are refused (one line);
        other arrays (a graph with collectives, device names repeated or empty, an order
        that is not topological) go through the constructor, which takes what its lists
        make a plan of and says what is wrong otherwise.

        >>> from workloads import build_model
        >>> g = build_model("mlp")
        >>> p = Plan.from_sequence(g, ("gpu0", "cpu0"), np.array([0, 1, 1, 0, 0, 0, 0]),
        ...                        np.arange(7), policy="hand")
        >>> p.order["cpu0"], p.devices
        (('fc1', 'relu1'), ('gpu0', 'cpu0'))
        """
        devices = tuple(devices)
        names = graph.arrays.names
        codes, sequence = np.asarray(codes), np.asarray(sequence)
        wrong = _out_of_range(len(names), len(devices), codes, sequence)
        if wrong:
            raise PlacementError(f"plan from arrays of graph {graph.name!r}: {wrong}")
        codes, sequence = codes.astype(np.int64), sequence.astype(np.int64)  # copies: kept
        sequenced = _Sequenced.of(graph, devices, codes, sequence)
        if sequenced is None:
            ranked = [names[i] for i in sequence.tolist()]
            placed = {names[i]: devices[c] for i, c in enumerate(codes.tolist())}
            listed = [name for name in ranked if name in placed]  # the rest: named unplaced
            return cls(graph, placed, split_by_device(listed, placed), policy=policy,
                       priority=priorities_from_order(ranked))
        self = cls.__new__(cls)
        self.graph, self.device_groups, self.step_of = graph, {}, {}
        self.cluster, self.cluster_hash, self.policy = "", "", policy
        self.placement_s, self.estimated_makespan_s, self.info = 0.0, None, {}
        self._sequenced = sequenced
        self.__dict__["_codes"] = {sequenced.used: sequenced.codes}
        self.__dict__["_positions"] = sequenced.positions
        return self

    @functools.cached_property
    def placement(self) -> dict[str, str]:
        """Each op's device (in the graph's order of ops)."""
        s = self._sequenced
        assert s is not None  # a plan made otherwise has its placement from the start
        names = self.graph.arrays.names
        placed = dict(zip(names, map(s.used.__getitem__, s.codes.tolist()), strict=True))
        if names != self.graph.names:
            placed = {name: placed[name] for name in self.graph.names}
        return placed

    @functools.cached_property
    def order(self) -> dict[str, tuple[str, ...]]:
        """Each device's ops in the order it runs them, devices in order of first use."""
        s = self._sequenced
        assert s is not None
        names = self.graph.arrays.names
        return {d: tuple(map(names.__getitem__, s.positions[d].tolist())) for d in s.used}

    @functools.cached_property
    def priority(self) -> dict[str, float]:
        """Each op's priority (higher first): for a plan made from arrays, those that give
        its order back."""
        s = self._sequenced
        assert s is not None
        names = self.graph.arrays.names
        return priorities_from_order([names[i] for i in s.sequence.tolist()])

    # -- validation ---------------------------------------------------------------------

    def _check_placed(self, placement: Mapping[str, str]) -> None:
        if "" in self.placement.values():
            name = next(n for n, device in self.placement.items() if not device)
            raise PlacementError(f"plan: op {name!r} is placed on no device")
        if len(placement) > len(self.placement):  # every op is placed: the rest are extra
            extra = next(name for name in placement if name not in self.graph)
            raise PlacementError(f"plan: op {extra!r} is placed on device "
                                 f"{placement[extra]!r} but is not in graph "
                                 f"{self.graph.name!r}")

    def _check_device_groups(self) -> None:
        collectives = set(self.graph.collectives)  # each graph finds them once
        for name in dict.fromkeys((*self.graph.collectives, *self.device_groups)):
            if name not in self.graph:
                continue  # named below
            op = self.graph.op(name)
            group = self.device_groups.get(name)
            if group is None or name not in collectives:
                raise PlacementError(
                    f"plan: op {name!r} ({op.kind}) "
                    + ("is a collective: expected a device group for it, got none"
                       if group is None else "is no collective: expected no device group, "
                       f"got {list(group)}"))
            members = int(op.attrs["members"])
            if len(group) != members or len(set(group)) != members or \
                    self.placement[name] != group[0]:
                raise PlacementError(
                    f"plan: collective {name!r}: expected {members} distinct devices, the "
                    f"first its placement {self.placement[name]!r}, got {list(group)}")
        extra = next((n for n in self.device_groups if n not in self.graph), None)
        if extra is not None:
            raise PlacementError(f"plan: device group for op {extra!r}, which is not in "
                                 f"graph {self.graph.name!r}")

    def devices_of(self, name: str) -> tuple[str, ...]:
        """The devices op ``name`` runs on: its device, or a collective's device group."""
        return self.device_groups.get(name) or (self.placement[name],)

    def _check_groups(self) -> None:
        index = self.graph.group_index
        grouped = np.flatnonzero(index >= 0)
        if not len(grouped):
            return
        try:
            codes = self.device_codes(self.devices)[grouped]
        except KeyError:  # an op on a device with no order: the loop, then _check_order
            codes = None
        if codes is not None:
            first = np.full(len(self.graph.groups), -1, np.int64)  # a device of each group
            first[index[grouped]] = codes
            if (first[index[grouped]] == codes).all():
                return  # every group on one device; else name the first that is not
        for group, ops in self.graph.groups.items():
            devices: dict[str, str] = {}
            for name in ops:  # the first op of the group on each device
                devices.setdefault(self.placement[name], name)
            if len(devices) > 1:
                shown = ", ".join(f"{name} on {d}" for d, name in devices.items())
                raise PlacementError(f"plan of policy {self.policy!r}: co-placement group "
                                     f"{group!r} must share one device, got {shown}")

    def _check_order(self) -> None:
        if self._orders_follow_topology():
            return  # every op listed once, on its device, in one topological order
        if self.device_groups or not self._listed_once():
            position = self._check_listed()  # names what is wrong
        chains = self._order_ids()
        if not self.device_groups and self._priorities_follow(chains):
            return  # one order of every op that edges and device orders all follow
        if self.device_groups:
            for edge in self.graph.edges():
                for device in self.devices_of(edge.dst):
                    if device in self.devices_of(edge.src) and \
                            position[edge.src, device] > position[edge.dst, device]:
                        self._ordered_before(edge.src, edge.dst, device)
        else:
            self._check_producers_first(chains)
        self._check_deadlock(chains)

    def _priorities_follow(self, chains: list[np.ndarray]) -> bool:
        """Whether the order of every op by priority (highest first, ties in graph order)
        is one that every edge and each device's order (``chains``, as graph positions)
        go forward in: then no op waits on one after it, and the orders cannot deadlock.
        ``mcmc``'s candidates carry such priorities; a plan without them is checked in
        full. (A NaN compares false: an op with one must take part in no edge or order.)"""
        if not self.priority:
            return False
        a = self.graph.arrays
        try:
            keys = np.fromiter(map(self.priority.get, a.names, itertools.repeat(np.nan)),
                               float, len(a.names))
        except (OverflowError, TypeError, ValueError):  # priorities no float holds
            return False
        # graph positions are topological: a producer precedes its readers on a tie
        if not (keys[a.edge_src] >= keys[a.edge_dst]).all():
            return False
        for ids in chains:
            ahead, after = keys[ids[:-1]], keys[ids[1:]]
            if not ((ahead > after) | ((ahead == after) & (ids[:-1] < ids[1:]))).all():
                return False
        return True

    def _ordered_before(self, producer: str, reader: str, device: str) -> None:
        raise PlacementError(f"plan: op {reader!r} on device {device!r} is ordered before "
                             f"its producer {producer!r}")

    def _order_ids(self) -> list[np.ndarray]:
        """Each device's order as the graph positions of its ops."""
        return list(self.order_positions(tuple(self.order)))

    def order_positions(self, devices: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """Each of ``devices``' order as the ``graph.arrays`` positions of its ops (empty
        for a device the plan does not use).

        >>> from policies import plan
        >>> from hwmodels import get_cluster
        >>> from workloads import build_model
        >>> p = plan(build_model("mlp"), get_cluster("workstation"), "single_device")
        >>> [len(o) for o in p.order_positions(("gpu0", "cpu0"))] == [len(p.graph), 0]
        True
        """
        positions: dict[str, list[int] | np.ndarray] = self.__dict__.setdefault(
            "_positions", {})
        rank = self.graph.arrays.position
        for d in devices:
            if not isinstance(positions.get(d), np.ndarray):
                ids = np.fromiter(positions[d] if d in positions else
                                  map(rank.__getitem__, self.order.get(d, ())), np.int64)
                ids.setflags(write=False)  # shared by every caller
                positions[d] = ids
        return tuple(positions[d] for d in devices)  # type: ignore[misc]

    def _check_producers_first(self, chains: list[np.ndarray]) -> None:
        """No op is ordered before a producer on its own device (each op on one device)."""
        a = self.graph.arrays
        place = np.zeros(len(a.names), np.int64)  # each op's place in its device's order
        for ids in chains:
            place[ids] = np.arange(len(ids))
        codes = self.device_codes(self.devices)
        src, dst = a.edge_src, a.edge_dst
        bad = np.flatnonzero((codes[src] == codes[dst]) & (place[src] > place[dst]))
        if len(bad):
            k = int(bad[0])
            self._ordered_before(a.names[src[k]], a.names[dst[k]],
                                 self.devices[int(codes[src[k]])])

    def _orders_follow_topology(self) -> bool:
        """Whether each device lists exactly its own ops, each once, in increasing order of
        the graph's topological order: then the orders are consistent and cannot deadlock.
        Checked with no Python-level loop over ops (plans of a million ops)."""
        if self.device_groups:
            return False  # a collective is listed on each of its devices
        rank = self.graph.arrays.position
        listed = 0
        positions = {}
        for device, ops in self.order.items():
            where = list(map(self.placement.get, ops))
            if where.count(device) != len(ops):
                return False
            ranks = positions[device] = list(map(rank.__getitem__, ops))
            if not all(map(operator.lt, ranks, itertools.islice(ranks, 1, None))):
                return False
            listed += len(ops)
        self.__dict__["_positions"] = positions  # what order_positions gives, found here
        return listed == len(self.placement)

    def _listed_once(self) -> bool:
        """Whether each device lists only its own ops and every op is listed once (a plan
        without device groups), checked without a Python step per op; the positions found
        are kept for :meth:`order_positions`."""
        rank = self.graph.arrays.position
        index = {d: i for i, d in enumerate(self.order)}
        try:
            codes = np.fromiter(map(index.__getitem__, map(self.placement.__getitem__,
                                                           self.graph.arrays.names)),
                                np.int64, len(self.placement))
            ids = {d: np.fromiter(map(rank.__getitem__, ops), np.int64, len(ops))
                   for d, ops in self.order.items()}
        except KeyError:  # an op listed that is not in the graph, or one on no order's device
            return False
        seen = np.zeros(len(codes), np.int64)
        for d, listed in ids.items():
            if (codes[listed] != index[d]).any():
                return False
            seen += np.bincount(listed, minlength=len(codes))
        if not (seen == 1).all():
            return False
        for ids_of in ids.values():
            ids_of.setflags(write=False)  # shared by every caller of order_positions
        self.__dict__["_positions"] = ids
        return True

    def _check_listed(self) -> dict[tuple[str, str], int]:
        """Every op listed once on each of its devices; its position in each order."""
        position: dict[tuple[str, str], int] = {}
        for device, ops in self.order.items():
            for i, name in enumerate(ops):
                if name not in self.placement:
                    raise PlacementError(f"plan: device {device!r} orders op {name!r}, "
                                         f"which is not in graph {self.graph.name!r}")
                if device not in self.devices_of(name):
                    raise PlacementError(f"plan: op {name!r} is placed on device "
                                         f"{self.placement[name]!r} but ordered on device "
                                         f"{device!r}")
                if (name, device) in position:
                    raise PlacementError(f"plan: op {name!r} appears twice in the order of "
                                         f"device {device!r}")
                position[name, device] = i
        for name in self.placement:
            for device in self.devices_of(name):
                if (name, device) not in position:
                    raise PlacementError(f"plan: op {name!r} on device {device!r} is "
                                         f"missing from that device's order")
        return position

    def _check_deadlock(self, chains: list[np.ndarray]) -> None:
        """The graph's edges and each device's order (``chains``, as graph positions) leave
        no cycle: then every strongly connected component (scipy's, compiled) is one op;
        networkx names a cycle when not."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        a = self.graph.arrays
        src = [a.edge_src, *(ids[:-1] for ids in chains)]
        dst = [a.edge_dst, *(ids[1:] for ids in chains)]
        n = len(a.names)
        links = coo_matrix((np.ones(sum(map(len, src)), bool),
                            (np.concatenate(src), np.concatenate(dst))), shape=(n, n))
        if connected_components(links.tocsr(), directed=True, connection="strong")[0] == n:
            return
        g = self.graph.to_networkx()
        for ops in self.order.values():
            g.add_edges_from(itertools.pairwise(ops))
        if not nx.is_directed_acyclic_graph(g):
            cycle = [u for u, _ in nx.find_cycle(g)]
            raise PlacementError(
                "plan: the device orders deadlock; op "
                f"{cycle[0]!r} on device {self.placement[cycle[0]]!r} waits on a cycle "
                f"through {', '.join(repr(c) for c in cycle)}")

    def validate(self, cluster: Cluster) -> Plan:
        """Check the plan was made for ``cluster`` (its definition hash, when the plan
        records one) and every device of the plan exists in it; return the plan."""
        if self.cluster_hash and self.cluster_hash != cluster.definition_hash:
            raise PlacementError(
                f"plan: made for cluster {self.cluster!r} (definition "
                f"{self.cluster_hash[:12]}), expected one for cluster {cluster.name!r} "
                f"(definition {cluster.definition_hash[:12]})")
        names = set(cluster.device_names)
        placed = itertools.chain(self.placement.items(), (
            (op, d) for op, group in self.device_groups.items() for d in group))
        for name, device in placed:
            if device not in names:
                raise PlacementError(
                    f"plan: op {name!r} is placed on device {device!r}, which cluster "
                    f"{cluster.name!r} lacks; it has {', '.join(cluster.device_names)}")
        return self

    @functools.cached_property
    def transfers(self) -> tuple[Transfer, ...]:
        """The tensors that cross devices, each once per (tensor, destination device), in
        the order the graph's readers first need them (worked out on first use: a search
        scores many plans whose evaluator never asks)."""
        with gc_paused():
            return self._derive_transfers()

    def _derive_transfers(self) -> tuple[Transfer, ...]:
        if self.device_groups:
            return self._member_transfers()
        a = self.graph.arrays
        codes = self.device_codes(self.devices)
        cross = np.flatnonzero(codes[a.edge_src] != codes[a.edge_dst])
        if a.names != self.graph.names:  # list edges in graph order, as Graph.edges() does
            graph_position = np.fromiter(map(self.graph.position, a.names), np.int64,
                                         len(a.names))
            cross = cross[np.argsort(graph_position[a.edge_dst[cross]], kind="stable")]
        # one transfer per (tensor, destination device), in the order of its first edge;
        # its consumers in edge order
        dst_ops = a.edge_dst[cross]
        key = a.edge_tensor[cross] * len(self.devices) + codes[dst_ops]
        unique, first, which = np.unique(key, return_index=True, return_inverse=True)
        by_first = np.argsort(first, kind="stable")  # first indices are distinct
        rank = np.empty(len(unique), np.int64)
        rank[by_first] = np.arange(len(unique))
        group = rank[which]
        by_rank = np.argsort(group, kind="stable")
        ends = np.cumsum(np.bincount(group, minlength=len(unique))).tolist()
        keys = unique[by_first]
        tensors, dst_codes = np.divmod(keys, len(self.devices))
        names, devices = a.names, self.devices
        consumers = [names[o] for o in dst_ops[by_rank].tolist()]
        producers = a.tensor_producer[tensors]
        return tuple(
            Transfer(f"{tensor}->{devices[dst]}", tensor, size, devices[src], devices[dst],
                     names[producer], tuple(consumers[begin:end]))
            for tensor, size, src, dst, producer, begin, end in zip(
                map(a.tensor_names.__getitem__, tensors.tolist()),
                a.tensor_bytes[tensors].tolist(), codes[producers].tolist(),
                dst_codes.tolist(), producers.tolist(), [0, *ends][:-1], ends, strict=True))

    def _member_transfers(self) -> tuple[Transfer, ...]:
        """Transfers where collectives take part: each member's tensors live on its device."""
        from workloads.collectives import member_inputs, member_outputs

        home: dict[str, str] = {}  # tensor -> the device it is made on
        wants: dict[tuple[str, str], str] = {}  # (collective, input) -> member device
        for name, group in self.device_groups.items():
            op = self.graph.op(name)
            for m, device in enumerate(group):
                home.update((t.name, device) for t in member_outputs(op, m))
                wants.update(((name, t), device) for t in member_inputs(op, m))
        by_key: dict[tuple[str, str], list[str]] = {}
        for edge in self.graph.edges():
            src = home.get(edge.tensor.name, self.placement[edge.src])
            dst = wants.get((edge.dst, edge.tensor.name), self.placement[edge.dst])
            if src != dst:
                by_key.setdefault((edge.tensor.name, dst), []).append(edge.dst)
        transfers = []
        for (tensor, dst), consumers in by_key.items():
            producer = self.graph.producer(tensor)
            transfers.append(Transfer(
                name=f"{tensor}->{dst}", tensor=tensor,
                nbytes=self.graph.tensor(tensor).nbytes,
                src=home.get(tensor, self.placement[producer]), dst=dst, producer=producer,
                consumers=tuple(consumers)))
        return tuple(transfers)

    # -- queries ------------------------------------------------------------------------

    def device_codes(self, devices: tuple[str, ...]) -> np.ndarray:
        """Each op's device as an index into ``devices``, in ``graph.arrays`` order
        (computed once per device tuple)."""
        cache: dict[tuple[str, ...], np.ndarray] = self.__dict__.setdefault("_codes", {})
        if devices not in cache:
            own = self.devices
            if own not in cache:
                index = {d: i for i, d in enumerate(own)}
                names = self.graph.arrays.names
                cache[own] = np.fromiter(
                    map(index.__getitem__, map(self.placement.__getitem__, names)),
                    np.int64, len(names))
            if devices != own:
                where = {d: i for i, d in enumerate(devices)}
                remap = np.fromiter((where[d] for d in own), np.int64, len(own))
                cache[devices] = remap[cache[own]]
        return cache[devices]

    @property
    def devices(self) -> tuple[str, ...]:
        """Devices that run at least one op, in order of first use."""
        if self._sequenced is not None and "order" not in self.__dict__:
            return self._sequenced.used  # without working out the orders
        return tuple(self.order)

    @property
    def transfer_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled: pickle gives arrays back writeable, so the position and device-code
        arrays that every caller of :meth:`order_positions` and :meth:`device_codes`
        shares are made read-only again."""
        self.__dict__.update(state)
        shared = [*state.get("_codes", {}).values(), *state.get("_positions", {}).values()]
        sequenced = state.get("_sequenced")
        if sequenced is not None:
            shared += [sequenced.codes, *sequenced.positions.values()]
        for value in shared:
            if isinstance(value, np.ndarray):
                value.setflags(write=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return (self.graph == other.graph and self.placement == other.placement
                and self.device_groups == other.device_groups and self.order == other.order
                and self.priority == other.priority
                and self.policy == other.policy)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        params = self.info.get("policy_params") or {}
        policy = self.policy + (f"({', '.join(f'{k}={v!r}' for k, v in params.items())})"
                                if params else "")
        return (f"Plan(graph={self.graph.name!r}, policy={policy!r}, "
                f"devices={len(self.order)}, transfers={len(self.transfers)})")

    # -- serialisation ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "policy": self.policy,
            "cluster": self.cluster, "cluster_hash": self.cluster_hash,
            "placement_s": self.placement_s,
            "estimated_makespan_s": self.estimated_makespan_s, "info": self.info,
            "graph": self.graph.to_dict(),
            "placement": self.placement, "order": {d: list(o) for d, o in self.order.items()},
            "device_groups": {op: list(g) for op, g in self.device_groups.items()},
            "priority": self.priority, "transfers": [t.to_dict() for t in self.transfers],
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "plan") -> Plan:
        """A plan from its parsed JSON form, checked against the plan schema."""
        from policies.formats import PlanDocument
        from workloads.errors import GraphError
        from workloads.schema import validate

        doc = validate(PlanDocument, data, source=source, error=PlacementError)
        try:
            graph = Graph.from_dict(data["graph"], source=f"{source}: graph")
        except GraphError as err:
            raise PlacementError(str(err)) from None
        try:
            return cls(graph, doc.placement, doc.order, policy=doc.policy,
                       priority=doc.priority or None, placement_s=doc.placement_s,
                       estimated_makespan_s=doc.estimated_makespan_s, info=doc.info,
                       cluster=doc.cluster, cluster_hash=doc.cluster_hash,
                       device_groups=doc.device_groups)
        except PlacementError as err:
            raise PlacementError(f"{source}: {err}") from None

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "plan") -> Plan:
        from workloads.schema import load_json

        return cls.from_dict(load_json(text, source=source, error=PlacementError),
                             source=source)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan JSON file (:meth:`to_json`'s output)."""
        from workloads.io import read_text

        return cls.from_json(read_text(path, PlacementError, "plan file"), source=str(path))
