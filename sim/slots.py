"""One graph on one cluster under one cost model, as the compiled loop reads it
(:mod:`sim.compiled`), and each plan of that graph in the few arrays the loop needs.

:func:`sim.wiring.wire` lays a plan out from its :class:`policies.plans.Transfer` objects,
a Python step per transfer. :class:`Slots` works out once what the graph fixes (its edges
in the order :attr:`Plan.transfers` meets them, tensors) and then each plan by array
operations on its op devices and orders alone. It numbers every (tensor, destination)
transfer the first time a plan makes it and keeps the number for every later plan, so that
one plan's run state means the same in another's (:mod:`sim.delta`; :meth:`Slots.renumber`
starts the numbers again, which a long search on a large cluster needs now and then); what
it prices (each transfer's time and route by its source) is priced as plans need it, not
for every (tensor, device) or device pair, and each op's time on a device when a plan first
uses the device. ``tests/sim/test_slots.py`` checks runs on these inputs, plan after plan
of one layout, against the Python event loop on random plans.
"""

from __future__ import annotations

import numpy as np

from hwmodels.cost import CostModel, RooflineCost
from hwmodels.spec import Cluster
from policies.plans import Plan
from sim import compiled
from sim.compiled import GraphColumns, PlanInputs, State
from workloads.graph import Graph

__all__ = ["Slots"]

#: The ``op_times`` that price each op by itself alone (an op's time does not depend on
#: where the others are): a table of every op on every device then serves every plan.
_PER_OP = (CostModel.op_times, RooflineCost.op_times)


