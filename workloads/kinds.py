"""The op kinds placelab knows, each with the op class a cost model treats it as.

A graph may only hold ops of these kinds (importers map foreign operators onto them; an
operator with no cost formula becomes ``opaque``, costed by the bytes it moves). A new kind
registers with :func:`register_op_kind`.
"""

from __future__ import annotations

from workloads.dtypes import OP_CLASSES
from workloads.errors import GraphError

__all__ = ["OP_KINDS", "register_op_kind"]

#: kind -> the op class it is costed as (``any``: the op states its own class).
OP_KINDS: dict[str, str] = {
    # sources
    "input": "source", "parameter": "source",
    # dense algebra
    "linear": "matmul", "matmul": "matmul", "conv2d": "conv", "embedding": "data_movement",
    # whole layers imported as one op (torch's nn.MultiheadAttention, nn.LSTM, nn.GRU,
    # nn.RNN, the transformer layers)
    "attention": "matmul", "lstm": "matmul", "gru": "matmul", "rnn": "matmul",
    "transformer_layer": "matmul",
    # elementwise
    "relu": "elementwise", "tanh": "elementwise", "sigmoid": "elementwise",
    "gelu": "elementwise", "add": "elementwise", "mul": "elementwise",
    "sub": "elementwise", "div": "elementwise",
    "batchnorm": "elementwise", "dropout": "elementwise", "lstm_cell": "elementwise",
    "fused_elementwise": "elementwise", "clip": "elementwise", "erf": "elementwise",
    "hardswish": "elementwise", "hardsigmoid": "elementwise", "resize": "elementwise",
    "silu": "elementwise", "relu6": "elementwise",
    "conv_transpose2d": "conv", "groupnorm": "reduction",
    # reductions and windows
    "max_pool2d": "reduction", "avg_pool2d": "reduction", "global_avg_pool": "reduction",
    "softmax": "reduction", "layernorm": "reduction", "lrn": "reduction",
    "cross_entropy": "reduction", "reduce": "reduction",
    # layout
    "flatten": "data_movement", "reshape": "data_movement", "transpose": "data_movement",
    "concat": "data_movement", "split": "data_movement", "pad": "data_movement",
    # training
    "backward": "any", "sgd_update": "elementwise", "momentum_update": "elementwise",
    "adam_update": "elementwise",
    # collectives, placed on a device group (workloads.collectives)
    "all_reduce": "data_movement", "all_gather": "data_movement",
    "reduce_scatter": "data_movement", "broadcast": "data_movement",
    # foreign operators without a cost formula, synthetic benchmark ops
    "opaque": "any", "synthetic": "any",
}


def register_op_kind(kind: str, op_class: str) -> None:
    """Make ``kind`` known, costed as ``op_class`` (``any`` to let each op say)."""
    if kind in OP_KINDS:
        raise GraphError(f"op kind {kind!r} is already registered")
    if op_class != "any" and op_class not in OP_CLASSES:
        raise GraphError(f"op kind {kind!r}: op_class must be one of "
                         f"{', '.join(OP_CLASSES)} or 'any', got {op_class!r}")
    OP_KINDS[kind] = op_class
