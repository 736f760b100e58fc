from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import Graph, GraphError, Op, Tensor
from workloads.dtypes import DTYPE_BYTES


@st.composite
def random_dags(draw: st.DrawFn) -> Graph:
    """Random DAGs: op i reads a random subset of earlier ops' outputs."""
    n = draw(st.integers(1, 25))
    ops = []
    for i in range(n):
        preds = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3, unique=True)) \
            if i else []
        shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
        ops.append(Op(f"n{i}", "synthetic", draw(st.sampled_from(["elementwise", "matmul"])),
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
@given(random_dags(), st.dictionaries(st.sampled_from(["model", "batch", "step"]),
                                      st.integers() | st.text(max_size=5)))
def test_a_pickled_or_copied_graph_is_the_same_graph(g: Graph, meta: dict) -> None:  # type: ignore[type-arg]
    import copy
    import pickle

    g = g.derive(g.ops, **meta)
    g.arrays  # noqa: B018 (worked out before: the copy makes its own, read-only)
    for back in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert back == g
        assert dict(back.meta) == dict(g.meta)
        assert back.topological_order() == g.topological_order()
        assert not back.arrays.flops.flags.writeable
        with pytest.raises(TypeError):
            back.meta["batch"] = 1  # type: ignore[index]


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
        Op("a", "relu", "elementwise", bytes_read=float("nan"))  # type: ignore[arg-type]
    with pytest.raises(GraphError, match=r"tensor 't': size must fit in an int64 of bytes"):
        Tensor("t", (10**12, 10**12))
    with pytest.raises(GraphError, match=r"tensor 't': shape must be positive integers"):
        Tensor("t", (2, 0))
    with pytest.raises(GraphError, match=r"dtype must be one of .* got 'fp13'"):
        Tensor("t", (2,), "fp13")
    with pytest.raises(GraphError, match=r"^op 'a': param_bytes must be a whole number \(a "
                                         r"count of FLOPs, bytes or parameters\), got 1\.5$"):
        Op("a", "relu", "elementwise", param_bytes=1.5)  # type: ignore[arg-type]
    with pytest.raises(GraphError, match=r"^op: name must be a string, got 5$"):
        Op(5, "relu", "elementwise")  # type: ignore[arg-type]
    with pytest.raises(GraphError, match=r"^op: name must be a non-empty string of printable "
                                         r"characters, got 'a\\nb'$"):
        Op("a\nb", "relu", "elementwise")
    whole = Op("a", "relu", "elementwise", flops=2e9)  # type: ignore[arg-type]
    assert whole.flops == 2 * 10**9  # a whole float


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


@st.composite
def dags_with_repeated_reads(draw: st.DrawFn) -> Graph:
    """Random DAGs whose ops may read one tensor twice and produce several tensors."""
    n = draw(st.integers(1, 20))
    ops: list[Op] = []
    tensors: list[str] = []
    for i in range(n):
        reads = draw(st.lists(st.sampled_from(tensors), max_size=4)) if tensors else []
        outs = tuple(Tensor(f"t{i}.{k}", (draw(st.integers(1, 9)),),
                            draw(st.sampled_from(["fp32", "bf16"])))
                     for k in range(draw(st.integers(0, 2))))
        tensors += [t.name for t in outs]
        ops.append(Op(f"n{i}", "relu", "elementwise", inputs=tuple(reads), outputs=outs,
                      flops=draw(st.integers(0, 10**6)), workspace_bytes=draw(st.integers(0, 9))))
    return Graph("reads", reversed(ops) if draw(st.booleans()) else ops)


@settings(max_examples=60, deadline=None)
@given(dags_with_repeated_reads())
def test_adjacency_matches_a_networkx_reference(g: Graph) -> None:
    import networkx as nx

    ref = nx.DiGraph()
    ref.add_nodes_from(op.name for op in g)
    for op in g:
        for tensor in op.inputs:
            ref.add_edge(next(o.name for o in g if tensor in [t.name for t in o.outputs]),
                         op.name)
    index = {op.name: i for i, op in enumerate(g)}
    for op in g:
        assert g.predecessors(op.name) == tuple(sorted(ref.predecessors(op.name),
                                                       key=index.__getitem__))
        assert g.successors(op.name) == tuple(sorted(ref.successors(op.name),
                                                     key=index.__getitem__))
    assert g.topological_order() == tuple(
        nx.lexicographical_topological_sort(ref, key=index.__getitem__))
    read = {t for op in g for t in op.inputs}
    assert g.outputs == tuple(t.name for op in g for t in op.outputs if t.name not in read)


@settings(max_examples=60, deadline=None)
@given(dags_with_repeated_reads())
def test_arrays_match_the_ops_they_flatten(g: Graph) -> None:
    a = g.arrays
    ops = [g.op(name) for name in a.names]
    assert a.names == g.topological_order()
    assert a.tensor_names == tuple(t.name for op in ops for t in op.outputs)
    edges = [(a.position[g.producer(t)], j, a.tensor_index[t])
             for j, op in enumerate(ops) for t in dict.fromkeys(op.inputs)]
    assert list(zip(a.edge_src.tolist(), a.edge_dst.tolist(), a.edge_tensor.tolist(),
                    strict=True)) == edges
    assert a.flops.tolist() == [float(op.flops) for op in ops]
    assert a.alloc_bytes.tolist() == [sum(t.nbytes for t in op.outputs) + op.workspace_bytes
                                      for op in ops]
    assert [op.outputs[0].dtype if op.outputs else "fp32" for op in ops] == [
        list(DTYPE_BYTES)[k] for k in a.dtype.tolist()]


def test_duplicate_output_tensors_are_named() -> None:
    x = Op("x", "input", "source", outputs=(Tensor("t", (1,)),))
    y = Op("y", "input", "source", outputs=(Tensor("t", (1,)),))
    with pytest.raises(GraphError, match="op 'y': output tensor name 't' is already produced "
                                         "by op 'x'"):
        Graph("g", [x, y])
