"""Backward kernels against PyTorch's autograd (float64) and finite differences; optimizer
updates against torch.optim."""

from __future__ import annotations

import array_api_strict
import numpy as np
import pytest

from runtime.gradients import (
    adam_update,
    cross_entropy_grad,
    gradient,
    momentum_update,
    sgd_update,
)
from runtime.kernels import run_kernel
from workloads import GraphBuilder, GraphError, Op, Tensor

torch = pytest.importorskip("torch", reason="torch is not installed")
F = torch.nn.functional

NAMESPACES = {"numpy": np, "array-api-strict": array_api_strict}


@pytest.fixture(params=list(NAMESPACES))
def xp(request):
    return NAMESPACES[request.param]


def _grads(xp, op, dy, inputs, weights):
    cast = xp.asarray
    din, dw = gradient(xp, op, cast(dy), [cast(v) for v in inputs],
                       {k: cast(v) for k, v in weights.items()})
    return ([None if g is None else np.asarray(g) for g in din],
            {k: np.asarray(v) for k, v in dw.items()})


def _autograd(fn, inputs, weights, dy):
    """PyTorch's gradients of ``sum(fn(...) * dy)``."""
    ts = [torch.tensor(v, requires_grad=v.dtype.kind == "f") for v in inputs]
    tw = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    out = fn(*ts, **tw)
    (out * torch.tensor(dy)).sum().backward()
    return [t.grad.numpy() if t.grad is not None else None for t in ts], \
        {k: t.grad.numpy() for k, t in tw.items()}


def _check(xp, op, fn, inputs, weights, rtol=1e-10):
    rng = np.random.default_rng(5)
    out = np.asarray(run_kernel(np, op, inputs, weights)[0])
    dy = rng.standard_normal(out.shape)
    got_in, got_w = _grads(xp, op, dy, inputs, weights)
    want_in, want_w = _autograd(fn, inputs, weights, dy)
    for got, want in zip(got_in, want_in, strict=True):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-10)
    for key, want in want_w.items():
        np.testing.assert_allclose(got_w[key], want, rtol=rtol, atol=1e-10, err_msg=key)


def rng():
    return np.random.default_rng(11)


