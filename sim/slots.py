"""One graph on one cluster under one cost model, as the compiled loop reads it
(:mod:`sim.compiled`), and each plan of that graph in the few arrays the loop needs.

:func:`sim.wiring.wire` lays a plan out from its :class:`policies.plans.Transfer` objects,
a Python step per transfer. :class:`Slots` works out once what the graph fixes (its edges
in the order :attr:`Plan.transfers` meets them, tensors, routes, the transfer times met so
far) and then a plan by array operations on its op devices and orders alone: the loop
finds which edge crosses devices as it runs. ``tests/sim/test_slots.py`` checks runs on
these inputs against :func:`sim.simulate` on random plans.
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
    plan's inputs and first state.

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

    def __init__(self, graph: Graph, cluster: Cluster, cost: CostModel) -> None:
        self.graph, self.cluster, self.cost = graph, cluster, cost
        a = graph.arrays
        self.devices = tuple(cluster.device_names)
        n_dev = len(self.devices)
        n, n_tensors = len(a.names), len(a.tensor_bytes)
        route, route_off, self.channels = compiled.routes(n_dev, self._route)
        specs = [cluster.device(d) for d in self.devices]
        self.by_size = type(cost).tensor_transfer_time is CostModel.tensor_transfer_time
        sizes, size_of = np.unique(a.tensor_bytes, return_inverse=True)
        self.sizes = sizes.tolist()
        # each op's time on each device, a device at a time as plans first use it
        self.table = np.zeros((n, n_dev)) if type(cost).op_times in _PER_OP else None
        self.priced = np.zeros(n_dev, bool)
        tensor_bytes = np.asarray(a.tensor_bytes, np.int64)
        self.columns = GraphColumns(
            edge_src=_i64(a.edge_src), edge_dst=_i64(a.edge_dst),
            edge_tensor=_i64(a.edge_tensor),
            in_off=_offsets(np.bincount(a.edge_dst, minlength=n)),
            out_edges=self._out_edges(), out_off=_offsets(np.bincount(a.edge_src, minlength=n)),
            own_off=_i64(a.out_offsets), producer=_i64(a.tensor_producer),
            tensor_bytes=tensor_bytes,
            key_bytes=np.concatenate((tensor_bytes, np.repeat(tensor_bytes, n_dev))),
            alloc=_i64(a.alloc_bytes), workspace=_i64(a.workspace_bytes),
            in_degree=np.bincount(a.edge_dst, minlength=n).astype(np.int64),
            param_bytes=_i64(a.param_bytes),
            t_row=_i64(size_of.ravel() if self.by_size else np.arange(n_tensors)),
            times=np.full((len(sizes) if self.by_size else n_tensors, n_dev, n_dev), np.nan),
            route=route, route_off=route_off, n_channels=len(self.channels),
            streams=np.array([d.compute_streams for d in specs], np.int64),
            copy_engines=np.array([d.copy_engines for d in specs], np.int64),
            capacity=np.array([d.memory_bytes for d in specs], np.int64))

    def _route(self, s: int, d: int) -> list[str]:
        return [h.channel for h in self.cluster.route(self.devices[s], self.devices[d])]

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

    def transfer_slots(self, op_dev: np.ndarray) -> np.ndarray:
        """The slot of each transfer of the plan of ``op_dev``, in the order
        :attr:`Plan.transfers` lists them (where each (tensor, device) first crosses)."""
        g = self.columns
        edges = self.by_rank
        dst = op_dev[g.edge_dst[edges]]
        far = op_dev[g.edge_src[edges]] != dst
        keys = g.edge_tensor[edges][far] * len(self.devices) + dst[far]
        slots, first = np.unique(keys, return_index=True)
        return slots[np.argsort(first)].astype(np.int64)

    def inputs(self, plan: Plan) -> PlanInputs:
        """What the loop reads of ``plan`` (a plan of this graph, without device groups)."""
        op_dev = plan.device_codes(self.devices)
        orders = plan.order_positions(self.devices)
        return PlanInputs(op_dev=op_dev, op_time=self._op_times(op_dev),
                          order=np.concatenate(orders),
                          order_off=_offsets([len(o) for o in orders]))

    def state(self, p: PlanInputs, *, record: bool, overflowed: bool = False) -> State:
        """The first state of ``p``'s run (``record``: keep the memory record)."""
        refs, missing = compiled.start_refs(self.columns, p.op_dev)
        if missing:
            self._learn(p.op_dev)
        return compiled.new_state(self.columns, p, refs, self.resident(p),
                                  overflowed=overflowed, record=record)

    def resident(self, p: PlanInputs) -> np.ndarray:
        """Each device's parameter bytes under ``p``."""
        return np.bincount(p.op_dev, weights=self.graph.arrays.param_bytes,
                           minlength=len(self.devices)).astype(np.int64)

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
        return self.table[np.arange(len(op_dev)), op_dev]

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
            self.table[:, d] = column
            self.priced[d] = True

    def _learn(self, op_dev: np.ndarray) -> None:
        """Ask the cost model the transfer times ``op_dev``'s edges need and the table
        lacks (once per size, or tensor, and device pair)."""
        g, a, names, cost = self.columns, self.graph.arrays, self.devices, self.cost
        src, dst = op_dev[g.edge_src], op_dev[g.edge_dst]
        far = src != dst
        rows = g.t_row[g.edge_tensor[far]]
        wanted = set(zip(rows.tolist(), src[far].tolist(), dst[far].tolist(), strict=True))
        for r, s, d in wanted:
            if not np.isnan(g.times[r, s, d]):
                continue
            if self.by_size:
                t = cost.transfer_time(int(self.sizes[r]), names[s], names[d])
            else:
                t = cost.tensor_transfer_time(a.tensor_names[r], int(a.tensor_bytes[r]),
                                              names[s], names[d])
            g.times[r, s, d] = t


def _i64(x: np.ndarray) -> np.ndarray:
    """One integer type for every column: one compiled loop serves all."""
    return np.asarray(x, np.int64)


def _offsets(counts: np.ndarray | list[int]) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
