"""A :class:`runtime.calibrate.Calibration` as a hardware TOML, and as the report the command
line prints.

The file is an ordinary hardware file (``placelab hw register`` takes it): the calibrated
device (the roofline fit: peak, bandwidth, launch overhead, efficiencies per op class) and
the engine's cluster of it (links and host slowdown as measured); ``[calibration]`` holds
the provenance (machine, date, engine, devices, threads, library versions, fit quality, the
held-out error per kind); ``[[predictor]]`` the fitted op-time models (LightGBM's text,
compressed) with the roofline their utilisations are fractions of; ``[[measured_shape]]``
the times measured per op signature inside whole models; ``[run]`` the executor's delay
before a run's first op and a reference graph's time.
"""

from __future__ import annotations

import datetime
import math
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.errors import CalibrationError

if TYPE_CHECKING:
    from hwmodels.predictor import KindModel, Quality
    from runtime.calibrate import Calibration

__all__ = ["calibration_document", "report", "write_calibration"]

#: The format of a stored model: LightGBM's model text, zlib-compressed, base64.
MODEL_FORMAT = "lightgbm-text/zlib/base64"


def _quality(q: Quality | None) -> dict[str, Any]:
    if q is None or not q.samples:
        return {}
    return {"heldout_median": round(q.median, 4), "heldout_p90": round(q.p90, 4),
            "heldout_worst": round(q.worst, 4), "heldout_samples": q.samples}


def _kind_row(m: KindModel) -> dict[str, Any]:
    return {"key": m.key, "base": list(m.base), "samples": m.trained_on,
            **_quality(m.heldout), "format": MODEL_FORMAT, "model": m.packed()}


def _provenance(cal: Calibration) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        placelab = version("placelab")
    except PackageNotFoundError:
        placelab = "unknown"
    fit = cal.fit
    return {
        "machine": platform.node() or "unknown", "processor": platform.processor()
        or platform.machine(), "date": datetime.datetime.now(datetime.UTC).isoformat(
            timespec="seconds"), "engine": cal.engine, "devices": len(cal.devices),
        "threads_per_device": cal.threads, "samples": cal.samples,
        "fingerprint": cal.fingerprint, "placelab": placelab,
        "fit": {c: {k: round(v, 4) for k, v in q.items()} for c, q in fit.quality.items()},
        **({"link_fit": {k: round(v, 4) for k, v in cal.link.quality.items()}}
           if cal.link else {}),
        "not_fitted_within_10pct": fit.poorly_fitted,
        "dispatch_us": round(cal.dispatch_s * 1e6, 3),
        **({"heldout_overall": {"median": round(cal.overall.median, 4),
                                "p90": round(cal.overall.p90, 4),
                                "worst": round(cal.overall.worst, 4),
                                "samples": cal.overall.samples}} if cal.overall else {}),
        "heldout": {k: {"median": round(q.median, 4), "p90": round(q.p90, 4),
                        "worst": round(q.worst, 4), "samples": q.samples}
                    for k, q in sorted(cal.heldout.items())},
        "adaptive_p90": {k: [round(v, 4) for v in values]
                         for k, values in sorted(cal.adaptive.items())},
    }


