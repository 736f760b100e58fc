"""The published GPU measurements in benchmarks/data and their loader, hwmodels.published."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from hwmodels.published import (
    DATA_ENV,
    HELDOUT_GPUS,
    TRAINING_GPUS,
    DeepBenchMeasurement,
    KernelMeasurement,
    ModelMeasurement,
    data_dir,
    deepbench,
    neusight_kernels,
    neusight_models,
)
from workloads.errors import HardwareSpecError

# the catalog names the `device` columns may use
CATALOG = {"p4", "p100-pcie-16gb", "t4", "v100-pcie-32gb", "a100-pcie-40gb", "a100-sxm4-40gb",
           "a100-pcie-80gb", "h100-sxm5-80gb", "l4", "gtx-1080ti", "titan-xp", "m40",
           "v100-sxm2-32gb"}
Measurement = KernelMeasurement | ModelMeasurement | DeepBenchMeasurement


def everything() -> list[Measurement]:
    return [*neusight_kernels(), *neusight_models(), *deepbench()]


def test_the_loaders_read_the_committed_files() -> None:
    assert data_dir() == Path(__file__).resolve().parents[2] / "benchmarks" / "data"
    assert len(neusight_kernels()) > 20_000
    assert len(neusight_models()) > 100
    assert len(deepbench()) > 2_000
    assert {k.family for k in neusight_kernels()} == {
        "bmm", "linear", "conv", "elementwise", "layernorm", "softmax"}
    assert {d.family for d in deepbench()} == {"gemm", "conv", "rnn", "allreduce"}
    assert neusight_kernels() is neusight_kernels()  # read once


def test_every_time_is_finite_and_positive() -> None:
    for row in everything():
        for field in dataclasses.fields(row):
            value = getattr(row, field.name)
            if field.name.endswith("_s") and value is not None:
                assert math.isfinite(value) and value > 0, (row, field.name)
    assert all(m.e2e_s > 0 for m in neusight_models())
    assert all(d.time_s or d.fwd_s for d in deepbench())


def test_every_device_is_a_catalog_name() -> None:
    assert {row.device for row in everything()} <= CATALOG


def test_the_role_split_is_neusights() -> None:
    assert set(TRAINING_GPUS) == {"p4", "p100-pcie-16gb", "t4", "v100-pcie-32gb",
                                  "a100-pcie-40gb"}
    assert {"l4", "h100-sxm5-80gb", "a100-pcie-80gb"} <= set(HELDOUT_GPUS)
    assert not set(TRAINING_GPUS) & set(HELDOUT_GPUS)
    neusight: list[KernelMeasurement | ModelMeasurement] = [*neusight_kernels(),
                                                            *neusight_models()]
    for row in neusight:
        assert row.role == ("train" if row.device in TRAINING_GPUS else "heldout"), row
        assert row.device in TRAINING_GPUS + HELDOUT_GPUS
    # NeuSight trains no conv predictor; every other training kernel is a training GPU's
    assert {k.role for k in neusight_kernels() if k.dataset == "train"
            and k.family != "conv"} == {"train"}
    assert {k.device for k in neusight_kernels() if k.role == "heldout"} == {
        "l4", "h100-sxm5-80gb", "a100-pcie-80gb"}


def test_values_match_the_sources() -> None:
    models = {(m.gpu, m.model, m.mode, m.seqlen, m.batch, m.parallel, m.compiled): m
              for m in neusight_models()}
    # NeuSight scripts/asplos/label/NVIDIA_L4/bert_large-inf-512-8.json
    assert models["NVIDIA L4", "bert_large", "inf", 512, 8, "none", False].e2e_s == \
        pytest.approx(409.8555847167969e-3, rel=1e-12)
    # NeuSight scripts/asplos/label/NVIDIA_L4/bert_large-train-512-2.json
    train = models["NVIDIA L4", "bert_large", "train", 512, 2, "none", False]
    assert (train.fw_s, train.bw_s, train.num_layer) == (
        pytest.approx(102.76290588378906e-3, rel=1e-12),
        pytest.approx(213.53635864257814e-3, rel=1e-12), 24)
    # NeuSight scripts/asplos/label/NVIDIA_H100_80GB_HBM3/gpt2_large-train-1024-16-tp4.json
    tp = models["NVIDIA H100 80GB HBM3", "gpt2_large", "train", 1024, 16, "tp4", False]
    assert (tp.e2e_s, tp.gpus, tp.fw_s) == (pytest.approx(729.6645690917969e-3, rel=1e-12),
                                            4, None)
    kernels = {(k.gpu, k.dataset, k.op, k.b, k.m, k.n, k.k): k for k in neusight_kernels()}
    # NeuSight scripts/asplos/data/dataset/train/collect/bmm/p2.1.0/Tesla T4.csv line 843
    small = kernels["Tesla T4", "train", "bmm", 5, 125, 4, 2]
    assert (small.latency_s, small.kernel, small.grid, small.block) == (
        pytest.approx(0.03392000123858452e-3, rel=1e-12), "volta_sgemm_32x128_nn", 5, 256)
    # NeuSight scripts/asplos/data/dataset/test/linear.csv line 6437 (the LM head of OPT)
    assert kernels["NVIDIA H100 80GB HBM3", "test", "linear", 1, 65536, 50272, 4096].latency_s \
        == pytest.approx(533.8868204752604e-3, rel=1e-12)
    bench = {(d.device, d.family, d.precision, d.m, d.n, d.k, d.a_t, d.b_t, d.size_floats,
              d.gpus): d for d in deepbench()}
    # DeepBench results/train/DeepBench_NV_V100.xlsx, sheet 'Results FP32', row 5: 0.038 ms
    gemm = bench["v100-sxm2-32gb", "gemm", "fp32", 1760, 16, 1760, False, False, None, None]
    assert gemm.time_s == pytest.approx(38e-6, rel=1e-12)
    # DeepBench results/train/DeepBench_NV_P100.xlsx, sheet 'Results FP32', row 345
    ring = bench["p100-pcie-16gb", "allreduce", "fp32", None, None, None, None, None, 100000, 2]
    assert (ring.time_s, ring.algorithm) == (pytest.approx(0.101933665e-3, rel=1e-9),
                                             "NCCL 2.0 MPI")


def write_kernel_csv(tmp_path: Path, latency: str) -> Path:
    """A one-row kernel file whose latency_ms is ``latency``."""
    header = (data_dir() / "neusight_kernels.csv").read_text().splitlines()[0]
    row = (f"NVIDIA L4,l4,heldout,test,bmm,bmm,1,2,3,4,,,,,,,,{latency},"
           "ampere_sgemm_128x128_nn,1,1,256,2.1.0,12.1")
    path = tmp_path / f"kernels{latency}.csv"
    path.write_text(f"{header}\n{row}\n")
    return path


def test_a_malformed_row_is_one_line(tmp_path: Path) -> None:
    (good,) = neusight_kernels(write_kernel_csv(tmp_path, "0.5"))
    assert (good.latency_s, good.k, good.h, good.kernel) == (
        pytest.approx(5e-4), 4, None, "ampere_sgemm_128x128_nn")
    with pytest.raises(HardwareSpecError, match=r"^published data '.*kernelsx\.csv' row 2: "
                       r"latency_ms must be a finite number > 0, got 'x'$"):
        neusight_kernels(write_kernel_csv(tmp_path, "x"))
    for value in ("nan", "inf", "0", "-1", ""):
        with pytest.raises(HardwareSpecError, match="latency_ms must be a finite number"):
            neusight_kernels(write_kernel_csv(tmp_path, value))


def test_a_missing_file_or_column_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(HardwareSpecError, match=r"^published data '.*nothing\.csv': cannot read"):
        neusight_models(tmp_path / "nothing.csv")
    (tmp_path / "short.csv").write_text("gpu,device\nNVIDIA L4,l4\n")
    with pytest.raises(HardwareSpecError, match=r"header must have the columns .*e2e_ms"):
        neusight_models(tmp_path / "short.csv")


def test_the_environment_names_another_folder(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert data_dir() == tmp_path
    with pytest.raises(HardwareSpecError, match=r"deepbench_train\.csv': cannot read"):
        deepbench()
