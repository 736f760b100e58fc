"""The ``gpu`` part of a device spec: TOML in and out, the catalog's figures checked against
independent arithmetic, and one-line errors for malformed values."""

from __future__ import annotations

import json
import math
import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwmodels import (
    Cluster,
    Device,
    GpuSpec,
    dumps,
    get_cluster,
    get_device,
    list_devices,
    loads,
)
from hwmodels.spec import GPU_ARCHITECTURES, PEAK_DTYPES
from workloads import HardwareSpecError, UnsupportedOp

TOY = """
[[device]]
name = "toy-gpu"
kind = "{kind}"
memory_gib = 16
memory_bandwidth_gbps = 900
peak_tflops = {{ fp32 = 15.7, fp16 = 125 }}
{gpu}
"""

INLINE = ('gpu = { architecture = "volta", sm_count = 80, base_clock_mhz = 1290, '
          'boost_clock_mhz = 1530, power_w = 300, l2_mib = 6, shared_memory_per_sm_kib = 96, '
          'vector_tflops = { fp32 = 15.7, fp16 = 31.4 } }')

TABLE = """
[device.gpu]
architecture = "{architecture}"
sm_count = {sm_count}
base_clock_mhz = {base}
boost_clock_mhz = {boost}
power_w = 300
l2_mib = 6
shared_memory_per_sm_kib = 96
vector_tflops = {{ fp32 = {vector_fp32}, fp16 = 31.4 }}
"""


def _toml(*, kind: str = "gpu", architecture: str = "volta", sm_count: object = 80,
          base: object = 1290, boost: object = 1530, vector_fp32: object = 15.7) -> str:
    gpu = TABLE.format(architecture=architecture, sm_count=sm_count, base=base, boost=boost,
                       vector_fp32=vector_fp32)
    return TOY.format(kind=kind, gpu=gpu)


def _volta(**changes: object) -> GpuSpec:
    figures: dict[str, object] = {
        "architecture": "volta", "sm_count": 80, "base_clock_hz": 1.29e9,
        "boost_clock_hz": 1.53e9, "power_w": 300.0, "l2_bytes": 6 * 2**20,
        "shared_memory_per_sm_bytes": 96 * 2**10,
        "vector_peak": {"fp32": 15.7e12, "fp16": 31.4e12}}
    return GpuSpec(**{**figures, **changes})  # type: ignore[arg-type]


# -- TOML in and out ------------------------------------------------------------------------


def test_inline_and_sub_table_forms_read_as_the_same_spec() -> None:
    inline = loads(TOY.format(kind="gpu", gpu=INLINE)).devices["toy-gpu"]
    table = loads(_toml()).devices["toy-gpu"]
    assert inline == table
    assert table.gpu == _volta()
    assert table.gpu is not None and table.gpu.l2_bytes == 6 * 2**20
    assert table.gpu.shared_memory_per_sm_bytes == 96 * 1024
    assert table.gpu.vector_flops("fp16") == 31.4e12


def test_round_trip_toml_device_toml_device() -> None:
    first = loads(_toml()).devices["toy-gpu"]
    text = dumps([first])
    assert "[device.gpu]" in text and "boost_clock_mhz = 1530" in text
    again = loads(text).devices["toy-gpu"]
    assert again == first and again.gpu == first.gpu
    assert dumps([again]) == text


def test_a_device_without_a_gpu_table_writes_none() -> None:
    plain = loads(TOY.format(kind="gpu", gpu="")).devices["toy-gpu"]
    assert plain.gpu is None and "[device.gpu]" not in dumps([plain])


def test_pickles_with_its_gpu_spec() -> None:
    device = get_device("a100-sxm4-40gb")
    again = pickle.loads(pickle.dumps(device))
    assert again == device and again.gpu == device.gpu
    assert hash(again.gpu) == hash(device.gpu)


def test_the_gpu_part_is_in_a_clusters_definition_and_hash() -> None:
    a = loads(_toml()).devices["toy-gpu"]
    b = loads(_toml(sm_count=84)).devices["toy-gpu"]
    ca, cb = Cluster("c", (a.instance("g0"),)), Cluster("c", (b.instance("g0"),))
    assert ca.definition()["devices"][0]["gpu"]["sm_count"] == 80
    json.dumps(ca.definition())  # JSON values throughout
    assert ca.definition_hash != cb.definition_hash
    bare = loads(TOY.format(kind="gpu", gpu="")).devices["toy-gpu"].instance("g0")
    assert "gpu" not in Cluster("c", (bare,)).definition()["devices"][0]


