"""Test helpers: small graphs and clusters with round numbers, and a fixed-time cost."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hwmodels import Cluster, CostModel, Device, Link
from workloads import Graph, Op, Tensor


def toy_device(name: str, *, memory_bytes: int = 2**34, streams: int = 1) -> Device:
    return Device(name, "gpu", peak={"fp32": 1e12}, memory_bytes=memory_bytes,
                  memory_bandwidth=1e11, compute_streams=streams)


def toy_cluster(n: int = 2, *, bandwidth: float = 1e9, latency_s: float = 1e-6,
                memory_bytes: int = 2**34, duplex: str = "full") -> Cluster:
    """``n`` identical devices d0..d(n-1) in a chain joined by identical links."""
    devices = tuple(toy_device(f"d{i}", memory_bytes=memory_bytes) for i in range(n))
    links = tuple(Link(f"d{i}", f"d{i + 1}", bandwidth, latency_s, duplex, name=f"l{i}")
                  for i in range(n - 1))
    return Cluster("toy", devices, links)


def op(name: str, inputs: tuple[str, ...] = (), *, nbytes: int = 4, flops: int = 0,
       param_bytes: int = 0, workspace_bytes: int = 0) -> Op:
    """An elementwise op whose output is ``nbytes`` of fp32."""
    return Op(name, "relu", "elementwise", inputs=inputs,
              outputs=(Tensor(name, (nbytes // 4,)),), flops=flops,
              param_bytes=param_bytes, workspace_bytes=workspace_bytes)


def chain(n: int, *, nbytes: int = 4) -> Graph:
    ops = [op("op0", nbytes=nbytes)]
    ops += [op(f"op{i}", (f"op{i - 1}",), nbytes=nbytes) for i in range(1, n)]
    return Graph("chain", ops)


class FixedCost(CostModel):
    """Op times from a table (default 1 s); transfers from the cluster's links."""

    name = "fixed"

    def __init__(self, cluster: Cluster, times: Mapping[str, float] | None = None,
                 default: float = 1.0) -> None:
        super().__init__(cluster)
        self.times = dict(times or {})
        self.default = default

    def op_time(self, op: Op, device: str) -> float:
        return self.times.get(op.name, self.default)


# Topcuoglu, Hariri and Wu (IEEE TPDS 2002), Fig. 2: ten tasks on three processors.
TOPCUOGLU_COMP = {1: (14, 16, 9), 2: (13, 19, 18), 3: (11, 13, 19), 4: (13, 8, 17),
                  5: (12, 13, 10), 6: (13, 16, 9), 7: (7, 15, 11), 8: (5, 11, 14),
                  9: (18, 12, 20), 10: (21, 7, 16)}
TOPCUOGLU_EDGES = {(1, 2): 18, (1, 3): 12, (1, 4): 9, (1, 5): 11, (1, 6): 14, (2, 8): 19,
                   (2, 9): 16, (3, 7): 23, (4, 8): 27, (4, 9): 23, (5, 9): 13, (6, 8): 15,
                   (7, 10): 17, (8, 10): 11, (9, 10): 13}


# Arabnejad and Barbosa (IEEE TPDS 2014), PEFT's worked example: ten tasks on three
# processors.
ARABNEJAD_COMP = {1: (22, 21, 36), 2: (22, 18, 18), 3: (32, 27, 43), 4: (7, 10, 4),
                  5: (29, 27, 35), 6: (26, 17, 24), 7: (14, 25, 30), 8: (29, 23, 36),
                  9: (15, 21, 8), 10: (13, 16, 33)}
ARABNEJAD_EDGES = {(1, 2): 17, (1, 3): 31, (1, 4): 29, (1, 5): 13, (1, 6): 7, (2, 8): 3,
                   (2, 9): 30, (3, 7): 16, (4, 8): 11, (4, 9): 7, (5, 9): 57, (6, 8): 5,
                   (7, 10): 9, (8, 10): 42, (9, 10): 7}


def topcuoglu_instance(copy_engines: int = 1) -> tuple[Graph, Cluster, CostModel]:
    """Topcuoglu's task graph on three fully connected processors (:func:`table_instance`)."""
    return table_instance("topcuoglu2002", TOPCUOGLU_COMP, TOPCUOGLU_EDGES, copy_engines)


def arabnejad_instance() -> tuple[Graph, Cluster, CostModel]:
    """PEFT's worked example on three fully connected processors (:func:`table_instance`)."""
    return table_instance("arabnejad2014", ARABNEJAD_COMP, ARABNEJAD_EDGES)


def table_instance(name: str, comp: dict[int, tuple[int, int, int]],
                   edges: dict[tuple[int, int], int],
                   copy_engines: int = 1) -> tuple[Graph, Cluster, CostModel]:
    """A published task graph (one tensor per edge, so each edge has its own cost), three
    fully connected processors, and its cost matrix as a ``table`` cost model."""
    from hwmodels import TableCost

    ops = []
    for t in sorted(comp):
        outs = tuple(Tensor(f"n{t}->n{b}", (1,)) for (a, b) in edges if a == t)
        ins = tuple(f"n{a}->n{t}" for (a, b) in edges if b == t)
        ops.append(Op(f"n{t}", "opaque", "matmul", inputs=ins,
                      outputs=outs or (Tensor(f"n{t}.out", (1,)),)))
    graph = Graph(name, ops)
    devices = tuple(Device(f"p{i}", "cpu", peak={"fp32": 1e9}, memory_bytes=2**30,
                           memory_bandwidth=1e9, copy_engines=copy_engines) for i in (1, 2, 3))
    cluster = Cluster("three", devices, (Link("p1", "p2", 1e9), Link("p1", "p3", 1e9),
                                         Link("p2", "p3", 1e9)))
    cost = TableCost(cluster,
                     {f"n{t}": {f"p{i + 1}": v for i, v in enumerate(row)}
                      for t, row in comp.items()},
                     {f"n{a}->n{b}": w for (a, b), w in edges.items()})
    return graph, cluster, cost


def recording(score: Callable[[Any], float]
              ) -> tuple[Callable[[Any], float], list[Any], list[float]]:
    """``score`` as an evaluator that keeps every plan it was given and every score it
    returned, in order (what a search spent its budget on)."""
    plans: list[Any] = []
    seconds: list[float] = []

    def scored(p: Any) -> float:
        plans.append(p)
        seconds.append(float(score(p)))
        return seconds[-1]

    return scored, plans, seconds


def reload_catalog() -> None:
    """Forget every registered device and cluster: the next lookup reads the built-in and
    user catalogs again (under the current ``PLACELAB_HOME``)."""
    import hwmodels.registry as registry

    registry._DEVICES.clear()
    registry._CLUSTERS.clear()
    registry._SOURCES.clear()
    registry._loaded = False
