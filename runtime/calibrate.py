"""Calibration: fit the roofline cost model to microbenchmarks measured on an engine, and
write the result as an ordinary hardware TOML (a device and the engine's cluster) with its
provenance inside.

The fitted model is the catalog's: ``launch + max(FLOPs / (peak * eff), bytes /
(bandwidth * eff))``, with ``eff`` a table per op class over size buckets (FLOPs for matmul
and convolution, bytes otherwise). ``scipy.optimize.least_squares`` with a robust loss fits
the launch overhead, peak rate, memory bandwidth and every efficiency at once, on the log of
the times (relative error); the largest GEMM bucket and the largest elementwise bucket anchor
the peak and the bandwidth (efficiency 1). Copies between logical devices fit a link's
latency and bandwidth. Fit quality (median and 90th-percentile relative error per op class)
is recorded, and a class the roofline cannot fit within 10% is named.

>>> import numpy as np
>>> from runtime.microbench import Sample, ShapeSample
>>> s = [Sample(f"m{i}", "matmul", f, 0.0, 2e-6 + f / 1e10) for i, f in
...      enumerate(np.geomspace(1e5, 1e9, 12))]
>>> fit = fit_samples(s, buckets=1)
>>> round(fit.peak_flops / 1e10, 2), round(fit.launch_s * 1e6, 1)
(1.0, 2.0)
"""

from __future__ import annotations

import datetime
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from runtime.microbench import Sample, ShapeSample
from workloads.errors import PlacelabError

__all__ = ["CalibrationError", "Fit", "KindFit", "LinkFit", "dispatch_seconds", "fit_kinds",
           "fit_link", "fit_samples", "last_level_cache_bytes", "shape_table",
           "write_calibration"]

#: Classes whose efficiency is indexed by FLOPs; the others by bytes moved.
COMPUTE_BOUND = ("matmul", "conv")
#: A class whose median error exceeds this is reported as not fitted by the roofline.
TOLERANCE = 0.10


class CalibrationError(PlacelabError):
    """Calibration could not measure or fit what it needs."""


@dataclass
class Fit:
    """The fitted device model and its quality on the samples it was fitted to."""

    launch_s: float
    peak_flops: float
    bandwidth: float
    efficiency: dict[str, list[tuple[float, float]]]
    quality: dict[str, dict[str, float]] = field(default_factory=dict)
    fp64_ratio: float | None = None

    def predict(self, s: Sample) -> float:
        eff = _lookup(self.efficiency.get(s.op_class, [(0.0, 1.0)]), _size(s))
        peak = self.peak_flops * ((self.fp64_ratio or 0.5) if s.dtype == "fp64" else 1.0)
        return self.launch_s + max(s.flops / (peak * eff), s.nbytes / (self.bandwidth * eff))

    @property
    def poorly_fitted(self) -> list[str]:
        return [c for c, q in self.quality.items() if q["median"] > TOLERANCE]


@dataclass
class LinkFit:
    latency_s: float
    bandwidth: float
    quality: dict[str, float]


def _size(s: Sample) -> float:
    return s.flops if s.op_class in COMPUTE_BOUND else s.nbytes


def _lookup(table: Sequence[tuple[float, float]], size: float) -> float:
    eff = table[0][1]
    for threshold, value in table:
        if size >= threshold:
            eff = value
    return eff


def _thresholds(sizes: np.ndarray, buckets: int) -> list[float]:
    """Lower edges of ``buckets`` size buckets holding about equal numbers of samples."""
    sizes = sizes[sizes > 0]
    if not len(sizes):
        return [0.0]
    edges = np.quantile(np.log(sizes), np.linspace(0, 1, buckets + 1)[1:-1])
    return [0.0, *sorted({float(np.exp(e)) for e in edges if np.exp(e) > 0})]


