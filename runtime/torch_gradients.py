"""Backward kernels, the loss gradient and the optimizer updates of the torch engine.

A backward kernel has the array-API library's signature (:func:`runtime.gradients.gradient`):
given the forward op, the gradient of its output(s), the forward inputs it saved and its
weights, it returns the gradient of each input (None where an input takes none, such as an
embedding's ids) and of each weight slot, in the IR's layouts. Where ATen has the backward
function of the forward operator it is called directly (``aten.convolution_backward``,
``aten.max_pool2d_with_indices_backward``, ``aten.native_layer_norm_backward``, ...);
linear layers and products are matrix products; any other kind, or a form those functions
do not take, is differentiated by ``torch.autograd.grad`` through its forward kernel, run
again. Batch norm is differentiated in its inference form, as its forward kernel computes.
Updates change the weights in place as ``torch.optim`` computes them (SGD, SGD with
momentum, Adam with bias correction), their state kept on the device.

:data:`TORCH_LIBRARY` is what :func:`runtime.torch_kernels.bind` hands
:func:`runtime.training.bind`, which sums incoming gradients, and flattens weight gradients
in the owner's slot order, for every engine alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from runtime.gradients import Gradient, Grads
from runtime.kernels import hard_slope, registrar
from runtime.torch_kernels import kernel_for, softmax_rows, torch_slope
from runtime.torch_windows import pads, torch_window
from runtime.training import BUFFERS, Library
from workloads.op import Op

__all__ = ["TORCH_GRADIENTS", "TORCH_LIBRARY", "autograd", "cross_entropy_grad", "gradient",
           "update"]

Tensor = torch.Tensor
TORCH_GRADIENTS: dict[str, Gradient] = {}
_grad = registrar(TORCH_GRADIENTS)
aten = torch.ops.aten


def gradient(xp: Any, op: Op, grad_out: Any, inputs: Sequence[Tensor],
             weights: Mapping[str, Tensor]) -> Grads:
    """Gradients of ``op``'s inputs and weights given the gradient of its output (a list,
    one per output, for an op with several): ATen's backward function of the kind, else
    autograd through the forward kernel.

    >>> from workloads import GraphBuilder
    >>> b = GraphBuilder("g")
    >>> y = b.relu(b.input((3,)))
    >>> op = b.build().op(y)
    >>> gradient(None, op, torch.ones(3), [torch.tensor([-1.0, 0.0, 2.0])], {})[0]
    [tensor([0., 0., 1.])]
    """
    native = None if "fused_ops" in op.attrs else TORCH_GRADIENTS.get(op.kind)
    if native is None:
        return autograd(xp, op, grad_out, inputs, weights)
    return native(xp, op, grad_out, inputs, weights)


def autograd(xp: Any, op: Op, grad_out: Any, inputs: Sequence[Tensor],
             weights: Mapping[str, Tensor]) -> Grads:
    """Gradients of ``op`` by ``torch.autograd.grad`` through its forward kernel, run again
    on leaves that share the inputs' and weights' memory: every floating input's, and every
    floating weight's but a buffer's (zeros for one the output does not depend on).

    >>> from workloads import Op, Tensor
    >>> op = Op("t", "tanh", "elementwise", inputs=("x",), outputs=(Tensor("t", (1,)),))
    >>> autograd(None, op, torch.ones(1), [torch.zeros(1)], {})[0]
    [tensor([1.])]
    """
    def leaf(t: Tensor, trained: bool = True) -> Tensor:
        return t.detach().requires_grad_(trained and t.is_floating_point())

    with torch.enable_grad():
        xs = [leaf(x) for x in inputs]
        # a buffer: a slot of BUFFERS, its own or a fused stage's ("<stage>.mean")
        ws = {k: leaf(v, k.rpartition(".")[2] not in BUFFERS) for k, v in weights.items()}
        outs = kernel_for(op)(xp, op, xs, ws)
        dys = list(grad_out) if len(op.outputs) > 1 else [grad_out]
        pairs = [(o, g) for o, g in zip(outs, dys, strict=True) if o.requires_grad]
        leaves = [t for t in [*xs, *ws.values()] if t.requires_grad]
        found = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                                    allow_unused=True) if pairs and leaves else ()
    by_leaf = {id(t): g for t, g in zip(leaves, found, strict=False)}

    def grad_of(t: Tensor) -> Tensor | None:
        if not t.requires_grad:
            return None
        g = by_leaf.get(id(t))
        return torch.zeros_like(t).detach() if g is None else g

    return [grad_of(x) for x in xs], {k: grad_of(v) for k, v in ws.items() if v.requires_grad}


# -- dense algebra ------------------------------------------------------------------------


@_grad("linear")
def _linear(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> Grads:
    # the IR's (in, out) weight, or a tied head's (vocab, dim) table read transposed
    weight = w["weight"] if "weight" in w else w["table"].t()
    rows, drows = x[0].reshape(-1, weight.shape[0]), dy.reshape(-1, weight.shape[1])
    din = torch.matmul(dy, weight.t())
    grads = ({"weight": torch.matmul(rows.t(), drows)} if "weight" in w
             else {"table": torch.matmul(drows.t(), rows)})
    if op.attrs.get("bias"):
        grads["bias"] = drows.sum(0)
    return [din], grads


@_grad("matmul")
def _matmul(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> Grads:
    a, b = x
    return [torch.matmul(dy, b.mT), torch.matmul(a.mT, dy)], {}


@_grad("conv2d")
def _conv2d(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> Grads:
    a = op.attrs
    window = torch_window(op, x[0], 0.0, pools=False)
    if window is None:
        return autograd(xp, op, dy, x, w)
    padded, padding = window
    bias = bool(a.get("bias"))
    weight = w["weight"]
    dx, dw, db = aten.convolution_backward(
        dy, padded, weight, [weight.shape[0]] if bias else None, list(a.get("stride", (1, 1))),
        list(padding), list(a.get("dilation", (1, 1))), False, [0, 0], a.get("groups", 1),
        [True, True, bias])
    grads = {"weight": dw, **({"bias": db} if bias else {})}
    return [_crop(op, dx, padded is x[0])], grads


def _crop(op: Op, dx: Tensor, as_is: bool) -> Tensor:
    """The gradient of the input from that of the input padded (nothing to do if the
    operator padded it itself)."""
    if as_is:
        return dx
    top, left, bottom, right = pads(op)
    return dx[:, :, top:dx.shape[2] - bottom, left:dx.shape[3] - right]


# -- windows and reductions ---------------------------------------------------------------


@_grad("max_pool2d")
def _max_pool(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
              ) -> Grads:
    window = torch_window(op, x[0], -torch.inf)
    if window is None:
        return autograd(xp, op, dy, x, w)
    padded, padding = window
    k, s = list(op.attrs["kernel"]), list(op.attrs.get("stride", (1, 1)))
    _, indices = aten.max_pool2d_with_indices(padded, k, s, list(padding))
    dx = aten.max_pool2d_with_indices_backward(dy, padded, k, s, list(padding), [1, 1], False,
                                               indices)
    return [_crop(op, dx, padded is x[0])], {}


@_grad("avg_pool2d")
def _avg_pool(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
              ) -> Grads:
    a = op.attrs
    if "output_size" in a:
        return [aten._adaptive_avg_pool2d_backward(dy, x[0])], {}
    include = a.get("count_include_pad", True)
    window = torch_window(op, x[0], 0.0)
    if window is None or (window[0] is not x[0] and not include and any(pads(op))):
        return autograd(xp, op, dy, x, w)  # the array-API kernel's forms
    padded, padding = window
    dx = aten.avg_pool2d_backward(dy, padded, list(a["kernel"]), list(a.get("stride", (1, 1))),
                                  list(padding), False, include, None)
    return [_crop(op, dx, padded is x[0])], {}


@_grad("global_avg_pool")
def _global_avg(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
                ) -> Grads:
    h, wd = x[0].shape[2:]
    return [(dy / (h * wd)).expand(x[0].shape)], {}


@_grad("softmax")
def _softmax(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
             ) -> Grads:
    y = torch.softmax(softmax_rows(op, x[0]), -1)
    dx = aten._softmax_backward_data(softmax_rows(op, dy), y, -1, x[0].dtype)
    return [dx.reshape(x[0].shape)], {}


@_grad("layernorm")
def _layernorm(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> Grads:
    shape = list(x[0].shape[-1:])
    _, mean, rstd = aten.native_layer_norm(x[0], shape, w["scale"], w["shift"],
                                           op.attrs.get("eps", 1e-5))
    dx, dscale, dshift = aten.native_layer_norm_backward(dy, x[0], shape, mean, rstd,
                                                         w["scale"], w["shift"],
                                                         [True, True, True])
    return [dx], {"scale": dscale, "shift": dshift}


@_grad("batchnorm")
def _batchnorm(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> Grads:
    # Inference statistics: no saved ones. CUDA's kernel wants them defined and empty (it
    # then reads the running ones), where an undefined one fails its internal assertion.
    unsaved = x[0].new_empty(0)
    dx, dscale, dshift = aten.native_batch_norm_backward(
        dy, x[0], w["scale"], w["mean"], w["var"], unsaved, unsaved, False,
        op.attrs.get("eps", 1e-5), [True, True, True])
    return [dx], {"scale": dscale, "shift": dshift}


@_grad("embedding")
def _embedding(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> Grads:
    return [None], {"table": aten.embedding_dense_backward(dy, x[0], op.attrs["vocab"], -1,
                                                           False)}


# -- elementwise --------------------------------------------------------------------------


@_grad("relu")
def _relu(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]) -> Grads:
    return [aten.threshold_backward(dy, x[0], 0)], {}


@_grad("relu6")
def _relu6(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
           ) -> Grads:
    return [aten.hardtanh_backward(dy, x[0], 0.0, 6.0)], {}


@_grad("sigmoid")
def _sigmoid(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
             ) -> Grads:
    return [aten.sigmoid_backward(dy, torch.sigmoid(x[0]))], {}


@_grad("tanh")
def _tanh(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]) -> Grads:
    return [aten.tanh_backward(dy, torch.tanh(x[0]))], {}


@_grad("gelu")
def _gelu(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]) -> Grads:
    return [aten.gelu_backward(dy, x[0], approximate=op.attrs.get("approximate", "tanh"))], {}


@_grad("silu")
def _silu(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]) -> Grads:
    return [aten.silu_backward(dy, x[0])], {}


@_grad("hardsigmoid")
def _hardsigmoid(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
                 ) -> Grads:
    if torch_slope(op):
        return [aten.hardsigmoid_backward(dy, x[0])], {}
    alpha, beta = hard_slope(op)
    z = alpha * x[0] + beta
    return [dy * alpha * ((z > 0) & (z < 1)).to(dy.dtype)], {}


@_grad("hardswish")
def _hardswish(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> Grads:
    return [aten.hardswish_backward(dy, x[0])], {}


@_grad("dropout")
def _dropout(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
             ) -> Grads:
    return [dy], {}


@_grad("add", "sub", "mul", "div")
def _binary(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> Grads:
    if op.attrs.get("onnx_inputs"):  # constants among the operands
        return autograd(xp, op, dy, x, w)
    if op.kind == "mul" and "scalar" in op.attrs:
        return [dy * op.attrs["scalar"]], {}
    if op.kind == "add":
        return [dy.sum_to_size(v.shape) for v in x], {}
    a, b = x
    if op.kind == "sub":
        grads = [dy, -dy]
    elif op.kind == "mul":
        grads = [dy * b, dy * a]
    else:
        grads = [dy / b, -dy * a / (b * b)]
    return [g.sum_to_size(v.shape) for g, v in zip(grads, x, strict=True)], {}


# -- layout -------------------------------------------------------------------------------


@_grad("reshape", "flatten")
def _reshape(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
             ) -> Grads:
    return [dy.reshape(x[0].shape)], {}


@_grad("transpose")
def _transpose(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
               ) -> Grads:
    perm = list(op.attrs["perm"])
    return [dy.permute(*(perm.index(i) for i in range(len(perm))))], {}


@_grad("concat")
def _concat(xp: Any, op: Op, dy: Tensor, x: Sequence[Tensor], w: Mapping[str, Tensor]
            ) -> Grads:
    axis = op.attrs.get("axis", 1) % dy.ndim
    return list(torch.split(dy, [v.shape[axis] for v in x], dim=axis)), {}


@_grad("split")
def _split(xp: Any, op: Op, dy: Any, x: Sequence[Tensor], w: Mapping[str, Tensor]) -> Grads:
    # dy: one gradient per output; the input's is their concatenation
    axis = op.attrs["axis"] % x[0].ndim
    pieces = list(dy) if len(op.outputs) > 1 else [dy]
    parts = [g.unsqueeze(axis) if op.attrs.get("squeeze") else g for g in pieces]
    rest = x[0].shape[axis] - sum(op.attrs["sizes"])
    if rest:  # the part no piece took gets no gradient
        shape = list(x[0].shape)
        shape[axis] = rest
        parts.append(parts[0].new_zeros(shape))
    return [torch.cat(parts, dim=axis)], {}


# -- the loss and the updates -------------------------------------------------------------


def cross_entropy_grad(xp: Any, probs: Tensor, labels: Tensor) -> Tensor:
    """Gradient of ``-mean(log probs[label])`` with respect to the probabilities (as
    :func:`runtime.gradients.cross_entropy_grad`: a probability that underflowed to 0 is
    floored, a huge finite gradient, never NaN).

    >>> cross_entropy_grad(None, torch.tensor([[0.5, 0.5]]), torch.tensor([1]))
    tensor([[-0., -2.]])
    """
    onehot = F.one_hot(labels.long(), probs.shape[-1]).to(probs.dtype)
    floor = torch.finfo(probs.dtype).smallest_normal
    return -onehot / (probs.clamp_min(floor) * labels.numel())


def update(xp: Any, op: Op, g: Tensor, w: Tensor, state: dict[str, Any]) -> None:
    """Apply update op ``op``'s optimizer to ``w`` in place as ``torch.optim`` computes it
    (its single-tensor path: the same operations in the same order), given the gradient
    ``g``; velocity, moments and Adam's step are kept in ``state``.

    >>> from workloads import Op
    >>> w = torch.tensor([1.0, 2.0])
    >>> update(None, Op("u", "sgd_update", "elementwise", attrs={"lr": 0.5}), torch.ones(2),
    ...        w, {})
    >>> w
    tensor([0.5000, 1.5000])
    """
    a = op.attrs
    lr = a["lr"]
    if op.kind == "sgd_update":
        w.add_(g, alpha=-lr)
    elif op.kind == "momentum_update":
        velocity = state["velocity"]  # starts at zero: the first step makes it the gradient
        velocity.mul_(a["momentum"]).add_(g)
        w.add_(velocity, alpha=-lr)
    else:
        beta1, beta2 = a["beta1"], a["beta2"]
        state["step"] = step = state.get("step", 0) + 1
        m, v = state["m"], state["v"]
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        step_size = lr / (1 - beta1 ** step)
        denom = (v.sqrt() / (1 - beta2 ** step) ** 0.5).add_(a["eps"])
        w.addcdiv_(m, denom, value=-step_size)


#: The torch engine's library: its kernels, gradients, loss and updates.
TORCH_LIBRARY = Library(kernel_for, gradient, cross_entropy_grad, update)
