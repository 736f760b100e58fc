"""ONNX models as placelab graphs (needs the ``onnx`` extra).

Shapes come from ONNX shape inference once the inputs' symbolic dimensions are bound (by
name, or ``batch`` for the symbolic first dimension); an unknown dimension is an error.
Constant tensors (initializers, and whatever nodes compute from constants alone, such as
``ConstantOfShape`` weights) are folded away: a floating-point constant read by an op is
that op's parameters (batch-norm mean and variance count as buffers), an integer one (a
shape, axes) is an attribute. Every other node becomes an op with a cost formula; an
operator without one is imported as ``opaque`` (costed by the bytes it moves) and named in
one warning.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.errors import GraphError
from workloads.graph import Graph, Op, Tensor
from workloads.importers.formulas import interpolation_flops, recurrent_flops
from workloads.importers.onnx_fold import fold_constants

__all__ = ["import_onnx"]

#: ONNX element types by the IR dtype of their width (unsigned as signed, the FP8 variants
#: as fp8). Strings and complex numbers are refused; the other numeric types (16-bit and
#: sub-byte integers, FP4/FP6) have no IR dtype and import as fp32, with a warning.
_DTYPES = {1: "fp32", 2: "int8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 10: "fp16",
           11: "fp64", 12: "int32", 13: "int64", 16: "bf16", 17: "fp8", 18: "fp8", 19: "fp8",
           20: "fp8", 24: "fp8"}
_FLOAT = {"fp32", "fp16", "bf16", "fp64"}


@dataclass
class _Node:
    """What a cost formula sees of one ONNX node."""

    op_type: str
    inputs: list[Tensor]            # dynamic inputs
    consts: list[tuple[int, Tensor]]  # (input position, constant) pairs
    outputs: list[Tensor]
    attrs: dict[str, Any]
    #: every input with a shape by its position, constant or computed at run time (a
    #: convolution's weight may be either)
    at: dict[int, Tensor] = field(default_factory=dict)


def _numel(t: Tensor) -> int:
    return math.prod(t.shape)


def _conv(n: _Node) -> tuple[str, str, int]:
    out, weight = n.outputs[0], n.at.get(1)
    per_out = _numel(weight) // weight.shape[0] if weight else 0
    bias = _numel(out) if 2 in n.at else 0
    return "conv2d", "conv", 2 * _numel(out) * per_out + bias


def _gemm(n: _Node) -> tuple[str, str, int]:
    out = n.outputs[0]
    a = n.inputs[0]
    k = a.shape[0] if n.attrs.get("transA") else a.shape[-1]
    bias = _numel(out) if len(n.consts) + len(n.inputs) > 2 else 0
    return "linear", "matmul", 2 * _numel(out) * k + bias


def _matmul(n: _Node) -> tuple[str, str, int]:
    a = n.inputs[0] if n.inputs else n.consts[0][1]
    return "matmul", "matmul", 2 * _numel(n.outputs[0]) * a.shape[-1]


def _pool(kind: str) -> Callable[[_Node], tuple[str, str, int]]:
    def cost(n: _Node) -> tuple[str, str, int]:
        window = math.prod(n.attrs.get("kernel_shape", [1]))
        return kind, "reduction", _numel(n.outputs[0]) * window
    return cost


def _elementwise(kind: str, per_element: int) -> Callable[[_Node], tuple[str, str, int]]:
    def cost(n: _Node) -> tuple[str, str, int]:
        extra = max(len(n.inputs) + len(n.consts) - 2, 0) if kind == "add" else 0
        return kind, "elementwise", (per_element + extra) * _numel(n.outputs[0])
    return cost


def _fixed(kind: str, op_class: str, per_element: int) -> Callable[[_Node], tuple[str, str, int]]:
    def cost(n: _Node) -> tuple[str, str, int]:
        return kind, op_class, per_element * _numel(n.outputs[0])
    return cost


def _conv_transpose(n: _Node) -> tuple[str, str, int]:
    """Each input element is scattered through the kernel to every output channel of its
    group: ``2 * numel(x) * (C_out / groups) * prod(kernel)``, plus the bias."""
    x, out, weight = n.inputs[0], n.outputs[0], n.at.get(1)
    per_in = _numel(weight) // weight.shape[0] if weight else 0  # (C_in, C_out/g, kh, kw)
    bias = _numel(out) if 2 in n.at else 0
    return "conv_transpose2d", "conv", 2 * _numel(x) * per_in + bias


def _resize(n: _Node) -> tuple[str, str, int]:
    mode = str(n.attrs.get("mode", "nearest"))
    return "resize", "elementwise", interpolation_flops(mode, n.inputs[0].shape,
                                                        n.outputs[0].shape)


def _gather(n: _Node) -> tuple[str, str, int]:
    """Rows picked from a constant table are an embedding lookup; from a computed tensor,
    a copy. Either way no arithmetic."""
    table = any(i == 0 and t.dtype in _FLOAT for i, t in n.consts)
    return ("embedding" if table else "transpose"), "data_movement", 0


def _recurrent(gates: int) -> Callable[[_Node], tuple[str, str, int]]:
    def cost(n: _Node) -> tuple[str, str, int]:
        x = n.inputs[0]  # (steps, batch, input) as ONNX lays it out by default
        steps, batch = (x.shape[1], x.shape[0]) if n.attrs.get("layout") else x.shape[:2]
        directions = 2 if n.attrs.get("direction") == "bidirectional" else 1
        hidden = int(n.attrs["hidden_size"])
        flops = recurrent_flops(gates, steps=steps, batch=batch, input_size=x.shape[-1],
                                hidden=hidden, directions=directions)
        return {4: "lstm", 3: "gru", 1: "rnn"}[gates], "matmul", flops
    return cost


_COSTS: dict[str, Callable[[_Node], tuple[str, str, int]]] = {
    "Conv": _conv, "Gemm": _gemm, "MatMul": _matmul,
    "MaxPool": _pool("max_pool2d"), "AveragePool": _pool("avg_pool2d"),
    "GlobalAveragePool": lambda n: ("global_avg_pool", "reduction", _numel(n.inputs[0])),
    "Relu": _elementwise("relu", 1), "Sigmoid": _elementwise("sigmoid", 4),
    "Tanh": _elementwise("tanh", 4), "Add": _elementwise("add", 1),
    "Sum": _elementwise("add", 1), "Mul": _elementwise("mul", 1),
    "Sub": _elementwise("sub", 1), "Div": _elementwise("div", 1),
    "BatchNormalization": _elementwise("batchnorm", 2), "Clip": _elementwise("clip", 1),
    "LRN": lambda n: ("lrn", "reduction", (int(n.attrs.get("size", 5)) + 3)
                      * _numel(n.outputs[0])),
    "Softmax": _fixed("softmax", "reduction", 5),
    "Concat": _fixed("concat", "data_movement", 0),
    "Transpose": _fixed("transpose", "data_movement", 0),
    "Pad": _fixed("pad", "data_movement", 0),
    "LayerNormalization": _fixed("layernorm", "reduction", 8),
    "InstanceNormalization": _fixed("groupnorm", "reduction", 8),
    "Gather": _gather,
    "GroupNormalization": _fixed("groupnorm", "reduction", 8),
    "Erf": _elementwise("erf", 4), "HardSwish": _elementwise("hardswish", 4),
    "Gelu": _elementwise("gelu", 8),
    "HardSigmoid": _elementwise("hardsigmoid", 3), "ConvTranspose": _conv_transpose,
    "Resize": _resize, "LSTM": _recurrent(4), "GRU": _recurrent(3),
    "RNN": _recurrent(1),
}
# Ops that only reinterpret their input: no bytes move.
_VIEWS = {"Reshape": "reshape", "Flatten": "flatten", "Unsqueeze": "reshape",
          "Squeeze": "reshape", "Dropout": "dropout", "Identity": "reshape"}
# Operators whose result is a function of their input's shape alone (known on import).
_SHAPE_OF = {"Shape", "Size"}
# Inputs at these positions are buffers, not trainable parameters.
_BUFFER_INPUTS = {"BatchNormalization": (3, 4)}
# Inputs at these positions are settings (read into the op's attributes), not data.
_SETTING_INPUTS = {"Pad": (1, 2, 3), "Resize": (1, 2, 3), "LSTM": (4,), "GRU": (4,),
                   "RNN": (4,)}
# Inputs at these positions are state the op starts from (a recurrent layer's initial
# hidden and cell states), neither parameters nor settings.
_STATE_INPUTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
# Where trained weights enter. A constant read anywhere else (an addition's operand, a
# select's branch) still counts as parameters; but one of two or more dimensions that holds
# fewer distinct values than half its elements (two at least) is likely what an exporter
# computed from fewer weights (a folded table lookup, a mask), so it is reported.
_WEIGHT_INPUTS = {"MatMul": (0, 1), "Gemm": (0, 1, 2), "Conv": (1, 2),
                  "ConvTranspose": (1, 2), "LSTM": (1, 2, 3), "GRU": (1, 2, 3),
                  "RNN": (1, 2, 3), "BatchNormalization": (1, 2),
                  "LayerNormalization": (1, 2), "InstanceNormalization": (1, 2),
                  "GroupNormalization": (1, 2), "Gather": (0,), "Einsum": tuple(range(8)),
                  "PRelu": (1,)}


def _load(path: str | Path) -> Any:
    try:
        import onnx
    except ImportError as err:
        raise GraphError("ONNX import needs the onnx package: pip install "
                         "'placelab[onnx]'") from err
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise GraphError(f"{path}: cannot read ONNX file: {err.strerror}") from None
    if not data:
        raise GraphError(f"{path}: expected an ONNX model, got an empty file")
    try:
        model = onnx.load_from_string(data)
        _check_opset(model, path)
        # The checker with full shape inference refuses inconsistent models (a MatMul of
        # incompatible shapes), which would otherwise import as wrong numbers; given the
        # path, it finds external weights beside the model and takes models past 2 GiB.
        onnx.checker.check_model(str(path), full_check=True)
    except GraphError:
        raise
    except Exception as err:  # protobuf and checker errors have no common base
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise GraphError(f"{path}: expected a valid ONNX model, got {type(err).__name__}: "
                         f"{first}") from None
    if not model.graph.node:
        raise GraphError(f"{path}: expected an ONNX model with at least one node, got none")
    return model


def _check_opset(model: Any, path: str | Path) -> None:
    """An operator set newer than the installed onnx knows would be read by older rules."""
    import onnx

    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > newest:
            raise GraphError(f"{path}: opset_import: expected ai.onnx opset at most {newest} "
                             f"(the installed onnx {onnx.__version__}), got {entry.version}")


#: The largest value a symbolic input dimension is bound to: far past any real input, and
#: small enough that the products of dimensions (element counts, bytes) stay in int64.
MAX_DIM = 2**31 - 1


def _bind(model: Any, path: str | Path, batch: int | None, dims: Mapping[str, int]
          ) -> tuple[Any, dict[str, tuple[str, ...]], dict[str, int]]:
    """The model with its inputs' symbolic dimensions bound (``dims`` by name, ``batch``
    for the symbolic dimension 0 of the inputs), shapes inferred from them and constants
    folded (:func:`~workloads.importers.onnx_fold.fold_constants`: also the sources of
    each folded weight and their sizes)."""
    import onnx

    consts = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in consts]
    batch_names = {i.type.tensor_type.shape.dim[0].dim_param for i in inputs
                   if i.type.tensor_type.HasField("shape") and i.type.tensor_type.shape.dim
                   and i.type.tensor_type.shape.dim[0].dim_param}
    if batch is not None and not batch_names:
        raise GraphError(f"{path}: --batch binds a symbolic batch dimension, but every input "
                         f"has a fixed first dimension; got --batch {batch}")
    values = dict.fromkeys(batch_names, batch) if batch is not None else {}
    values |= dict(dims)
    for key, value in [("--batch", batch), *((f"--dim {k}", v) for k, v in dims.items())]:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= MAX_DIM):
            raise GraphError(f"{path}: {key}: expected an integer in 1..{MAX_DIM}, got "
                             f"{value!r}")
    for info in inputs:
        for d in info.type.tensor_type.shape.dim:
            if d.dim_param and d.dim_param in values:
                d.dim_value = int(values[d.dim_param])  # clears dim_param (a oneof)
    try:
        # data_prop: shape arithmetic (Shape, Gather, Concat, ...) is evaluated, so that a
        # Reshape to a computed shape gets that shape.
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        # weights stored beside the model (what torch.onnx.export(dynamo=True) writes) are
        # read from the model's folder, not the working directory
        return fold_constants(inferred, _base_dir(path))
    except GraphError:
        raise
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise GraphError(f"{path}: expected a valid ONNX model, got {type(err).__name__}: "
                         f"{first}") from None


def _value_types(model: Any, path: str | Path) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    empty: list[str] = []
    inexact: dict[str, str] = {}  # tensor -> its ONNX element type, imported as fp32
    infos = [*model.graph.input, *model.graph.value_info, *model.graph.output]
    for info in infos:
        tt = info.type.tensor_type
        if not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            if not d.HasField("dim_value"):
                named = f" ({d.dim_param!r})" if d.dim_param else ""
                hint = f"--dim {d.dim_param}=N" if d.dim_param else "fixed input dimensions"
                raise GraphError(f"{path}: tensor {info.name!r}: dimension {axis}{named} is "
                                 f"unknown; expected it bound ({hint}, or --batch for a "
                                 f"symbolic batch dimension)")
        dims = [d.dim_value for d in tt.shape.dim]
        if 0 in dims:
            empty.append(info.name)
        out[info.name] = Tensor(info.name, tuple(max(int(d), 1) for d in dims) or (1,),
                                _dtype(tt.elem_type, info.name, path, inexact))
    for init in model.graph.initializer:
        out[init.name] = Tensor(init.name, tuple(max(int(d), 1) for d in init.dims) or (1,),
                                _dtype(init.data_type, init.name, path, inexact))
    if inexact:
        kinds = sorted(set(inexact.values()))
        warnings.warn(f"{path}: {len(inexact)} tensor(s) of element type {', '.join(kinds)} "
                      f"(no such dtype here) imported as fp32, so their bytes are counted "
                      f"at 4 an element: {', '.join(repr(n) for n in list(inexact)[:5])}"
                      + (", ..." if len(inexact) > 5 else ""), stacklevel=4)
    if empty:
        # the IR has no empty tensor: such a tensor moves one element and costs next to
        # nothing, which is what an empty one costs
        warnings.warn(f"{path}: {len(empty)} tensor(s) with a zero dimension imported as one "
                      f"element: {', '.join(repr(n) for n in empty[:5])}"
                      + (", ..." if len(empty) > 5 else ""), stacklevel=4)
    return out


def _dtype(elem_type: int, name: str, path: str | Path, inexact: dict[str, str]) -> str:
    if elem_type in _DTYPES:
        return _DTYPES[elem_type]
    import onnx

    kind = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
        onnx.TensorProto.DataType.values() else str(elem_type)
    if kind in ("UNDEFINED", "STRING", "COMPLEX64", "COMPLEX128") or kind == str(elem_type):
        raise GraphError(f"{path}: tensor {name!r}: element type must be a real number type "
                         f"(FLOAT, FLOAT16, BFLOAT16, DOUBLE, INT8, INT32, INT64, BOOL, ...), "
                         f"got {kind}")
    inexact[name] = kind
    return "fp32"


def import_onnx(path: str | Path, *, batch: int | None = None,
                dims: Mapping[str, int] | None = None, name: str | None = None,
                strict: bool = False) -> Graph:
    """Read the ONNX model at ``path`` as a Graph.

    Symbolic dimensions of the inputs are bound by name (``dims={"seq": 128}``) or, for
    the symbolic first dimension, by ``batch``; a dimension still unknown after shape
    inference is an error naming the tensor and the dimension, never a guess. Operators
    without a cost formula are named in one warning with their share of the graph's bytes,
    or, with ``strict``, refused.

    >>> import glob, onnx, os
    >>> light = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    >>> g = import_onnx(os.path.join(light, "light_resnet50.onnx"))
    >>> g.params
    25557032
    """
    model, sources, sizes = _bind(_load(path), path, batch, dims or {})
    types = _value_types(model, path)
    consts = {i.name for i in model.graph.initializer}
    values = _constant_values(model, _base_dir(path))
    ops: list[Op] = []
    for inp in model.graph.input:
        if inp.name not in consts and inp.name in types:
            ops.append(Op(_safe(inp.name), "input", "source",
                          outputs=(_renamed(types[inp.name]),)))
    unknown: dict[str, int] = {}
    owners: dict[str, str] = {}
    loose: dict[str, int] = {}  # op -> constant elements outside a weight input
    taken = {op.name for op in ops}
    for i, node in enumerate(model.graph.node):
        live = [t for t in node.input if t and t not in consts]
        if not live or node.op_type in _SHAPE_OF:
            # computed from constants, or from shapes, which are known by now: fold
            consts.update(o for o in node.output if o)
            continue
        op_name = _free_name(node.name or f"{node.op_type}_{i}", i, taken)
        op = _op(node, op_name, types, consts, owners, unknown, path, values, (sources, sizes),
                 loose)
        if op is not None:
            ops.append(op)
    if unknown:
        _report(path, ops, unknown, strict)
    if loose:
        _report_loose(path, ops, loose)
    produced = {t.name for op in ops for t in op.outputs}
    outputs = [_safe(o.name) for o in model.graph.output if _safe(o.name) in produced]
    return Graph(name or Path(path).stem, ops, outputs or None)


def _report(path: str | Path, ops: list[Op], unknown: dict[str, int], strict: bool) -> None:
    """Operators imported without a cost formula: how many ops, and what share of the
    graph's bytes they hold; an error under ``strict``, one warning otherwise."""
    opaque = [op for op in ops if op.kind == "opaque"]
    moved = sum(op.bytes_read + op.bytes_written for op in ops) or 1
    share = sum(op.bytes_read + op.bytes_written for op in opaque) / moved
    message = (f"{path}: imported without a cost formula (bytes only): "
               + ", ".join(f"{k} x{v}" for k, v in sorted(unknown.items()))
               + f" ({len(opaque)} of {len(ops)} ops, {share:.1%} of the bytes moved)")
    if strict:
        raise GraphError(message.replace("imported without", "refused under --strict: ops "
                                                              "without", 1))
    warnings.warn(message, stacklevel=3)


