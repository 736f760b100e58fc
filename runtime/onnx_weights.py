"""The weights of an imported ONNX model, laid out the way placelab's kernels read them.

An imported op names the constants its operator read (``attrs["onnx_inputs"]``); this maps
their values (a model's initializers, or any other values for the same names) onto the op's
weight slots: a Conv's weight and bias, a Gemm's weight as ``(in, out)`` with ``alpha`` and
``beta`` applied, a BatchNormalization's scale, shift, mean and variance, and for other
operators each constant by its input position (``constK``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workloads.errors import GraphError
from workloads.graph import Graph

__all__ = ["initializer_values", "onnx_weights"]


def initializer_values(model: Any) -> dict[str, np.ndarray]:
    """A model's initializers as arrays, by name."""
    from onnx import numpy_helper

    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


def onnx_weights(graph: Graph, values: Mapping[str, np.ndarray]
                 ) -> dict[str, dict[str, np.ndarray]]:
    """Op name -> weight slots, for every imported op that read floating-point constants."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for op in graph:
        roles = op.attrs.get("onnx_inputs", ())
        consts = {k: name for k, (role, name) in enumerate(roles) if role == "const"}
        floats = {k: values[name] for k, name in consts.items()
                  if name in values and np.issubdtype(values[name].dtype, np.floating)}
        if not floats:
            continue
        missing = [name for name in consts.values() if name not in values]
        if missing:
            raise GraphError(f"op {op.name!r}: no value for constant {missing[0]!r}")
        out[op.name] = _slots(op.attrs, floats)
    return out


def _slots(attrs: Mapping[str, Any], c: Mapping[int, np.ndarray]) -> dict[str, np.ndarray]:
    kind = attrs.get("onnx_op")
    if kind == "Conv":
        return {"weight": c[1], **({"bias": c[2]} if 2 in c else {})}
    if kind == "Gemm":
        weight = c[1].T if attrs.get("transB", 0) else c[1]
        slots = {"weight": np.ascontiguousarray(weight * attrs.get("alpha", 1.0),
                                                dtype=c[1].dtype)}
        if 2 in c:
            slots["bias"] = (c[2] * attrs.get("beta", 1.0)).astype(c[2].dtype)
        return slots
    if kind == "BatchNormalization":
        return {"scale": c[1], "shift": c[2], "mean": c[3], "var": c[4]}
    return {f"const{k}": v for k, v in c.items()}
