"""The op-time predictor against the closed forms that made its data: held-out error, the
roofline bound, the model's text round trip, the class fallback, and its file errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels.predictor import (
    FEATURES,
    Context,
    KindModel,
    OpSample,
    Quality,
    fit_predictor,
    op_features,
    roofline_seconds,
)
from hwmodels.spec import Device
from workloads.errors import HardwareSpecError
from workloads.op import Op, Tensor

CPU = Device("cpu", "cpu", {"fp32": 1e11}, 2**33, 2e10)


def _relu(n: int, name: str = "r") -> Op:
    return Op(name, "relu", "elementwise", outputs=(Tensor(name, (n,)),), flops=n,
              bytes_read=4 * n, bytes_written=4 * n)


def _stream_time(n: int) -> float:
    """A made-up kernel: 3 us to launch, then 8 bytes per element at a bandwidth that
    rises from a quarter to all of 20 GB/s as the array grows (cache-resident ops are
    launch-bound), with a cliff past 1 MiB."""
    efficiency = min(1.0, 0.25 + 0.75 * math.log2(n) / 20) * (0.7 if 8 * n > 2**20 else 1.0)
    return 3e-6 + 8 * n / (2e10 * efficiency)


def test_the_predictor_generalises_to_sizes_it_never_saw() -> None:
    rng = np.random.default_rng(0)
    train = [int(n) for n in np.exp(rng.uniform(np.log(64), np.log(2**24), 200))]
    held = [int(n) for n in np.exp(rng.uniform(np.log(64), np.log(2**24), 50))]
    samples = [OpSample.of(_relu(n), _stream_time(n)) for n in train]
    heldout = [OpSample.of(_relu(n), _stream_time(n)) for n in held]
    p = fit_predictor(samples, CPU, heldout=heldout, min_samples=10)
    quality = p.models["relu"].heldout
    assert quality is not None and quality.samples == 50
    assert quality.median < 0.03 and quality.p90 < 0.08
    # never on its training points: the held-out figure is the fitted model's on others
    predicted = p.times([_relu(n) for n in held], CPU)
    measured = np.array([_stream_time(n) for n in held])
    assert Quality.of(predicted, measured).median == pytest.approx(quality.median)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 2**26), flops=st.integers(0, 2**30))
def test_no_prediction_is_faster_than_the_roofline(n: int, flops: int) -> None:
    samples = [OpSample.of(_relu(m), _stream_time(m)) for m in (2**k for k in range(6, 25))]
    p = _fitted(tuple(samples))
    op = Op("x", "relu", "elementwise", outputs=(Tensor("x", (n,)),), flops=flops,
            bytes_read=4 * n, bytes_written=4 * n)
    assert p.time(op, CPU) >= roofline_seconds(op.flops, 8 * n, "fp32", CPU)


_CACHE: dict[tuple[OpSample, ...], object] = {}


def _fitted(samples: tuple[OpSample, ...]):  # the same fit for every hypothesis example
    if samples not in _CACHE:
        _CACHE[samples] = fit_predictor(samples, CPU, min_samples=4)
    return _CACHE[samples]


def test_a_stored_model_predicts_what_the_fitted_one_did() -> None:
    samples = [OpSample.of(_relu(m), _stream_time(m)) for m in (2**k for k in range(6, 25))]
    model = fit_predictor(samples, CPU, min_samples=4).models["relu"]
    again = KindModel(model.key, model.base, KindModel.unpack(model.packed(), "here"),
                      model.trained_on)
    x = np.array([s.features for s in samples])
    base = np.array([s.base for s in samples])
    roof = np.zeros(len(samples))
    assert np.array_equal(model.seconds(x, base, roof), again.seconds(x, base, roof))


def test_a_model_that_does_not_decode_is_one_clear_line() -> None:
    with pytest.raises(HardwareSpecError, match=r"^f.toml: predictor\[0\]\.kind\[2\]\.model: "
                                                r"expected a LightGBM model \(zlib, base64\), "
                                                r"got data that does not decode"):
        KindModel.unpack("not base64!", "f.toml: predictor[0].kind[2].model")


def test_a_kind_without_samples_takes_its_class_model() -> None:
    samples = [OpSample.of(_relu(m), _stream_time(m)) for m in (2**k for k in range(6, 25))]
    p = fit_predictor(samples, CPU, min_samples=4)
    tanh = Op("t", "tanh", "elementwise", outputs=(Tensor("t", (4096,)),), flops=4096,
              bytes_read=16384, bytes_written=16384)
    assert p.model_for(tanh) is p.models["class:elementwise"]
    assert p.time(tanh, CPU) == pytest.approx(_stream_time(4096), rel=0.15)
    conv = Op("c", "conv2d", "conv", outputs=(Tensor("c", (1, 4, 8, 8)),), flops=10)
    assert p.model_for(conv) is None
    with pytest.raises(HardwareSpecError, match="predictor: no model for op 'c' "
                                                r"\(kind 'conv2d', class 'conv'\)"):
        p.time(conv, CPU)


def test_features_read_shapes_windows_and_remainders() -> None:
    conv = Op("c", "conv2d", "conv", outputs=(Tensor("c", (2, 37, 9, 11)),),
              attrs={"kernel": (3, 5), "stride": (2, 2), "padding": (1, 2), "groups": 1},
              flops=2 * 2 * 37 * 99 * 15 * 5, bytes_read=1000, bytes_written=4 * 2 * 37 * 99)
    f = dict(zip(FEATURES, op_features(conv, Context(1024, 2**21)), strict=True))
    assert (f["d0"], f["d1"], f["d2"], f["d3"]) == (2, 37, 9, 11)
    assert (f["channel_mod8"], f["channel_mod16"], f["last_mod8"]) == (5, 5, 3)
    assert (f["kernel_area"], f["stride"], f["padding"]) == (15, 2, 2)
    assert f["work_per_output"] == 2 * 15 * 5 and f["log_cold"] == 10
    assert (f["held_l2"], f["held_llc"]) == (1, -4)  # 2 MiB against 1 and 32 MiB
    assert len(op_features(_relu(8))) == len(FEATURES)


def test_quality_is_the_relative_error() -> None:
    q = Quality.of(np.array([1.1, 0.8, 2.0]), np.array([1.0, 1.0, 1.0]))
    assert (q.median, q.worst, q.samples) == (pytest.approx(0.2), pytest.approx(1.0), 3)
    assert q.p90 == pytest.approx(np.quantile([0.1, 0.2, 1.0], 0.9))
