"""Shapes along edges: what an op's output shape must be, given its inputs' shapes.

A graph built in code gets its shapes from the builder; a graph file can say anything, and
the simulator, which reads FLOPs and bytes, would not notice a relu whose output differs
from its input. The rules here are the ones that hold for every op of their kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from workloads.errors import GraphError

if TYPE_CHECKING:
    from workloads.graph import Graph
    from workloads.op import Op

__all__ = ["BROADCAST_KINDS", "check_edges"]

#: Kinds whose output is the broadcast of their inputs (and of constants they hold);
#: not resize (it scales axes), an LSTM cell (several states), an optimizer update or a
#: backward op (one gradient per input, each of that input's shape).
BROADCAST_KINDS = frozenset({
    "relu", "relu6", "tanh", "sigmoid", "gelu", "silu", "erf", "hardswish", "hardsigmoid",
    "clip", "dropout", "batchnorm", "add", "sub", "mul", "div", "fused_elementwise"})


def check_edges(graph: Graph) -> None:
    """Refuse the first op whose output shape its inputs' shapes rule out: an elementwise
    op's output must be what each input broadcasts to; a linear layer reads
    ``in_features`` and writes ``out_features`` on the last axis, the others kept.

    >>> from workloads.zoo import build_model
    >>> check_edges(build_model("mlp"))  # a built graph holds by construction
    """
    for op in graph.ops:
        if len(op.outputs) != 1 or not op.inputs or "fused" in op.attrs or (
                op.kind not in BROADCAST_KINDS and op.kind != "linear"):
            continue  # a fused chain writes its last op's output, whatever its head's kind
        out = op.outputs[0].shape
        # a training step's weights arrive flat (one tensor of every parameter of an op)
        ins = [(name, graph.tensor(name).shape) for name in op.inputs
               if graph.op(graph.producer(name)).kind != "parameter"]
        if op.kind == "batchnorm":
            ins = ins[:1]  # its statistics, (C,), may arrive as inputs: the data decides
        if op.kind in BROADCAST_KINDS:
            for name, shape in ins:
                if _broadcast(shape, out) != out:
                    raise _error(op, name, shape, "a shape it broadcasts to")
        elif op.kind == "linear" and "in_features" in op.attrs and len(ins) == 1:
            name, shape = ins[0]
            if not shape or not out:
                raise GraphError(f"op {op.name!r} (linear): input {name!r} and the output "
                                 f"must have a features axis, got shapes {tuple(shape)} and "
                                 f"{tuple(out)}")
            if shape[-1] != op.attrs["in_features"]:
                raise GraphError(f"op {op.name!r} (linear): input {name!r} must have "
                                 f"in_features on its last axis: expected "
                                 f"{op.attrs['in_features']}, got shape {tuple(shape)}")
            want = (*shape[:-1], op.attrs.get("out_features", out[-1]))
            if tuple(out) != want:
                raise _error(op, name, shape, f"{want} (out_features on the last axis)")


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def _error(op: Op, name: str, shape: tuple[int, ...], expected: str) -> GraphError:
    return GraphError(f"op {op.name!r} ({op.kind}): output shape must follow from input "
                      f"{name!r} of shape {tuple(shape)}: expected {expected}, got "
                      f"{tuple(op.outputs[0].shape)}")
