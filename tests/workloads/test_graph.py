from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import Graph, GraphError, Op, Tensor


@st.composite
def random_dags(draw: st.DrawFn) -> Graph:
    """Random DAGs: op i reads a random subset of earlier ops' outputs."""
    n = draw(st.integers(1, 25))
    ops = []
    for i in range(n):
        preds = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3, unique=True)) \
            if i else []
        shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
        ops.append(Op(f"n{i}", "relu", draw(st.sampled_from(["elementwise", "matmul"])),
                      inputs=tuple(f"n{p}" for p in preds), outputs=(Tensor(f"n{i}", shape),),
                      flops=draw(st.integers(0, 10**9)), attrs={"k": [1, [2, 3]]}))
    return Graph("random", reversed(ops) if draw(st.booleans()) else ops)


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_json_round_trip_is_lossless(g: Graph) -> None:
    back = Graph.from_json(g.to_json())
    assert back == g
    assert back.topological_order() == g.topological_order()


@settings(max_examples=60, deadline=None)
@given(random_dags())
def test_topological_order_respects_every_edge(g: Graph) -> None:
    position = {name: i for i, name in enumerate(g.topological_order())}
    assert sorted(position) == sorted(op.name for op in g)
    for edge in g.edges():
        assert position[edge.src] < position[edge.dst]


def test_cycle_is_rejected_naming_ops() -> None:
    a = Op("a", "relu", "elementwise", inputs=("b",), outputs=(Tensor("a", (1,)),))
    b = Op("b", "relu", "elementwise", inputs=("a",), outputs=(Tensor("b", (1,)),))
    with pytest.raises(GraphError, match=r"must form a DAG, got a cycle through '(a|b)'"):
        Graph("cyc", [a, b])


def test_missing_producer_and_duplicates_are_rejected() -> None:
    a = Op("a", "relu", "elementwise", inputs=("ghost",), outputs=(Tensor("a", (1,)),))
    with pytest.raises(GraphError, match="op 'a': input tensor 'ghost' is produced by no op"):
        Graph("g", [a])
    x = Op("x", "input", "source", outputs=(Tensor("x", (1,)),))
    with pytest.raises(GraphError, match="duplicate op name 'x'"):
        Graph("g", [x, x])


def test_bad_fields_name_the_op_and_value() -> None:
    with pytest.raises(GraphError, match=r"op 'a': op_class must be one of .* got 'gemm'"):
        Op("a", "matmul", "gemm")
    with pytest.raises(GraphError, match=r"op 'a': flops must be a finite number in "
                                         r"\[0, 2\*\*63\), got -1"):
        Op("a", "relu", "elementwise", flops=-1)
    with pytest.raises(GraphError, match=r"op 'a': bytes_read must be .* got nan"):
        Op("a", "relu", "elementwise", bytes_read=float("nan"))
    with pytest.raises(GraphError, match=r"tensor 't': size must fit in an int64 of bytes"):
        Tensor("t", (10**12, 10**12))
    with pytest.raises(GraphError, match=r"tensor 't': shape must be positive integers"):
        Tensor("t", (2, 0))
    with pytest.raises(GraphError, match=r"dtype must be one of .* got 'fp13'"):
        Tensor("t", (2,), "fp13")


def test_networkx_view_carries_edge_bytes() -> None:
    x = Op("x", "input", "source", outputs=(Tensor("x", (10,)),))
    y = Op("y", "add", "elementwise", inputs=("x", "x"), outputs=(Tensor("y", (10,)),))
    g = Graph("g", [x, y]).to_networkx()
    assert g.edges["x", "y"] == {"tensors": ["x"], "bytes": 40}


def test_from_json_rejects_garbage() -> None:
    with pytest.raises(GraphError, match="expected JSON"):
        Graph.from_json("{nope")
    with pytest.raises(GraphError, match=r"graph: format: expected one of 'placelab\.graph', "
                                         r"got 'other'"):
        Graph.from_json('{"format": "other"}')


def test_graph_arrays_are_read_only() -> None:
    # Executors and policies share one GraphArrays per graph: a write would change their
    # answers while the graph stays the same.
    import numpy as np
    import pytest

    from workloads import build_model

    arrays = build_model("mlp").arrays
    for name in ("flops", "moved_bytes", "alloc_bytes", "edge_src", "tensor_bytes"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(arrays, name)[0] = 0
    assert isinstance(arrays.flops, np.ndarray)
