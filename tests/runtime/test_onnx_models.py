"""The nine ONNX models the onnx package ships, run by placelab and by onnxruntime on the
same input and the same random weights, compared at every intermediate tensor.

The shipped weights are computed from constants (uniform), so final outputs would agree
trivially: every weight the graph reads is replaced, in a copy of the model, by a random
initializer (the nodes that computed it removed), and every intermediate tensor is made an
output of the copy so that onnxruntime reports it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

from onnx import helper, numpy_helper, shape_inference  # noqa: E402

from policies import plan  # noqa: E402
from runtime import NumpyEngine, execute  # noqa: E402
from runtime.onnx_weights import initializer_values, onnx_weights  # noqa: E402
from workloads.importers import import_onnx  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.name for p in LIGHT.glob("*.onnx"))


def _constants(model) -> set[str]:
    """Initializers and whatever nodes compute from them alone (as the importer folds)."""
    consts = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if all(not t or t in consts for t in node.input):
            consts.update(o for o in node.output if o)
    return consts


def _random_copy(path: Path, out: Path, seed: int) -> tuple[Path, str, tuple[int, ...]]:
    """A copy of the model with random weights and every intermediate tensor an output."""
    model = shape_inference.infer_shapes(onnx.load(str(path)), strict_mode=True)
    consts = _constants(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]}
    shapes |= {i.name: list(i.dims) for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    live = [n for n in model.graph.node if not all(not t or t in consts for t in n.input)]
    read = {t for n in live for t in n.input if t in consts}
    inits = {i.name: i for i in model.graph.initializer}
    new_inits = []
    for name in sorted(read):
        shape = shapes[name]
        if name in inits and inits[name].data_type != onnx.TensorProto.FLOAT:
            new_inits.append(inits[name])  # integer shapes and axes stay as they are
            continue
        if len(shape) >= 2:
            value = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        else:
            value = rng.uniform(0.5, 1.5, shape)  # scales, shifts, means, variances
        new_inits.append(numpy_helper.from_array(value.astype(np.float32), name))
    inputs = [i for i in model.graph.input if i.name not in consts]
    produced = [o for n in live for o in n.output if o]
    typed = {v.name: v for v in [*model.graph.value_info, *model.graph.output]}
    outputs = [typed[o] for o in produced if o in typed]  # a dropout's mask has no type
    graph = helper.make_graph(live, model.graph.name, inputs, outputs, new_inits,
                              value_info=list(model.graph.value_info))
    copy = helper.make_model(graph, opset_imports=model.opset_import,
                             ir_version=max(model.ir_version, 7))  # initializers need no input
    onnx.save(copy, str(out))
    first = inputs[0]
    return out, first.name, tuple(shapes[first.name])


@pytest.mark.parametrize("name", MODELS)
def test_light_model_agrees_with_onnxruntime_at_every_tensor(name: str, tmp_path) -> None:
    path, input_name, shape = _random_copy(LIGHT / name, tmp_path / name, seed=1)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    reference = dict(zip(names, session.run(names, {input_name: x}), strict=True))

    graph = import_onnx(path)
    engine = NumpyEngine(devices=1)
    weights = onnx_weights(graph, initializer_values(onnx.load(str(path))))
    run = execute(plan(graph, engine.cluster(), "single_device"), engine,
                  inputs={input_name: x}, weights=weights, warmup=0, repeats=1)
    compared = 0
    for tensor, expected in reference.items():
        if tensor not in run.outputs:
            continue
        got = run.outputs[tensor].reshape(expected.shape)
        scale = max(float(np.abs(expected).max()), 1e-6)
        error = float(np.abs(got - expected).max()) / scale
        assert error <= 1e-4, f"{name}: tensor {tensor!r} differs by {error:.2e} (relative)"
        compared += 1
    assert compared >= 0.9 * len(reference), (compared, len(reference))


def _pad_model(path: Path, opset: int, pads: list[int], axes: list[int] | None,
               mode: str = "constant") -> Path:
    """x (1, 3, 4, 5) -> Pad -> Relu, the pads a constant input (an attribute before 11)."""
    from onnx import TensorProto

    dims = [1, 3, 4, 5]
    half = len(pads) // 2
    for a, b, e in zip(axes or range(half), pads[:half], pads[half:], strict=True):
        dims[a] += b + e
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    inits, inputs, extra = [], ["x"], {}
    if opset >= 11:
        inits.append(numpy_helper.from_array(np.array(pads, np.int64), "pads"))
        inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "value"))
        inputs += ["pads", "value"]
        if axes is not None:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            inputs.append("axes")
    else:
        extra = {"pads": pads, "value": 0.5}
    nodes = [helper.make_node("Pad", inputs, ["p"], name="pad", mode=mode,
                              **extra),  # type: ignore[arg-type]
             helper.make_node("Relu", ["p"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "pad", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(("opset", "pads", "axes"), [
    (13, [0, 0, 1, 2, 0, 0, 2, 1], None),
    (13, [0, 1, -1, 0, 0, 0, 2, -2], None),  # negative pads crop
    (18, [1, 2, 0, 1], [2, -1]),
    (10, [0, 0, 1, 1, 0, 0, 0, 2], None),
])
def test_pad_agrees_with_onnxruntime(tmp_path, opset, pads, axes) -> None:
    path = _pad_model(tmp_path / "pad.onnx", opset, pads, axes)
    graph = import_onnx(path)
    assert graph.op("pad").kind == "pad" and graph.op("pad").params == 0
    x = np.random.default_rng(3).standard_normal((1, 3, 4, 5)).astype(np.float32)
    engine = NumpyEngine(devices=1)
    ours = execute(plan(graph, engine.cluster(), "single_device"), engine, inputs={"x": x},
                   warmup=0, repeats=1).outputs["y"]
    theirs = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ours, theirs)


def test_pad_in_a_mode_without_a_kernel_is_named(tmp_path) -> None:
    from workloads import PlacelabError

    graph = import_onnx(_pad_model(tmp_path / "pad.onnx", 13, [0, 0, 1, 1, 0, 0, 1, 1], None,
                                   mode="reflect"))
    engine = NumpyEngine(devices=1)
    with pytest.raises(PlacelabError, match="op 'pad': pad needs attrs 'pads' and 'value' to "
                                            "run"):
        execute(plan(graph, engine.cluster(), "single_device"), engine)


def test_hard_activations_agree_with_onnxruntime(tmp_path) -> None:
    from onnx import TensorProto

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])
    nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], name="hs", alpha=0.3, beta=0.4),
             helper.make_node("HardSigmoid", ["h"], ["d"], name="hs_default"),
             helper.make_node("HardSwish", ["d"], ["y"], name="swish")]
    path = tmp_path / "hard.onnx"
    model = helper.make_model(helper.make_graph(nodes, "hard", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what the onnxruntime here reads
    onnx.save(model, str(path))
    graph = import_onnx(path)
    values = np.random.default_rng(4).uniform(-6, 6, (2, 3, 4)).astype(np.float32)
    engine = NumpyEngine(devices=1)
    ours = execute(plan(graph, engine.cluster(), "single_device"), engine,
                   inputs={"x": values}, warmup=0, repeats=1).outputs["y"]
    theirs = ort.InferenceSession(str(path)).run(None, {"x": values})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
