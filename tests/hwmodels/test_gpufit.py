"""The GPU model fitted on published measurements: what it was fitted on, that no held-out
GPU reaches a fit, its cost model, and a light form of the published-data checks."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from hwmodels.cost import make_cost_model
from hwmodels.gpucheck import nearest_heldout, uncertainty
from hwmodels.gpufit import (
    GPU_PREDICTOR_FILE,
    GpuCost,
    Measured,
    fit_gpu_predictor,
    kernel_op,
    load_gpu_predictor,
    measured_kernels,
    provenance_of,
)
from hwmodels.gpumodel import MIN_FIT_SECONDS
from hwmodels.published import HELDOUT_GPUS, TRAINING_GPUS, data_dir, neusight_kernels
from hwmodels.registry import get_cluster, get_device
from hwmodels.spec import Cluster
from workloads import build_model
from workloads.errors import HardwareSpecError


def _rows(**match: str) -> list:
    return [k for k in neusight_kernels() if all(getattr(k, f) == v for f, v in match.items())]


def test_the_shipped_model_was_fitted_on_training_gpus_only() -> None:
    p = provenance_of()
    assert sorted(p["training_gpus"]) == sorted(TRAINING_GPUS)
    assert not set(p["training_gpus"]) & set(HELDOUT_GPUS)
    # on the data committed beside it
    digest = hashlib.sha256((data_dir() / "neusight_kernels.csv").read_bytes()).hexdigest()
    assert p["sha256_16"]["neusight_kernels.csv"] == digest[:16]


def test_a_held_out_gpu_s_measurement_is_refused_by_the_fit() -> None:
    rows = _rows(device="l4", family="bmm")[:3]
    with pytest.raises(HardwareSpecError, match=r"GPU model: measurement 'op' is of 'l4', a "
                                                r"held-out GPU; expected only training GPUs"):
        fit_gpu_predictor(measured_kernels(rows), refuse=HELDOUT_GPUS)


def test_kernel_ops_count_flops_as_the_closed_forms() -> None:
    bmm = _rows(family="bmm")[0]
    assert kernel_op(bmm).flops == 2 * bmm.b * bmm.m * bmm.n * bmm.k
    linear = _rows(family="linear")[0]  # nn.Linear(n, k) on (b, m, n): a bias add per output
    assert kernel_op(linear).flops == (2 * linear.b * linear.m * linear.n * linear.k
                                       + linear.b * linear.m * linear.k)
    add = next(k for k in neusight_kernels() if k.op == "add")
    assert add.b is not None and add.h is not None
    assert kernel_op(add).bytes_read == 2 * 4 * add.b * add.h  # two fp32 tensors


def test_fitting_is_deterministic() -> None:
    rows = [k for k in _rows(dataset="train", family="linear") if k.device in TRAINING_GPUS]
    measured = measured_kernels(rows[::4])
    a = fit_gpu_predictor(measured, choose=False, power_reference=2.0)
    b = fit_gpu_predictor(measured, choose=False, power_reference=2.0)
    op, device = measured[0].op, measured[0].device
    assert a.time(op, device) == b.time(op, device)


def test_never_faster_than_the_spec_s_roofline() -> None:
    p = load_gpu_predictor()
    h100 = get_device("h100-sxm5-80gb")
    for k in _rows(device="h100-sxm5-80gb")[::40]:
        op = kernel_op(k)
        assert p.time(op, h100) >= p.featurizer.roof(op, h100)


def _pooled_error(rows: list) -> tuple[float, float]:
    measured = measured_kernels([k for k in rows if k.latency_s >= MIN_FIT_SECONDS])
    model, roofline = [], []
    for m in measured:
        cluster = Cluster("one", (m.device.instance("gpu0"),))
        model.append(GpuCost(cluster).alone.time(m.op, m.device) / m.seconds - 1)
        roofline.append(make_cost_model("roofline", cluster).op_time(m.op, "gpu0")
                        / m.seconds - 1)
    return float(np.median(np.abs(model))), float(np.median(np.abs(roofline)))


@pytest.mark.parametrize("family", ["bmm", "linear", "softmax"])
def test_on_held_out_gpus_the_model_beats_the_catalog_roofline(family: str) -> None:
    # a light form of benchmarks/gpu_published.py: GPUs the fit never saw, NeuSight's data
    rows = [k for k in neusight_kernels() if k.role == "heldout" and k.family == family]
    model, roofline = _pooled_error(rows[::5])
    assert model < roofline
    assert model < 0.25


def test_the_cost_model_prices_gpus_by_the_model_and_the_rest_by_the_roofline() -> None:
    cluster = get_cluster("workstation")
    gpu_cost, roofline = make_cost_model("gpu", cluster), make_cost_model("roofline", cluster)
    graph = build_model("mlp", batch=64)
    op = graph.op("fc1")
    assert gpu_cost.op_time(op, "cpu0") == roofline.op_time(op, "cpu0")
    placement = dict.fromkeys(graph.names, "gpu0")
    vectorised = gpu_cost.op_times(graph, placement)
    assert vectorised == pytest.approx([gpu_cost.op_time(graph.op(n), "gpu0")
                                        for n in graph.arrays.names])
    assert set(gpu_cost.sources(graph, placement)) == {"gpu-model"}


def test_a_malformed_model_file_is_one_line(tmp_path) -> None:
    bad = tmp_path / "gpu.toml"
    bad.write_text(GPU_PREDICTOR_FILE.read_text().replace("max_log_correction = 0.0",
                                                          "max_log_correction = -1.0", 1))
    with pytest.raises(HardwareSpecError, match=r"gpu.toml: kind\[\d+\].max_log_correction: "
                                                r"expected a number >= 0, got -1.0"):
        load_gpu_predictor(bad)


def test_a_hypothetical_gpu_carries_the_error_of_its_nearest_held_out_architecture() -> None:
    assert nearest_heldout(get_device("h200-sxm-141gb")) == "h100-sxm5-80gb"
    assert nearest_heldout(get_device("v100-sxm2-32gb")) == "a100-pcie-80gb"  # volta -> ampere
    assert nearest_heldout(get_device("xeon-8380")) is None
    u = uncertainty(get_device("h200-sxm-141gb"))
    assert u is not None and u.basis == "h100-sxm5-80gb" and not u.fitted_on_it
    assert 0 < u.median < u.p90
    mine = uncertainty(get_device("t4"))
    assert mine is not None and mine.basis == "t4" and mine.fitted_on_it


def test_measured_is_what_a_fit_reads() -> None:
    m = measured_kernels(_rows(device="t4", family="bmm")[:1])[0]
    assert isinstance(m, Measured) and m.device.name == "t4" and m.seconds > 0


def test_the_one_standard_error_rule_keeps_the_simplest_bound_within_reach() -> None:
    from hwmodels.gpufit import _one_standard_error

    folds = [0.15, 0.25, 0.15, 0.25]  # mean 0.2, sample std 0.0577: standard error 0.0289
    assert _one_standard_error({3.0: folds, 0.4: [0.22] * 4, 0.0: [0.3] * 4}) == 0.4
    assert _one_standard_error({3.0: folds, 0.4: [0.24] * 4, 0.0: [0.21] * 4}) == 0.0
    assert _one_standard_error({3.0: [0.1] * 4, 0.4: [0.2] * 4, 0.0: [0.3] * 4}) == 3.0


def test_in_a_graph_a_kernel_pays_the_spec_s_launch_not_the_fitted_fixed_cost() -> None:
    from hwmodels.gpufit import in_graph

    alone = load_gpu_predictor()
    graph = in_graph(alone)
    for key, model in graph.models.items():
        assert model.base[0] == 1.0 and model.base[1:] == alone.models[key].base[1:]
    op = kernel_op(_rows(device="t4", family="bmm")[0])
    t4 = get_device("t4")
    fixed = alone.models["gemm"].base[0] - 1.0  # in units of the spec's launch overhead
    if alone.models["gemm"].max_correction == 0:
        assert alone.time(op, t4) - graph.time(op, t4) == pytest.approx(
            fixed * t4.launch_overhead_s, rel=1e-6)
