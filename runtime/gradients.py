"""Backward kernels and optimizer updates, on the array API like the forward kernels.

A gradient function takes the forward op, the gradient of its output, the forward inputs it
saved and its weights, and returns the gradient of each input (None where an input needs
none) and of each weight slot. Batch norm is differentiated in its inference form (frozen
running statistics), the form its forward kernel computes. Updates follow PyTorch's
``torch.optim`` definitions (SGD, SGD with momentum, Adam with bias correction).

:mod:`runtime.training` binds them to the ops of a training graph. They are tested on their
own (``tests/runtime``) against PyTorch's autograd and finite differences, and whole steps
against ``torch.optim``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from array_api_compat import device as _device

from runtime.kernels import hard_slope, registrar, windows  # windows: the im2col views
from workloads.errors import GraphError
from workloads.op import Op

__all__ = ["GRADIENTS", "adam_update", "cross_entropy_grad", "gradient",
           "momentum_update", "sgd_update"]

Array = Any
Grads = tuple[list[Array | None], dict[str, Array]]
Gradient = Callable[[Any, Op, Array, Sequence[Array], Mapping[str, Array]], Grads]
GRADIENTS: dict[str, Gradient] = {}


_grad = registrar(GRADIENTS)


def gradient(xp: Any, op: Op, grad_out: Array, inputs: Sequence[Array],
             weights: Mapping[str, Array]) -> Grads:
    """Gradients of ``op``'s inputs and weights given the gradient of its output (a list,
    one per output, for an op with several)."""
    try:
        fn = GRADIENTS[op.kind]
    except KeyError:
        raise GraphError(f"op {op.name!r}: kind {op.kind!r} has no backward kernel; kinds "
                         f"with one: {', '.join(sorted(GRADIENTS))}") from None
    return fn(xp, op, grad_out, inputs, weights)


def _sum_to(xp: Any, g: Array, shape: tuple[int, ...]) -> Array:
    """Sum ``g`` over the leading axes a broadcast added."""
    while g.ndim > len(shape):
        g = xp.sum(g, axis=0)
    return g


@_grad("linear")
def _linear(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    # A head tied to an embedding reads the table transposed; its gradient goes back so.
    weight = w["weight"] if "weight" in w else xp.permute_dims(w["table"], (1, 0))
    din = xp.matmul(dy, xp.permute_dims(weight, (1, 0)))
    rows = xp.reshape(x[0], (-1, weight.shape[0]))
    drows = xp.reshape(dy, (-1, weight.shape[1]))
    dweight = xp.matmul(xp.permute_dims(rows, (1, 0)), drows)
    grads = {"weight": dweight} if "weight" in w else {"table": xp.permute_dims(dweight, (1, 0))}
    if op.attrs.get("bias"):
        grads["bias"] = xp.sum(drows, axis=0)
    return [din], grads


@_grad("matmul")
def _matmul(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    a, b = x

    def t(v: Array) -> Array:
        return xp.matrix_transpose(v)

    return [xp.matmul(dy, t(b)), xp.matmul(t(a), dy)], {}


@_grad("conv2d")
def _conv2d(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    weight = w["weight"]
    groups = op.attrs.get("groups", 1)
    n, c, h, wd = x[0].shape
    out, cg, kh, kw = weight.shape
    cols, ho, wo = windows(xp, x[0], op, 0.0)              # (n, c, k, ho, wo)
    cols = xp.reshape(cols, (n, groups, cg * kh * kw, ho * wo))
    dyg = xp.reshape(dy, (n, groups, out // groups, ho * wo))
    dw = xp.sum(xp.matmul(dyg, xp.permute_dims(cols, (0, 1, 3, 2))), axis=0)
    grads = {"weight": xp.reshape(dw, weight.shape)}
    if op.attrs.get("bias"):
        grads["bias"] = xp.sum(dy, axis=(0, 2, 3))
    wg = xp.reshape(weight, (1, groups, out // groups, cg * kh * kw))
    dcols = xp.matmul(xp.permute_dims(wg, (0, 1, 3, 2)), dyg)  # (n, g, cg*k, ho*wo)
    dcols = xp.reshape(dcols, (n, c, kh * kw, ho, wo))
    return [_fold(xp, dcols, op, (n, c, h, wd))], grads


def _fold(xp: Any, dcols: Array, op: Op, shape: tuple[int, int, int, int]) -> Array:
    """The adjoint of :func:`runtime.kernels.windows`: add each kernel position's view
    back where it was read from, then drop the padding."""
    n, c, h, w = shape
    kh, kw = op.attrs["kernel"]
    sh, sw = op.attrs.get("stride", (1, 1))
    pads = tuple(op.attrs.get("padding", (0, 0)))
    top, left, bottom, right = pads * 2 if len(pads) == 2 else pads
    ho, wo = dcols.shape[3:]
    dx = xp.zeros((n, c, h + top + bottom, w + left + right), dtype=dcols.dtype,
                  device=_device(dcols))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + sh * (ho - 1) + 1, sh)
            cols = slice(j, j + sw * (wo - 1) + 1, sw)
            dx[:, :, rows, cols] = dx[:, :, rows, cols] + dcols[:, :, i * kw + j, ...]
    return dx[:, :, top:top + h, left:left + w]


@_grad("max_pool2d")
def _max_pool(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
              ) -> Grads:
    cols, _, _ = windows(xp, x[0], op, -math.inf)
    best = xp.max(cols, axis=2, keepdims=True)
    hit = xp.astype(cols == best, dy.dtype)
    first = xp.astype(xp.cumulative_sum(hit, axis=2) == 1, dy.dtype) * hit  # ties: first
    return [_fold(xp, first * xp.expand_dims(dy, axis=2), op, x[0].shape)], {}


@_grad("avg_pool2d")
def _avg_pool(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
              ) -> Grads:
    if "output_size" in op.attrs:
        return [_adaptive_avg(xp, dy, x[0].shape)], {}
    kh, kw = op.attrs["kernel"]
    n, c = x[0].shape[:2]
    if op.attrs.get("count_include_pad", True) or not any(op.attrs.get("padding", (0, 0))):
        count: Array | float = float(kh * kw)
    else:  # each window averages over the cells it covers inside the input
        ones = xp.ones((1, 1, *tuple(x[0].shape[2:])), dtype=dy.dtype, device=_device(dy))
        cols, _, _ = windows(xp, ones, op, 0.0)
        count = xp.sum(cols, axis=2)
    share = xp.expand_dims(dy / count, axis=2)
    dcols = xp.broadcast_to(share, (n, c, kh * kw, *dy.shape[2:]))
    return [_fold(xp, dcols, op, x[0].shape)], {}


def _adaptive_avg(xp: Any, dy: Array, shape: tuple[int, ...]) -> Array:
    """The adjoint of adaptive average pooling, ``P_h dy P_w^T``: ``P[r, i]`` is 1 / (cell
    i's extent) where input row ``r`` lies in cell ``i`` (PyTorch's cells)."""
    size = dy.shape[-1]

    def spread(extent: int) -> Array:
        rows = [[0.0] * size for _ in range(extent)]
        for i in range(size):
            lo, hi = (i * extent) // size, -((-(i + 1) * extent) // size)
            for r in range(lo, hi):
                rows[r][i] = 1.0 / (hi - lo)
        return xp.asarray(rows, dtype=dy.dtype, device=_device(dy))

    h, w = shape[2:]
    return xp.matmul(xp.matmul(spread(h), dy), xp.permute_dims(spread(w), (1, 0)))


@_grad("global_avg_pool")
def _global_avg(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
                ) -> Grads:
    h, wd = x[0].shape[2:]
    return [xp.broadcast_to(dy / (h * wd), x[0].shape)], {}


@_grad("relu")
def _relu(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    return [dy * xp.astype(x[0] > 0, dy.dtype)], {}


@_grad("sigmoid")
def _sigmoid(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
             ) -> Grads:
    s = 1.0 / (1.0 + xp.exp(-x[0]))
    return [dy * s * (1.0 - s)], {}


@_grad("tanh")
def _tanh(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    t = xp.tanh(x[0])
    return [dy * (1.0 - t * t)], {}


@_grad("hardsigmoid")
@_grad("hardswish")
def _hard(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    alpha, beta = hard_slope(op)
    v = x[0]
    z = alpha * v + beta
    inside = xp.astype((z > 0) & (z < 1), dy.dtype)
    if op.kind == "hardsigmoid":
        return [dy * alpha * inside], {}
    gate = xp.clip(z, 0.0, 1.0)
    return [dy * (gate + v * alpha * inside)], {}


@_grad("silu")
def _silu(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    s = 1.0 / (1.0 + xp.exp(-x[0]))
    return [dy * s * (1.0 + x[0] * (1.0 - s))], {}


@_grad("relu6")
def _relu6(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    return [dy * xp.astype((x[0] > 0) & (x[0] < 6), dy.dtype)], {}


@_grad("gelu")
def _gelu(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    v = x[0]
    k = math.sqrt(2.0 / math.pi)
    inner = k * (v + 0.044715 * v * v * v)  # v * v * v: a float power is far slower
    t = xp.tanh(inner)
    slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * v * v)
    return [dy * slope], {}


@_grad("add")
def _add(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    return [_sum_to(xp, dy, tuple(v.shape)) for v in x], {}


@_grad("mul")
def _mul(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    if "scalar" in op.attrs:
        return [dy * op.attrs["scalar"]], {}
    a, b = x
    return [dy * b, dy * a], {}


@_grad("reshape", "flatten")
def _reshape(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
             ) -> Grads:
    return [xp.reshape(dy, x[0].shape)], {}


@_grad("transpose")
def _transpose(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
               ) -> Grads:
    perm = list(op.attrs["perm"])
    inverse = tuple(perm.index(i) for i in range(len(perm)))
    return [xp.permute_dims(dy, inverse)], {}


@_grad("concat")
def _concat(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    axis = op.attrs.get("axis", 1) % dy.ndim
    out, start = [], 0
    for v in x:  # each input's slice of the output's gradient
        index = [slice(None)] * dy.ndim
        index[axis] = slice(start, start + v.shape[axis])
        out.append(dy[tuple(index)])
        start += v.shape[axis]
    return out, {}


@_grad("split")
def _split(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]) -> Grads:
    # dy: one gradient per output; the input's is their concatenation.
    axis = op.attrs["axis"] % x[0].ndim
    pieces = dy if len(op.outputs) > 1 else [dy]
    parts = [xp.expand_dims(g, axis=axis) if op.attrs.get("squeeze") else g for g in pieces]
    rest = x[0].shape[axis] - sum(op.attrs["sizes"])
    if rest:  # the part no piece took gets no gradient
        shape = list(x[0].shape)
        shape[axis] = rest
        parts.append(xp.zeros(tuple(shape), dtype=parts[0].dtype, device=_device(parts[0])))
    return [xp.concat(parts, axis=axis)], {}


@_grad("softmax")
def _softmax(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
             ) -> Grads:
    v = x[0]
    e = xp.exp(v - xp.max(v, axis=-1, keepdims=True))
    p = e / xp.sum(e, axis=-1, keepdims=True)
    return [p * (dy - xp.sum(dy * p, axis=-1, keepdims=True))], {}


@_grad("layernorm")
def _layernorm(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
               ) -> Grads:
    v = x[0]
    d = v.shape[-1]
    mean = xp.mean(v, axis=-1, keepdims=True)
    inv = 1.0 / xp.sqrt(xp.var(v, axis=-1, keepdims=True) + op.attrs.get("eps", 1e-5))
    xhat = (v - mean) * inv
    g = dy * w["scale"]
    dx = inv / d * (d * g - xp.sum(g, axis=-1, keepdims=True)
                    - xhat * xp.sum(g * xhat, axis=-1, keepdims=True))
    flat = xp.reshape(dy, (-1, d))
    return [dx], {"scale": xp.sum(flat * xp.reshape(xhat, (-1, d)), axis=0),
                  "shift": xp.sum(flat, axis=0)}


@_grad("batchnorm")
def _batchnorm(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
               ) -> Grads:
    v = x[0]
    shape = (1, v.shape[1]) + (1,) * (v.ndim - 2)
    axes = (0, *range(2, v.ndim))
    inv = 1.0 / xp.sqrt(w["var"] + op.attrs.get("eps", 1e-5))
    xhat = (v - xp.reshape(w["mean"], shape)) * xp.reshape(inv, shape)
    return [dy * xp.reshape(w["scale"] * inv, shape)], {
        "scale": xp.sum(dy * xhat, axis=axes), "shift": xp.sum(dy, axis=axes)}


@_grad("embedding")
def _embedding(xp: Any, op: Op, dy: Array, x: Sequence[Array], w: Mapping[str, Array]
               ) -> Grads:
    vocab, dim = op.attrs["vocab"], op.attrs["dim"]
    ids = xp.reshape(x[0], (-1,))
    rows = xp.reshape(dy, (-1, dim))
    onehot = xp.astype(xp.reshape(ids, (-1, 1)) == xp.arange(vocab, device=_device(ids)),
                       rows.dtype)
    return [None], {"table": xp.matmul(xp.permute_dims(onehot, (1, 0)), rows)}


def cross_entropy_grad(xp: Any, probs: Array, labels: Array) -> Array:
    """Gradient of ``-mean(log probs[label])`` with respect to the probabilities (the
    zoo's heads end in a softmax, which the loss reads)."""
    classes = probs.shape[-1]
    onehot = xp.astype(xp.reshape(labels, (*labels.shape, 1))
                       == xp.arange(classes, device=_device(labels)), probs.dtype)
    count = math.prod(labels.shape)
    # A probability that underflowed to 0 is floored: a huge finite gradient, never NaN.
    floor = xp.finfo(probs.dtype).smallest_normal
    least = xp.asarray(floor, dtype=probs.dtype, device=_device(probs))
    return -onehot / (xp.maximum(probs, least) * count)


def sgd_update(w: Array, g: Array, *, lr: float) -> Array:
    """``w - lr * g`` (``torch.optim.SGD`` without momentum)."""
    return w - lr * g


def momentum_update(w: Array, velocity: Array, g: Array, *, lr: float, momentum: float
                    ) -> tuple[Array, Array]:
    """``torch.optim.SGD`` with momentum: ``v = momentum * v + g; w -= lr * v``."""
    velocity = momentum * velocity + g
    return w - lr * velocity, velocity


def adam_update(xp: Any, w: Array, m: Array, v: Array, g: Array, *, step: int, lr: float,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
                ) -> tuple[Array, Array, Array]:
    """``torch.optim.Adam`` (bias-corrected moments) at ``step`` (from 1)."""
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat = m / (1 - b1 ** step)
    v_hat = v / (1 - b2 ** step)
    return w - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v
