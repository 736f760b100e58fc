"""The GPU model's features from specs: products, tiles, waves, split-K, clocks, rates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.gpumodel import (
    MIN_SPLIT_DEPTH,
    TILE_LOAD_COST,
    Gemm,
    GpuFeatures,
    _gemm_op,
    dense_rate,
    gemms,
    gpu_key,
    split_k,
    sustained_clock,
    tile_work,
    tiling,
)
from hwmodels.registry import get_device
from hwmodels.spec import GpuSpec
from workloads.builder import GraphBuilder
from workloads.errors import HardwareSpecError
from workloads.training import training_graph

A100 = GpuSpec("ampere", 108, 7.65e8, 1.41e9, 250.0, 40 * 2**20, 164 * 2**10,
               {"fp32": 19.5e12})


def _graph_with_linear(rows: int, inner: int, out: int):
    b = GraphBuilder("g")
    x = b.linear(b.input((rows, 4), "x"), inner, name="first")  # so fc's input has a grad
    b.linear(x, out, name="fc")
    return b.build()


def test_a_linear_layer_is_one_product_over_every_row() -> None:
    op = _graph_with_linear(96, 300, 40).op("fc")
    assert gemms(op) == [Gemm(1, 96, 40, 300)]  # the bias add rounds away


def test_a_convolution_is_its_implicit_gemm() -> None:
    b = GraphBuilder("c")
    x = b.input((4, 16, 10, 10), "x")
    b.conv2d(x, 32, 3, padding=1, name="conv")
    # rows: images x output positions; columns: output channels; inner: c k k
    assert gemms(b.build().op("conv")) == [Gemm(1, 4 * 10 * 10, 32, 16 * 9)]


def test_a_linear_layer_s_backward_runs_two_products_sharing_its_flops() -> None:
    step = training_graph(_graph_with_linear(64, 128, 32))
    back = step.op("fc.backward")
    products = gemms(back)
    assert len(products) == 2
    assert sum(g.flops for g in products) == pytest.approx(back.flops, rel=0.01)
    assert products[0] == Gemm(1, 64, 128, 32)  # dX = dY W^T: 64 x 128 over 32


def test_only_dense_ops_run_products() -> None:
    b = GraphBuilder("r")
    b.relu(b.input((8, 8), "x"), name="r")
    assert gemms(b.build().op("r")) == []


def test_a_gemm_of_exactly_one_full_wave() -> None:
    # 108 SMs x 2 tiles of 128 x 128: 216 tiles fill one wave exactly
    g = Gemm(1, 128 * 12, 128 * 18, 64)
    _, waves, fill = tiling(g, A100)
    assert (waves, fill) == (1, 1.0)
    assert tile_work(g, A100, (128, 128)) == pytest.approx(
        2 * 128 * 128 * (1 + TILE_LOAD_COST * (2 / 128)))


def test_one_tile_more_costs_another_round_on_one_sm() -> None:
    full = Gemm(1, 128 * 12, 128 * 18, 4096)
    more = Gemm(1, 128 * 12 + 1, 128 * 18, 4096)  # a thirteenth row of tiles
    assert tile_work(more, A100, (128, 128)) > tile_work(full, A100, (128, 128))


def test_split_k_where_tiles_would_leave_sms_idle() -> None:
    few = Gemm(1, 64, 64, 100_000)  # one 64 x 64 tile: 107 SMs idle without a split
    assert split_k(few, A100, (64, 64)) == 108
    assert split_k(Gemm(1, 64, 64, MIN_SPLIT_DEPTH * 3), A100, (64, 64)) == 3
    assert split_k(Gemm(1, 4096, 4096, 100_000), A100, (128, 128)) == 1
    assert (tile_work(few, A100, (64, 64))
            == pytest.approx(tile_work(few, A100, (64, 64), split=False) / 108))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 5000), st.integers(1, 5000), st.integers(1, 5000))
def test_the_busiest_sm_does_at_least_its_share(batch: int, m: int, n: int, k: int) -> None:
    g = Gemm(batch, m, n, k)
    tile, waves, fill = tiling(g, A100, split=False)
    work = tile_work(g, A100, tile, split=False)
    useful = batch * m * n / A100.sm_count
    assert work >= useful - 1e-9  # no SM does less than the average
    assert 0 < fill <= 1 and waves >= 1
    # and no tile size does less padded work than the one chosen
    for other in ((128, 128), (64, 64), (32, 32)):
        assert work <= tile_work(g, A100, other, split=False) + 1e-9


def test_a_card_short_of_power_holds_less_than_its_boost_clock() -> None:
    t4 = get_device("t4").gpu
    assert t4 is not None
    density = t4.power_w / (t4.sm_count * t4.boost_clock_hz / 1e9)
    expected = t4.boost_clock_hz * (density / 2.0) ** (1 / 3)
    assert sustained_clock(t4, 2.0) == pytest.approx(expected)
    assert sustained_clock(t4, density / 2) == t4.boost_clock_hz  # enough power: boost
    assert sustained_clock(t4, 1e6) == t4.base_clock_hz  # never below base


def test_fp32_runs_on_the_cuda_cores_and_fp16_on_the_tensor_cores() -> None:
    v100 = get_device("v100-pcie-32gb")
    assert v100.gpu is not None
    assert dense_rate(_gemm_op(1, 64, 64, 64), v100) == (v100.gpu.vector_peak["fp32"], False)
    assert dense_rate(_gemm_op(1, 64, 64, 64, "fp16"), v100) == (v100.peak["fp16"], True)


def test_families() -> None:
    step = training_graph(_graph_with_linear(8, 8, 8))
    assert gpu_key(step.op("fc")) == gpu_key(step.op("fc.backward")) == "gemm"
    b = GraphBuilder("n")
    b.layernorm(b.input((4, 8), "x"), name="ln")
    assert gpu_key(b.build().op("ln")) == "layernorm"
    assert gpu_key(training_graph(b.build()).op("ln.backward")) == "backward:layernorm"
    assert gpu_key(step.op("fc.update")) == "memory"


def test_the_base_and_roof_of_a_large_product() -> None:
    a100 = get_device("a100-pcie-40gb")
    op = _gemm_op(1, 8192, 8192, 8192)
    f = GpuFeatures(power_reference=0.1)  # every card at its boost clock
    launch, waves, memory, in_l2, vector = f.base(op, a100)
    assert launch == a100.launch_overhead_s and vector == 0.0
    assert in_l2 == 0.0 and memory == pytest.approx((op.bytes_read + op.bytes_written) / 1.555e12)
    roof = 2 * 8192**3 / 19.5e12
    assert f.roof(op, a100) == pytest.approx(roof)
    assert roof < waves < 1.2 * roof  # whole waves, bigger-tile loads: a little above


def test_a_device_without_a_gpu_table_is_refused() -> None:
    with pytest.raises(HardwareSpecError,
                       match=r"device 'xeon-8380': the GPU model needs its gpu table"):
        GpuFeatures().base(_gemm_op(1, 8, 8, 8), get_device("xeon-8380"))


def test_features_are_finite_on_every_op_of_a_training_step() -> None:
    from workloads import build_model

    step = training_graph(build_model("bert_base", seq_len=16))
    l4 = get_device("l4")
    f = GpuFeatures()
    for op in step.ops:
        if op.op_class == "source":
            continue
        values = f.features(op, l4) + f.base(op, l4)
        assert all(math.isfinite(v) for v in values), op.name