def _expanded(values: dict[str, Any], t: Tensor) -> bool:
    """Whether constant ``t`` has two or more dimensions above 1 and fewer distinct
    values than half its elements (a table lookup or a mask, not trained weights), but
    more than one (a parameter initialised to zeros looks like nothing else)."""
    import numpy as np

    value = values.get(t.name)
    if value is None or sum(d > 1 for d in t.shape) < 2:
        return False
    distinct = len(np.unique(np.asarray(value)))
    return distinct >= 2 and 2 * distinct < np.asarray(value).size


def _report_loose(path: str | Path, ops: list[Op], loose: dict[str, int]) -> None:
    """Constants counted as parameters outside a weight input: one warning naming the
    ops that read them and their share of the parameters."""
    total = sum(op.params for op in ops) or 1
    count = sum(loose.values())
    names = sorted(loose, key=lambda n: -loose[n])
    warnings.warn(
        f"{path}: {count:,} parameters ({count / total:.1%} of {total:,}) are constants "
        f"holding fewer distinct values than half their elements, read by {len(loose)} "
        f"op(s) other than a matrix product, convolution, normalisation, recurrent layer or "
        f"embedding; an exporter may have computed them from fewer weights (a folded table "
        f"lookup, a mask): "
        + ", ".join(f"{n!r} ({loose[n]:,})" for n in names[:5])
        + (", ..." if len(names) > 5 else ""), stacklevel=3)