def fit_samples(samples: Sequence[Sample], *, buckets: int = 4) -> Fit:
    """Fit launch overhead, peak, bandwidth and efficiency tables to ``samples``."""
    ops = [s for s in samples if s.op_class not in ("copy", "dispatch") and s.dtype != "fp64"
           and s.seconds > 0]
    if len(ops) < 3:
        raise CalibrationError(f"calibration: expected at least 3 timed ops, got {len(ops)}")
    classes = sorted({s.op_class for s in ops})
    tables = {c: _thresholds(np.array([_size(s) for s in ops if s.op_class == c]), buckets)
              for c in classes}
    slots = [(c, k) for c in classes for k in range(len(tables[c]))]
    anchors = {("matmul", len(tables.get("matmul", [])) - 1),
               ("elementwise", len(tables.get("elementwise", [])) - 1)}
    free = [slot for slot in slots if slot not in anchors]
    index = {slot: 3 + i for i, slot in enumerate(free)}
    bucket = [sum(_size(s) >= t for t in tables[s.op_class]) - 1 for s in ops]
    flops = np.array([s.flops for s in ops])
    nbytes = np.array([s.nbytes for s in ops])
    seconds = np.array([s.seconds for s in ops])
    rows = [index.get((s.op_class, b), -1) for s, b in zip(ops, bucket, strict=True)]

    def model(x: np.ndarray) -> np.ndarray:
        launch, peak, bw = np.exp(x[:3])
        eff = np.array([np.exp(x[r]) if r >= 0 else 1.0 for r in rows])
        return launch + np.maximum(flops / (peak * eff), nbytes / (bw * eff))

    x0 = np.concatenate([np.log(_initial(ops)), np.full(len(free), np.log(0.5))])
    upper = np.concatenate([np.full(3, np.inf), np.zeros(len(free))])  # efficiency <= 1
    result = least_squares(lambda x: np.log(model(x)) - np.log(seconds), x0,
                           bounds=(np.full(len(x0), -np.inf), upper), loss="soft_l1",
                           f_scale=0.05)
    if not result.success:
        raise CalibrationError(f"calibration: the fit did not converge: {result.message}")
    x = result.x
    efficiency = {c: [(t, float(np.exp(x[index[(c, k)]])) if (c, k) in index else 1.0)
                      for k, t in enumerate(tables[c])] for c in classes}
    launch, peak, bandwidth = (float(v) for v in np.exp(x[:3]))
    fit = Fit(launch, peak, bandwidth, efficiency=efficiency)
    fit.fp64_ratio = _fp64_ratio(samples, fit)
    fit.quality = _quality(ops, fit)
    return fit


def _initial(ops: Sequence[Sample]) -> tuple[float, float, float]:
    """Starting point: the fastest op's time, the best GEMM rate, the best streaming rate."""
    launch = min(s.seconds for s in ops) / 2
    peak = max((s.flops / s.seconds for s in ops if s.op_class in COMPUTE_BOUND), default=1e9)
    bw = max((s.nbytes / s.seconds for s in ops if s.op_class not in COMPUTE_BOUND),
             default=1e9)
    return launch, peak, bw


def _fp64_ratio(samples: Sequence[Sample], fit: Fit) -> float | None:
    """Measured fp64 GEMM rate over what the fp32 fit predicts for the same op."""
    doubles = [s for s in samples if s.dtype == "fp64" and s.op_class == "matmul"]
    if not doubles:
        return None
    single = Fit(fit.launch_s, fit.peak_flops, fit.bandwidth, fit.efficiency)
    ratios = [single.predict(Sample(s.label, s.op_class, s.flops, s.nbytes, 0.0)) / s.seconds
              for s in doubles]
    return float(np.median(ratios))


def _quality(ops: Sequence[Sample], fit: Fit) -> dict[str, dict[str, float]]:
    out = {}
    for c in sorted({s.op_class for s in ops}):
        errors = np.array([abs(fit.predict(s) / s.seconds - 1) for s in ops if s.op_class == c])
        out[c] = {"median": float(np.median(errors)), "p90": float(np.quantile(errors, 0.9)),
                  "samples": len(errors)}
    return out


