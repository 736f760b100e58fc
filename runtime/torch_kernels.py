"""PyTorch's own kernels for the IR's op kinds: what the torch engine runs.

A kernel here has the array-API library's signature (``kernel(xp, op, inputs, weights) ->
outputs``, :mod:`runtime.kernels`) and computes with torch's operators (``F.conv2d``,
``F.layer_norm``, ``F.max_pool2d``, ...) on tensors in the IR's layouts: a linear layer's
weight is ``(in, out)`` (an embedding table read by a tied head, ``(vocab, dim)``), a
convolution's ``(out, in / groups, kh, kw)``. A kind without one here, or a form torch's
operator does not take (a local response norm of even size, pooling windows torch's
operator does not tile), runs its array-API kernel on ``array_api_compat.torch``; a kind
with neither is refused before anything runs. Backward ops, the loss and the optimizer
updates are in :mod:`runtime.torch_gradients`; :func:`bind` binds an op of a graph, forward
or training, through :func:`runtime.training.bind`.

>>> import torch
>>> from workloads import GraphBuilder
>>> b = GraphBuilder("t")
>>> y = b.relu(b.input((2, 2)))
>>> op = b.build().op(y)
>>> kernel_for(op)(None, op, [torch.tensor([[-1.0, 2.0], [3.0, -4.0]])], {})
(tensor([[0., 2.],
        [3., 0.]]),)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from runtime import kernels as array_api
from runtime.fused import is_fused, stages
from runtime.kernels import Kernel, hard_slope, registrar
from runtime.torch_windows import avg_pool, torch_window
from workloads.errors import GraphError
from workloads.op import Op

if TYPE_CHECKING:
    from runtime.training import Call
    from workloads.graph import Graph

__all__ = ["TORCH_KERNELS", "bind", "kernel_for", "kinds", "softmax_rows", "torch_slope"]

Tensor = torch.Tensor
TORCH_KERNELS: dict[str, Kernel] = {}
_kernel = registrar(TORCH_KERNELS)

#: Attributes an op of a kind needs before torch's kernel can run it (checked when bound).
_NEEDS: dict[str, tuple[str, ...]] = {
    "linear": ("in_features", "out_features"), "conv2d": ("kernel",),
    "max_pool2d": ("kernel",), "split": ("axis", "sizes"), "pad": ("pads", "value")}


def kinds() -> list[str]:
    """The kinds the torch engine runs: its own kernels' and the array-API library's.

    >>> {"conv2d", "lstm_cell"} <= set(kinds())
    True
    """
    return sorted({*TORCH_KERNELS, *array_api.KERNELS})


def kernel_for(op: Op) -> Kernel:
    """torch's kernel of ``op``'s kind, else the array-API kernel (run on
    ``array_api_compat.torch``); an op neither runs, or one without the attributes its
    kernel needs, is refused in one line."""
    if is_fused(op):
        head, folded = stages(op)
        for part in (head, *(stage for stage, _ in folded)):
            kernel_for(part)
        return _fused
    native = TORCH_KERNELS.get(op.kind)
    if native is not None:
        _check_attrs(op)
        return native
    try:
        return array_api.kernel_for(op)
    except GraphError:
        raise GraphError(f"op {op.name!r}: kind {op.kind!r} has no kernel on the torch engine "
                         f"(it can be simulated, not run); kinds that run: "
                         f"{', '.join(kinds())}") from None


def _check_attrs(op: Op) -> None:
    a = op.attrs
    missing = [k for k in _NEEDS.get(op.kind, ()) if k not in a]
    if op.kind == "avg_pool2d" and "kernel" not in a and "output_size" not in a:
        missing = ["kernel"]
    if missing:
        raise GraphError(f"op {op.name!r}: a {op.kind} needs attrs "
                         f"{', '.join(repr(k) for k in _NEEDS.get(op.kind, ('kernel',)))} "
                         f"to run, got {dict(a)}")
    if op.kind == "gelu" and a.get("approximate", "tanh") not in ("tanh", "none"):
        raise GraphError(f"op {op.name!r}: gelu approximate must be 'tanh' or 'none', got "
                         f"{a['approximate']!r}")


def bind(graph: Graph, op: Op) -> Call:
    """The call the executor makes for ``op`` of ``graph`` on the torch engine (its
    forward kernel, or the backward, loss or update of a training graph); an op it cannot
    run is refused here, before anything runs.

    >>> from workloads import build_model
    >>> graph = build_model("mlp", batch=2)
    >>> out = bind(graph, graph.op("fc1"))(None, [torch.zeros(2, 784)],
    ...                                    {"weight": torch.ones(784, 1024),
    ...                                     "bias": torch.ones(1024)})
    >>> out[0].shape
    torch.Size([2, 1024])
    """
    from runtime.torch_gradients import TORCH_LIBRARY
    from runtime.training import bind as bind_op

    if op.kind == "backward":
        forward = graph.op(op.attrs["of"])
        try:
            kernel_for(forward)
        except GraphError:
            raise GraphError(f"op {op.name!r}: kind {forward.kind!r} has no backward kernel "
                             f"on the torch engine (no forward kernel to differentiate); "
                             f"kinds with one: {', '.join(kinds())}") from None
    return bind_op(graph, op, TORCH_LIBRARY)


def _fused(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
           ) -> tuple[Tensor]:
    """A fused op stage by stage, each with its torch kernel (a stage's weights under
    ``<stage>.<slot>``), as :func:`runtime.kernels.kernel_for` runs one."""
    head, folded = stages(op)
    values = dict(zip(op.inputs, args, strict=True))
    own = {k: v for k, v in w.items() if "." not in k}
    (current,) = kernel_for(head)(xp, head, args[:len(head.inputs)], own)
    for stage, chain in folded:
        prefix = f"{stage.name}."
        weights = {k[len(prefix):]: v for k, v in w.items() if k.startswith(prefix)}
        stage_args = [current if t == chain else values[t] for t in stage.inputs]
        (current,) = kernel_for(stage)(xp, stage, stage_args, weights)
    return (current,)


# -- dense algebra ------------------------------------------------------------------------


@_kernel("linear")
def _linear(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> tuple[Tensor]:
    # F.linear takes (out, in): the IR's (in, out) weight transposed (a view), or a tied
    # head's (vocab, dim) table as it is.
    weight = w["weight"].t() if "weight" in w else w["table"]
    return (F.linear(args[0], weight, w["bias"] if op.attrs.get("bias") else None),)


@_kernel("matmul")
def _matmul(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> tuple[Tensor]:
    return (torch.matmul(args[0], args[1]),)


@_kernel("conv2d")
def _conv2d(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> tuple[Tensor]:
    a = op.attrs
    window = torch_window(op, args[0], 0.0, pools=False)
    if window is None:
        return array_api.KERNELS["conv2d"](xp, op, args, w)
    x, padding = window
    return (F.conv2d(x, w["weight"], w["bias"] if a.get("bias") else None,
                     tuple(a.get("stride", (1, 1))), padding,
                     tuple(a.get("dilation", (1, 1))), a.get("groups", 1)),)


# -- windows and reductions ---------------------------------------------------------------


@_kernel("max_pool2d")
def _max_pool(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
              ) -> tuple[Tensor]:
    window = torch_window(op, args[0], -torch.inf)
    if window is None:
        return array_api.KERNELS["max_pool2d"](xp, op, args, w)
    x, padding = window
    a = op.attrs
    return (F.max_pool2d(x, tuple(a["kernel"]), tuple(a.get("stride", (1, 1))), padding),)


@_kernel("avg_pool2d")
def _avg_pool(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
              ) -> tuple[Tensor]:
    if "output_size" in op.attrs:
        return (F.adaptive_avg_pool2d(args[0], op.attrs["output_size"]),)
    out = avg_pool(op, args[0])
    return array_api.KERNELS["avg_pool2d"](xp, op, args, w) if out is None else (out,)


@_kernel("global_avg_pool")
def _global_avg(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
                ) -> tuple[Tensor]:
    return (torch.mean(args[0], dim=(2, 3), keepdim=True),)


def softmax_rows(op: Op, x: Tensor) -> Tensor:
    """``x`` as the softmax of ``op`` normalises it, over its last axis: ONNX's before
    opset 13 (``attrs["axis"]``) flattens the axes from ``axis`` on.

    >>> softmax_rows(Op("s", "softmax", "reduction", attrs={"axis": 1}),
    ...              torch.zeros(2, 3, 4)).shape
    torch.Size([2, 12])
    """
    axis = op.attrs.get("axis")
    return x if axis is None else x.reshape(*x.shape[:axis], -1)


@_kernel("softmax")
def _softmax(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
             ) -> tuple[Tensor]:
    return (torch.softmax(softmax_rows(op, args[0]), -1).reshape(args[0].shape),)


@_kernel("lrn")
def _lrn(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]) -> tuple[Tensor]:
    # torch's window is ONNX's for an odd size only (even: one channel further back)
    a = op.attrs
    size = a.get("size", 5)
    if size % 2 == 0:
        return array_api.KERNELS["lrn"](xp, op, args, w)
    return (F.local_response_norm(args[0], size, a.get("alpha", 1e-4), a.get("beta", 0.75),
                                  a.get("bias", 1.0)),)


@_kernel("layernorm")
def _layernorm(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> tuple[Tensor]:
    x = args[0]
    return (F.layer_norm(x, x.shape[-1:], w["scale"], w["shift"], op.attrs.get("eps", 1e-5)),)


@_kernel("batchnorm")
def _batchnorm(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> tuple[Tensor]:
    return (F.batch_norm(args[0], w["mean"], w["var"], w["scale"], w["shift"],
                         training=False, eps=op.attrs.get("eps", 1e-5)),)


# -- elementwise (add, sub, mul, div and dropout: the array-API kernels' tensor operators) --


@_kernel("relu")
def _relu(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]) -> tuple[Tensor]:
    return (torch.relu(args[0]),)


@_kernel("relu6")
def _relu6(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
           ) -> tuple[Tensor]:
    return (F.relu6(args[0]),)


@_kernel("sigmoid")
def _sigmoid(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
             ) -> tuple[Tensor]:
    return (torch.sigmoid(args[0]),)


@_kernel("tanh")
def _tanh(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]) -> tuple[Tensor]:
    return (torch.tanh(args[0]),)


@_kernel("gelu")
def _gelu(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]) -> tuple[Tensor]:
    return (F.gelu(args[0], approximate=op.attrs.get("approximate", "tanh")),)


@_kernel("silu")
def _silu(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]) -> tuple[Tensor]:
    return (F.silu(args[0]),)


def torch_slope(op: Op) -> bool:
    """Whether a hard sigmoid or swish has torch's slope (1/6, 1/2), the one torch's
    operators compute; ONNX's default hard sigmoid is (0.2, 0.5).

    >>> torch_slope(Op("h", "hardsigmoid", "elementwise"))
    False
    """
    return hard_slope(op) == (1.0 / 6.0, 0.5)


@_kernel("hardsigmoid")
def _hardsigmoid(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
                 ) -> tuple[Tensor]:
    if torch_slope(op):
        return (F.hardsigmoid(args[0]),)
    alpha, beta = hard_slope(op)
    return (torch.clamp(alpha * args[0] + beta, 0.0, 1.0),)


@_kernel("hardswish")
def _hardswish(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> tuple[Tensor]:
    return (F.hardswish(args[0]),)  # its slope is fixed (hard_slope)


@_kernel("clip")
def _clip(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]) -> tuple[Tensor]:
    low, high = op.attrs.get("min"), op.attrs.get("max")
    if low is None and high is None:
        return (args[0].clone(),)
    return (torch.clamp(args[0], low, high),)


for _kind in ("add", "sub", "mul", "div", "dropout"):
    TORCH_KERNELS[_kind] = array_api.KERNELS[_kind]


@_kernel("lstm_cell")
def _lstm_cell(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> tuple[Tensor, Tensor]:
    gx, gh, c = args
    i, f, g, o = torch.chunk(gx + gh, 4, dim=-1)  # PyTorch's gate order
    c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_next), c_next


# -- layout -------------------------------------------------------------------------------


@_kernel("reshape", "flatten")
def _reshape(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
             ) -> tuple[Tensor]:
    return (torch.reshape(args[0], op.outputs[0].shape),)


@_kernel("transpose")
def _transpose(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> tuple[Tensor]:
    # materialised, as the IR costs it (a view would move no bytes)
    return (args[0].permute(*op.attrs["perm"]).clone(memory_format=torch.contiguous_format),)


@_kernel("concat")
def _concat(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> tuple[Tensor]:
    return (torch.cat(list(args), dim=op.attrs.get("axis", 1)),)


@_kernel("split")
def _split(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
           ) -> tuple[Tensor, ...]:
    x, a = args[0], op.attrs
    axis, sizes = a["axis"] % x.ndim, list(a["sizes"])
    rest = x.shape[axis] - sum(sizes)
    pieces = torch.split(x, [*sizes, rest] if rest else sizes, dim=axis)[:len(sizes)]
    if a.get("squeeze"):
        pieces = tuple(p.squeeze(axis) for p in pieces)
    # copies: the IR moves these bytes
    return tuple(p.clone(memory_format=torch.contiguous_format) for p in pieces)


@_kernel("pad")
def _pad(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]) -> tuple[Tensor]:
    # F.pad lists (before, after) from the last axis back; negative pads crop, as in ONNX
    flat = [n for before, after in reversed(op.attrs["pads"]) for n in (before, after)]
    return (F.pad(args[0], flat, value=op.attrs["value"]),)


@_kernel("embedding")
def _embedding(xp: Any, op: Op, args: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> tuple[Tensor]:
    return (F.embedding(args[0], w["table"]),)