def _device_and_cluster(cal: Calibration) -> tuple[dict[str, Any], dict[str, Any]]:
    from hwmodels.spec import Cluster, Device, Link
    from hwmodels.toml_io import cluster_table, device_table

    fit = cal.fit
    peak = {"fp32": fit.peak_flops}
    if fit.fp64_ratio:
        peak["fp64"] = fit.peak_flops * fit.fp64_ratio
    spec = Device(cal.model, "cpu", peak, cal.memory_bytes, fit.bandwidth,
                  launch_overhead_s=fit.launch_s,
                  efficiency={c: tuple(t) for c, t in fit.efficiency.items()},
                  description=f"calibrated on {platform.node() or 'this machine'}: "
                              f"{cal.threads} threads per device ({cal.engine} engine)")
    devices = cal.devices
    slots = tuple(spec.instance(d) for d in devices)
    link = cal.link
    # the link's samples include the executor's idle time before the reader, which the
    # reader's own time already holds
    latency = max(link.latency_s - cal.dispatch_s, 0.0) if link else 0.0
    links = tuple(Link(a, b, link.bandwidth, latency) for i, a in enumerate(devices)
                  for b in devices[i + 1:]) if link else ()
    slowdown = cal.host_slowdown
    cluster = Cluster(f"{cal.engine}-{len(devices)}-calibrated", slots, links,
                      hosts=dict.fromkeys(devices, "localhost"),
                      host_slowdown={"localhost": slowdown} if slowdown > 1 else {})
    return device_table(spec), cluster_table(cluster)


def calibration_document(cal: Calibration) -> dict[str, Any]:
    """The TOML document of ``cal`` (every number finite)."""
    device, cluster = _device_and_cluster(cal)
    p = cal.predictor
    roof = p.roof
    predictor: dict[str, Any] = {"model": cal.model, "caches_kib": [c / 2**10 for c in p.caches],
                 "kind": [_kind_row(m) for _, m in sorted(p.models.items())]}
    if roof is not None:
        predictor |= {"peak_tflops": {k: v / 1e12 for k, v in roof.peak.items()},
                      "memory_bandwidth_gbps": roof.memory_bandwidth / 1e9}
    data: dict[str, Any] = {"calibration": _provenance(cal), "device": [device],
                            "cluster": [cluster], "predictor": [predictor],
                            "run": {"start_us": cal.start_s * 1e6,
                                    "reference_ms": cal.reference_s * 1e3}}
    if cal.shapes:
        data["measured_shape"] = [{
            "model": cal.model, "kind": kind, "signature": signature,
            "batches": list(times), "us": [t * 1e6 for t in times.values()]}
            for (kind, signature), times in cal.shapes.items()]
    return _finite(data)


def write_calibration(cal: Calibration, path: str | Path) -> Path:
    """Write ``cal``'s document to ``path`` atomically; return the path."""
    import tomli_w

    from workloads.io import write_text_atomic

    return write_text_atomic(path, tomli_w.dumps(calibration_document(cal)))


def report(cal: Calibration) -> dict[str, Any]:
    """What ``placelab calibrate`` prints: the roofline, the link, the held-out error per
    kind (on samples the fit never saw), and what else was measured."""
    fit, link = cal.fit, cal.link
    heldout = {k: {"median": q.median, "p90": q.p90, "worst": q.worst, "samples": q.samples}
               for k, q in sorted(cal.heldout.items())}
    return {
        "samples": cal.samples, "launch_overhead_us": fit.launch_s * 1e6,
        "dispatch_us": cal.dispatch_s * 1e6, "peak_gflops": fit.peak_flops / 1e9,
        "memory_bandwidth_gbps": fit.bandwidth / 1e9, "fit": fit.quality,
        "not_fitted_within_10pct": fit.poorly_fitted, "heldout": heldout,
        "heldout_overall": None if cal.overall is None else {
            "median": cal.overall.median, "p90": cal.overall.p90, "worst": cal.overall.worst,
            "samples": cal.overall.samples}, "kinds_fitted": len(cal.predictor.models),
        "signatures": len(cal.shapes), "run_start_us": cal.start_s * 1e6,
        "reference_ms": cal.reference_s * 1e3, "side_by_side": cal.side_by_side,
        "host_slowdown": cal.host_slowdown, "stages": cal.stages,
        "link": None if link is None else {"bandwidth_gbps": link.bandwidth / 1e9,
                                           "latency_us": link.latency_s * 1e6,
                                           "fit": link.quality}}


def _finite(value: Any) -> Any:
    """``value`` with every float checked finite (a calibration never writes NaN)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise CalibrationError(f"calibration: a fitted value is not finite: {value}")
    return value