def last_level_cache_bytes() -> int:
    """This machine's last-level cache (Linux sysfs), 32 MiB where it cannot be read."""
    import re

    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        match = re.fullmatch(r"(\d+)([KMG]?)", path.read_text().strip())
        if match:
            sizes.append(int(match[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match[2]])
    return max(sizes, default=32 * 2**20)


@dataclass
class KindFit:
    """A non-negative linear model of one kind's time over
    :data:`hwmodels.cost.KIND_FEATURES` (a backward op's kind is ``backward:<forward
    kind>``)."""

    kind: str
    coefficients: tuple[float, ...]
    cache_bytes: int
    quality: dict[str, float]

    def predict(self, s: Sample) -> float:
        return float(np.dot(self.coefficients, _features(s, self.cache_bytes)))

    @property
    def launch_s(self) -> float:
        return self.coefficients[0]


def _features(s: Sample, cache: int) -> tuple[float, ...]:
    """A sample's features: those measured with it, or those its FLOPs, bytes and windows
    give (a sample made by hand)."""
    if s.features:
        return s.features
    return (1.0, s.flops, s.nbytes, s.windows, max(s.nbytes - cache, 0.0), 0.0, 0.0, 0.0)


def fit_kinds(samples: Sequence[Sample], *, min_samples: int = 2,
              cache_bytes: int | None = None) -> dict[str, KindFit]:
    """A non-negative linear model per kind over its samples' features (FLOPs, bytes,
    window positions and gathered bytes, batched products, bytes beyond the cache, weights
    read from memory), fitted on relative error with a robust loss (one hiccup of the
    machine does not move it) from a non-negative least-squares start; kinds with fewer
    than ``min_samples`` fp32 samples are left to the roofline."""
    from scipy.optimize import nnls

    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    out = {}
    for kind in sorted({s.kind for s in samples if s.kind and s.dtype == "fp32"
                        and s.op_class not in ("copy", "dispatch")}):
        mine = [s for s in samples if s.kind == kind and s.dtype == "fp32" and s.seconds > 0]
        if len(mine) < min_samples:
            continue
        raw = np.array([_features(s, cache) for s in mine])
        seconds = np.array([s.seconds for s in mine])
        scale = np.where(raw.max(axis=0) > 0, raw.max(axis=0), 1.0)
        x = raw / scale  # columns of order 1: better conditioned
        start, _ = nnls(x / seconds[:, None], np.ones(len(mine)))
        start = np.maximum(start, 1e-12)
        def residuals(c: np.ndarray, x: np.ndarray = x, t: np.ndarray = seconds
                      ) -> np.ndarray:
            return (x @ c) / t - 1  # linear in c: with soft_l1, a convex problem

        result = least_squares(residuals, start, bounds=(0, np.inf), loss="soft_l1",
                               f_scale=0.05)
        fit = KindFit(kind, tuple(float(v) for v in result.x / scale), cache, quality={})
        errors = np.array([abs(fit.predict(s) / s.seconds - 1) for s in mine])
        fit.quality = {"median": float(np.median(errors)),
                       "p90": float(np.quantile(errors, 0.9)), "samples": len(mine)}
        out[kind] = fit
    return out


def shape_table(samples: Sequence[ShapeSample]
                ) -> dict[tuple[str, str], dict[int, float]]:
    """(kind, signature) -> batch -> seconds: the median of the ops measured with that
    signature at that batch.

    >>> from runtime.microbench import ShapeSample
    >>> shape_table([ShapeSample("relu", "s", 2, t) for t in (1.0, 3.0, 2.0)])
    {('relu', 's'): {2: 2.0}}
    """
    groups: dict[tuple[str, str], dict[int, list[float]]] = {}
    for s in samples:
        groups.setdefault((s.kind, s.signature), {}).setdefault(s.batch, []).append(s.seconds)
    return {key: {b: float(np.median(t)) for b, t in sorted(by_batch.items())}
            for key, by_batch in groups.items()}


def dispatch_seconds(samples: Sequence[Sample]) -> float:
    """The median idle time between consecutive ops of a chain on one device: what running
    an op costs the executor outside its kernel (0 without such samples)."""
    gaps = [s.seconds for s in samples if s.op_class == "dispatch"]
    return float(np.median(gaps)) if gaps else 0.0


def fit_link(samples: Sequence[Sample]) -> LinkFit | None:
    """Latency and bandwidth of copies: ``latency + bytes / bandwidth``, robust fit."""
    copies = [s for s in samples if s.op_class == "copy" and s.seconds > 0]
    if len(copies) < 2:
        return None
    nbytes = np.array([s.nbytes for s in copies])
    seconds = np.array([s.seconds for s in copies])
    x0 = np.log([seconds.min() / 2, nbytes.max() / seconds.max()])
    result = least_squares(
        lambda x: np.log(np.exp(x[0]) + nbytes / np.exp(x[1])) - np.log(seconds), x0,
        loss="soft_l1", f_scale=0.05)
    latency, bandwidth = (float(v) for v in np.exp(result.x))
    errors = np.abs((latency + nbytes / bandwidth) / seconds - 1)
    return LinkFit(latency, bandwidth, {"median": float(np.median(errors)),
                                        "p90": float(np.quantile(errors, 0.9)),
                                        "samples": len(copies)})


def _provenance(engine_name: str, devices: int, threads: int, fit: Fit,
                link: LinkFit | None, samples: int) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import scipy

    try:
        placelab = version("placelab")
    except PackageNotFoundError:
        placelab = "unknown"
    return {
        "machine": platform.node() or "unknown", "processor": platform.processor()
        or platform.machine(), "date": datetime.datetime.now(datetime.UTC).isoformat(
            timespec="seconds"), "engine": engine_name, "devices": devices,
        "threads_per_device": threads, "samples": samples,
        "versions": {"placelab": placelab, "numpy": numpy.__version__,
                     "scipy": scipy.__version__, "python": platform.python_version()},
        "fit": {c: {k: round(v, 4) for k, v in q.items()} for c, q in fit.quality.items()},
        **({"link_fit": {k: round(v, 4) for k, v in link.quality.items()}} if link else {}),
        "not_fitted_within_10pct": fit.poorly_fitted,
    }


def write_calibration(path: str | Path, *, engine_name: str, model: str, devices: Sequence[str],
                      memory_bytes: int, threads: int, fit: Fit, link: LinkFit | None,
                      samples: int, kinds: dict[str, KindFit] | None = None,
                      link_dispatch_s: float = 0.0,
                      shapes: dict[tuple[str, str], dict[int, float]] | None = None,
                      start_s: float = 0.0, reference_s: float = 0.0,
                      host_slowdown: float = 1.0) -> Path:
    """Write the fitted device (catalog model ``model``), the engine's cluster of it and
    the per-kind models as a hardware TOML that ``placelab hw register`` accepts and the
    ``calibrated`` cost model reads; return the path. ``link_dispatch_s``, the executor's
    idle time before an op (already in the ops' times), is taken off the link latency,
    whose samples include it. The devices sit on one host, ``localhost``, with
    ``host_slowdown`` (:mod:`runtime.hosts`) where it is above 1."""
    import tomli_w

    from hwmodels.spec import Cluster, Device, Link
    from hwmodels.toml_io import cluster_table, device_table
    from workloads.io import write_text_atomic

    peak = {"fp32": fit.peak_flops}
    if fit.fp64_ratio:
        peak["fp64"] = fit.peak_flops * fit.fp64_ratio
    spec = Device(model, "cpu", peak, memory_bytes, fit.bandwidth,
                  launch_overhead_s=fit.launch_s,
                  efficiency={c: tuple(t) for c, t in fit.efficiency.items()
                              if c != "source"},
                  description=f"calibrated on {platform.node() or 'this machine'}: "
                              f"{threads} threads per device ({engine_name} engine)")
    slots = tuple(spec.instance(d) for d in devices)
    latency = max(link.latency_s - link_dispatch_s, 0.0) if link else 0.0
    links = tuple(Link(a, b, link.bandwidth, latency) for i, a in enumerate(devices)
                  for b in devices[i + 1:]) if link else ()
    cluster = Cluster(f"{engine_name}-{len(devices)}-calibrated", slots, links,
                      hosts=dict.fromkeys(devices, "localhost"),
                      host_slowdown={"localhost": host_slowdown} if host_slowdown > 1 else {})
    data: dict[str, Any] = {
        "calibration": {**_provenance(engine_name, len(devices), threads, fit, link,
                                      samples),
                        "dispatch_us": round(link_dispatch_s * 1e6, 3)},
        "device": [device_table(spec)], "cluster": [cluster_table(cluster)]}
    if kinds:
        data["measured"] = [{
            "model": model, "kind": k.kind,
            **{key: value * unit for key, value, unit in zip(
                _MEASURED_KEYS, k.coefficients, _MEASURED_UNITS, strict=True)},
            "cache_mib": k.cache_bytes / 2**20, "median_error": round(k.quality["median"], 4),
            "p90_error": round(k.quality["p90"], 4), "samples": int(k.quality["samples"])}
            for k in kinds.values()]
    if start_s or reference_s:
        data["run"] = {"start_us": start_s * 1e6, "reference_ms": reference_s * 1e3}
    if shapes:
        data["measured_shape"] = [{
            "model": model, "kind": kind, "signature": signature,
            "batches": list(times), "us": [t * 1e6 for t in times.values()]}
            for (kind, signature), times in shapes.items()]
    return write_text_atomic(path, tomli_w.dumps(_finite(data)))


#: The file's key for each feature's coefficient (hwmodels.cost.KIND_FEATURES) and the
#: factor from seconds per unit to the key's unit.
_MEASURED_KEYS = ("launch_us", "s_per_gflop", "s_per_gb", "us_per_window",
                  "s_per_gb_beyond_cache", "s_per_gb_windowed", "us_per_item", "s_per_gb_cold")
_MEASURED_UNITS = (1e6, 1e9, 1e9, 1e6, 1e9, 1e9, 1e6, 1e9)


def _finite(value: Any) -> Any:
    """``value`` with every float checked finite (a calibration never writes NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise CalibrationError(f"calibration: a fitted value is not finite: {value}")
    return value
