"""Every forward kernel against an independent float64 reference (scipy.signal, explicit
loops, closed forms, torch's functional ops), on NumPy and on array-api-strict."""

from __future__ import annotations

import math

import array_api_strict
import numpy as np
import pytest
from scipy import signal

from runtime.kernels import KERNELS, run_kernel
from workloads import GraphBuilder, GraphError, Op, Tensor

NAMESPACES = {"numpy": np, "array-api-strict": array_api_strict}


def run(ns: str, op, inputs, weights=None) -> list[np.ndarray]:
    xp = NAMESPACES[ns]
    args = [xp.asarray(a) for a in inputs]
    w = {k: xp.asarray(v) for k, v in (weights or {}).items()}
    return [np.asarray(o) for o in run_kernel(xp, op, args, w)]


def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.fixture(params=list(NAMESPACES))
def ns(request) -> str:
    return request.param


@pytest.mark.parametrize(("stride", "padding", "groups", "bias"),
                         [(1, 0, 1, False), (2, 1, 1, True), ((2, 1), (1, 2), 3, True)])
def test_conv2d_against_scipy(ns, stride, padding, groups, bias) -> None:
    b = GraphBuilder("c", "fp64")
    x = b.input((2, 6, 9, 10))
    y = b.conv2d(x, 9, (3, 2), stride=stride, padding=padding, groups=groups, bias=bias)
    op = b.build().op(y)
    r = rng()
    xv, wv, bv = r.standard_normal((2, 6, 9, 10)), r.standard_normal((9, 6 // groups, 3, 2)), \
        r.standard_normal(9)
    (sh, sw), (ph, pw) = op.attrs["stride"], op.attrs["padding"]
    padded = np.pad(xv, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ref = np.zeros(op.output.shape)
    cg, og = 6 // groups, 9 // groups
    for n in range(2):
        for o in range(9):
            g = o // og
            full = sum(signal.correlate2d(padded[n, g * cg + c], wv[o, c], mode="valid")
                       for c in range(cg))
            ref[n, o] = full[::sh, ::sw] + (bv[o] if bias else 0.0)
    (out,) = run(ns, op, [xv], {"weight": wv, **({"bias": bv} if bias else {})})
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def _pool_reference(x: np.ndarray, k: int, s: int, p: int, how: str) -> np.ndarray:
    n, c, h, w = x.shape
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    fill = -np.inf if how == "max" else 0.0
    padded = np.full((n, c, h + 2 * p, w + 2 * p), fill)
    padded[:, :, p:p + h, p:p + w] = x
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            window = padded[:, :, i * s:i * s + k, j * s:j * s + k]
            out[:, :, i, j] = window.max(axis=(2, 3)) if how == "max" else \
                window.sum(axis=(2, 3)) / (k * k)
    return out


@pytest.mark.parametrize(("k", "s", "p"), [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_pooling_against_explicit_loops(ns, k, s, p) -> None:
    b = GraphBuilder("p", "fp64")
    x = b.input((2, 3, 7, 8))
    mx, av = b.max_pool2d(x, k, stride=s, padding=p), b.avg_pool2d(x, k, stride=s, padding=p)
    g = b.build()
    xv = rng().standard_normal((2, 3, 7, 8))
    np.testing.assert_allclose(run(ns, g.op(mx), [xv])[0], _pool_reference(xv, k, s, p, "max"))
    np.testing.assert_allclose(run(ns, g.op(av), [xv])[0], _pool_reference(xv, k, s, p, "avg"),
                               rtol=1e-12)


def test_adaptive_and_global_average_pooling(ns) -> None:
    b = GraphBuilder("a", "fp64")
    x = b.input((1, 2, 7, 9))
    ad, gl = b.adaptive_avg_pool2d(x, 3), b.global_avg_pool(x)
    g = b.build()
    xv = rng().standard_normal((1, 2, 7, 9))
    ref = np.zeros((1, 2, 3, 3))
    for i in range(3):
        for j in range(3):  # PyTorch's cells: [floor(i h / s), ceil((i + 1) h / s))
            r0, r1 = i * 7 // 3, math.ceil((i + 1) * 7 / 3)
            c0, c1 = j * 9 // 3, math.ceil((j + 1) * 9 / 3)
            ref[:, :, i, j] = xv[:, :, r0:r1, c0:c1].mean(axis=(2, 3))
    np.testing.assert_allclose(run(ns, g.op(ad), [xv])[0], ref, rtol=1e-12)
    np.testing.assert_allclose(run(ns, g.op(gl), [xv])[0], xv.mean(axis=(2, 3), keepdims=True))


def test_dense_and_elementwise_against_closed_forms(ns) -> None:
    b = GraphBuilder("e", "fp64")
    x = b.input((3, 5))
    y = b.input((3, 5), name="y")
    ops = {"linear": b.linear(x, 4), "relu": b.relu(x), "sigmoid": b.sigmoid(x),
           "tanh": b.tanh(x), "gelu": b.gelu(x), "add": b.add(x, y), "mul": b.mul(x, y),
           "scale": b.scale(x, 0.125), "softmax": b.softmax(x), "layernorm": b.layernorm(x)}
    g = b.build()
    r = rng()
    xv, yv = r.standard_normal((3, 5)), r.standard_normal((3, 5))
    wv, bv = r.standard_normal((5, 4)), r.standard_normal(4)
    sc, sh = r.standard_normal(5), r.standard_normal(5)
    e = np.exp(xv - xv.max(axis=1, keepdims=True))
    norm = (xv - xv.mean(axis=1, keepdims=True)) / np.sqrt(xv.var(axis=1, keepdims=True) + 1e-5)
    expect = {
        "linear": (xv @ wv + bv, {"weight": wv, "bias": bv}), "relu": (np.maximum(xv, 0), {}),
        "sigmoid": (1 / (1 + np.exp(-xv)), {}), "tanh": (np.tanh(xv), {}),
        "gelu": (0.5 * xv * (1 + np.tanh(math.sqrt(2 / math.pi) * (xv + 0.044715 * xv**3))),
                 {}),
        "add": (xv + yv, {}), "mul": (xv * yv, {}), "scale": (xv / 8, {}),
        "softmax": (e / e.sum(axis=1, keepdims=True), {}),
        "layernorm": (norm * sc + sh, {"scale": sc, "shift": sh}),
    }
    for kind, name in ops.items():
        op = g.op(name)
        args = [xv, yv][:len(op.inputs)]
        ref, weights = expect[kind]
        np.testing.assert_allclose(run(ns, op, args, weights)[0], ref, rtol=1e-12, atol=1e-14,
                                   err_msg=kind)


def test_batchnorm_is_the_inference_formula(ns) -> None:
    b = GraphBuilder("bn", "fp64")
    y = b.batchnorm(b.input((2, 3, 4, 4)))
    op = b.build().op(y)
    r = rng()
    xv = r.standard_normal((2, 3, 4, 4))
    w = {"scale": r.standard_normal(3), "shift": r.standard_normal(3),
         "mean": r.standard_normal(3), "var": r.uniform(0.5, 2, 3)}
    shape = (1, 3, 1, 1)
    ref = (xv - w["mean"].reshape(shape)) / np.sqrt(w["var"].reshape(shape) + 1e-5) \
        * w["scale"].reshape(shape) + w["shift"].reshape(shape)
    np.testing.assert_allclose(run(ns, op, [xv], w)[0], ref, rtol=1e-12)


def test_layout_kernels(ns) -> None:
    b = GraphBuilder("l", "fp64")
    x = b.input((2, 3, 4))
    t = b.transpose(x, (2, 0, 1))
    r = b.reshape(x, (6, 4))
    f = b.flatten(x)
    c = b.concat([x, x], axis=2)
    parts = b.split(x, [1, 2], axis=1)
    rows = b.split(x, [1, 1], axis=1, squeeze=True)
    g = b.build()
    xv = rng().standard_normal((2, 3, 4))
    np.testing.assert_array_equal(run(ns, g.op(t), [xv])[0], xv.transpose(2, 0, 1))
    np.testing.assert_array_equal(run(ns, g.op(r), [xv])[0], xv.reshape(6, 4))
    np.testing.assert_array_equal(run(ns, g.op(f), [xv])[0], xv.reshape(2, 12))
    np.testing.assert_array_equal(run(ns, g.op(c), [xv, xv])[0], np.concatenate([xv, xv], 2))
    a, bb = run(ns, g.op(g.producer(parts[0])), [xv])
    np.testing.assert_array_equal(a, xv[:, :1])
    np.testing.assert_array_equal(bb, xv[:, 1:])
    first, second = run(ns, g.op(g.producer(rows[0])), [xv])
    np.testing.assert_array_equal(first, xv[:, 0])
    np.testing.assert_array_equal(second, xv[:, 1])


def test_embedding_looks_rows_up(ns) -> None:
    b = GraphBuilder("emb", "fp64")
    y = b.embedding(b.input((2, 3), dtype="int64"), 10, 4)
    op = b.build().op(y)
    table = rng().standard_normal((10, 4))
    ids = np.array([[0, 9, 3], [3, 3, 1]])
    np.testing.assert_array_equal(run(ns, op, [ids], {"table": table})[0], table[ids])


def test_lstm_cell_against_torch() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    cell = torch.nn.LSTMCell(5, 4).double()
    r = rng()
    x, h, c = r.standard_normal((3, 5)), r.standard_normal((3, 4)), r.standard_normal((3, 4))
    with torch.no_grad():
        h1, c1 = cell(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
    gx = x @ cell.weight_ih.detach().numpy().T + cell.bias_ih.detach().numpy()
    gh = h @ cell.weight_hh.detach().numpy().T + cell.bias_hh.detach().numpy()
    op = Op("cell", "lstm_cell", "elementwise", inputs=("gx", "gh", "c"),
            outputs=(Tensor("h1", (3, 4), "fp64"), Tensor("c1", (3, 4), "fp64")))
    out_h, out_c = run("numpy", op, [gx, gh, c])
    np.testing.assert_allclose(out_h, h1.numpy(), rtol=1e-10)
    np.testing.assert_allclose(out_c, c1.numpy(), rtol=1e-10)


def test_conv_and_pooling_against_torch_in_fp32() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import torch.nn.functional as F

    b = GraphBuilder("t")
    x = b.input((2, 8, 15, 15))
    y = b.avg_pool2d(b.max_pool2d(b.conv2d(x, 16, 3, stride=2, padding=1, groups=2), 3,
                                  stride=2, padding=1), 3, stride=1, padding=1)
    g = b.build()
    r = rng()
    xv = r.standard_normal((2, 8, 15, 15)).astype(np.float32)
    wv = r.standard_normal((16, 4, 3, 3)).astype(np.float32)
    conv = g.op(g.producer(g.op(g.producer(g.op(y).inputs[0])).inputs[0]))
    h = run("numpy", conv, [xv], {"weight": wv})[0]
    h = run("numpy", g.op(g.producer(g.op(y).inputs[0])), [h])[0]
    out = run("numpy", g.op(y), [h])[0]
    ref = F.avg_pool2d(F.max_pool2d(F.conv2d(torch.tensor(xv), torch.tensor(wv), stride=2,
                                             padding=1, groups=2), 3, 2, 1), 3, 1, 1)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-5)


def test_ops_that_can_only_be_costed_are_refused() -> None:
    op = Op("mystery", "opaque", "elementwise", outputs=(Tensor("m", (2,)),))
    with pytest.raises(GraphError, match=r"op 'mystery': kind 'opaque' has no kernel \(it can "
                                         r"be simulated, not run\)"):
        run("numpy", op, [])
    assert "synthetic" not in KERNELS and "opaque" not in KERNELS
