"""Op-time predictors that generalise beyond the shapes they were fitted on.

Per op kind, two parts (as nn-Meter's kernel predictors and NeuSight's utilisation bound
suggest): a **base**, a non-negative linear model of the op's time over what it does —
a fixed cost, FLOPs, bytes read and written, bytes beyond the last-level cache, bytes a
windowed kernel gathers, the batched products it runs, weights read from memory — fitted
on relative error with a robust loss, which extrapolates linearly past the sizes it saw;
and a **correction**, gradient-boosted trees (LightGBM) over shape features that predict
the log of measured over base time, which capture what a kernel does at particular shapes
(channel counts off the vector width, odd windows, cache cliffs). The prediction is bounded
by the roofline: the *utilisation* ``roofline / time`` is never above 1, with ``roofline =
max(FLOPs / peak, bytes / bandwidth)`` from the device's spec (or the fastest rates a
calibration measured), so no op is ever predicted faster than physics allows; and a tree,
which extrapolates as a constant, extrapolates a factor on the base, not a time.

LightGBM was chosen over scikit-learn's ``HistGradientBoostingRegressor`` because a fitted
LightGBM model is text through its public API (``Booster.model_to_string`` and
``Booster(model_str=...)``): a calibration file holds the fitted model itself, with no
pickle, and reads back to the same predictions on any machine.

The tree features are what kernels care about (:data:`FEATURES`): FLOPs, bytes read and
written, weights, arithmetic intensity, the work per output element (a product's inner
dimension, a convolution's window), each output dimension, remainders of the innermost and
channel dimensions against vector widths, the kernel window, stride, padding and groups,
the elements a windowed kernel gathers, the weights read from memory rather than cache,
and the footprint against each cache level. They read the op alone (its outputs,
attributes and costs), so a cost model can price an op without its graph.

A kind with too few samples is priced by its op class's model (``class:<op_class>``,
fitted on every sample of that class), so an op kind calibration never ran still gets a
fitted time.

>>> import numpy as np
>>> from hwmodels.spec import Device
>>> from workloads.op import Op, Tensor
>>> cpu = Device("cpu", "cpu", {"fp32": 1e11}, 2**33, 2e10)
>>> ops = [Op(f"r{n}", "relu", "elementwise", outputs=(Tensor(f"r{n}", (n,)),), flops=n,
...           bytes_read=4 * n, bytes_written=4 * n) for n in (2**k for k in range(8, 24))]
>>> samples = [OpSample.of(op, 2e-6 + 8 * op.outputs[0].numel / 1e10) for op in ops]
>>> p = fit_predictor(samples, cpu, seed=0, min_samples=4)
>>> t = p.time(ops[9], cpu)
>>> bool(abs(t / (2e-6 + 8 * 2**17 / 1e10) - 1) < 0.2), bool(t >= 8 * 2**17 / 2e10)
(True, True)
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from hwmodels.spec import Device
from workloads.errors import HardwareSpecError
from workloads.op import Op, window_work

__all__ = ["ALONE", "BASE_FEATURES", "FEATURES", "Context", "CpuFeatures", "Featurizer",
           "KindModel", "OpSample", "OpTimePredictor", "Quality", "base_features", "fit_base",
           "fit_kind", "fit_predictor", "model_key", "op_features", "predict_samples",
           "roofline_seconds"]

#: Cache sizes (bytes) the footprint features are taken against where none are given:
#: 32 KiB, 1 MiB, 32 MiB.
DEFAULT_CACHES = (32 * 2**10, 2**20, 32 * 2**20)

FEATURES = (
    "log_flops", "log_read", "log_written", "log_weights", "log_intensity", "work_per_output",
    "rank", "outputs", "d0", "d1", "d2", "d3", "last_mod8", "last_mod16", "channel_mod8",
    "channel_mod16", "kernel_area", "stride", "padding", "groups", "log_gathered",
    "products", "log_cold", "footprint_l1", "footprint_l2", "footprint_llc", "held_l2",
    "held_llc")


@dataclass(frozen=True)
class Context:
    """Where an op runs: the weight bytes it reads from memory rather than cache
    (``cold_bytes``), and all the weights its device holds in the graph (``held_bytes``),
    which evict each other's from the caches between one use and the next."""

    cold_bytes: float = 0.0
    held_bytes: float = 0.0


ALONE = Context()

