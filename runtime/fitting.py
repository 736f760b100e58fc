"""Fits calibration makes: the roofline over measured ops (the cost model's source for an
op no fitted model covers), a link's latency and bandwidth, the executor's dispatch time,
and the table of times measured per op signature inside whole graphs.

The roofline is the catalog's: ``launch + max(FLOPs / (peak * eff), bytes / (bandwidth *
eff))``, with ``eff`` a table per op class over size buckets (FLOPs for matmul and
convolution, bytes otherwise). ``scipy.optimize.least_squares`` with a robust loss fits the
launch overhead, peak rate, memory bandwidth and every efficiency at once, on the log of the
times (relative error); the largest GEMM bucket and the largest elementwise bucket anchor the
peak and the bandwidth (efficiency 1). Copies between logical devices fit a link's latency
and bandwidth.

>>> import numpy as np
>>> from runtime.microbench import Sample
>>> s = [Sample(f"m{i}", "matmul", f, 0.0, 2e-6 + f / 1e10) for i, f in
...      enumerate(np.geomspace(1e5, 1e9, 12))]
>>> fit = fit_samples(s, buckets=1)
>>> round(fit.peak_flops / 1e10, 2), round(fit.launch_s * 1e6, 1)
(1.0, 2.0)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from runtime.microbench import Sample, ShapeSample
from workloads.errors import CalibrationError

__all__ = ["Fit", "LinkFit", "cache_sizes", "dispatch_seconds", "fit_link", "fit_samples",
           "last_level_cache_bytes", "shape_table"]

#: Classes whose efficiency is indexed by FLOPs; the others by bytes moved.
COMPUTE_BOUND = ("matmul", "conv")
#: A class whose median error exceeds this is reported as not fitted by the roofline.
TOLERANCE = 0.10



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
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        match = re.fullmatch(r"(\d+)([KMG]?)", path.read_text().strip())
        if match:
            sizes.append(int(match[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match[2]])
    return max(sizes, default=32 * 2**20)

def cache_sizes() -> tuple[int, int, int]:
    """This machine's level 1 data, level 2 and last-level cache sizes (Linux sysfs), the
    defaults of :data:`hwmodels.predictor.DEFAULT_CACHES` where they cannot be read."""
    from hwmodels.predictor import DEFAULT_CACHES

    found: dict[int, int] = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            match = re.fullmatch(r"(\d+)([KMG]?)", (index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if match and kind != "Instruction":
            size = int(match[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match[2]]
            found[level] = max(found.get(level, 0), size)
    levels = [found[k] for k in sorted(found)]
    if not levels:
        return DEFAULT_CACHES
    l1 = levels[0]
    l2 = levels[1] if len(levels) > 1 else max(l1, DEFAULT_CACHES[1])
    return l1, l2, max(levels[-1], l2)


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