@pytest.mark.parametrize(("stride", "padding", "groups"), [(1, 0, 1), (2, 1, 2), ((2, 1), 1, 1)])
def test_conv2d(xp, stride, padding, groups) -> None:
    b = GraphBuilder("c", "fp64")
    y = b.conv2d(b.input((2, 4, 7, 6)), 6, 3, stride=stride, padding=padding, groups=groups,
                 bias=True)
    op = b.build().op(y)
    r = rng()
    x, w, bias = r.standard_normal((2, 4, 7, 6)), r.standard_normal((6, 4 // groups, 3, 3)), \
        r.standard_normal(6)
    _check(xp, op, lambda v, weight, bias: F.conv2d(v, weight, bias, stride=stride,
                                                    padding=padding, groups=groups),
           [x], {"weight": w, "bias": bias})


def test_linear_and_matmul(xp) -> None:
    b = GraphBuilder("l", "fp64")
    x = b.input((2, 3, 5))
    lin = b.linear(x, 4)
    mm = b.matmul(x, b.input((2, 5, 3), name="y"))
    g = b.build()
    r = rng()
    xv, yv = r.standard_normal((2, 3, 5)), r.standard_normal((2, 5, 3))
    w, bias = r.standard_normal((5, 4)), r.standard_normal(4)
    _check(xp, g.op(lin), lambda v, weight, bias: v @ weight + bias, [xv],
           {"weight": w, "bias": bias})
    _check(xp, g.op(mm), lambda a, c: a @ c, [xv, yv], {})


@pytest.mark.parametrize(("kind", "fn"), [
    ("relu", torch.relu), ("sigmoid", torch.sigmoid), ("tanh", torch.tanh),
    ("gelu", lambda v: F.gelu(v, approximate="tanh")), ("softmax", lambda v: F.softmax(v, -1)),
])
def test_elementwise_and_softmax(xp, kind, fn) -> None:
    b = GraphBuilder("e", "fp64")
    y = getattr(b, kind)(b.input((3, 7)))
    _check(xp, b.build().op(y), fn, [rng().standard_normal((3, 7))], {})


def test_pooling(xp) -> None:
    b = GraphBuilder("p", "fp64")
    x = b.input((2, 3, 7, 7))
    mx = b.max_pool2d(x, 3, stride=2, padding=1)
    av = b.avg_pool2d(x, 3, stride=2, padding=1)
    gl = b.global_avg_pool(x)
    ex = b.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)
    ad = b.adaptive_avg_pool2d(x, 3)
    g = b.build()
    xv = rng().standard_normal((2, 3, 7, 7))
    _check(xp, g.op(ex), lambda v: F.avg_pool2d(v, 3, 2, 1, count_include_pad=False), [xv], {})
    _check(xp, g.op(ad), lambda v: F.adaptive_avg_pool2d(v, 3), [xv], {})
    _check(xp, g.op(mx), lambda v: F.max_pool2d(v, 3, 2, 1), [xv], {})
    _check(xp, g.op(av), lambda v: F.avg_pool2d(v, 3, 2, 1), [xv], {})
    _check(xp, g.op(gl), lambda v: v.mean(dim=(2, 3), keepdim=True), [xv], {})


def test_layernorm(xp) -> None:
    b = GraphBuilder("n", "fp64")
    ln = b.layernorm(b.input((2, 3, 6)))
    r = rng()
    _check(xp, b.build().op(ln),
           lambda v, scale, shift: F.layer_norm(v, (6,), scale, shift, 1e-5),
           [r.standard_normal((2, 3, 6))],
           {"scale": r.standard_normal(6), "shift": r.standard_normal(6)})


def test_layout_add_mul_and_embedding(xp) -> None:
    b = GraphBuilder("m", "fp64")
    x = b.input((2, 3, 4))
    y = b.input((2, 3, 4), name="y")
    ops = [b.add(x, y), b.mul(x, y), b.scale(x, 0.5), b.transpose(x, (2, 0, 1)),
           b.reshape(x, (6, 4)), b.flatten(x), b.concat([x, y], axis=1)]
    emb = b.embedding(b.input((2, 5), name="ids", dtype="int64"), 9, 3)
    g = b.build()
    r = rng()
    xv, yv = r.standard_normal((2, 3, 4)), r.standard_normal((2, 3, 4))
    fns = [lambda a, c: a + c, lambda a, c: a * c, lambda a: a * 0.5,
           lambda a: a.permute(2, 0, 1), lambda a: a.reshape(6, 4), lambda a: a.reshape(2, 12),
           lambda a, c: torch.cat([a, c], dim=1)]
    for name, fn in zip(ops, fns, strict=True):
        op = g.op(name)
        _check(xp, op, fn, [xv, yv][:len(op.inputs)], {})
    ids = np.array([[0, 8, 3, 3, 1], [2, 2, 2, 0, 8]])
    _check(xp, g.op(emb), lambda i, table: F.embedding(i, table), [ids],
           {"table": r.standard_normal((9, 3))})


def test_batchnorm_weights_match_torch(xp) -> None:
    b = GraphBuilder("bn", "fp64")
    y = b.batchnorm(b.input((2, 4, 3, 3)))
    op = b.build().op(y)
    r = rng()
    w = {"scale": r.standard_normal(4), "shift": r.standard_normal(4),
         "mean": r.standard_normal(4), "var": r.uniform(0.5, 2, 4)}
    x = r.standard_normal((2, 4, 3, 3))
    dy = r.standard_normal((2, 4, 3, 3))
    got_in, got_w = _grads(xp, op, dy, [x], w)
    tx = torch.tensor(x, requires_grad=True)
    ts, tb = torch.tensor(w["scale"], requires_grad=True), torch.tensor(w["shift"],
                                                                       requires_grad=True)
    out = F.batch_norm(tx, torch.tensor(w["mean"]), torch.tensor(w["var"]), ts, tb,
                       training=False, eps=1e-5)
    (out * torch.tensor(dy)).sum().backward()
    np.testing.assert_allclose(got_in[0], tx.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(got_w["scale"], ts.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(got_w["shift"], tb.grad.numpy(), rtol=1e-10)


def test_conv_gradient_by_finite_differences() -> None:
    b = GraphBuilder("fd", "fp64")
    y = b.conv2d(b.input((1, 2, 5, 5)), 3, 3, stride=2, padding=1)
    op = b.build().op(y)
    r = rng()
    x, w = r.standard_normal((1, 2, 5, 5)), r.standard_normal((3, 2, 3, 3))
    dy = r.standard_normal(op.output.shape)
    (dx,), dw = _grads(np, op, dy, [x], {"weight": w})

    def loss(xv, wv):
        return float((run_kernel(np, op, [xv], {"weight": wv})[0] * dy).sum())

    eps = 1e-6
    for idx in [(0, 0, 0, 0), (0, 1, 2, 3), (0, 1, 4, 4)]:
        bump = np.zeros_like(x)
        bump[idx] = eps
        numeric = (loss(x + bump, w) - loss(x - bump, w)) / (2 * eps)
        assert dx[idx] == pytest.approx(numeric, rel=1e-6, abs=1e-8)
    for idx in [(0, 0, 0, 0), (2, 1, 2, 1)]:
        bump = np.zeros_like(w)
        bump[idx] = eps
        numeric = (loss(x, w + bump) - loss(x, w - bump)) / (2 * eps)
        assert dw["weight"][idx] == pytest.approx(numeric, rel=1e-6, abs=1e-8)


def test_cross_entropy_through_softmax_equals_torch() -> None:
    r = rng()
    logits = r.standard_normal((4, 6))
    labels = np.array([0, 5, 2, 2])
    b = GraphBuilder("ce", "fp64")
    y = b.softmax(b.input((4, 6)))
    op = b.build().op(y)
    probs = np.asarray(run_kernel(np, op, [logits], {})[0])
    dprobs = cross_entropy_grad(np, probs, labels)
    (dlogits,), _ = _grads(np, op, dprobs, [logits], {})
    t = torch.tensor(logits, requires_grad=True)
    F.cross_entropy(t, torch.tensor(labels)).backward()
    np.testing.assert_allclose(dlogits, t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_optimizer_updates_equal_torch_optim() -> None:
    r = rng()
    w0, grads = r.standard_normal(5), [r.standard_normal(5) for _ in range(3)]
    for name, make in (("sgd", lambda p: torch.optim.SGD([p], lr=0.1)),
                       ("momentum", lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9)),
                       ("adam", lambda p: torch.optim.Adam([p], lr=0.01))):
        p = torch.tensor(w0.copy(), requires_grad=True)
        opt = make(p)
        w, state_a, state_b = w0.copy(), np.zeros(5), np.zeros(5)
        for step, g in enumerate(grads, 1):
            p.grad = torch.tensor(g)
            opt.step()
            if name == "sgd":
                w = sgd_update(w, g, lr=0.1)
            elif name == "momentum":
                w, state_a = momentum_update(w, state_a, g, lr=0.1, momentum=0.9)
            else:
                w, state_a, state_b = adam_update(np, w, state_a, state_b, g, step=step,
                                                  lr=0.01)
        np.testing.assert_allclose(w, p.detach().numpy(), rtol=1e-12, err_msg=name)


def test_a_kind_without_a_backward_is_named() -> None:
    op = Op("c", "lrn", "reduction", inputs=("a",), outputs=(Tensor("c", (2,)),))
    with pytest.raises(GraphError, match=r"op 'c': kind 'lrn' has no backward kernel"):
        gradient(np, op, np.zeros(2), [np.zeros(2)], {})


@pytest.mark.parametrize(("sizes", "axis", "squeeze"), [((2, 3), 1, False),
                                                        ((1, 1), 0, True)])
def test_split_gradient_equals_torch(xp, sizes, axis, squeeze) -> None:
    # One gradient per output; the input's gradient is zero where no piece reaches.
    b = GraphBuilder("s", "fp64")
    b.split(b.input((2, 6, 3)), sizes, axis=axis, squeeze=squeeze, name="sp")
    op = b.build().op("sp")
    r = rng()
    x = r.standard_normal((2, 6, 3))
    dys = [r.standard_normal(t.shape) for t in op.outputs]
    (got,), _ = gradient(xp, op, [xp.asarray(d) for d in dys], [xp.asarray(x)], {})
    t = torch.tensor(x, requires_grad=True)
    pieces = torch.split(t, [*sizes, 6 - sum(sizes)] if axis else [1, 1], dim=axis)[:2]
    if squeeze:
        pieces = [p.squeeze(axis) for p in pieces]
    sum((p * torch.tensor(d)).sum() for p, d in zip(pieces, dys, strict=True)).backward()
    np.testing.assert_allclose(np.asarray(got), t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize(("kind", "attrs", "fn"), [
    ("silu", {}, F.silu), ("relu6", {}, F.relu6), ("hardswish", {}, F.hardswish),
    ("hardsigmoid", {"alpha": 1 / 6, "beta": 0.5}, F.hardsigmoid),  # torch's slope
    ("hardsigmoid", {}, lambda v: torch.clamp(0.2 * v + 0.5, 0, 1)),  # ONNX's default
])
def test_hard_and_smooth_activations_match_torch(xp, kind, attrs, fn) -> None:
    # values spread over the kinks (0, +-3, 6) but never on them
    x = rng().uniform(-8, 8, (4, 9))
    op = Op("a", kind, "elementwise", inputs=("x",), outputs=(Tensor("a", (4, 9), "fp64"),),
            attrs=attrs)
    np.testing.assert_allclose(np.asarray(run_kernel(np, op, [x], {})[0]),
                               fn(torch.tensor(x)).numpy(), rtol=1e-12, atol=1e-12)
    _check(xp, op, fn, [x], {}, rtol=1e-7)  # torch's hardsigmoid slope is a float32 1/6
