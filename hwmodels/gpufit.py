"""The GPU op-time model fitted on published measurements of GPUs, and its cost model.

The model's features come from specs (:mod:`hwmodels.gpumodel`); its coefficients and
trees are fitted here on kernel latencies that NeuSight (Lee et al., ASPLOS'25) measured
on its **training GPUs** only (:data:`hwmodels.published.TRAINING_GPUS`): a GPU it is
asked about is priced from its datasheet, and the error on GPUs it never saw (NeuSight's
held-out ones, DeepBench's) is what ``benchmarks/gpu_published.py`` reports. The fitted
model ships as ``hwmodels/catalog/gpu_predictor.toml`` (LightGBM's own text, no pickle),
written by :func:`write_gpu_predictor` and read by the ``gpu`` cost model, which prices
ops on a device with a gpu table by it and every other op by the roofline.

>>> sorted(load_gpu_predictor().models)
['class:reduction', 'gemm', 'layernorm', 'memory', 'softmax']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from hwmodels.cost import Placement, RooflineCost
from hwmodels.gpumodel import GPU_BASE_FEATURES, MIN_FIT_SECONDS, GpuFeatures
from hwmodels.predictor import (
    ALONE,
    KindModel,
    OpSample,
    OpTimePredictor,
    Quality,
    _linear,
    fit_base,
    fit_kind,
    predict_samples,
)
from hwmodels.schema import PredictorKind
from hwmodels.spec import Cluster, Device
from workloads.errors import HardwareSpecError
from workloads.graph import Graph
from workloads.op import Op
from workloads.params import Param
from workloads.schema import Schema

__all__ = ["GPU_PREDICTOR_FILE", "GpuCost", "Measured", "cross_validate", "fit_gpu_predictor",
           "gpu_samples", "in_graph", "load_gpu_predictor", "quality_by_key", "write_gpu_predictor"]

GPU_PREDICTOR_FILE = Path(__file__).parent / "catalog" / "gpu_predictor.toml"
MODEL_FORMAT = "lightgbm-text/zlib/base64"


@dataclass(frozen=True)
class Measured:
    """One op measured on one GPU: the op, the GPU's spec, the seconds, where from."""

    op: Op
    device: Device
    seconds: float
    source: str = ""


def gpu_samples(measured: Sequence[Measured], features: GpuFeatures | None = None
                ) -> list[OpSample]:
    """The predictor samples of measured ops: GPU features of each on its own device and
    its roofline there (samples of several GPUs fit one model)."""
    f = features or GpuFeatures()
    return [OpSample(f.key(m.op), m.op.op_class, m.op.dtype, float(m.op.flops),
                     float(m.op.bytes_read + m.op.bytes_written),
                     f.features(m.op, m.device, ALONE), m.seconds, m.device.name, m.op.name,
                     f.base(m.op, m.device, ALONE), f.roof(m.op, m.device))
            for m in measured]


#: Power references tried (W per SM and GHz): the one whose dense base fits best is kept.
POWER_REFERENCES = tuple(float(x) for x in np.geomspace(0.5, 8.0, 25).round(3))


def fit_power_reference(measured: Sequence[Measured]) -> float:
    """The :data:`hwmodels.gpumodel.POWER_REFERENCE` under which the base alone fits the
    dense ops of ``measured`` best (median relative error; the first of a tie)."""
    dense = [m for m in measured if m.op.op_class in ("matmul", "conv")]
    if not dense:
        return GpuFeatures().power_reference
    seconds = np.array([m.seconds for m in dense])
    best: tuple[float, float] | None = None
    for reference in POWER_REFERENCES:
        samples = gpu_samples(dense, GpuFeatures(reference))
        base = fit_base(samples)
        error = float(np.median(np.abs(_linear(np.array([s.base for s in samples]), base)
                                       / seconds - 1)))
        if best is None or error < best[0]:
            best = (error, reference)
    assert best is not None
    return best[1]


#: Bounds on the trees' correction tried per family (log factors): unbounded (as far as
#: the CPU's), a factor of 1.5, none (the base alone).
CORRECTIONS = (3.0, 0.4, 0.0)