#: The trees' correction of the base is at most this factor either way (log).
MAX_LOG_CORRECTION = 3.0
#: The least roofline time an op has (one nanosecond): an op that moves nothing (a view)
#: still costs its dispatch, which its utilisation of this floor then expresses.
ROOF_FLOOR_S = 1e-9
#: LightGBM's settings (its native training API, which needs no scikit-learn): small trees,
#: many of them, slowly; deterministic and one thread (a calibration is fitted while
#: nothing else runs, and predictions must repeat).
LGBM_PARAMS: dict[str, Any] = {
    "objective": "huber", "alpha": 0.3, "learning_rate": 0.05, "num_leaves": 8,
    "min_data_in_leaf": 8, "lambda_l2": 1.0, "deterministic": True, "force_row_wise": True,
    "num_threads": 1, "verbose": -1}
#: Boosting rounds (trees).
LGBM_ROUNDS = 200


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -1.0


def _pair_value(value: Any) -> float:
    """The first of an int or a pair/sequence (a stride, a padding), 0 without one."""
    if value is None:
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    values = [v for v in value if isinstance(v, int | float)]
    return float(max(values)) if values else 0.0


def op_features(op: Op, context: Context = ALONE,
                caches: Sequence[int] = DEFAULT_CACHES) -> tuple[float, ...]:
    """``op``'s values of :data:`FEATURES` in ``context``, against the sizes of three cache
    levels (bytes).

    >>> from workloads.op import Tensor
    >>> relu = Op("r", "relu", "elementwise", outputs=(Tensor("r", (8, 24)),), flops=192,
    ...           bytes_read=768, bytes_written=768)
    >>> values = dict(zip(FEATURES, op_features(relu), strict=True))
    >>> values["d3"], values["last_mod16"]
    (24.0, 8.0)
    """
    shape = op.outputs[0].shape if op.outputs else ()
    numel = math.prod(shape) if op.outputs else 1
    dims = (0,) * (4 - min(len(shape), 4)) + tuple(shape[-4:])
    last = shape[-1] if shape else 1
    channel = shape[1] if len(shape) >= 3 else last
    moved = op.bytes_read + op.bytes_written
    kernel = op.attrs.get("kernel") or (0, 0)
    gathered, products = window_work(op)
    itemsize = op.outputs[0].nbytes / max(numel, 1) if op.outputs else 4.0
    held = context.held_bytes
    return (
        _log2(op.flops), _log2(op.bytes_read), _log2(op.bytes_written), _log2(op.param_bytes),
        _log2(op.flops / moved) if moved and op.flops else -1.0,
        op.flops / max(numel, 1), float(len(shape)), float(len(op.outputs)),
        *(float(d) for d in dims), float(last % 8), float(last % 16), float(channel % 8),
        float(channel % 16), float(kernel[0] * kernel[1]) if len(kernel) == 2 else 0.0,
        _pair_value(op.attrs.get("stride")), _pair_value(op.attrs.get("padding")),
        float(op.attrs.get("groups", 1)), _log2(gathered * itemsize), float(products),
        _log2(context.cold_bytes), *(_log2(moved / c) if moved else -30.0 for c in caches),
        *(_log2(held / c) if held else -30.0 for c in caches[1:]))


#: What the base model is linear in (seconds per unit of each).
BASE_FEATURES = ("launch", "flops", "read", "written", "beyond_llc", "gathered", "products",
                 "cold")


def base_features(op: Op, context: Context = ALONE,
                  caches: Sequence[int] = DEFAULT_CACHES) -> tuple[float, ...]:
    """``op``'s values of :data:`BASE_FEATURES` in ``context``.

    >>> from workloads.op import Tensor
    >>> relu = Op("r", "relu", "elementwise", outputs=(Tensor("r", (256,)),), flops=256,
    ...           bytes_read=1024, bytes_written=1024)
    >>> base_features(relu, caches=(64, 512, 1024))
    (1.0, 256.0, 1024.0, 1024.0, 1024.0, 0.0, 0.0, 0.0)
    """
    moved = op.bytes_read + op.bytes_written
    gathered, products = window_work(op)
    itemsize = op.outputs[0].nbytes / max(op.outputs[0].numel, 1) if op.outputs else 4.0
    return (1.0, float(op.flops), float(op.bytes_read), float(op.bytes_written),
            float(max(moved - caches[-1], 0)), float(gathered * itemsize), float(products),
            float(context.cold_bytes))


