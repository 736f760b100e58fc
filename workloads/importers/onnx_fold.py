"""Constant folding of an ONNX model before shape inference runs again.

Exporters write shape arithmetic and weight slicing as nodes (``Shape`` of an input, then
``Gather``, ``Mul``, ``Concat``; ``Slice`` of a packed projection weight by computed
bounds). Shape inference propagates some of it (``data_prop``) but not all, and a tensor
whose shape depends on the rest is left with an unknown dimension. Here every node whose
inputs are all known is evaluated by ONNX's own reference evaluator (``onnx.reference``)
and replaced by an initializer holding its result: initializers and ``Constant`` nodes are
known from the start, ``Shape`` and ``Size`` of a constant or of a tensor whose shape
inference fixed are known from that shape; a round that folds something is followed by
shape inference and another round. Random generators are never folded; a node the
evaluator cannot run stays as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["fold_constants"]

#: Nodes never folded: their value is not a function of their inputs.
_VOLATILE = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
             "Multinomial", "Bernoulli"}


def _static_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """Tensors whose shape inference left every dimension known."""
    shapes: dict[str, tuple[int, ...]] = {}
    for info in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        tt = info.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[info.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return shapes


def _shape_value(node: Any, shapes: dict[str, tuple[int, ...]]) -> np.ndarray | None:
    """``Shape`` (with its ``start``/``end``) or ``Size`` of a tensor of known shape."""
    shape = shapes.get(node.input[0])
    if shape is None:
        return None
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return np.array(shape[slice(start, end)], dtype=np.int64)


def _evaluate(node: Any, known: dict[str, np.ndarray], opset: dict[str, int]
              ) -> list[np.ndarray] | None:
    from onnx.reference import ReferenceEvaluator

    try:
        run = ReferenceEvaluator(node, opsets=opset)
        feeds = {name: known[name] for name in node.input if name}
        return [np.asarray(v) for v in run.run(None, feeds)]
    except Exception:  # the evaluator lacks the op or refuses the inputs: leave it
        return None


def fold_constants(model: Any, base_dir: str = ""
                   ) -> tuple[Any, dict[str, tuple[str, ...]], dict[str, int]]:
    """``model`` with every node computable from constants and known shapes replaced by
    initializers (unused initializers dropped), shapes inferred again; and, so that
    parameters are counted once, each folded floating-point constant's *sources*: the
    original initializers it was computed from (a transposed or sliced weight is that
    weight), or itself where it comes from none (a ``Constant`` or ``ConstantOfShape``
    tensor), with every source's element count.

    >>> import onnx
    >>> from onnx import helper, TensorProto
    >>> two = helper.make_node("Constant", [], ["two"], value_int=2)
    >>> shape = helper.make_node("Shape", ["x"], ["s"])
    >>> times = helper.make_node("Mul", ["s", "two"], ["s2"])
    >>> graph = helper.make_graph([two, shape, times], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
    ...     [helper.make_tensor_value_info("s2", TensorProto.INT64, None)])
    >>> folded, sources, sizes = fold_constants(helper.make_model(graph))
    >>> [i.name for i in folded.graph.initializer], len(folded.graph.node), sources
    (['s2'], 0, {})
    """
    from onnx import numpy_helper

    graph = model.graph
    opset = {o.domain or "": o.version for o in model.opset_import}
    stored = {i.name for i in graph.initializer}
    known = {i.name: numpy_helper.to_array(i, base_dir) for i in graph.initializer}
    origin: dict[str, tuple[str, ...]] = {n: (n,) for n, v in known.items()
                                          if np.issubdtype(v.dtype, np.floating)}
    sizes = {n: int(known[n].size) for n in origin}
    made: dict[str, np.ndarray] = {}
    # A folded value can fix a shape (a Reshape's target, a Pad's pads) that makes a later
    # Shape known: fold and infer again until a round folds nothing.
    while True:
        kept = _fold_round(model, known, origin, sizes, made, opset)
        if len(kept) == len(model.graph.node):
            break
        model = _rewrite(model, kept, made, stored)
    if not made:
        return model, {}, {}
    used = {i for node in model.graph.node for i in node.input} | {
        o.name for o in model.graph.output}
    folded = {n: origin[n] for n in made if n in origin and n in used}
    return model, folded, {src: sizes[src] for srcs in folded.values() for src in srcs}


def _fold_round(model: Any, known: dict[str, np.ndarray], origin: dict[str, tuple[str, ...]],
                sizes: dict[str, int], made: dict[str, np.ndarray], opset: dict[str, int]
                ) -> list[Any]:
    """One pass over the nodes: evaluate what is known (recording values, sources and
    sizes in place); the nodes left."""
    # a constant's shape is its value's, whether or not inference recorded it
    shapes = {**{n: tuple(v.shape) for n, v in known.items()}, **_static_shapes(model)}
    kept = []
    for node in model.graph.node:
        values: list[np.ndarray] | None = None
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
            value = _shape_value(node, shapes)
            values = None if value is None else [value]
        elif node.op_type not in _VOLATILE and all(i in known for i in node.input if i):
            values = _evaluate(node, known, opset)
        if values is None or len(values) != len([o for o in node.output if o]):
            kept.append(node)
            continue
        sources = tuple(dict.fromkeys(src for i in node.input if i
                                      for src in origin.get(i, ())))
        for name, value in zip([o for o in node.output if o], values, strict=True):
            known[name] = made[name] = value
            if np.issubdtype(value.dtype, np.floating):
                origin[name] = sources or (name,)
                sizes.setdefault(name, int(value.size))
    return kept


def _rewrite(model: Any, kept: list[Any], made: dict[str, np.ndarray], stored: set[str]
             ) -> Any:
    """``model`` with only the ``kept`` nodes, the initializers they (or the outputs) read
    among the stored and the ``made`` ones, and shapes inferred anew."""
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    used = {i for node in kept for i in node.input} | {o.name for o in graph.output}
    have = {i.name for i in graph.initializer}
    initializers = [i for i in graph.initializer if i.name in used]
    initializers += [numpy_helper.from_array(v, name) for name, v in made.items()
                     if name in used and name not in have]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    have = {i.name for i in initializers}
    inputs = [i for i in graph.input if i.name not in made
              and (i.name not in stored or i.name in used)]
    if model.ir_version < 4:  # before IR 4 every initializer is a graph input too
        named = {i.name for i in inputs}
        inputs += [onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for name, v in made.items() if name in have and name not in named]
    del graph.input[:]
    graph.input.extend(inputs)
    del graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
