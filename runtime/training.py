"""Training steps for real: each op of a training graph bound to the call the executor makes.

A forward op that reads its weights as a tensor gets them unflattened into its slots (its
buffers, such as batch norm's running statistics, stay with the op); a ``backward`` op sums
its incoming gradients, calls the backward kernel of the op it differentiates and writes one
gradient per input that needs one and the weight gradient flat, in the owner's slot order;
the loss writes the gradient of the mean cross-entropy; an update applies its optimizer to
the weights in place, keeping the optimizer's state (velocity, Adam's moments and step) on
its device from one step to the next, as ``torch.optim`` does.

>>> from workloads import build_model, training_graph
>>> step = training_graph(build_model("mlp", batch=2))
>>> sorted(trainable_shapes(step.op("fc1")).items())
[('bias', (1024,)), ('weight', (784, 1024))]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from array_api_compat import device as _device

from runtime.gradients import (
    GRADIENTS,
    Gradient,
    adam_update,
    cross_entropy_grad,
    gradient,
    momentum_update,
    sgd_update,
)
from runtime.kernels import Kernel, kernel_for
from runtime.weights import weight_shapes
from workloads.errors import GraphError
from workloads.graph import Graph
from workloads.op import Op

__all__ = ["ARRAY_API", "BUFFERS", "UPDATES", "Call", "Library", "bind", "check_trainable",
           "flatten", "state_shapes", "trainable_shapes", "unflatten", "update",
           "weights_input"]

Array = Any
#: What the executor calls for one op: ``call(xp, inputs, resident) -> outputs``, where
#: ``resident`` holds the arrays kept on the op's device (weights, buffers, state).
Call = Callable[[Any, Sequence[Array], dict[str, Array]], tuple[Array, ...]]
#: An optimizer step: ``update(xp, op, grad, weights, state)`` changes ``weights`` in place.
Update = Callable[[Any, Op, Array, Array, dict[str, Array]], None]

#: Weight slots that are buffers, not trained: they stay with the op that owns them.
BUFFERS = frozenset({"mean", "var"})
#: Update kinds and the state slots each keeps per weight.
UPDATES: dict[str, tuple[str, ...]] = {"sgd_update": (), "momentum_update": ("velocity",),
                                       "adam_update": ("m", "v")}


def trainable_shapes(op: Op) -> dict[str, tuple[int, ...]]:
    """The slots of ``op``'s weights that training updates, in the order the flat weights
    tensor holds them."""
    return {k: v for k, v in weight_shapes(op).items() if k not in BUFFERS}


def flatten(xp: Any, slots: Mapping[str, Array], shapes: Mapping[str, tuple[int, ...]]
            ) -> Array:
    """The arrays of ``slots`` in the order of ``shapes``, as one flat array."""
    return xp.concat([xp.reshape(slots[k], (-1,)) for k in shapes])


def unflatten(xp: Any, flat: Array, shapes: Mapping[str, tuple[int, ...]]
              ) -> dict[str, Array]:
    """Views of ``flat`` shaped as ``shapes`` (the inverse of :func:`flatten`)."""
    out, start = {}, 0
    for k, shape in shapes.items():
        size = math.prod(shape)
        out[k] = xp.reshape(flat[start:start + size], shape)
        start += size
    return out


def weights_input(graph: Graph, op: Op) -> str | None:
    """The weights tensor ``op`` reads (an output of a ``parameter`` op), if any."""
    for t in op.inputs:
        if graph.op(graph.producer(t)).kind == "parameter":
            return t
    return None


def _owner_shapes(graph: Graph, tensor: str) -> dict[str, tuple[int, ...]]:
    owner = graph.op(graph.producer(tensor)).attrs["weights_of"]
    return trainable_shapes(graph.op(owner))


def state_shapes(graph: Graph, op: Op) -> dict[str, tuple[int, ...]]:
    """The optimizer state an update op keeps on its device, by slot: one array the size
    of the weights (its last input) per slot."""
    size = graph.tensor(op.inputs[-1]).numel
    return {slot: (size,) for slot in UPDATES.get(op.kind, ())}


def check_trainable(graph: Graph, op: Op) -> None:
    """Refuse, before anything runs, a backward op whose forward kind has no backward
    kernel."""
    if op.kind == "backward" and graph.op(op.attrs["of"]).kind not in GRADIENTS:
        raise GraphError(f"op {op.name!r}: kind {graph.op(op.attrs['of']).kind!r} has no "
                         f"backward kernel; kinds with one: {', '.join(sorted(GRADIENTS))}")


def update(xp: Any, op: Op, g: Array, w: Array, state: dict[str, Array]) -> None:
    """Apply the optimizer of update op ``op`` to the weights ``w`` in place, given their
    gradient ``g``; its state (velocity, Adam's moments and step) is kept in ``state``.

    >>> import numpy as np
    >>> w = np.array([1.0, 2.0])
    >>> update(np, Op("u", "sgd_update", "elementwise", attrs={"lr": 0.5}), np.ones(2), w, {})
    >>> w.tolist()
    [0.5, 1.5]
    """
    a = op.attrs
    if op.kind == "sgd_update":
        new = sgd_update(w, g, lr=a["lr"])
    elif op.kind == "momentum_update":
        new, state["velocity"] = momentum_update(
            w, state["velocity"], g, lr=a["lr"], momentum=a["momentum"])
    else:
        state["step"] = state.get("step", 0) + 1
        new, state["m"], state["v"] = adam_update(
            xp, w, state["m"], state["v"], g, step=state["step"], lr=a["lr"],
            betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    w[...] = new  # in place, as optimizers update parameters


@dataclass(frozen=True)
class Library:
    """What the ops of a graph are bound to: the forward kernel of an op, the gradient
    function of the backward kernels (:func:`runtime.gradients.gradient`'s signature), the
    loss's gradient and the optimizer update. :data:`ARRAY_API` is the array-API library;
    an engine with kernels of its own binds through its own (:mod:`runtime.torch_kernels`).
    """

    kernel_for: Callable[[Op], Kernel]
    gradient: Gradient
    loss: Callable[[Any, Array, Array], Array]
    update: Update


#: The array-API kernel library (:mod:`runtime.kernels`, :mod:`runtime.gradients`).
ARRAY_API = Library(kernel_for, gradient, cross_entropy_grad, update)


def bind(graph: Graph, op: Op, library: Library = ARRAY_API) -> Call:
    """The call the executor makes for ``op`` of ``graph``, made of ``library``'s
    kernels."""
    if op.kind == "backward":
        return _backward(graph, op, library.gradient)
    if op.kind in UPDATES:
        return _update(op, library.update)
    if op.kind == "cross_entropy":
        loss = library.loss
        return lambda xp, args, resident: (loss(xp, args[0], args[1]),)
    kernel = library.kernel_for(op)
    tensor = weights_input(graph, op)
    if tensor is None:
        return lambda xp, args, resident: kernel(xp, op, args, resident)
    at = op.inputs.index(tensor)
    shapes = _owner_shapes(graph, tensor)

    def lifted(xp: Any, args: Sequence[Array], resident: dict[str, Array]
               ) -> tuple[Array, ...]:
        rest = [a for i, a in enumerate(args) if i != at]
        return kernel(xp, op, rest, {**resident, **unflatten(xp, args[at], shapes)})

    return lifted


def _backward(graph: Graph, op: Op, gradient: Gradient) -> Call:
    forward = graph.op(op.attrs["of"])
    tensor = weights_input(graph, forward)
    original = [t for t in forward.inputs if t != tensor]  # as the forward kernel sees them
    saved = list(dict.fromkeys(original))
    k = op.attrs["grads"]
    shapes = _owner_shapes(graph, tensor) if tensor else {}
    wgrad = bool(op.outputs) and op.outputs[-1].name.endswith(".wgrad")
    wanted = [t.name.rsplit(".grad@", 1)[0] for t in op.outputs[:len(op.outputs) - wgrad]]

    at = op.attrs.get("grad_outputs")

    def call(xp: Any, args: Sequence[Array], resident: dict[str, Array]) -> tuple[Array, ...]:
        dy = _incoming(xp, forward, args[:k], at)
        values = dict(zip(saved, args[k:k + len(saved)], strict=True))
        weights = {**resident, **unflatten(xp, args[-1], shapes)} if tensor else resident
        dx, dw = gradient(xp, forward, dy, [values[n] for n in original], weights)
        outs = [_sum_at(name, original, dx, op) for name in wanted]
        if wgrad:
            outs.append(flatten(xp, dw, shapes))
        return tuple(outs)

    return call


def _incoming(xp: Any, forward: Op, grads: Sequence[Array], at: Sequence[int] | None
              ) -> Array | list[Array]:
    """The gradient of the forward op's output, summed over its readers; for an op with
    several outputs, one per output (zeros for an output no reader differentiates)."""
    if at is None:
        return _total(grads)
    outs: list[Array] = []
    for i, t in enumerate(forward.outputs):
        mine = [g for g, j in zip(grads, at, strict=True) if j == i]
        outs.append(_total(mine) if mine else xp.zeros(t.shape, dtype=grads[0].dtype,
                                                        device=_device(grads[0])))
    return outs


def _total(arrays: Sequence[Array]) -> Array:
    """The sum of one or more arrays (gradients of one value from several readers)."""
    total = arrays[0]
    for a in arrays[1:]:
        total = total + a
    return total


def _sum_at(name: str, inputs: list[str], grads: Sequence[Array | None], op: Op) -> Array:
    """The gradient of input ``name``: the sum over every position it takes."""
    parts = [g for n, g in zip(inputs, grads, strict=True) if n == name and g is not None]
    if not parts:
        raise GraphError(f"op {op.name!r}: the backward kernel gave no gradient for input "
                         f"{name!r}")
    return _total(parts)


def _update(op: Op, step: Update) -> Call:
    def call(xp: Any, args: Sequence[Array], resident: dict[str, Array]) -> tuple[Array, ...]:
        step(xp, op, _total(args[:-1]), args[-1], resident)
        return ()

    return call
