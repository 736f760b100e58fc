"""The torch engine's kernels, kind by kind, against PyTorch's own modules with the same
weights (``nn.Conv2d``, ``nn.Linear``, ``nn.LayerNorm``, ``nn.MaxPool2d``, ...): outputs, and
the gradients of the backward kernels against autograd through the module, in float64;
odd shapes, strides, groups and uneven padding drawn by hypothesis. Kinds and forms torch
has no kernel for run the array-API kernel on ``array_api_compat.torch``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="torch is not installed (pip install "
                                            "'placelab[torch]'): the torch engine needs it")

import array_api_compat.torch as xp  # noqa: E402
from torch import Tensor as T  # noqa: E402
from torch import nn  # noqa: E402
from torch.func import functional_call  # noqa: E402

from runtime import kernels as array_api  # noqa: E402
from runtime.torch_gradients import cross_entropy_grad, gradient, update  # noqa: E402
from runtime.torch_kernels import TORCH_KERNELS, kernel_for  # noqa: E402
from runtime.training import BUFFERS  # noqa: E402
from workloads import GraphBuilder, GraphError, Op, Tensor  # noqa: E402

F = torch.nn.functional
Reference = Callable[[list[T], dict[str, T]], Sequence[T]]
SETTINGS = settings(max_examples=20, deadline=None)


def _leaf(v: np.ndarray, grad: bool = True) -> T:
    t = torch.tensor(v)
    return t.requires_grad_(grad and t.is_floating_point())


def check(op: Op, inputs: Sequence[np.ndarray], weights: Mapping[str, np.ndarray],
          reference: Reference, *, rtol: float = 1e-10, atol: float = 1e-11) -> None:
    """``op``'s torch kernel computes what ``reference`` does, and its backward kernel
    gives the gradients autograd gives through ``reference`` (inputs, trained weights)."""
    xs = [torch.tensor(v) for v in inputs]
    ws = {k: torch.tensor(v) for k, v in weights.items()}
    got = kernel_for(op)(xp, op, xs, ws)
    rng = np.random.default_rng(3)
    dys = [torch.tensor(rng.standard_normal(tuple(o.shape))) for o in got]
    din, dw = gradient(xp, op, dys if len(op.outputs) > 1 else dys[0], xs, ws)
    rx = [_leaf(v) for v in inputs]
    rw = {k: _leaf(v, k not in BUFFERS) for k, v in weights.items()}
    want = tuple(reference(rx, rw))
    assert len(got) == len(want) == len(op.outputs)
    for g, w, t in zip(got, want, op.outputs, strict=True):
        assert tuple(g.shape) == t.shape
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"{op.kind} forward")
    torch.autograd.backward([w for w in want if w.requires_grad],
                            [d for d, w in zip(dys, want, strict=True) if w.requires_grad])
    for i, leaf in enumerate(rx):
        if leaf.requires_grad:
            got_grad = din[i]
            assert got_grad is not None and leaf.grad is not None
            np.testing.assert_allclose(got_grad.numpy(), leaf.grad.numpy(), rtol=rtol,
                                       atol=atol, err_msg=f"{op.kind}: input {i}")
        else:
            assert din[i] is None
    for k, leaf in rw.items():
        if leaf.requires_grad:
            assert leaf.grad is not None
            np.testing.assert_allclose(dw[k].numpy(), leaf.grad.numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"{op.kind}: weight {k}")


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([seed, *shape]).standard_normal(shape)


def _out(shape: Sequence[int], n: int, c: int, kh: int, kw: int, stride: tuple[int, int],
         pads: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    (h, w), (sh, sw), (top, left, bottom, right) = shape, stride, pads
    return n, c, (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1


def window_op(kind: str, x_shape: tuple[int, ...], channels: int, kernel: tuple[int, int],
              stride: tuple[int, int], pads: tuple[int, int, int, int], **attrs: object
              ) -> Op:
    """A conv or pooling op with (possibly uneven) padding, as the ONNX importer makes one."""
    top, left, bottom, right = pads
    padding = (top, left) if (top, left) == (bottom, right) else pads
    n, _c, h, w = x_shape
    out = _out((h, w), n, channels, *kernel, stride, pads)
    return Op("w", kind, "conv" if kind == "conv2d" else "reduction", inputs=("x",),
              outputs=(Tensor("w", out, "fp64"),),
              attrs={"kernel": kernel, "stride": stride, "padding": padding, **attrs})


@st.composite
def windows(draw: st.DrawFn, *, pools: bool) -> tuple:
    """A window: kernel, stride, padding (uneven or not; for torch's pooling modules at
    most half the window when even), and an input it fits."""
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    if draw(st.booleans()):
        ph, pw = draw(st.integers(0, kh // 2 if pools else 3)), \
            draw(st.integers(0, kw // 2 if pools else 3))
        pads: tuple[int, ...] = (ph, pw, ph, pw)
    else:
        pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, kh - pads[0] - pads[2]), 9))
    w = draw(st.integers(max(1, kw - pads[1] - pads[3]), 9))
    return (kh, kw), stride, pads, (h, w)


def _flat(pads: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    top, left, bottom, right = pads
    return left, right, top, bottom


# -- dense algebra ------------------------------------------------------------------------


@SETTINGS
@given(window=windows(pools=False), groups=st.sampled_from([1, 2, 3]),
       per_group=st.tuples(st.integers(1, 3), st.integers(1, 3)), bias=st.booleans(),
       batch=st.integers(1, 2))
def test_conv2d_equals_nn_conv2d(window, groups, per_group, bias, batch) -> None:
    kernel, stride, pads, (h, w) = window
    cin, cout = groups * per_group[0], groups * per_group[1]
    op = window_op("conv2d", (batch, cin, h, w), cout, kernel, stride, pads, groups=groups,
                   bias=bias)
    module = nn.Conv2d(cin, cout, kernel, stride, groups=groups, bias=bias, dtype=torch.float64)
    weights = {"weight": rand(cout, cin // groups, *kernel)} | ({"bias": rand(cout)} if bias
                                                               else {})

    def reference(x: list[T], wt: dict[str, T]) -> list[T]:
        return [functional_call(module, wt, (F.pad(x[0], _flat(pads)),))]

    check(op, [rand(batch, cin, h, w)], weights, reference)


@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_equals_nn_linear_with_the_weight_in_in_out_layout(shape, bias) -> None:
    b = GraphBuilder("l", "fp64")
    y = b.linear(b.input(shape), 4, bias=bias)
    op = b.build().op(y)
    module = nn.Linear(7, 4, bias=bias, dtype=torch.float64)
    weights = {"weight": rand(7, 4)} | ({"bias": rand(4)} if bias else {})

    def reference(x: list[T], wt: dict[str, T]) -> list[T]:
        return [functional_call(module, {**wt, "weight": wt["weight"].T}, (x[0],))]

    check(op, [rand(*shape)], weights, reference)


def test_a_head_tied_to_an_embedding_reads_the_table_transposed() -> None:
    op = Op("head", "linear", "matmul", inputs=("x",), outputs=(Tensor("head", (2, 3, 11),
                                                                       "fp64"),),
            attrs={"in_features": 5, "out_features": 11, "bias": False, "shares": "wte"})
    check(op, [rand(2, 3, 5)], {"table": rand(11, 5)},
          lambda x, w: [F.linear(x[0], w["table"])])


def test_batched_matmul_equals_torch_matmul() -> None:
    b = GraphBuilder("m", "fp64")
    y = b.matmul(b.input((2, 3, 4, 5), name="a"), b.input((2, 3, 5, 6), name="b"))
    check(b.build().op(y), [rand(2, 3, 4, 5), rand(2, 3, 5, 6)], {},
          lambda x, w: [x[0] @ x[1]])


# -- windows and reductions ---------------------------------------------------------------


@SETTINGS
@given(window=windows(pools=True), kind=st.sampled_from(["max", "avg", "avg_exclude"]))
def test_pooling_equals_nn_pooling(window, kind) -> None:
    kernel, stride, pads, (h, w) = window
    include = kind != "avg_exclude"
    attrs = {} if kind == "max" else {"count_include_pad": include}
    op = window_op("max_pool2d" if kind == "max" else "avg_pool2d", (2, 3, h, w), 3, kernel,
                   stride, pads, **attrs)
    # even padding torch's modules take (at most half the window) is given to them
    even = pads[:2] == pads[2:] and 2 * pads[0] <= kernel[0] and 2 * pads[1] <= kernel[1]

    def reference(x: list[T], wt: dict[str, T]) -> list[T]:
        if kind == "max":
            return [nn.MaxPool2d(kernel, stride)(F.pad(x[0], _flat(pads), value=-math.inf))]
        if even:
            return [nn.AvgPool2d(kernel, stride, pads[:2], count_include_pad=include)(x[0])]
        if include:
            return [nn.AvgPool2d(kernel, stride)(F.pad(x[0], _flat(pads)))]
        # uneven padding left out of the count: the array-API kernel (tested on its own)
        return list(array_api.KERNELS["avg_pool2d"](xp, op, x, wt))

    check(op, [rand(2, 3, h, w)], {}, reference)


def test_max_pooling_routes_a_tie_to_the_first_maximum_as_torch_does() -> None:
    b = GraphBuilder("p", "fp64")
    y = b.max_pool2d(b.relu(b.input((1, 2, 6, 6))), 2, stride=2)
    op = b.build().op(y)
    x = np.maximum(rand(1, 2, 6, 6), 0)  # relu's zeros: windows full of ties
    check(op, [x], {}, lambda v, w: [nn.MaxPool2d(2, 2)(v[0])])


@pytest.mark.parametrize(("size", "h", "w"), [(1, 5, 7), (3, 7, 5), (4, 9, 9), (5, 5, 5)])
def test_adaptive_and_global_average_pooling(size, h, w) -> None:
    b = GraphBuilder("p", "fp64")
    x = b.input((2, 3, h, w))
    adaptive, glob = b.adaptive_avg_pool2d(x, size), b.global_avg_pool(x)
    g = b.build()
    check(g.op(adaptive), [rand(2, 3, h, w)], {},
          lambda v, wt: [nn.AdaptiveAvgPool2d(size)(v[0])])
    check(g.op(glob), [rand(2, 3, h, w)], {},
          lambda v, wt: [nn.AdaptiveAvgPool2d(1)(v[0])])


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 8)])
def test_layernorm_equals_nn_layernorm(shape) -> None:
    b = GraphBuilder("n", "fp64")
    y = b.layernorm(b.input(shape), eps=1e-12)
    module = nn.LayerNorm(shape[-1], eps=1e-12, dtype=torch.float64)
    check(b.build().op(y), [rand(*shape)], {"scale": rand(shape[-1]), "shift": rand(shape[-1])},
          lambda x, w: [functional_call(module, {"weight": w["scale"], "bias": w["shift"]},
                                        (x[0],))])


def test_batchnorm_equals_nn_batchnorm2d_in_eval_mode() -> None:
    b = GraphBuilder("bn", "fp64")
    y = b.batchnorm(b.input((2, 3, 4, 5)))
    module = nn.BatchNorm2d(3, dtype=torch.float64).eval()
    r = np.random.default_rng(1)
    weights = {"scale": rand(3), "shift": rand(3), "mean": rand(3, seed=1),
               "var": r.uniform(0.5, 2, 3)}
    check(b.build().op(y), [rand(2, 3, 4, 5)], weights,
          lambda x, w: [functional_call(module, {"weight": w["scale"], "bias": w["shift"],
                                                 "running_mean": w["mean"],
                                                 "running_var": w["var"]}, (x[0],))])


@pytest.mark.parametrize("axis", [None, 1])
def test_softmax_equals_nn_softmax(axis) -> None:
    attrs = {} if axis is None else {"axis": axis}  # ONNX before opset 13: axes flattened
    op = Op("s", "softmax", "reduction", inputs=("x",), outputs=(Tensor("s", (2, 3, 4),
                                                                        "fp64"),), attrs=attrs)

    def reference(x: list[T], w: dict[str, T]) -> list[T]:
        if axis is None:
            return [nn.Softmax(-1)(x[0])]
        return [nn.Softmax(-1)(x[0].reshape(2, 12)).reshape(2, 3, 4)]

    check(op, [rand(2, 3, 4)], {}, reference)


@SETTINGS
@given(size=st.sampled_from([1, 3, 5, 7]), alpha=st.floats(1e-4, 1.0),
       beta=st.floats(0.5, 1.0), bias=st.floats(1.0, 2.0), channels=st.integers(1, 8))
def test_lrn_of_odd_size_equals_nn_local_response_norm(size, alpha, beta, bias,
                                                       channels) -> None:
    op = Op("n", "lrn", "reduction", inputs=("x",),
            outputs=(Tensor("n", (2, channels, 3, 3), "fp64"),),
            attrs={"size": size, "alpha": alpha, "beta": beta, "bias": bias})
    check(op, [rand(2, channels, 3, 3)], {},
          lambda x, w: [nn.LocalResponseNorm(size, alpha, beta, bias)(x[0])])


def test_lrn_of_even_size_is_onnx_s_window_not_torch_s() -> None:
    # ONNX sums channels [c - 1, c + 2] for size 4, torch [c - 2, c + 1]: the array-API
    # kernel (ONNX's definition) runs it
    op = Op("n", "lrn", "reduction", inputs=("x",), outputs=(Tensor("n", (1, 6, 2, 2), "fp64"),),
            attrs={"size": 4, "alpha": 0.5, "beta": 0.75, "bias": 1.0})
    x = rand(1, 6, 2, 2)
    (got,) = kernel_for(op)(xp, op, [torch.tensor(x)], {})
    (onnx,) = array_api.run_kernel(np, op, [x], {})
    np.testing.assert_allclose(got.numpy(), onnx, rtol=1e-12)
    assert not np.allclose(got.numpy(), nn.LocalResponseNorm(4, 0.5, 0.75, 1.0)(
        torch.tensor(x)).numpy())


# -- elementwise --------------------------------------------------------------------------


def _unary(kind: str, **attrs: object) -> Op:
    return Op("u", kind, "elementwise", inputs=("x",), outputs=(Tensor("u", (3, 7), "fp64"),),
              attrs=attrs)


@pytest.mark.parametrize(("kind", "attrs", "module"), [
    ("relu", {}, nn.ReLU()), ("relu6", {}, nn.ReLU6()), ("sigmoid", {}, nn.Sigmoid()),
    ("tanh", {}, nn.Tanh()), ("silu", {}, nn.SiLU()), ("hardswish", {}, nn.Hardswish()),
    ("gelu", {"approximate": "tanh"}, nn.GELU("tanh")), ("gelu", {}, nn.GELU("tanh")),
    ("gelu", {"approximate": "none"}, nn.GELU()),
    ("hardsigmoid", {"alpha": 1 / 6, "beta": 0.5}, nn.Hardsigmoid()),  # torch's import
    ("dropout", {}, nn.Dropout().eval()),
], ids=lambda v: v if isinstance(v, str) else None)
def test_activations_equal_torch_s_modules(kind, attrs, module) -> None:
    x = 4 * rand(3, 7)  # beyond the hard activations' knees too
    check(_unary(kind, **attrs), [x], {}, lambda v, w: [module(v[0])])


@pytest.mark.parametrize(("attrs", "slope"), [({}, (0.2, 0.5)),
                                              ({"alpha": 0.3, "beta": 0.4}, (0.3, 0.4))])
def test_an_onnx_hard_sigmoid_keeps_its_slope(attrs, slope) -> None:
    alpha, beta = slope
    check(_unary("hardsigmoid", **attrs), [4 * rand(3, 7)], {},
          lambda v, w: [torch.clamp(alpha * v[0] + beta, 0.0, 1.0)])


@pytest.mark.parametrize(("low", "high"), [(-0.5, 0.5), (None, 0.0), (0.0, None)])
def test_clip_equals_torch_clamp(low, high) -> None:
    check(_unary("clip", min=low, max=high), [rand(3, 7)], {},
          lambda v, w: [torch.clamp(v[0], low, high)])


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div"])
def test_binary_ops_equal_torch_s_operators(kind) -> None:
    op = Op("b", kind, "elementwise", inputs=("x", "y"), outputs=(Tensor("b", (3, 7), "fp64"),))
    fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[kind]
    check(op, [rand(3, 7), rand(3, 7, seed=1) + 3.0], {}, lambda v, w: [fn(v[0], v[1])])


def test_an_imported_binary_op_reads_its_constant() -> None:
    op = Op("b", "sub", "elementwise", inputs=("x",), outputs=(Tensor("b", (3, 7), "fp64"),),
            attrs={"onnx_inputs": (("const", "c"), ("input", "x"))})
    check(op, [rand(3, 7)], {"const0": rand(7)}, lambda v, w: [w["const0"] - v[0]])


def test_the_lstm_cell_equals_nn_lstmcell() -> None:
    # gx + gh is the cell's input through an identity input weight (the gates as given)
    hidden = 3
    cell = nn.LSTMCell(4 * hidden, hidden, bias=False, dtype=torch.float64)
    params = {"weight_ih": torch.eye(4 * hidden, dtype=torch.float64),
              "weight_hh": torch.zeros(4 * hidden, hidden, dtype=torch.float64)}
    op = Op("cell", "lstm_cell", "elementwise", inputs=("gx", "gh", "c"),
            outputs=(Tensor("h1", (2, hidden), "fp64"), Tensor("c1", (2, hidden), "fp64")))

    def reference(v: list[T], w: dict[str, T]) -> tuple[T, T]:
        zeros = torch.zeros(2, hidden, dtype=torch.float64)
        return functional_call(cell, params, (v[0] + v[1], (zeros, v[2])))

    check(op, [rand(2, 4 * hidden), rand(2, 4 * hidden, seed=1), rand(2, hidden)], {},
          reference)


def test_embedding_equals_nn_embedding() -> None:
    b = GraphBuilder("e", "fp64")
    y = b.embedding(b.input((2, 5), dtype="int64"), 11, 4)
    module = nn.Embedding(11, 4, dtype=torch.float64)
    ids = np.array([[0, 10, 3, 3, 1], [3, 7, 7, 7, 0]])
    check(b.build().op(y), [ids], {"table": rand(11, 4)},
          lambda v, w: [functional_call(module, {"weight": w["table"]}, (v[0],))])


# -- layout -------------------------------------------------------------------------------


def test_layout_ops_equal_torch_s() -> None:
    b = GraphBuilder("l", "fp64")
    x = b.input((2, 3, 4))
    g_ops = {"transpose": b.transpose(x, (2, 0, 1)), "reshape": b.reshape(x, (6, 4)),
             "flatten": b.flatten(x), "concat": b.concat([x, x], axis=2)}
    g = b.build()
    v = rand(2, 3, 4)
    check(g.op(g_ops["transpose"]), [v], {}, lambda t, w: [t[0].permute(2, 0, 1)])
    check(g.op(g_ops["reshape"]), [v], {}, lambda t, w: [t[0].reshape(6, 4)])
    check(g.op(g_ops["flatten"]), [v], {}, lambda t, w: [t[0].flatten(1)])
    check(g.op(g_ops["concat"]), [v, rand(2, 3, 4, seed=1)], {},
          lambda t, w: [torch.cat(t, dim=2)])


@pytest.mark.parametrize(("sizes", "axis", "squeeze"), [([1, 2], 1, False), ([1, 1], 1, True),
                                                        ([2], 2, False), ([1, 1, 1], -1, True)])
def test_split_equals_torch_split(sizes, axis, squeeze) -> None:
    b = GraphBuilder("s", "fp64")
    b.split(b.input((2, 3, 4)), sizes, axis=axis, squeeze=squeeze, name="s")
    op = b.build().op("s")

    def reference(t: list[T], w: dict[str, T]) -> list[T]:
        a = axis % 3
        pieces = t[0].split([*sizes, t[0].shape[a] - sum(sizes)], dim=a)[:len(sizes)]
        return [p.squeeze(a) if squeeze else p for p in pieces]

    check(op, [rand(2, 3, 4)], {}, reference)


def test_pad_pads_and_crops_as_onnx_does() -> None:
    pads = ((0, 0), (1, -1), (-2, 3))
    op = Op("p", "pad", "data_movement", inputs=("x",),
            outputs=(Tensor("p", (2, 4, 5), "fp64"),), attrs={"pads": pads, "value": 0.5})
    (got,) = kernel_for(op)(xp, op, [torch.tensor(rand(2, 4, 4))], {})
    np.testing.assert_array_equal(got.numpy(), array_api.run_kernel(np, op, [rand(2, 4, 4)],
                                                                    {})[0])
    check(op, [rand(2, 4, 4)], {}, lambda t, w: [F.pad(t[0], (-2, 3, 1, -1), value=0.5)])


# -- the array-API fallback ---------------------------------------------------------------


def test_a_kind_torch_has_no_kernel_for_runs_the_array_api_kernel(monkeypatch) -> None:
    def erf_like(xp_: object, op: Op, args: Sequence[T], w: Mapping[str, T]) -> tuple[T]:
        return (xp_.exp(-args[0] * args[0]),)  # type: ignore[attr-defined]

    monkeypatch.setitem(array_api.KERNELS, "erf", erf_like)
    op = _unary("erf")
    assert "erf" not in TORCH_KERNELS and kernel_for(op) is erf_like
    # forward on torch tensors; backward by autograd through the array-API kernel
    check(op, [rand(3, 7)], {}, lambda v, w: [torch.exp(-v[0] ** 2)])


def test_an_unknown_kind_is_refused_in_one_line() -> None:
    with pytest.raises(GraphError, match=r"^op 'u': kind 'erf' has no kernel on the torch "
                                         r"engine \(it can be simulated, not run\); kinds "
                                         r"that run: add, avg_pool2d, batchnorm, clip"):
        kernel_for(_unary("erf"))


def test_an_op_without_the_attributes_its_kernel_needs_is_refused() -> None:
    op = Op("gemm", "linear", "matmul", inputs=("x",), outputs=(Tensor("gemm", (2, 3)),))
    with pytest.raises(GraphError, match=r"op 'gemm': a linear needs attrs 'in_features', "
                                         r"'out_features' to run, got \{\}"):
        kernel_for(op)


# -- the loss and the updates -------------------------------------------------------------


def test_the_loss_gradient_equals_the_array_api_one() -> None:
    from runtime.gradients import cross_entropy_grad as array_api_loss

    probs = np.random.default_rng(2).dirichlet(np.ones(5), size=(2, 3))
    probs[0, 0, 1] = 0.0  # underflowed: floored, never a division by zero
    labels = np.array([[1, 4, 0], [2, 2, 3]])
    got = cross_entropy_grad(xp, torch.tensor(probs), torch.tensor(labels)).numpy()
    np.testing.assert_array_equal(got, array_api_loss(np, probs, labels))
    assert np.isfinite(got).all()


@pytest.mark.parametrize(("kind", "attrs", "make"), [
    ("sgd_update", {"lr": 0.1}, lambda p: torch.optim.SGD(p, lr=0.1)),
    ("momentum_update", {"lr": 0.1, "momentum": 0.9},
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("adam_update", {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
     lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6)),
])
def test_updates_are_torch_optim_s_bit_for_bit(kind, attrs, make) -> None:
    op = Op("u", kind, "elementwise", attrs=attrs)
    w = torch.tensor(rand(50))
    state = {k: torch.zeros(50, dtype=torch.float64) for k in ("velocity", "m", "v")}
    theirs = torch.tensor(rand(50)).requires_grad_()
    opt = make([theirs])
    for step in range(4):
        g = torch.tensor(rand(50, seed=step + 1))
        update(xp, op, g, w, state)
        theirs.grad = g.clone()
        opt.step()
        np.testing.assert_array_equal(w.numpy(), theirs.detach().numpy(), err_msg=str(step))