def _safe(name: str) -> str:
    return name or "unnamed"


def _renamed(t: Tensor) -> Tensor:
    return Tensor(_safe(t.name), t.shape, t.dtype)


def _free_name(name: str, index: int, taken: set[str]) -> str:
    """``name``, or where a graph input or an earlier node has it (valid ONNX: node names
    and tensor names are apart, and node names need not be unique), ``name_index``."""
    while name in taken:
        name = f"{name}_{index}"
    taken.add(name)
    return name


def _op(node: Any, name: str, types: dict[str, Tensor], consts: set[str],
        owners: dict[str, str], unknown: dict[str, int], path: str | Path,
        values: dict[str, Any],
        folded: tuple[dict[str, tuple[str, ...]], dict[str, int]] = ({}, {}),
        loose: dict[str, int] | None = None) -> Op | None:
    import onnx

    outputs = [types[o] for o in node.output if o and o in types]
    if not outputs:
        raise GraphError(f"{path}: op {name!r} ({node.op_type}): shape inference gave no "
                         f"shape for its outputs {list(node.output)}")
    dyn = [t for t in node.input if t and t not in consts]
    missing = [t for t in dyn if t not in types]
    if missing:
        raise GraphError(f"{path}: op {name!r} ({node.op_type}): no shape for input "
                         f"{missing[0]!r}")
    const_in = [(k, types[t]) for k, t in enumerate(node.input) if t in consts and t in types]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v  # mode, direction
             for k, v in attrs.items()}
    attrs = {k: v for k, v in attrs.items() if isinstance(v, int | float | str | list)}
    n = _Node(node.op_type, [types[t] for t in dyn], const_in, outputs, attrs,
              {k: types[t] for k, t in enumerate(node.input) if t and t in types})
    params = buffers = 0
    shares = None
    sources, sizes = folded
    loose = {} if loose is None else loose
    for k, t in const_in:
        if t.dtype not in _FLOAT or k in _SETTING_INPUTS.get(node.op_type, ()) \
                or k in _STATE_INPUTS.get(node.op_type, ()):
            continue
        # a folded weight (a slice or transpose of one) is its sources, counted once
        for source, size in ([(s, sizes[s]) for s in sources[t.name]]
                             if t.name in sources else [(t.name, _numel(t))]):
            if source in owners:
                shares = owners[source]
                continue
            owners[source] = name
            if k in _BUFFER_INPUTS.get(node.op_type, ()):
                buffers += size
            else:
                params += size
                if k not in _WEIGHT_INPUTS.get(node.op_type, ()) and _expanded(values, t):
                    loose[name] = loose.get(name, 0) + size
    if node.op_type in _VIEWS:
        kind, op_class, flops, view = _VIEWS[node.op_type], "data_movement", 0, True
    elif node.op_type in _COSTS:
        (kind, op_class, flops), view = _COSTS[node.op_type](n), False
    else:
        unknown[node.op_type] = unknown.get(node.op_type, 0) + 1
        kind, op_class, flops, view = "opaque", "data_movement", 0, False
    itemsize = 4 if not outputs else {"fp16": 2, "bf16": 2, "fp64": 8}.get(outputs[0].dtype, 4)
    param_bytes = (params + buffers) * itemsize
    moved_in = sum(t.nbytes for t in n.inputs) + sum(t.nbytes for _, t in const_in
                                                     if t.dtype in _FLOAT)
    extra = {"onnx_op": node.op_type, **({"shares": shares} if shares else {}),
             "onnx_inputs": tuple((("const" if t in consts else "input"), _safe(t))
                                  for t in node.input if t),
             **_executable(node.op_type, attrs, n),
             **(_pad(node, attrs, values, len(n.inputs[0].shape))
                if node.op_type == "Pad" else {})}
    return Op(name=name, kind=kind, op_class=op_class, inputs=tuple(_safe(t) for t in dyn),
              outputs=tuple(_renamed(t) for t in outputs), attrs={**_plain(attrs), **extra},
              flops=int(flops), params=params, param_bytes=param_bytes,
              bytes_read=0 if view else moved_in,
              bytes_written=0 if view else sum(t.nbytes for t in outputs))


