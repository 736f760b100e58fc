"""What a run keeps on its devices besides the values flowing through the plan: weights
(or, where ``parameter`` ops hold the weights as tensors, the flat starting values of those
and the buffers of their owners), and the optimizer state of update ops."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from policies.plans import Plan
from runtime.engine import Engine
from runtime.training import BUFFERS, state_shapes, trainable_shapes
from runtime.weights import owner_of, weight_arrays
from workloads.errors import GraphError
from workloads.graph import Graph
from workloads.op import Op

__all__ = ["STAGED", "numpy_dtype", "parameters", "place_resident", "resident_key"]

NUMPY_DTYPES = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16,
                "int64": np.int64, "int32": np.int32, "int8": np.int8, "bool": np.bool_}


def numpy_dtype(dtype: str) -> Any:
    """The NumPy type of an IR dtype the runtime runs."""
    try:
        return NUMPY_DTYPES[dtype]
    except KeyError:
        raise GraphError(f"the runtime runs {', '.join(NUMPY_DTYPES)}, got {dtype!r}") \
            from None


#: Ops whose outputs are staged on their device before the run.
STAGED = ("input", "parameter")


def resident_key(graph: Graph, op: Op) -> str:
    """Whose resident arrays ``op`` computes with: an update its own state, a backward op
    its forward op's weights and buffers, any other op its owner's."""
    if op.kind.endswith("_update"):
        return op.name
    if op.kind == "backward":
        op = graph.op(op.attrs["of"])
    return owner_of(graph, op).name


def _host_weights(owner: Op, seed: int, given: Mapping[str, Mapping[str, np.ndarray]]
                  ) -> dict[str, np.ndarray]:
    if owner.name in given:
        return dict(given[owner.name])
    return weight_arrays(owner, seed, numpy_dtype(owner.dtype))


def parameters(graph: Graph, seed: int, given: Mapping[str, Mapping[str, np.ndarray]]
               ) -> dict[str, np.ndarray]:
    """The flat weights each ``parameter`` op starts from: its owner's trainable slots, as
    a forward run of the same seed draws them."""
    out = {}
    for op in graph:
        if op.kind == "parameter":
            owner = graph.op(op.attrs["weights_of"])
            slots = _host_weights(owner, seed, given)
            out[op.output.name] = np.concatenate(
                [np.ravel(slots[k]) for k in trainable_shapes(owner)]).astype(
                numpy_dtype(op.dtype))
    return out


def place_resident(plan: Plan, engine: Engine, seed: int,
                   given: Mapping[str, Mapping[str, np.ndarray]]
                   ) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, int]]:
    """Each op's resident arrays on its device: weights (shared weights on every device that
    uses them) or, where a ``parameter`` op holds the weights, only the buffers; and each
    update op's optimizer state, zeros."""
    graph = plan.graph
    lifted = {op.attrs["weights_of"] for op in graph if op.kind == "parameter"}
    weights: dict[tuple[str, str], dict[str, Any]] = {}
    resident = dict.fromkeys(engine.devices, 0)
    for op in graph:
        name, device = resident_key(graph, op), plan.placement[op.name]
        key = (name, device)
        if key in weights or op.kind in STAGED:
            continue
        if op.kind.endswith("_update"):
            dtype = numpy_dtype(graph.tensor(op.inputs[-1]).dtype)  # the weights'
            host = {k: np.zeros(shape, dtype) for k, shape in state_shapes(graph, op).items()}
        else:
            owner = graph.op(name)
            if not owner.params:
                continue
            host = _host_weights(owner, seed, given)
            if name in lifted:
                host = {k: v for k, v in host.items() if k in BUFFERS}
        weights[key] = {k: engine.to_device(v, device) for k, v in host.items()}
        resident[device] += sum(int(v.nbytes) for v in host.values())
    return weights, resident