def fit_gpu_predictor(measured: Sequence[Measured], *, seed: int = 0,
                      min_samples: int = 12, refuse: Sequence[str] = (),
                      power_reference: float | None = None,
                      choose: bool = True) -> OpTimePredictor:
    """One model per kernel family (and per op class) fitted on every measured op, with
    the power reference fitted too unless given, and each family's bound on the trees'
    correction chosen by leaving one GPU out (``choose``; :data:`CORRECTIONS`): across
    GPUs the trees may carry or not. A measurement on a device named in ``refuse`` (the
    held-out GPUs) is an error, so no held-out GPU's measurement can reach a fit.

    >>> fit_gpu_predictor([], refuse=("l4",)).models
    {}
    """
    for m in measured:
        if m.device.model in refuse or m.device.name in refuse:
            raise HardwareSpecError(f"GPU model: measurement {m.op.name!r} is of "
                                    f"{m.device.name!r}, a held-out GPU; expected only "
                                    f"training GPUs")
    # Convolutions are priced as their implicit GEMMs by the products' model: NeuSight's
    # are one geometry (3x3, stride 1, padding 1), too narrow to fit a family on.
    measured = [m for m in measured if m.seconds >= MIN_FIT_SECONDS
                and m.op.op_class != "conv"]
    features = GpuFeatures(power_reference if power_reference is not None
                           else fit_power_reference(measured))
    samples = gpu_samples(measured, features)
    groups: dict[str, list[OpSample]] = {}
    classes: dict[str, list[OpSample]] = {}
    for s in samples:
        groups.setdefault(s.key, []).append(s)
        classes.setdefault(f"class:{s.op_class}", []).append(s)
    # a class's model prices the backward ops of its families: worth one where the class
    # spans several (layer norms and softmaxes), the family's own elsewhere
    groups |= {key: mine for key, mine in classes.items()
               if len({s.key for s in mine}) > 1}
    models = {key: fit_kind(key, mine, None, seed=seed)  # type: ignore[arg-type]
              for key, mine in sorted(groups.items()) if len(mine) >= min_samples}
    if choose and len({m.device.name for m in measured}) > 2:
        bounds = choose_corrections(measured, features, seed=seed)
        models = {k: replace(m, max_correction=bounds.get(k, m.max_correction))
                  for k, m in models.items()}
    return OpTimePredictor(models, featurizer=features)


def choose_corrections(measured: Sequence[Measured], features: GpuFeatures, *,
                       seed: int = 0) -> dict[str, float]:
    """Per model key, the bound of :data:`CORRECTIONS` chosen on GPUs left out of the fit,
    one at a time, by the one-standard-error rule (Breiman et al., CART): the smallest bound
    whose error (the mean over left-out GPUs of the median |error|) is within one standard
    error of the best — with five GPUs, trees must carry clearly to be kept."""
    devices = sorted({m.device.name for m in measured})
    scores: dict[str, dict[float, list[float]]] = {}
    for gpu in devices:
        fitted = fit_gpu_predictor([m for m in measured if m.device.name != gpu], seed=seed,
                                   power_reference=features.power_reference, choose=False)
        left = gpu_samples([m for m in measured if m.device.name == gpu], features)
        for key, model in fitted.models.items():
            mine = [s for s in left if s.key == key or f"class:{s.op_class}" == key]
            if not mine:
                continue
            seconds = np.array([s.seconds for s in mine])
            for bound in CORRECTIONS:
                predicted = predict_samples(replace(model, max_correction=bound), mine, None)
                scores.setdefault(key, {}).setdefault(bound, []).append(
                    float(np.median(np.abs(predicted / seconds - 1))))
    return {key: _one_standard_error(by) for key, by in scores.items()}


def _one_standard_error(scores: Mapping[float, Sequence[float]]) -> float:
    """The smallest bound whose mean score is within one standard error of the best's."""
    best = min(scores, key=lambda b: float(np.mean(scores[b])))
    folds = np.asarray(scores[best])
    limit = folds.mean() + (folds.std(ddof=1) / np.sqrt(len(folds)) if len(folds) > 1 else 0)
    return min(b for b in scores if float(np.mean(scores[b])) <= limit)


def quality_by_key(predictor: OpTimePredictor, measured: Sequence[Measured]
                   ) -> dict[str, Quality]:
    """Median, p90 and worst relative error per kernel family of ``predictor`` on
    ``measured`` (data it did not see, for the figure to mean anything)."""
    groups: dict[str, list[OpSample]] = {}
    features = predictor.featurizer if isinstance(predictor.featurizer, GpuFeatures) else None
    for s in gpu_samples(measured, features):
        groups.setdefault(s.key, []).append(s)
    out = {}
    for key, mine in sorted(groups.items()):
        model = predictor.models.get(key) or predictor.models.get(f"class:{mine[0].op_class}")
        if model is not None:
            out[key] = Quality.of(predict_samples(model, mine, None),
                                  np.array([s.seconds for s in mine]))
    return out