def roofline_seconds(flops: float, moved: float, dtype: str, spec: Device) -> float:
    """The larger of the compute and the memory roof on ``spec`` (at least
    :data:`ROOF_FLOOR_S`): the least time the op can take there, launch aside."""
    peak = spec.peak_flops(dtype) if flops else 1.0
    return max(flops / peak, moved / spec.memory_bandwidth, ROOF_FLOOR_S)


def model_key(op: Op) -> str:
    """What a per-kind model is keyed by (:func:`hwmodels.cost.kind_key`)."""
    from hwmodels.cost import kind_key

    return kind_key(op)


@dataclass(frozen=True)
class OpSample:
    """An op's measured time with what a predictor reads of it."""

    key: str
    op_class: str
    dtype: str
    flops: float
    moved: float
    features: tuple[float, ...]
    seconds: float
    signature: str = ""
    name: str = ""
    #: The op's :func:`base_features`.
    base: tuple[float, ...] = ()
    #: The op's roofline seconds on the device it was measured on, where the sample
    #: carries it (samples of several devices); 0: the spec it is predicted for gives it.
    roof_s: float = 0.0

    @classmethod
    def of(cls, op: Op, seconds: float, *, context: Context = ALONE,
           caches: Sequence[int] = DEFAULT_CACHES, signature: str = "") -> OpSample:
        """The sample of ``op`` measured at ``seconds`` in ``context``."""
        return cls(model_key(op), op.op_class, op.dtype, float(op.flops),
                   float(op.bytes_read + op.bytes_written),
                   op_features(op, context, caches), float(seconds), signature, op.name,
                   base_features(op, context, caches))


@dataclass(frozen=True)
class Quality:
    """Relative error of a model's predictions on samples: median, 90th percentile, worst,
    and how many."""

    median: float
    p90: float
    worst: float
    samples: int

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> Quality:
        errors = np.abs(np.asarray(predicted) / np.asarray(measured) - 1)
        if not len(errors):
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(float(np.median(errors)), float(np.quantile(errors, 0.9)),
                   float(errors.max()), len(errors))


@dataclass(frozen=True)
class KindModel:
    """One kind's (or op class's) fitted model: the base's coefficients (seconds per unit
    of each of :data:`BASE_FEATURES`), the correction's LightGBM model as text, and its
    error on held-out samples it was not fitted to."""

    key: str
    base: tuple[float, ...]
    text: str = field(repr=False)
    trained_on: int
    heldout: Quality | None = None
    #: The most the trees may correct the base, as a log factor either way (0: the base
    #: alone, where cross-validation found the trees do not carry).
    max_correction: float = MAX_LOG_CORRECTION

    @cached_property
    def booster(self) -> Any:
        import lightgbm

        return lightgbm.Booster(model_str=self.text)

    def seconds(self, features: np.ndarray, base: np.ndarray, roof: np.ndarray
                ) -> np.ndarray:
        """Predicted seconds of ops with these tree features, base features and
        roofline times (rows): the base times the correction, never below the roof."""
        linear = _linear(base, self.base)
        if not self.max_correction:
            return np.maximum(linear, roof)
        bound = self.max_correction
        correction = np.clip(np.asarray(self.booster.predict(features, num_threads=1),
                                        dtype=float), -bound, bound)
        return np.maximum(linear * np.exp(correction), roof)

    def packed(self) -> str:
        """The model text, compressed (zlib) and base64-encoded, as a file stores it."""
        return base64.b64encode(zlib.compress(self.text.encode(), 9)).decode()

    @staticmethod
    def unpack(data: str, where: str) -> str:
        try:
            return zlib.decompress(base64.b64decode(data, validate=True)).decode()
        except (ValueError, zlib.error) as err:
            raise HardwareSpecError(f"{where}: expected a LightGBM model (zlib, base64), "
                                    f"got data that does not decode: {err}") from None


class Featurizer(Protocol):
    """What a predictor reads of an op on a device: the key of the model that prices it,
    the trees' features, the base's features and the roofline that bounds it. The CPU's
    (:class:`CpuFeatures`) reads the op alone, for a model fitted on one machine; a GPU's
    (:class:`hwmodels.gpumodel.GpuFeatures`) reads the device's spec too, for one model
    fitted across GPUs."""

    def key(self, op: Op) -> str: ...

    def features(self, op: Op, spec: Device, context: Context) -> tuple[float, ...]: ...

    def base(self, op: Op, spec: Device, context: Context) -> tuple[float, ...]: ...

    def roof(self, op: Op, spec: Device) -> float: ...