class Slots:
    """What ``graph`` fixes on ``cluster`` under ``cost`` (:attr:`columns`), and each
    plan's inputs and first state; ``many``: lay out many plans (price each op on each
    device a plan uses, once), not one.

    >>> from hwmodels import get_cluster, RooflineCost
    >>> from policies import plan
    >>> from sim import compiled, simulate
    >>> from workloads import build_model
    >>> c = get_cluster("quad-v100-nvlink")
    >>> cost = RooflineCost(c)
    >>> slots = Slots(build_model("mlp"), c, cost)
    >>> p = plan(slots.graph, c, "round_robin")
    >>> inputs = slots.inputs(p)
    >>> s = slots.state(inputs, record=False)
    >>> compiled.begin(slots.columns, inputs, s, True)
    >>> _ = compiled.advance(slots.columns, inputs, s, True, 10**9)
    >>> float(s.clock[1]) == simulate(p, c, cost).makespan_s
    True
    """

    def __init__(self, graph: Graph, cluster: Cluster, cost: CostModel, *,
                 many: bool = True) -> None:
        self.graph, self.cluster, self.cost = graph, cluster, cost
        a = graph.arrays
        self.devices = tuple(cluster.device_names)
        self.n_dev = n_dev = len(self.devices)
        n = len(a.names)
        specs = [cluster.device(d) for d in self.devices]
        self.by_size = type(cost).tensor_transfer_time is CostModel.tensor_transfer_time
        sizes, size_of = np.unique(a.tensor_bytes, return_inverse=True)
        self.sizes = sizes.tolist()
        # a transfer's time is the model's for its size (or tensor) and device pair
        self.t_row = (size_of.ravel().astype(np.int64) if self.by_size
                      else np.arange(len(a.tensor_bytes), dtype=np.int64))
        # for many plans, each op's time on each device, a device at a time as plans first
        # use it; for one, the plan's own
        # (a row per device: a row not priced takes no memory)
        self.table = (np.zeros((n_dev, n)) if many and type(cost).op_times in _PER_OP
                      else None)
        self.priced = np.zeros(n_dev, bool)
        self.columns = GraphColumns(
            edge_src=_i64(a.edge_src), edge_dst=_i64(a.edge_dst),
            edge_tensor=_i64(a.edge_tensor),
            in_off=_offsets(np.bincount(a.edge_dst, minlength=n)),
            out_edges=self._out_edges(), out_off=_offsets(np.bincount(a.edge_src, minlength=n)),
            own_off=_i64(a.out_offsets), producer=_i64(a.tensor_producer),
            tensor_bytes=_i64(a.tensor_bytes), alloc=_i64(a.alloc_bytes),
            workspace=_i64(a.workspace_bytes),
            in_degree=np.bincount(a.edge_dst, minlength=n).astype(np.int64),
            param_bytes=_i64(a.param_bytes),
            streams=np.array([d.compute_streams for d in specs], np.int64),
            copy_engines=np.array([d.copy_engines for d in specs], np.int64),
            capacity=np.array([d.memory_bytes for d in specs], np.int64))
        self.times: dict[tuple[int, int, int], float] = {}
        self.pair_route: dict[int, int] = {}  # source * n_dev + destination -> route
        self.routes: list[list[int]] = []
        self.channels: dict[str, int] = {}
        self.route, self.route_off = np.zeros(0, np.int64), np.zeros(1, np.int64)
        self.renumber()

    def renumber(self) -> None:
        """Forget every transfer number (a run state taken under them no longer applies);
        prices and routes stay."""
        # the transfers numbered so far: key tensor * n_dev + destination, sorted, and each
        # key's number; per number its tensor, destination, last source seen, seconds, route
        self.known = np.zeros(0, np.int64)
        self.number = np.zeros(0, np.int64)
        self.k_tensor = np.zeros(0, np.int64)
        self.k_dst = np.zeros(0, np.int64)
        self.k_src = np.zeros(0, np.int64)
        self.k_duration = np.zeros(0)
        self.k_route = np.zeros(0, np.int64)
        self.key_bytes = self.columns.tensor_bytes.copy()  # writable, as once it grows
        # the last plan's transfer key per edge (-1 within a device) and number
        self.last_keys = np.full(len(self.columns.edge_src), -1, np.int64)
        self.last_k = np.full(len(self.columns.edge_src), -1, np.int64)

    def _out_edges(self) -> np.ndarray:
        """Each op's out-edges in the order :attr:`Plan.transfers` meets them (``by_rank``:
        every edge in that order, by reader in graph order)."""
        a, graph = self.graph.arrays, self.graph
        if a.names != graph.names:
            in_graph = np.fromiter(map(graph.position, a.names), np.int64, len(a.names))
            self.by_rank = np.argsort(in_graph[a.edge_dst], kind="stable")
        else:
            self.by_rank = np.arange(len(a.edge_dst))
        rank = np.empty(len(self.by_rank), np.int64)
        rank[self.by_rank] = np.arange(len(self.by_rank))
        return np.lexsort((rank, a.edge_src)).astype(np.int64)

    # -- a plan ---------------------------------------------------------------------------

    def inputs(self, plan: Plan) -> PlanInputs:
        """What the loop reads of ``plan`` (a plan of this graph, without device groups)."""
        g = self.columns
        op_dev = plan.device_codes(self.devices)
        orders = plan.order_positions(self.devices)
        dst = op_dev[g.edge_dst]
        keys = np.where(op_dev[g.edge_src] != dst, g.edge_tensor * self.n_dev + dst, -1)
        # a plan differs from the last by a move or two: look up only the edges it changed
        changed = np.flatnonzero(keys != self.last_keys)
        edge_k = self.last_k.copy()
        edge_k[changed] = -1
        far = changed[keys[changed] >= 0]
        edge_k[far] = self._numbers(keys[far])
        self.last_keys, self.last_k = keys, edge_k
        self._update(op_dev)
        return PlanInputs(
            op_dev=op_dev, op_time=self._op_times(op_dev), order=np.concatenate(orders),
            order_off=_offsets([len(o) for o in orders]), edge_k=edge_k,
            k_tensor=self.k_tensor, k_dst=self.k_dst, k_duration=self.k_duration.copy(),
            k_route=self.k_route.copy(), route=self.route, route_off=self.route_off,
            n_channels=len(self.channels), key_bytes=self.key_bytes)

    def transfer_numbers(self, p: PlanInputs) -> np.ndarray:
        """The number of each of ``p``'s plan's transfers, in :attr:`Plan.transfers`' order
        (where each (tensor, device) first crosses, by reader in graph order)."""
        k = p.edge_k[self.by_rank]
        k = k[k >= 0]
        numbers, first = np.unique(k, return_index=True)
        return numbers[np.argsort(first)]

    def state(self, p: PlanInputs, *, record: bool, overflowed: bool = False) -> State:
        """The first state of ``p``'s run (``record``: keep the memory record)."""
        return compiled.new_state(self.columns, p, compiled.start_refs(self.columns, p),
                                  self.resident(p), overflowed=overflowed, record=record)

    def resident(self, p: PlanInputs) -> np.ndarray:
        """Each device's parameter bytes under ``p``."""
        return np.bincount(p.op_dev, weights=self.graph.arrays.param_bytes,
                           minlength=self.n_dev).astype(np.int64)

    # -- what grows as plans need it --------------------------------------------------------

    def _numbers(self, keys: np.ndarray) -> np.ndarray:
        """The number of each transfer key, numbering those met for the first time."""
        at = np.searchsorted(self.known, keys)
        hit = at < len(self.known)
        hit[hit] = self.known[at[hit]] == keys[hit]
        if not hit.all():
            fresh = np.unique(keys[~hit])
            start = len(self.k_tensor)
            known = np.concatenate((self.known, fresh))
            order = np.argsort(known, kind="stable")
            self.known = known[order]
            self.number = np.concatenate((self.number, start + np.arange(len(fresh))))[order]
            self.k_tensor = np.concatenate((self.k_tensor, fresh // self.n_dev))
            self.k_dst = np.concatenate((self.k_dst, fresh % self.n_dev))
            self.k_src = np.concatenate((self.k_src, np.full(len(fresh), -1, np.int64)))
            self.k_duration = np.concatenate((self.k_duration, np.zeros(len(fresh))))
            self.k_route = np.concatenate((self.k_route, np.zeros(len(fresh), np.int64)))
            self.key_bytes = np.concatenate((self.columns.tensor_bytes,
                                             self.columns.tensor_bytes[self.k_tensor]))
            at = np.searchsorted(self.known, keys)
        return self.number[at]

    def _update(self, op_dev: np.ndarray) -> None:
        """Each transfer's time and route from its tensor's source under ``op_dev``, for
        those whose source differs from the last plan's (the model asked once per size,
        or tensor, and device pair)."""
        src = op_dev[self.columns.producer[self.k_tensor]]
        stale = np.flatnonzero(src != self.k_src)
        if not len(stale):
            return
        pairs = src[stale] * self.n_dev + self.k_dst[stale]
        codes = self.t_row[self.k_tensor[stale]] * self.n_dev ** 2 + pairs
        unique, inverse = np.unique(codes, return_inverse=True)
        seconds = [self._seconds(*divmod(int(c), self.n_dev ** 2)) for c in unique]
        unique_pairs, pair_of = np.unique(pairs, return_inverse=True)
        known = len(self.routes)
        routes = [self._route(int(pair)) for pair in unique_pairs]
        if len(self.routes) > known:
            self.route = np.array([c for r in self.routes for c in r], np.int64)
            self.route_off = _offsets([len(r) for r in self.routes])
        # only now that the model has priced them all (it may refuse one)
        self.k_duration[stale] = np.asarray(seconds, np.float64)[inverse.ravel()]
        self.k_route[stale] = np.asarray(routes, np.int64)[pair_of.ravel()]
        self.k_src[stale] = src[stale]

    def _seconds(self, row: int, pair: int) -> float:
        s, d = divmod(pair, self.n_dev)
        key = (row, s, d)
        if key not in self.times:
            names, a = self.devices, self.graph.arrays
            self.times[key] = (self.cost.transfer_time(int(self.sizes[row]), names[s], names[d])
                               if self.by_size else self.cost.tensor_transfer_time(
                                   a.tensor_names[row], int(a.tensor_bytes[row]), names[s],
                                   names[d]))
        return self.times[key]

    def _route(self, pair: int) -> int:
        """The number of the route from device ``pair // n_dev`` to ``pair % n_dev``."""
        if pair not in self.pair_route:
            s, d = divmod(pair, self.n_dev)
            hops = self.cluster.route(self.devices[s], self.devices[d])
            self.routes.append([self.channels.setdefault(h.channel, len(self.channels))
                                for h in hops])
            self.pair_route[pair] = len(self.routes) - 1
        return self.pair_route[pair]

    def channel_names(self) -> list[str]:
        """The channels met so far, by number."""
        return list(self.channels)

    def _op_times(self, op_dev: np.ndarray) -> np.ndarray:
        """Each op's time on its device: from the table where the cost model prices each
        op alone (its own :meth:`CostModel.op_times`, or the roofline's, equal to it op for
        op), a device's column priced when a plan first uses the device; else, or where
        the model cannot price every op on that device, by asking the model for the plan
        (as a full simulation does)."""
        for d in np.unique(op_dev).tolist() if not self.priced.all() else ():
            if self.table is not None and not self.priced[d]:
                self._price(d)
        if self.table is None:
            return np.asarray(self.cost.op_times(self.graph, op_dev), np.float64)
        return self.table[op_dev, np.arange(len(op_dev))]

    def _price(self, d: int) -> None:
        """Every op's time on device ``d``, into the table; a model that refuses some op
        there is asked plan by plan from then on (a plan that places it there gets its
        error)."""
        n = len(self.graph.arrays.names)
        try:
            column = self.cost.op_times(self.graph, np.full(n, d, np.int64))
        except Exception:  # whatever the model raises, a plan placing the op there will too
            self.table = None
            return
        if self.table is not None:
            self.table[d] = column
            self.priced[d] = True


def _i64(x: np.ndarray) -> np.ndarray:
    """One integer type for every column: one compiled loop serves all."""
    return np.asarray(x, np.int64)


def _offsets(counts: np.ndarray | list[int]) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