def cross_validate(measured: Sequence[Measured], *, seed: int = 0
                   ) -> dict[str, dict[str, Quality]]:
    """Leave one GPU out: per training GPU, the error per family of a model fitted on the
    others — how the model carries to a GPU it never saw, measured without the held-out
    GPUs (choices of features are made on this, never on those)."""
    devices = sorted({m.device.name for m in measured})
    out = {}
    for gpu in devices:
        fitted = fit_gpu_predictor([m for m in measured if m.device.name != gpu], seed=seed)
        out[gpu] = quality_by_key(fitted, [m for m in measured if m.device.name == gpu])
    return out


#: NeuSight's vector ops as the zoo's op kinds: a binary op (two tensors), one with a
#: Python scalar (``...u``), or one input.
_BINARY = {"add": "add", "mul": "mul", "div": "div", "pow": "mul", "sub": "sub"}
_UNARY = {"relu": 1, "tanh": 4, "gelu": 8, "dropout": 2}


def kernel_op(k: Any) -> Op:
    """The op a published kernel measurement ran (a
    :class:`hwmodels.published.KernelMeasurement`), built by the zoo's own builder so its
    FLOPs and bytes are counted as a zoo graph's are.

    >>> from hwmodels.published import neusight_kernels
    >>> op = kernel_op(next(k for k in neusight_kernels() if k.op == "bmm"))
    >>> op.kind, len(op.output.shape)
    ('matmul', 3)
    """
    from workloads.builder import GraphBuilder

    g = GraphBuilder(f"{k.op}")
    if k.family in ("bmm", "linear"):
        x = g.input((k.b, k.m, k.n), "x")
        out = (g.matmul(x, g.input((k.b, k.n, k.k), "w"), name="op") if k.family == "bmm"
               else g.linear(x, k.k, name="op"))
    elif k.family == "conv":
        x = g.input((k.b, k.in_channels, k.image_size, k.image_size), "x")
        out = g.conv2d(x, k.out_channels, k.kernel_size, stride=k.stride,
                       padding=k.padding, name="op")
    else:
        out = _vector_op(g, k)
    return g.build().op(out)


def _vector_op(g: Any, k: Any) -> str:
    x = g.input((k.b, k.h), "x")
    if k.family == "layernorm":
        return str(g.layernorm(x, name="op"))
    if k.family == "softmax":
        return str(g.softmax(x, name="op"))
    base = k.op.removesuffix("u") if k.op.endswith("u") and k.op[:-1] in _BINARY else k.op
    if k.op in _BINARY:
        return str(g.add_op(_BINARY[k.op], "elementwise", (x, g.input((k.b, k.h), "y")),
                            (k.b, k.h), name="op", flops=k.b * k.h))
    if base in _BINARY:
        return str(g.unary(_BINARY[base], x, name="op"))
    return str(g.unary(k.op, x, flops_per_element=_UNARY.get(k.op, 1), name="op"))


def measured_kernels(rows: Sequence[Any]) -> list[Measured]:
    """Published kernel measurements as measured ops on their catalog devices."""
    from hwmodels.registry import get_device

    return [Measured(kernel_op(k), get_device(k.device), k.latency_s,
                     f"{k.gpu}/{k.dataset}") for k in rows]


class _GpuKind(PredictorKind):
    base: Annotated[list[Annotated[float, Field(ge=0)]],
                    Field(min_length=len(GPU_BASE_FEATURES),
                          max_length=len(GPU_BASE_FEATURES))]
    max_log_correction: Annotated[float, Field(ge=0, le=10)]


class _GpuPredictorDocument(Schema):
    provenance: dict[str, Any]
    kind: Annotated[list[_GpuKind], Field(min_length=1)]


def write_gpu_predictor(predictor: OpTimePredictor, path: str | Path,
                        provenance: Mapping[str, Any]) -> Path:
    """Write ``predictor`` (fitted by :func:`fit_gpu_predictor`) to ``path`` atomically,
    with where its data came from."""
    import tomli_w

    from workloads.io import write_text_atomic

    rows = [{"key": m.key, "base": list(m.base), "samples": m.trained_on,
             "max_log_correction": m.max_correction, "format": MODEL_FORMAT,
             "model": m.packed()}
            for _, m in sorted(predictor.models.items())]
    text = tomli_w.dumps({"provenance": dict(provenance), "kind": rows})
    return write_text_atomic(Path(path), text)


def _document(path: Path) -> _GpuPredictorDocument:
    from workloads.io import read_text
    from workloads.schema import load_toml, validate

    data = load_toml(read_text(path, HardwareSpecError, "GPU model file"), source=str(path),
                     error=HardwareSpecError)
    return validate(_GpuPredictorDocument, data, source=str(path), error=HardwareSpecError)


