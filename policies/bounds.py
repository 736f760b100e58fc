"""Lower bounds on the makespan of any plan of a graph on a cluster.

* :func:`critical_path_bound`: the longest path when every op runs on its fastest device and
  communication is free.
* :func:`work_bound`: the work of every op at its fastest, spread evenly over every compute
  stream of the cluster.

Both hold for the simulator's model: an op never runs faster than on its fastest device,
never before its producers end, and a stream runs one op at a time.
"""

from __future__ import annotations

import numpy as np

from hwmodels.cost import CostModel
from hwmodels.spec import Cluster
from workloads.graph import Graph

__all__ = ["critical_path_bound", "fastest_times", "lower_bound", "work_bound"]


def fastest_times(graph: Graph, cluster: Cluster, cost: CostModel) -> np.ndarray:
    """Each op's time on its fastest device, in ``graph.arrays`` order."""
    names = graph.arrays.names
    per_device = [cost.op_times(graph, dict.fromkeys(names, d)) for d in cluster.device_names]
    return np.min(np.asarray(per_device), axis=0)


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
    a = graph.arrays
    fastest = fastest_times(graph, cluster, cost).tolist()
    finish = [0.0] * len(a.names)
    preds: list[list[int]] = [[] for _ in a.names]
    for src, dst in zip(a.edge_src.tolist(), a.edge_dst.tolist(), strict=True):
        preds[dst].append(src)
    for i in range(len(a.names)):  # arrays order is topological
        finish[i] = fastest[i] + max((finish[p] for p in preds[i]), default=0.0)
    return max(finish, default=0.0)


def work_bound(graph: Graph, cluster: Cluster, cost: CostModel) -> float:
    """Total fastest work over the number of compute streams in the cluster."""
    streams = sum(d.compute_streams for d in cluster.devices)
    return float(fastest_times(graph, cluster, cost).sum()) / streams


def lower_bound(graph: Graph, cluster: Cluster, cost: CostModel) -> float:
    """The larger of :func:`critical_path_bound` and :func:`work_bound`."""
    return max(critical_path_bound(graph, cluster, cost), work_bound(graph, cluster, cost))
