"""The parameters an op computes with: their shapes, read from the op's attributes, and
their values, drawn from a seed.

An op that uses another op's weights (an unrolled LSTM's later steps, a GPT's output head
tied to its token embedding) names the owner in ``attrs["shares"]``; it reads the owner's
arrays (an embedding table serves as a linear layer's weight transposed).
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from workloads.errors import GraphError
from workloads.graph import Graph
from workloads.op import Op

__all__ = ["owner_of", "weight_arrays", "weight_shapes"]


def weight_shapes(op: Op) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every array ``op`` owns (none for an op that shares another's).

    >>> from workloads import build_model
    >>> weight_shapes(build_model("mlp").op("fc1"))
    {'weight': (784, 1024), 'bias': (1024,)}
    """
    if op.attrs.get("shares") or not op.params:
        return {}
    a = op.attrs
    out = op.outputs[0].shape if op.outputs else ()
    if op.kind == "linear":
        shapes: dict[str, tuple[int, ...]] = {"weight": (a["in_features"], a["out_features"])}
        return shapes | ({"bias": (a["out_features"],)} if a.get("bias") else {})
    if op.kind == "conv2d":
        kh, kw = a["kernel"]
        cin = op.params // (out[1] * kh * kw) if not a.get("bias") else \
            (op.params - out[1]) // (out[1] * kh * kw)
        conv: dict[str, tuple[int, ...]] = {"weight": (out[1], cin, kh, kw)}
        return conv | ({"bias": (out[1],)} if a.get("bias") else {})
    if op.kind == "embedding":
        return {"table": (a["vocab"], a["dim"])}
    if op.kind == "batchnorm":
        c = out[1]
        return {"scale": (c,), "shift": (c,), "mean": (c,), "var": (c,)}
    if op.kind == "layernorm":
        return {"scale": (out[-1],), "shift": (out[-1],)}
    raise GraphError(f"op {op.name!r}: no weight layout for an op of kind {op.kind!r} with "
                     f"{op.params} parameters")


def owner_of(graph: Graph, op: Op) -> Op:
    """The op whose arrays ``op`` computes with (itself, or the op it shares them with)."""
    owner = op.attrs.get("shares")
    return graph.op(owner) if owner else op


def _rng(seed: int, name: str) -> np.random.Generator:
    # Per op, not per run order: the same op gets the same weights on any device or plan.
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def weight_arrays(op: Op, seed: int, dtype: Any) -> dict[str, np.ndarray]:
    """Host arrays for ``op``'s weights: normal with variance 1/fan-in (activations keep
    their scale through deep models), norms near identity, variances positive. A fused op
    holds its first op's and, under ``<stage>.<slot>``, each folded stage's: the same
    values as the unfused ops have."""
    from runtime.fused import is_fused, stages

    if is_fused(op):
        head, folded = stages(op)
        merged = weight_arrays(head, seed, dtype)
        for stage, _ in folded:
            merged |= {f"{stage.name}.{k}": v
                       for k, v in weight_arrays(stage, seed, dtype).items()}
        return merged
    shapes = weight_shapes(op)
    rng = _rng(seed, op.name)
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        if name in ("scale",):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "var":
            value = rng.uniform(0.5, 1.5, shape)
        elif name in ("shift", "mean", "bias"):
            value = 0.1 * rng.standard_normal(shape)
        else:
            fan_in = math.prod(shape[1:]) if op.kind == "conv2d" else shape[0]
            if op.kind == "embedding":
                fan_in = 1
            value = rng.standard_normal(shape) / math.sqrt(max(fan_in, 1))
        out[name] = np.ascontiguousarray(value, dtype=dtype)
    return out