def _executable(op_type: str, attrs: dict[str, Any], n: _Node) -> dict[str, Any]:
    """The attributes placelab's kernels read, in the IR's conventions (empty where the
    operator has no kernel or uses a form the kernels do not run, such as uneven pads)."""
    if op_type in ("Conv", "MaxPool", "AveragePool"):
        k = attrs.get("kernel_shape") or (list(n.consts[0][1].shape[2:]) if n.consts else [])
        pads = attrs.get("pads", [0, 0, 0, 0])
        if not k or len(k) != 2 or len(pads) != 4:
            return {}
        # (top, left) when even, else (top, left, bottom, right): Caffe-style uneven pads
        padding = tuple(pads[:2]) if pads[:2] == pads[2:] else tuple(pads)
        out: dict[str, Any] = {"kernel": tuple(k), "stride": tuple(attrs.get("strides", [1, 1])),
                               "padding": padding}
        if op_type == "Conv":
            out |= {"groups": attrs.get("group", 1), "bias": len(n.consts) > 1}
        if op_type == "AveragePool":
            out["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
        return out
    if op_type == "Gemm":
        b = next((t for i, t in n.consts if i == 1), None)
        if b is None or attrs.get("transA", 0):
            return {}
        fin, fout = (b.shape[1], b.shape[0]) if attrs.get("transB", 0) else b.shape
        return {"in_features": fin, "out_features": fout,
                "bias": any(i == 2 for i, _ in n.consts)}
    if op_type == "BatchNormalization":
        return {"eps": attrs.get("epsilon", 1e-5)}
    if op_type == "Flatten":
        return {"start_dim": attrs.get("axis", 1)}
    if op_type == "Softmax":
        return {"axis": attrs.get("axis", 1)}
    return {}


def _base_dir(path: str | Path) -> str:
    return str(Path(path).resolve().parent)


def _constant_values(model: Any, base_dir: str) -> dict[str, Any]:
    """Values of the initializers and ``Constant`` nodes (settings such as Pad's pads)."""
    import onnx
    from onnx import numpy_helper

    out = {i.name: numpy_helper.to_array(i, base_dir) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output and node.attribute:
            value = onnx.helper.get_attribute_value(node.attribute[0])
            if isinstance(value, onnx.TensorProto):
                out[node.output[0]] = numpy_helper.to_array(value)
    return out


def _pad(node: Any, attrs: dict[str, Any], values: dict[str, Any], rank: int
         ) -> dict[str, Any]:
    """Pad's settings as IR attributes: ``pads`` (before, after) per dimension and the
    constant ``value``; none for a mode the kernel does not run or pads not known at import."""
    import onnx

    def value_of(k: int) -> Any:
        name = node.input[k] if len(node.input) > k else ""
        return values.get(name) if name else None

    mode = next((onnx.helper.get_attribute_value(a) for a in node.attribute
                 if a.name == "mode"), b"constant")
    pads = value_of(1) if len(node.input) > 1 else attrs.get("pads")
    if mode != b"constant" or pads is None:
        return {}
    pads = [int(v) for v in list(pads)]
    half = len(pads) // 2
    axes = value_of(3)
    axes = [int(a) % rank for a in axes] if axes is not None else list(range(half))
    pairs = [(0, 0)] * rank
    for a, b, e in zip(axes, pads[:half], pads[half:], strict=True):
        pairs[a] = (b, e)
    fill = value_of(2)
    constant = float(fill.reshape(-1)[0]) if fill is not None and fill.size else \
        float(attrs.get("value", 0.0))
    return {"pads": tuple(pairs), "value": constant}


def _plain(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes JSON can carry (bytes become text)."""
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if isinstance(v, list):
            v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
            if not all(isinstance(x, int | float | str) for x in v):
                continue
        out[k] = v
    return out