@cache
def load_gpu_predictor(path: str | Path = GPU_PREDICTOR_FILE) -> OpTimePredictor:
    """The fitted GPU model in ``path`` (the catalog's by default)."""
    doc = _document(Path(path))
    models = {}
    for i, k in enumerate(doc.kind):
        text = KindModel.unpack(k.model, f"{path}: kind[{i}].model")
        models[k.key] = KindModel(k.key, tuple(k.base), text, k.samples,
                                  max_correction=k.max_log_correction)
    reference = doc.provenance.get("power_reference", GpuFeatures().power_reference)
    if not isinstance(reference, int | float) or not 0 < reference < math.inf:
        raise HardwareSpecError(f"{path}: provenance.power_reference must be a finite "
                                f"number > 0, got {reference!r}")
    return OpTimePredictor(models, featurizer=GpuFeatures(float(reference)))


def in_graph(predictor: OpTimePredictor) -> OpTimePredictor:
    """``predictor`` pricing kernels as a graph runs them: each pays the spec's launch
    overhead, not the fixed cost fitted on kernels timed one at a time (which is mostly
    the host's launch and the timer's, and which a kernel queued behind others hides)."""
    models = {k: replace(m, base=(1.0, *m.base[1:])) for k, m in predictor.models.items()}
    return OpTimePredictor(models, predictor.caches, predictor.roof, predictor.featurizer)


def provenance_of(path: str | Path = GPU_PREDICTOR_FILE) -> dict[str, Any]:
    """What the fitted GPU model in ``path`` was fitted on."""
    return dict(_document(Path(path)).provenance)


class GpuCost(RooflineCost):
    """Op times of a device with a gpu table from the GPU model fitted on published
    measurements (:func:`load_gpu_predictor`), as a graph runs its kernels
    (:func:`in_graph`; ``alone`` prices a kernel timed by itself, as the measurements
    were); of any other device, the roofline.

    >>> from hwmodels.registry import get_cluster
    >>> from hwmodels.gpumodel import _gemm_op
    >>> cost = GpuCost(get_cluster("dgx-a100"))
    >>> device = cost.cluster.device_names[0]
    >>> cost.op_time(_gemm_op(1, 4096, 4096, 4096), device) > 2 * 4096**3 / 19.5e12
    True
    """

    params = (Param("file", "str", None, optional=True,
                    doc="a fitted GPU model (None: the one shipped with placelab)"),)

    def __init__(self, cluster: Cluster, file: str | Path | None = None) -> None:
        super().__init__(cluster)
        self.file: str | None = None if file is None else str(file)
        self.alone = load_gpu_predictor(Path(file) if file else GPU_PREDICTOR_FILE)
        self.predictor = in_graph(self.alone)

    @classmethod
    def create(cls, cluster: Cluster, file: str | Path | None = None) -> GpuCost:
        return cls(cluster, file)

    def op_time(self, op: Op, device: str) -> float:
        spec = self.spec(device)
        if spec.gpu is None or (not op.flops and not op.bytes_read + op.bytes_written):
            return super().op_time(op, device)
        seconds = self.predictor.time(op, spec)
        if not math.isfinite(seconds):
            raise HardwareSpecError(f"GPU model: op {op.name!r} on {device!r} priced at "
                                    f"{seconds}, expected a finite time")
        return seconds

    def op_times(self, graph: Graph, placement: Placement) -> list[float]:
        """:meth:`op_time` of every op, one model call per device and family."""
        names = self.cluster.device_names
        ops = [graph.op(n) for n in graph.arrays.names]
        where = ([names[d] for d in placement.tolist()] if isinstance(placement, np.ndarray)
                 else [placement[op.name] for op in ops])
        times = np.array(super().op_times(graph, placement))
        by_device: dict[str, list[int]] = {}
        for i, (op, device) in enumerate(zip(ops, where, strict=True)):
            if self.spec(device).gpu is not None and (op.flops or op.bytes_read
                                                      + op.bytes_written):
                by_device.setdefault(device, []).append(i)
        for device, index in by_device.items():
            times[index] = self.predictor.times([ops[i] for i in index], self.spec(device))
        if not np.isfinite(times).all():
            raise HardwareSpecError("GPU model: an op was priced at a non-finite time")
        return times.tolist()

    def sources(self, graph: Graph, placement: Placement) -> list[str]:
        names = self.cluster.device_names
        ops = [graph.op(n) for n in graph.arrays.names]
        where = ([names[d] for d in placement.tolist()] if isinstance(placement, np.ndarray)
                 else [placement[op.name] for op in ops])
        return ["gpu-model" if self.spec(d).gpu is not None else "roofline" for d in where]