@dataclass(frozen=True)
class CpuFeatures:
    """:data:`FEATURES` and :data:`BASE_FEATURES` against three cache levels (bytes), and
    ``spec``'s roofline.

    >>> from workloads.op import Tensor
    >>> relu = Op("r", "relu", "elementwise", outputs=(Tensor("r", (256,)),), flops=256,
    ...           bytes_read=1024, bytes_written=1024)
    >>> CpuFeatures((64, 512, 1024)).base(relu, None, ALONE)[:4]
    (1.0, 256.0, 1024.0, 1024.0)
    """

    caches: tuple[int, ...] = DEFAULT_CACHES

    def key(self, op: Op) -> str:
        return model_key(op)

    def features(self, op: Op, spec: Any, context: Context) -> tuple[float, ...]:
        return op_features(op, context, self.caches)

    def base(self, op: Op, spec: Any, context: Context) -> tuple[float, ...]:
        return base_features(op, context, self.caches)

    def roof(self, op: Op, spec: Device) -> float:
        return roofline_seconds(op.flops, op.bytes_read + op.bytes_written, op.dtype, spec)


class OpTimePredictor:
    """Fitted models per kind key (and per op class, ``class:<op_class>``), what they read
    of an op (``featurizer``; by default :class:`CpuFeatures` against ``caches``), and the
    roofline their utilisations are fractions of: ``roof`` (a device spec whose peaks and
    bandwidth bound every op, e.g. the fastest rates calibration measured), or else the
    spec of the device asked about."""

    def __init__(self, models: Mapping[str, KindModel],
                 caches: Sequence[int] = DEFAULT_CACHES, roof: Device | None = None,
                 featurizer: Featurizer | None = None) -> None:
        self.models = dict(models)
        self.caches = tuple(int(c) for c in caches)
        self.roof = roof
        self.featurizer: Featurizer = featurizer or CpuFeatures(self.caches)

    def model_for(self, op: Op) -> KindModel | None:
        """The op's kind's model, else its class's, else None."""
        return (self.models.get(self.featurizer.key(op))
                or self.models.get(f"class:{op.op_class}"))

    def quality(self, samples: Sequence[OpSample], spec: Device | None = None) -> Quality:
        """The error of the predictions of ``samples`` (each by its kind's model, else its
        class's), e.g. on samples held out of the fit."""
        roof = self.roof or spec
        if roof is None and not all(s.roof_s for s in samples):
            raise HardwareSpecError("predictor: quality needs a spec or a roof, got neither")
        predicted, measured = [], []
        for s in samples:
            model = self.models.get(s.key) or self.models.get(f"class:{s.op_class}")
            if model is not None:
                predicted.append(predict_samples(model, [s], roof)[0])
                measured.append(s.seconds)
        return Quality.of(np.array(predicted), np.array(measured))

    def time(self, op: Op, spec: Device, context: Context = ALONE) -> float:
        """Predicted seconds of ``op`` on a device of ``spec`` in ``context``."""
        return float(self.times([op], spec, [context])[0])

    def times(self, ops: Sequence[Op], spec: Device,
              contexts: Sequence[Context] | None = None) -> np.ndarray:
        """:meth:`time` of each op (in its context), one model call per kind."""
        where = list(contexts) if contexts is not None else [ALONE] * len(ops)
        spec = self.roof or spec
        f = self.featurizer
        out = np.zeros(len(ops))
        groups: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            model = self.model_for(op)
            if model is None:
                raise HardwareSpecError(f"predictor: no model for op {op.name!r} (kind "
                                        f"{op.kind!r}, class {op.op_class!r})")
            groups.setdefault(model.key, []).append(i)
        for key, index in groups.items():
            x = np.array([f.features(ops[i], spec, where[i]) for i in index])
            base = np.array([f.base(ops[i], spec, where[i]) for i in index])
            roof = np.array([f.roof(ops[i], spec) for i in index])
            out[index] = self.models[key].seconds(x, base, roof)
        return out


def _need(spec: Device | None) -> Device:
    if spec is None:
        raise HardwareSpecError("predictor: a sample without its roofline needs a spec, "
                                "got none")
    return spec