@st.composite
def gpu_specs(draw: st.DrawFn) -> GpuSpec:
    """Valid specs whose figures are what a TOML file can hold (decimals in its units)."""
    boost_mhz = draw(st.integers(1, 99_999)) / 10
    base_mhz = draw(st.integers(1, int(boost_mhz * 10))) / 10
    dtypes = draw(st.lists(st.sampled_from(PEAK_DTYPES), unique=True, max_size=4))
    return GpuSpec(
        architecture=draw(st.sampled_from(GPU_ARCHITECTURES)),
        sm_count=draw(st.integers(1, 4096)),
        base_clock_hz=base_mhz * 1e6, boost_clock_hz=boost_mhz * 1e6,
        power_w=draw(st.integers(1, 10**6)) / 10,
        l2_bytes=draw(st.integers(1, 2**36)),
        shared_memory_per_sm_bytes=draw(st.integers(1, 2**26)),
        vector_peak={d: draw(st.integers(1, 10**7)) / 1000 * 1e12 for d in dtypes})


@settings(max_examples=60, deadline=None)
@given(gpu_specs())
def test_random_gpu_specs_round_trip_through_toml(gpu: GpuSpec) -> None:
    peak = {d: 1e16 for d in (*gpu.vector_peak, "fp32")}
    device = Device("g", "gpu", peak, 2**34, 1e12, gpu=gpu)
    again = loads(dumps([device])).devices["g"]
    assert again.gpu == gpu
    assert again == device


# -- the catalog ----------------------------------------------------------------------------

NEW_GPUS = ("p4", "p100-pcie-16gb", "p100-sxm2-16gb", "t4", "v100-pcie-32gb", "v100-sxm2-16gb",
            "a100-pcie-40gb", "a100-sxm4-40gb", "a100-pcie-80gb", "gtx-1080ti", "titan-xp",
            "m40")
#: FP32 lanes (CUDA cores) per SM, from the architecture whitepapers; the big compute dies
#: GP100 and GA100 have 64 where the rest of their generation has 128.
LANES = {"maxwell": 128, "pascal": 128, "volta": 64, "turing": 64, "ampere": 128, "ada": 128,
         "hopper": 128, "blackwell": 128}
LANES_OF_DIE = {"p100-pcie-16gb": 64, "p100-sxm2-16gb": 64, "a100-pcie-40gb": 64,
                "a100-sxm4-40gb": 64, "a100-pcie-80gb": 64, "a100-sxm4-80gb": 64}


def _nvidia_gpus() -> list[Device]:
    return [get_device(n) for n in list_devices()
            if get_device(n).kind == "gpu" and n != "mi300x"]


def test_every_catalog_nvidia_gpu_has_a_gpu_table() -> None:
    names = {d.name for d in _nvidia_gpus()}
    assert {*NEW_GPUS, "h100-sxm5-80gb", "l4", "a100-sxm4-80gb", "v100-sxm2-32gb",
            "h200-sxm-141gb"} <= names
    assert [d.name for d in _nvidia_gpus() if d.gpu is None] == []
    assert all(get_device(n).gpu is None for n in list_devices()
               if get_device(n).kind != "gpu" or n == "mi300x")


@pytest.mark.parametrize("name", [d.name for d in _nvidia_gpus()])
def test_vector_fp32_is_sms_times_lanes_times_two_times_boost(name: str) -> None:
    device = get_device(name)
    gpu = device.gpu
    assert gpu is not None
    lanes = LANES_OF_DIE.get(name, LANES[gpu.architecture])
    derived = gpu.sm_count * lanes * 2 * gpu.boost_clock_hz
    assert gpu.vector_flops("fp32") == pytest.approx(derived, rel=0.02)
    assert device.peak_flops("fp32") == pytest.approx(derived, rel=0.02)


@pytest.mark.parametrize("name", [d.name for d in _nvidia_gpus()])
def test_catalog_gpu_figures_are_consistent(name: str) -> None:
    device = get_device(name)
    gpu = device.gpu
    assert gpu is not None
    assert gpu.base_clock_hz <= gpu.boost_clock_hz
    assert 1 * 2**20 <= gpu.l2_bytes <= 64 * 2**20
    assert 64 * 2**10 <= gpu.shared_memory_per_sm_bytes <= 228 * 2**10
    assert 50 <= gpu.power_w <= 700
    for dtype, rate in gpu.vector_peak.items():
        assert rate <= device.peak_flops(dtype)
    if gpu.architecture in ("volta", "turing", "ampere", "ada", "hopper"):
        # tensor cores: the best fp16 rate is about four times the CUDA cores' or more
        assert device.peak_flops("fp16") >= 3.9 * gpu.vector_flops("fp16")


def test_datasheet_figures_the_brief_names() -> None:
    figures = {  # name: (SMs, boost MHz, L2 MiB, shared KiB per SM, W)
        "a100-sxm4-40gb": (108, 1410, 40, 164, 400), "v100-sxm2-16gb": (80, 1530, 6, 96, 300),
        "v100-pcie-32gb": (80, 1380, 6, 96, 250), "t4": (40, 1590, 4, 64, 70),
        "p100-sxm2-16gb": (56, 1480, 4, 64, 300), "p100-pcie-16gb": (56, 1303, 4, 64, 250),
        "p4": (20, 1063, 2, 96, 75), "l4": (58, 2040, 48, 100, 72),
        "h100-sxm5-80gb": (132, 1980, 50, 228, 700), "gtx-1080ti": (28, 1582, 2.75, 96, 250),
        "titan-xp": (30, 1582, 3, 96, 250), "m40": (24, 1114, 3, 96, 250)}
    for name, (sms, boost, l2, shared, watts) in figures.items():
        gpu = get_device(name).gpu
        assert gpu is not None
        got = (gpu.sm_count, gpu.boost_clock_hz / 1e6, gpu.l2_bytes / 2**20,
               gpu.shared_memory_per_sm_bytes / 2**10, gpu.power_w)
        assert got == (sms, boost, l2, shared, watts), name


