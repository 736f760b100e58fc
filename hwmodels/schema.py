"""The hardware TOML format, declared once (see :mod:`workloads.schema`).

Units are in the key names; every number must be finite; counts and sizes have upper bounds
beyond which a value can only be a mistake (or would overflow an int64 of bytes).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from hwmodels.spec import MAX_COPY_ENGINES, MAX_STREAMS
from workloads.schema import Schema

__all__ = ["MAX_COPY_ENGINES", "MAX_MEMORY_GIB", "MAX_STREAMS", "ClusterTable", "DeviceTable",
           "CostTableDocument", "GpuTable", "HardwareDocument", "LinkTable", "PredictorKind",
           "PredictorTable", "SlotTable"]

#: Memory above this many GiB would overflow an int64 of bytes.
MAX_MEMORY_GIB = 2**32
#: Beyond these a GPU figure can only be a mistake (today's largest GPUs have a few hundred
#: SMs at most, clocks under 3 GHz, about a kilowatt, L2 and shared memory per SM in the
#: hundreds of MiB and KiB).
MAX_SMS = 4096
MAX_CLOCK_MHZ = 10_000
MAX_POWER_W = 100_000
MAX_L2_MIB = 65_536
MAX_SHARED_MEMORY_KIB = 65_536

Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Name = Annotated[str, Field(min_length=1)]
#: One row of an efficiency table: ``[size_threshold, efficiency]``.
Pair = Annotated[list[float], Field(min_length=2, max_length=2)]


class GpuTable(Schema):
    """A GPU's figures for tile-aware models (``hwmodels.spec.GpuSpec``); the architecture
    is checked against ``GPU_ARCHITECTURES`` by the spec, as a device's kind is."""

    architecture: Name
    sm_count: Annotated[int, Field(ge=1, le=MAX_SMS)]
    base_clock_mhz: Annotated[float, Field(gt=0, le=MAX_CLOCK_MHZ)]
    boost_clock_mhz: Annotated[float, Field(gt=0, le=MAX_CLOCK_MHZ)]
    power_w: Annotated[float, Field(gt=0, le=MAX_POWER_W)]
    l2_mib: Annotated[float, Field(gt=0, le=MAX_L2_MIB)]
    shared_memory_per_sm_kib: Annotated[float, Field(gt=0, le=MAX_SHARED_MEMORY_KIB)]
    #: FLOP/s of the CUDA cores alone (no tensor cores) per dtype, at the boost clock.
    vector_tflops: dict[str, Positive] = Field(default_factory=dict)


class DeviceTable(Schema):
    name: Name
    kind: str
    description: str = ""
    memory_gib: Annotated[float, Field(gt=0, le=MAX_MEMORY_GIB)]
    memory_bandwidth_gbps: Positive
    launch_overhead_us: NonNegative = 0.0
    compute_streams: Annotated[int, Field(ge=1, le=MAX_STREAMS)] = 1
    copy_engines: Annotated[int, Field(ge=1, le=MAX_COPY_ENGINES)] = 1
    peak_tflops: Annotated[dict[str, Positive], Field(min_length=1)]
    efficiency: dict[str, float | list[Pair]] = Field(default_factory=dict)
    gpu: GpuTable | None = None


class LinkTable(Schema):
    name: str = ""
    a: Name
    b: Name
    bandwidth_gbps: Positive
    latency_us: NonNegative = 0.0
    duplex: Literal["full", "half"] = "full"


class SlotTable(Schema):
    name: Name
    model: Name
    host: str | None = None


class ClusterTable(Schema):
    name: Name
    description: str = ""
    switches: list[str] = Field(default_factory=list)
    device: Annotated[list[SlotTable], Field(min_length=1)]
    link: list[LinkTable] = Field(default_factory=list)
    #: Host -> how many times slower an op runs while two of its devices compute at once.
    host_slowdown: dict[str, Annotated[float, Field(ge=1, allow_inf_nan=False)]] = Field(
        default_factory=dict)


class PredictorKind(Schema):
    """One op kind's (or op class's, ``class:<op_class>``) fitted utilisation model."""

    key: Name
    #: The base model's coefficients, seconds per unit of each of
    #: ``hwmodels.predictor.BASE_FEATURES``.
    base: Annotated[list[NonNegative], Field(min_length=8, max_length=8)]
    samples: Annotated[int, Field(ge=1)]
    heldout_median: NonNegative = 0.0
    heldout_p90: NonNegative = 0.0
    heldout_worst: NonNegative = 0.0
    heldout_samples: Annotated[int, Field(ge=0)] = 0
    format: Literal["lightgbm-text/zlib/base64"]
    model: Name


class PredictorTable(Schema):
    """The fitted op-time models of one device model (``hwmodels.predictor``), the cache
    sizes their features read, and the roofline their utilisations are fractions of (the
    device's own spec where it is not given)."""

    model: Name
    caches_kib: Annotated[list[Positive], Field(min_length=3, max_length=3)]
    peak_tflops: dict[str, Positive] = Field(default_factory=dict)
    memory_bandwidth_gbps: NonNegative = 0.0
    kind: list[PredictorKind] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> PredictorTable:
        keys = [k.key for k in self.kind]
        if len(set(keys)) != len(keys):
            twice = sorted({k for k in keys if keys.count(k) > 1})
            raise ValueError(f"kind keys must be unique, got {', '.join(twice)} twice")
        return self


class MeasuredShape(Schema):
    """Times calibration measured for ops of one signature (kind, shapes past the batch
    dimension, the attributes a kernel reads) at several batch sizes, inside whole graphs;
    the ``calibrated`` cost model interpolates between them in batch."""

    model: Name
    kind: Name
    signature: Name
    batches: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)]
    us: Annotated[list[NonNegative], Field(min_length=1)]

    @model_validator(mode="after")
    def _same_length(self) -> MeasuredShape:
        if len(self.batches) != len(self.us) or len(set(self.batches)) != len(self.batches):
            raise ValueError(f"batches and us must pair up, one time per distinct batch, "
                             f"got {len(self.batches)} batches {self.batches} and "
                             f"{len(self.us)} times")
        return self


class RunTable(Schema):
    """What an engine's executor costs a run beyond its ops (calibration measures it)."""

    #: From a run's start to its first op's (waking the device's worker).
    start_us: NonNegative = 0.0
    #: A reference graph's time at calibration (runtime.microbench.reference_seconds).
    reference_ms: NonNegative = 0.0


class HardwareDocument(Schema):
    device: list[DeviceTable] = Field(default_factory=list)
    cluster: list[ClusterTable] = Field(default_factory=list)
    #: Where a calibrated file came from (machine, date, engine, versions, fit quality).
    calibration: dict[str, Any] | None = None
    predictor: list[PredictorTable] = Field(default_factory=list)
    measured_shape: list[MeasuredShape] = Field(default_factory=list)
    run: RunTable | None = None


class CostTableDocument(Schema):
    """The ``table`` cost model's file: seconds per op and device, per tensor crossing."""

    op_time_s: dict[str, dict[str, NonNegative]]
    transfer_time_s: dict[str, NonNegative] = Field(default_factory=dict)
