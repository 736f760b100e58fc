"""How far to trust the GPU model on one device: its predictions against what was
published for that GPU, or, for a GPU nobody measured, the error on the held-out GPU of
the nearest architecture, as the stated uncertainty of its predictions.

>>> nearest_heldout(get_device("h200-sxm-141gb"))
'h100-sxm5-80gb'
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hwmodels.gpufit import GpuCost, Measured, measured_kernels
from hwmodels.gpumodel import ARCH_ORDER
from hwmodels.published import HELDOUT_GPUS, TRAINING_GPUS, neusight_kernels, neusight_models
from hwmodels.registry import get_device
from hwmodels.spec import Cluster, Device

__all__ = ["FamilyError", "LabelError", "check_device", "nearest_heldout", "uncertainty"]

#: NeuSight's model names -> the zoo's (its "gpt3_xl" is wider than the paper's).
ZOO_NAMES = {"bert_large": "bert_large", "gpt2_large": "gpt2_large",
             "gpt3_xl": "gpt3_xl_neusight", "gpt3_27": "gpt3_2.7b", "opt_13": "opt_1.3b"}
#: NeuSight's held-out GPUs by architecture (the A100-SXM4-40GB has labels, no kernels).
_HELDOUT_KERNELS = ("h100-sxm5-80gb", "l4", "a100-pcie-80gb")


@dataclass(frozen=True)
class FamilyError:
    """|relative error| of one kernel family's predictions on one GPU: the roofline's
    (the catalog's efficiencies) and the GPU model's, median and 90th percentile."""

    family: str
    samples: int
    roofline_median: float
    roofline_p90: float
    model_median: float
    model_p90: float


@dataclass(frozen=True)
class LabelError:
    """One published end-to-end time against the zoo graph priced by the GPU model."""

    model: str
    mode: str
    batch: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1


def _one(device: Device) -> Cluster:
    return Cluster(f"one-{device.name}", (device.instance("gpu0"),))


def family_errors(measured: Sequence[tuple[str, Measured]]) -> list[FamilyError]:
    """Per family, the errors of the roofline and of the GPU model on ``measured``
    (``(family, measurement)`` pairs, all of one device)."""
    from hwmodels.cost import RooflineCost

    groups: dict[str, list[Measured]] = defaultdict(list)
    for family, m in measured:
        groups[family].append(m)
    out = []
    for family, ms in sorted(groups.items()):
        cluster = _one(ms[0].device)
        seconds = np.array([m.seconds for m in ms])
        roof = np.array([RooflineCost(cluster).op_time(m.op, "gpu0") for m in ms])
        model = GpuCost(cluster).alone.times([m.op for m in ms], ms[0].device)
        r, g = np.abs(roof / seconds - 1), np.abs(model / seconds - 1)
        out.append(FamilyError(family, len(ms), float(np.median(r)), float(np.quantile(r, .9)),
                               float(np.median(g)), float(np.quantile(g, .9))))
    return out


def kernel_errors(device: str) -> list[FamilyError]:
    """The kernel families NeuSight measured on ``device`` (a catalog name), checked."""
    rows = [k for k in neusight_kernels() if k.device == device]
    return family_errors(list(zip([k.family for k in rows], measured_kernels(rows),
                                  strict=True)))


def label_errors(device: str) -> list[LabelError]:
    """NeuSight's one-GPU end-to-end labels of ``device`` against the zoo's graphs priced
    by the GPU model (a training label without the optimizer's update ops)."""
    from workloads import build_model
    from workloads.training import training_graph

    spec = get_device(device)
    cost = GpuCost(_one(spec))
    out = []
    for m in neusight_models():
        if m.device != device or m.parallel != "none" or m.compiled or m.model not in ZOO_NAMES:
            continue
        forward = build_model(ZOO_NAMES[m.model], batch=m.batch, seq_len=m.seqlen)
        graph = forward if m.mode == "inf" else training_graph(forward, "sgd")
        times = cost.op_times(graph, dict.fromkeys(graph.names, "gpu0"))
        seconds = sum(t for name, t in zip(graph.arrays.names, times, strict=True)
                      if not graph.op(name).kind.endswith("_update"))
        out.append(LabelError(m.model, m.mode, m.batch, m.e2e_s, seconds))
    return out


def nearest_heldout(device: Device) -> str | None:
    """The held-out GPU (NeuSight's, with kernels measured) whose architecture is nearest
    ``device``'s (the same where one is; the newer of two as near); None for a device
    without a gpu table, which the GPU model does not price."""
    if device.gpu is None:
        return None
    rank = ARCH_ORDER[device.gpu.architecture]
    return min(_HELDOUT_KERNELS, key=lambda name: (
        abs(ARCH_ORDER[_arch(name)] - rank), -ARCH_ORDER[_arch(name)]))


def _arch(name: str) -> str:
    gpu = get_device(name).gpu
    assert gpu is not None
    return gpu.architecture


@dataclass(frozen=True)
class Uncertainty:
    """The error a prediction on a device carries: measured on ``basis`` (the device
    itself where it was measured, else the nearest held-out GPU), median and p90 over its
    kernels, and whether the GPU model was fitted on the device."""

    basis: str
    median: float
    p90: float
    fitted_on_it: bool


def uncertainty(device: Device) -> Uncertainty | None:
    """:class:`Uncertainty` of the GPU model's kernel times on ``device``; None for a device
    the GPU model does not price (no gpu table).

    >>> u = uncertainty(get_device("h200-sxm-141gb"))
    >>> u.basis, 0 < u.median < u.p90
    ('h100-sxm5-80gb', True)
    """
    if device.gpu is None:
        return None
    measured = device.model in TRAINING_GPUS + HELDOUT_GPUS and any(
        k.device == device.model for k in neusight_kernels())
    basis = device.model if measured else nearest_heldout(device)
    assert basis is not None
    rows = [k for k in neusight_kernels() if k.device == basis]
    ms = measured_kernels(rows)
    predicted = GpuCost(_one(ms[0].device)).alone.times([m.op for m in ms], ms[0].device)
    errors = np.abs(predicted / np.array([m.seconds for m in ms]) - 1)
    return Uncertainty(basis, float(np.median(errors)), float(np.quantile(errors, 0.9)),
                       device.model in TRAINING_GPUS)


def check_device(device: Device) -> dict[str, object]:
    """What ``placelab hw check`` reports: the published kernels and end-to-end labels of
    ``device`` against the roofline and the GPU model where data exists; else the stated
    uncertainty from the nearest held-out GPU."""
    name = device.model
    kernels = kernel_errors(name) if any(k.device == name for k in neusight_kernels()) else []
    labels = label_errors(name)
    return {"device": device.name, "model": name,
            "role": ("training" if name in TRAINING_GPUS else
                     "held out" if name in HELDOUT_GPUS else "not measured"),
            "kernels": kernels, "labels": labels, "uncertainty": uncertainty(device)}
