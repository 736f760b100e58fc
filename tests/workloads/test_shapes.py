"""Shapes along edges: a graph file whose shapes contradict its ops is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from workloads import Graph, GraphError, Op, Tensor
from workloads.shapes import check_edges
from workloads.training import training_graph
from workloads.zoo import build_model, list_models


@pytest.mark.parametrize("name", list_models())
def test_every_zoo_model_and_its_training_step_hold(name: str) -> None:
    graph = build_model(name)
    check_edges(graph)
    check_edges(training_graph(graph, "adam"))


@settings(max_examples=80, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, max_side=5),
       st.data())
def test_an_add_holds_exactly_when_its_output_is_numpys_broadcast(shapes, data) -> None:  # type: ignore[no-untyped-def]
    a, b = shapes.input_shapes
    out = data.draw(st.one_of(st.just(shapes.result_shape),
                              hnp.array_shapes(min_dims=1, max_dims=4, max_side=5)))
    graph = Graph("g", [Op("a", "input", "source", outputs=(Tensor("a", a or (1,)),)),
                        Op("b", "input", "source", outputs=(Tensor("b", b or (1,)),)),
                        Op("s", "add", "elementwise", inputs=("a", "b"),
                           outputs=(Tensor("s", out),))])
    try:  # numpy is the reference: each input must broadcast to the output shape
        ok = all(np.broadcast_shapes(s or (1,), out) == out for s in (a, b))
    except ValueError:
        ok = False
    if ok:
        check_edges(graph)
    else:
        with pytest.raises(GraphError, match=r"^op 's' \(add\): output shape must follow"):
            check_edges(graph)


def test_a_graph_file_with_a_contradicting_shape_is_refused(tmp_path) -> None:
    data = json.loads(build_model("mlp", batch=4).to_json())
    relu = next(op for op in data["ops"] if op["name"] == "relu1")
    relu["outputs"][0]["shape"] = [4, 77]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError) as err:
        Graph.load(path)
    assert str(err.value) == (f"{path}: op 'relu1' (relu): output shape must follow from "
                              f"input 'fc1' of shape (4, 1024): expected a shape it "
                              f"broadcasts to, got (4, 77)")
    fc2 = next(op for op in data["ops"] if op["name"] == "fc2")
    relu["outputs"][0]["shape"], fc2["attrs"]["in_features"] = [4, 1024], 512
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError, match=r"op 'fc2' \(linear\): input 'relu1' must have "
                                         r"in_features on its last axis: expected 512, got "
                                         r"shape \(4, 1024\)$"):
        Graph.load(path)
    fc2["attrs"]["in_features"], fc2["outputs"][0]["shape"] = 1024, [4, 1000]
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError, match=r"op 'fc2' \(linear\): output shape must follow "
                                         r"from input 'relu1' of shape \(4, 1024\): expected "
                                         r"\(4, 1024\) \(out_features on the last axis\), "
                                         r"got \(4, 1000\)$"):
        Graph.load(path)


def test_a_batchnorm_fed_its_statistics_and_a_fused_chain_hold() -> None:
    x = Op("x", "input", "source", outputs=(Tensor("x", (2, 8, 4, 4)),))
    stats = Op("s", "input", "source", outputs=(Tensor("s", (8,)),))
    bn = Op("bn", "batchnorm", "elementwise", inputs=("x", "s"),
            outputs=(Tensor("bn", (2, 8, 4, 4)),))
    check_edges(Graph("g", [x, stats, bn]))  # the data input decides, not the statistics
    # relu then a 2x resize fused into one op: it writes the resize's output
    fused = Op("r", "relu", "elementwise", inputs=("x",), outputs=(Tensor("up", (2, 8, 8, 8)),),
               attrs={"fused": ("up",)})
    check_edges(Graph("g", [x, fused]))


def test_a_linear_layer_without_a_features_axis_is_one_line() -> None:
    x = Op("x", "input", "source", outputs=(Tensor("x", (1,)),))
    fc = Op("fc", "linear", "matmul", inputs=("x",), outputs=(Tensor("fc", (4,)),),
            attrs={"in_features": 3, "out_features": 4})
    with pytest.raises(GraphError, match=r"^op 'fc' \(linear\): input 'x' must have "
                                         r"in_features on its last axis: expected 3, got "
                                         r"shape \(1,\)$"):
        check_edges(Graph("g", [x, fc]))
    scalar = Op("x", "input", "source", outputs=(Tensor("x", ()),))
    with pytest.raises(GraphError, match=r"^op 'fc' \(linear\): input 'x' and the output "
                                         r"must have a features axis, got shapes \(\) and "
                                         r"\(4,\)$"):
        check_edges(Graph("g", [scalar, fc]))