@pytest.mark.parametrize(("name", "model", "per_direction"), [
    ("hgx-a100-40gb-4gpu", "a100-sxm4-40gb", 300e9),  # NVLink 3: 600 GB/s both ways
    ("hgx-h100-4gpu", "h100-sxm5-80gb", 450e9),  # NVLink 4: 900 GB/s both ways
])
def test_four_gpu_nvlink_boxes(name: str, model: str, per_direction: float) -> None:
    box = get_cluster(name)
    assert [d.model for d in box.devices] == [model] * 4
    for gpu in box.device_names:
        total = sum(k.bandwidth for k in box.links if gpu in (k.a, k.b))
        assert total == pytest.approx(per_direction)
        assert all(len(box.route(gpu, other)) == 1 for other in box.device_names
                   if other != gpu)


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    ({"sm_count": 0}, "gpu.sm_count must be an int >= 1, got 0"),
    ({"sm_count": 80.0}, "gpu.sm_count must be an int >= 1, got 80.0"),
    ({"boost_clock_hz": math.nan}, "gpu.boost_clock_hz must be a finite number > 0, got nan"),
    ({"base_clock_hz": 2e9}, "gpu.base_clock_hz must be <= boost_clock_hz (1530000000.0), "
                             "got 2000000000.0"),
    ({"architecture": "kepler"}, "gpu.architecture must be one of maxwell, pascal, volta, "
                                 "turing, ampere, ada, hopper, blackwell, got 'kepler'"),
    ({"l2_bytes": 0}, "gpu.l2_bytes must be an int >= 1, got 0"),
    ({"vector_peak": {"fp9": 1e12}}, "gpu.vector_peak dtype must be one of fp64, fp32, tf32, "
                                     "fp16, bf16, fp8, int8, got 'fp9'"),
    ({"vector_peak": {"fp32": -1.0}}, "gpu.vector_peak.fp32 must be a finite number > 0, "
                                      "got -1.0"),
])
def test_malformed_gpu_spec_is_one_line(change: dict[str, object], message: str) -> None:
    with pytest.raises(HardwareSpecError, match=f"^{re.escape(message)}$"):
        _volta(**change)


@pytest.mark.parametrize(("text", "message"), [
    (_toml(sm_count=0), r"my.toml: device[0].gpu.sm_count: expected a number >= 1, got 0"),
    (_toml(boost="nan"),
     "my.toml: device[0].gpu.boost_clock_mhz: expected a finite number, got nan"),
    (_toml(architecture="kepler"),
     "my.toml: device[0] ('toy-gpu'): device 'toy-gpu': gpu.architecture must be one of "
     "maxwell, pascal, volta, turing, ampere, ada, hopper, blackwell, got 'kepler'"),
    (_toml(base=1600),
     "my.toml: device[0] ('toy-gpu'): device 'toy-gpu': gpu.base_clock_hz must be <= "
     "boost_clock_hz (1530000000.0), got 1600000000.0"),
    (_toml(kind="cpu"),
     "my.toml: device[0] ('toy-gpu'): device 'toy-gpu': gpu must be absent on a device of "
     "kind 'cpu', got a gpu table"),
    (_toml(vector_fp32=16),
     "my.toml: device[0] ('toy-gpu'): device 'toy-gpu': gpu.vector_peak.fp32 must be <= "
     "peak.fp32 (the best rate, tensor cores included: 15700000000000.0), "
     "got 16000000000000.0"),
    (_toml().replace("sm_count", "sm_cuont"), "my.toml: device[0].gpu.sm_cuont: unknown field"),
])
def test_malformed_gpu_table_names_file_entry_field_and_value(text: str, message: str) -> None:
    with pytest.raises(HardwareSpecError, match=f"^{re.escape(message)}$"):
        loads(text, source="my.toml")


def test_a_gpu_spec_on_a_cpu_built_in_python_is_refused() -> None:
    with pytest.raises(HardwareSpecError, match=r"^device 'c': gpu must be absent on a device "
                                                r"of kind 'cpu', got a gpu table$"):
        Device("c", "cpu", {"fp32": 1e12}, 2**30, 1e11, gpu=_volta(vector_peak={}))


def test_a_missing_vector_rate_is_named() -> None:
    with pytest.raises(UnsupportedOp, match=r"^gpu \(volta, 80 SMs\): has no vector rate for "
                                            r"dtype 'bf16'; it has fp32, fp16$"):
        _volta().vector_flops("bf16")
