"""Two copies of a model side by side: the graph that measures a host's slowdown."""

from __future__ import annotations

import networkx as nx

from runtime.hosts import _twice, median_slowdown
from workloads import build_model


def test_two_copies_are_independent_and_complete() -> None:
    graph = build_model("lenet5", batch=2)
    both = _twice(graph)
    assert len(both) == 2 * len(graph) and both.flops == 2 * graph.flops
    parts = list(nx.weakly_connected_components(both.to_networkx_view()))
    assert sorted({n.split("/")[0] for n in p} for p in parts) == [{"copy0"}, {"copy1"}]


def test_the_host_slowdown_is_the_median_and_never_below_one() -> None:
    assert median_slowdown({"a": 1.4, "b": 1.1, "c": 1.2}) == 1.2
    assert median_slowdown({"a": 0.8}) == 1.0 and median_slowdown({}) == 1.0
