"""The hardware rules and the hardware TOML format, each declared once (see
:mod:`workloads.schema`).

The rules (finite numbers, bounds, choices, efficiency tables) are annotated types that
carry their words; the TOML tables below use them, and so do the specs of
:mod:`hwmodels.spec`, which check their fields against :class:`DeviceRules` and the like
when they are built, so a device made in Python and one read from a file meet the same
rules. Units are in the TOML key names; counts and sizes in a file have upper bounds beyond which a
value can only be a mistake (or would overflow an int64 of bytes).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    Strict,
    Tag,
    TypeAdapter,
    model_validator,
)
from typing_extensions import TypedDict, is_typeddict

from hwmodels.spec import (
    COMPUTE_CLASSES,
    DEVICE_KINDS,
    GPU_ARCHITECTURES,
    MAX_COPY_ENGINES,
    MAX_STREAMS,
    PEAK_DTYPES,
)
from workloads.schema import RULES_CONFIG, Schema

__all__ = ["MAX_COPY_ENGINES", "MAX_MEMORY_GIB", "MAX_STREAMS", "ClusterTable",
           "CostTableDocument", "DeviceRules", "DeviceTable", "Efficiency", "GpuRules",
           "GpuTable", "HardwareDocument", "HostSlowdownRules", "LinkRules", "LinkTable",
           "PredictorKind", "PredictorTable", "SlotTable", "adapter"]

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

# -- the rules, with their words --------------------------------------------------------------



def _truth_value(value: Any) -> Any:
    """NumPy's booleans as Python's, which a number refuses (pydantic would take NumPy's as
    0.0 and 1.0)."""
    return bool(value) if isinstance(value, np.bool_) else value


Number = Annotated[float, BeforeValidator(_truth_value)]
Positive = Annotated[Number, Field(gt=0, allow_inf_nan=False,
                                   description="must be a finite number > 0")]
NonNegative = Annotated[Number, Field(ge=0, allow_inf_nan=False,
                                      description="must be a finite number >= 0")]
#: An integer count of something there is at least one of.
Count = Annotated[int, Field(ge=1, description="must be an int >= 1")]
Streams = Annotated[int, Field(ge=1, le=MAX_STREAMS,
                               description=f"must be an int in [1, {MAX_STREAMS}]")]
CopyEngines = Annotated[int, Field(ge=1, le=MAX_COPY_ENGINES,
                                   description=f"must be an int in [1, {MAX_COPY_ENGINES}]")]
#: How many times slower a host's ops run while two of its devices compute at once.
Slowdown = Annotated[Number, Field(ge=1, allow_inf_nan=False,
                                  description="must be a finite number >= 1")]
Name = Annotated[str, Field(min_length=1)]
DeviceKind = Annotated[Literal[DEVICE_KINDS], Field(  # type: ignore[valid-type]
    description=f"must be one of {', '.join(DEVICE_KINDS)}")]
PeakDtype = Annotated[Literal[PEAK_DTYPES], Field(  # type: ignore[valid-type]
    description=f"dtype must be one of {', '.join(PEAK_DTYPES)}")]
Architecture = Annotated[Literal[GPU_ARCHITECTURES], Field(  # type: ignore[valid-type]
    description=f"must be one of {', '.join(GPU_ARCHITECTURES)}")]
ComputeClass = Annotated[Literal[COMPUTE_CLASSES], Field(  # type: ignore[valid-type]
    description=f"key must be one of {', '.join(COMPUTE_CLASSES)}")]
Duplex = Annotated[Literal["full", "half"], Field(description="must be 'full' or 'half'")]
Peak = Annotated[Mapping[PeakDtype, Positive], Field(min_length=1,
                                                     description="must name at least one dtype")]


def _whole_bytes(value: float) -> int:
    if not value.is_integer():
        raise ValueError("must be a whole number of bytes")
    return int(value)


#: A size in bytes; a whole float (``16e9``) is taken as the int it is.
Bytes = Annotated[Positive, AfterValidator(_whole_bytes)]

_TABLE = "table must have finite increasing thresholds and efficiencies in (0, 1]"
#: One row of an efficiency table: ``[size_threshold, efficiency]`` (a list or a tuple).
Row = Annotated[tuple[Annotated[float, BeforeValidator(_truth_value), Strict()],
                      Annotated[float, BeforeValidator(_truth_value), Strict(),
                                Field(gt=0, le=1)]],
                Strict(False)]


def _increasing(rows: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
    if any(a >= b for (a, _), (b, _) in itertools.pairwise(rows)):
        raise ValueError(_TABLE)
    return rows


def _number_or_table(value: Any) -> str:
    return "<number>" if isinstance(value, int | float) and not isinstance(value, bool) else (
        "<table>")


#: The fraction of peak an op class reaches: a constant, or a table of
#: ``[size_threshold, efficiency]`` rows by increasing threshold.
Efficiency = Annotated[
    Annotated[float, Field(gt=0, le=1, description="must be in (0, 1]"), Tag("<number>")]
    | Annotated[tuple[Row, ...], Strict(False), Field(min_length=1, description=_TABLE),
                AfterValidator(_increasing), Tag("<table>")],
    Discriminator(_number_or_table),
    Field(description="must be a number or a table [[size_threshold, efficiency], ...]")]


class DeviceRules(TypedDict):
    """What :class:`hwmodels.spec.Device` checks of its fields (SI units)."""

    __pydantic_config__ = RULES_CONFIG  # type: ignore[misc]

    kind: DeviceKind
    peak: Peak
    memory_bytes: Bytes
    memory_bandwidth: Positive
    launch_overhead_s: NonNegative
    compute_streams: Streams
    copy_engines: CopyEngines
    efficiency: Mapping[ComputeClass, Efficiency]


class GpuRules(TypedDict):
    """What :class:`hwmodels.spec.GpuSpec` checks of its fields (SI units)."""

    __pydantic_config__ = RULES_CONFIG  # type: ignore[misc]

    architecture: Architecture
    sm_count: Count
    l2_bytes: Count
    shared_memory_per_sm_bytes: Count
    base_clock_hz: Positive
    boost_clock_hz: Positive
    power_w: Positive
    vector_peak: Mapping[PeakDtype, Positive]


class LinkRules(TypedDict):
    """What :class:`hwmodels.spec.Link` checks of its fields (SI units)."""

    __pydantic_config__ = RULES_CONFIG  # type: ignore[misc]

    bandwidth: Positive
    latency_s: NonNegative
    duplex: Duplex


class HostSlowdownRules(TypedDict):
    """What :class:`hwmodels.spec.Cluster` checks of its slowdowns (the rest is structure:
    names, links, connectivity)."""

    __pydantic_config__ = RULES_CONFIG  # type: ignore[misc]

    host_slowdown: Mapping[str, Slowdown]


@cache
def adapter(rules: str) -> TypeAdapter[Any]:
    """The validator of the rule or rules named ``rules`` (``"DeviceRules"``,
    ``"NonNegative"``), built once, on a spec's first construction."""
    tp = globals()[rules]
    if is_typeddict(tp):
        return TypeAdapter(tp)
    return TypeAdapter(tp, config=RULES_CONFIG)


# -- the TOML format ----------------------------------------------------------------------------

class GpuTable(Schema):
    """A GPU's figures for tile-aware models (``hwmodels.spec.GpuSpec``); the architecture
    is checked against ``GPU_ARCHITECTURES`` by the spec, as a device's kind is."""

    architecture: Name
    sm_count: Annotated[Count, Field(le=MAX_SMS)]
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
    compute_streams: Streams = 1
    copy_engines: CopyEngines = 1
    #: Keys (dtypes) and kind are the spec's to check, with its words.
    peak_tflops: Annotated[dict[str, Positive], Field(min_length=1)]
    efficiency: dict[str, Efficiency] = Field(default_factory=dict)
    gpu: GpuTable | None = None


class LinkTable(Schema):
    name: str = ""
    a: Name
    b: Name
    bandwidth_gbps: Positive
    latency_us: NonNegative = 0.0
    duplex: Duplex = "full"


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
    host_slowdown: dict[str, Slowdown] = Field(default_factory=dict)


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
