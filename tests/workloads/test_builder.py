"""Shapes, FLOPs and parameters against closed forms and published counts."""

from __future__ import annotations

import pytest

from workloads import GraphBuilder, GraphError, build_model


def test_conv2d_shape_flops_params_closed_form() -> None:
    b = GraphBuilder("c")
    x = b.input((2, 3, 32, 32))
    y = b.conv2d(x, 8, 3, stride=2, padding=1, bias=True)
    op = b.build().op(y)
    # H_out = floor((32 + 2 - 3) / 2) + 1 = 16
    assert op.output.shape == (2, 8, 16, 16)
    outs = 2 * 8 * 16 * 16
    assert op.flops == 2 * outs * 3 * 3 * 3 + outs
    assert op.params == 8 * 3 * 3 * 3 + 8
    assert op.bytes_read == (2 * 3 * 32 * 32 + op.params) * 4
    assert op.bytes_written == outs * 4


def test_linear_and_matmul_flops() -> None:
    b = GraphBuilder("m")
    x = b.input((4, 5, 6), name="x")
    w = b.input((4, 6, 7), name="w")
    mm = b.matmul(x, w)
    fc = b.linear(x, 3, bias=False)
    g = b.build()
    assert g.op(mm).flops == 2 * 4 * 5 * 6 * 7
    assert g.op(mm).output.shape == (4, 5, 7)
    assert g.op(fc).flops == 2 * 20 * 6 * 3 and g.op(fc).params == 18


def test_flatten_is_a_view_and_pools_shrink() -> None:
    b = GraphBuilder("p")
    x = b.input((1, 4, 8, 8))
    p = b.max_pool2d(x, 2)
    f = b.flatten(b.global_avg_pool(p))
    g = b.build()
    assert g.op(p).output.shape == (1, 4, 4, 4)
    assert g.op(f).output.shape == (1, 4)
    assert g.op(f).bytes_read == g.op(f).bytes_written == 0


def test_shape_mismatch_is_a_graph_error() -> None:
    b = GraphBuilder("bad")
    x, y = b.input((2, 3), name="x"), b.input((3, 2), name="y")
    with pytest.raises(GraphError, match=r"input shapes must match, got \(2, 3\) and \(3, 2\)"):
        b.add(x, y)
    with pytest.raises(GraphError, match=r"\(\.\.\., m, k\) @ \(\.\.\., k, n\), got \(2, 3\)"):
        b.matmul(x, x)
    with pytest.raises(GraphError, match="expected an NCHW tensor"):
        b.conv2d(x, 4, 3)


def test_resnet50_parameter_count_is_the_published_one() -> None:
    # torchvision.models.resnet50 (He et al. 2016, v1.5): 25,557,032 parameters.
    assert build_model("resnet50").params == 25_557_032


def test_resnet50_flops_match_the_published_gmacs() -> None:
    # He et al. 2016, Table 1: 3.8e9 FLOPs (multiply-adds) for the paper's variant;
    # torchvision documents 4.09 GFLOPS (MACs) for v1.5 at 224x224. Within 2%.
    macs = build_model("resnet50", batch=1).flops / 2
    assert macs == pytest.approx(4.09e9, rel=0.02)
    assert build_model("resnet50", batch=4).flops == 4 * build_model("resnet50").flops


def test_lenet5_parameter_count_is_the_published_one() -> None:
    # LeCun et al. 1998 with full C3 connectivity: 156 + 2,416 + 48,120 + 10,164 + 850.
    assert build_model("lenet5").params == 61_706


def test_mlp_parameters_closed_form() -> None:
    assert build_model("mlp").params == (784 * 1024 + 1024) + (1024 * 1024 + 1024) + (
        1024 * 10 + 10)