def _linear(base: np.ndarray, coefficients: Sequence[float]) -> np.ndarray:
    """The base's seconds of rows of :data:`BASE_FEATURES` (never below the floor)."""
    return np.maximum(base @ np.asarray(coefficients), ROOF_FLOOR_S)


def fit_base(samples: Sequence[OpSample]) -> tuple[float, ...]:
    """Non-negative coefficients of :data:`BASE_FEATURES` fitted to the samples' times on
    relative error, with a robust loss (a hiccup of the machine moves it little), from a
    non-negative least-squares start. A feature that few samples have (fewer than five, or
    than a tenth of them) keeps a coefficient of 0: a handful cannot say what it costs,
    and a wild coefficient would multiply whatever an unseen op has of it."""
    from scipy.optimize import least_squares, nnls

    raw = np.array([s.base for s in samples])
    seconds = np.array([s.seconds for s in samples])
    seen = (raw > 0).sum(axis=0) >= max(5, len(samples) // 10)
    seen[0] = True  # the fixed cost
    x = raw[:, seen] / raw[:, seen].max(axis=0)  # columns of order 1: better conditioned
    start, _ = nnls(x / seconds[:, None], np.ones(len(samples)))
    result = least_squares(lambda c: (x @ c) / seconds - 1, np.maximum(start, 1e-12),
                           bounds=(0, np.inf), loss="soft_l1", f_scale=0.1)
    coefficients = np.zeros(raw.shape[1])
    coefficients[seen] = result.x / raw[:, seen].max(axis=0)
    return tuple(float(v) for v in coefficients)


def fit_kind(key: str, samples: Sequence[OpSample], spec: Device, *, seed: int = 0,
             heldout: Sequence[OpSample] = ()) -> KindModel:
    """Fit one key's model on ``samples`` (the base, then the trees on the log of measured
    over base time); its quality on ``heldout``, which it never saw."""
    import lightgbm

    base = fit_base(samples)
    linear = _linear(np.array([s.base for s in samples]), base)
    target = np.log(np.array([s.seconds for s in samples]) / linear)
    data = lightgbm.Dataset(np.array([s.features for s in samples]), target,
                            params={"verbose": -1})
    booster = lightgbm.train({**LGBM_PARAMS, "seed": seed}, data,
                             num_boost_round=LGBM_ROUNDS)
    model = KindModel(key, base, booster.model_to_string(), len(samples))
    if heldout:
        predicted = predict_samples(model, heldout, spec)
        model = KindModel(key, base, model.text, len(samples),
                          Quality.of(predicted, np.array([s.seconds for s in heldout])))
    return model


def predict_samples(model: KindModel, samples: Sequence[OpSample], spec: Device | None
                    ) -> np.ndarray:
    """``model``'s predicted seconds of each sample, with its own roofline where it carries
    one, else ``spec``'s."""
    roof = np.array([s.roof_s or roofline_seconds(s.flops, s.moved, s.dtype, _need(spec))
                     for s in samples])
    return model.seconds(np.array([s.features for s in samples]),
                         np.array([s.base for s in samples]), roof)


def fit_predictor(samples: Sequence[OpSample], spec: Device, *, seed: int = 0,
                  heldout: Sequence[OpSample] = (), min_samples: int = 12,
                  caches: Sequence[int] = DEFAULT_CACHES, roof: bool = False
                  ) -> OpTimePredictor:
    """A model per kind key with at least ``min_samples`` samples and per op class;
    each reports its error on the ``heldout`` samples of its key (class models: of their
    class), which it never saw. Utilisations are of ``spec``'s roofline; ``roof`` keeps
    ``spec`` as the predictor's roof for every device it is asked about."""
    models = {}
    by_key: dict[str, list[OpSample]] = {}
    by_class: dict[str, list[OpSample]] = {}
    for s in samples:
        if s.seconds > 0:
            by_key.setdefault(s.key, []).append(s)
            by_class.setdefault(f"class:{s.op_class}", []).append(s)
    for key, mine in sorted(by_key.items()):
        if len(mine) >= min_samples:
            models[key] = fit_kind(key, mine, spec, seed=seed,
                                   heldout=[h for h in heldout if h.key == key])
    for key, mine in sorted(by_class.items()):
        if len(mine) >= min_samples:
            cls = key.removeprefix("class:")
            models[key] = fit_kind(key, mine, spec, seed=seed,
                                   heldout=[h for h in heldout if h.op_class == cls])
    return OpTimePredictor(models, caches, spec if roof else None)
