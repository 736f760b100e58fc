"""Calibration as a library: measure an engine, fit its cost model, and say how far the fit
holds on ops it never saw.

:func:`calibrate` times random op configurations of every kind (:mod:`runtime.sampling`),
samples more near the configurations that cross-validation predicts worst (adaptive
sampling, as nn-Meter does), times the zoo's models whole (each op in context, kept per
op signature), the links between logical devices, how much two devices slow each other
while both compute, and a reference graph; then fits a predictor per op kind
(:mod:`hwmodels.predictor`) and reports its error on a random held-out sample drawn apart
from the training one and never fitted. The result is a :class:`Calibration`: the fits,
the held-out report, :meth:`Calibration.write` (an ordinary hardware TOML with its
provenance inside) and :meth:`Calibration.cost_model`.

>>> from runtime import NumpyEngine
>>> cal = calibrate(NumpyEngine(devices=1), budget=Budget.tiny())  # doctest: +SKIP
>>> cal.heldout["relu"].median < 0.5  # doctest: +SKIP
True
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from hwmodels.predictor import (
    OpSample,
    OpTimePredictor,
    Quality,
    fit_kind,
    fit_predictor,
    predict_samples,
)
from runtime.engine import Engine
from runtime.fitting import (
    Fit,
    LinkFit,
    cache_sizes,
    dispatch_seconds,
    fit_link,
    fit_samples,
    shape_table,
)
from runtime.microbench import Sample, ShapeSample, Timed, time_cases
from workloads.errors import CalibrationError

if TYPE_CHECKING:
    from hwmodels.calibrated import CalibratedCost
    from hwmodels.spec import Cluster, Device
    from runtime.sampling import Config

__all__ = ["Budget", "Calibration", "CalibrationError", "calibrate", "cross_validate"]

T = TypeVar("T")
#: ``progress(items, description)``: an iterable over ``items`` that may show a bar.
Progress = Callable[[Iterable[Any], str], Iterable[Any]]


def _quiet(items: Iterable[T], description: str) -> Iterable[T]:
    return items


@dataclass(frozen=True)
class Budget:
    """How much a calibration measures."""

    #: Random configurations per family fitted on, and held out (never fitted).
    cases: int
    heldout: int
    #: Adaptive rounds, each adding this share of ``cases`` near the worst predictions.
    rounds: int
    extra: float
    #: Each case runs at least ``repeats`` times and ``min_seconds`` in all.
    repeats: int
    min_seconds: float
    #: Zoo models timed whole (see :func:`runtime.microbench.calibration_graphs`).
    quick_zoo: bool
    #: A kind whose cross-validated 90th-percentile error exceeds this is sampled more.
    target: float = 0.10

    @classmethod
    def full(cls) -> Budget:
        return cls(cases=32, heldout=8, rounds=1, extra=0.25, repeats=5, min_seconds=0.05,
                   quick_zoo=False)

    @classmethod
    def quick(cls) -> Budget:
        return cls(cases=12, heldout=4, rounds=1, extra=0.25, repeats=3, min_seconds=0.03,
                   quick_zoo=True)

    @classmethod
    def tiny(cls) -> Budget:
        """For tests: a few cases, no adaptive round."""
        return cls(cases=3, heldout=2, rounds=0, extra=0.0, repeats=1, min_seconds=0.0,
                   quick_zoo=True)


@dataclass
class Calibration:
    """What :func:`calibrate` measured and fitted on one engine."""

    engine: str
    devices: tuple[str, ...]
    model: str
    memory_bytes: int
    threads: int
    fit: Fit
    predictor: OpTimePredictor
    link: LinkFit | None
    dispatch_s: float
    shapes: dict[tuple[str, str], dict[int, float]]
    start_s: float
    reference_s: float
    side_by_side: dict[str, float]
    host_slowdown: float
    samples: int
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: Per kind key (and ``class:<op_class>``): error on held-out samples it never fitted.
    heldout: dict[str, Quality] = field(default_factory=dict)
    #: Over every held-out sample, each priced by the model the cost model would use.
    overall: Quality | None = None
    #: Per kind key: error of each adaptive round's cross-validation, round by round.
    adaptive: dict[str, list[float]] = field(default_factory=dict)
    #: The op signatures the fit learned from (graphs meant to be unseen avoid them).
    signatures: frozenset[str] = frozenset()
    #: Seconds each stage of the calibration took.
    stages: dict[str, float] = field(default_factory=dict)

    def write(self, path: str | Path) -> Path:
        """Write the calibration as a hardware TOML (atomically); return its path."""
        from runtime.calfile import write_calibration

        return write_calibration(self, path)

    def document(self) -> dict[str, Any]:
        """The TOML document :meth:`write` writes."""
        from runtime.calfile import calibration_document

        return calibration_document(self)

    def cost_model(self, cluster: Cluster | None = None) -> CalibratedCost:
        """The ``calibrated`` cost model of this calibration, bound to ``cluster`` (the
        calibrated engine's own cluster by default)."""
        import tomli_w

        from hwmodels.calibrated import CalibratedCost
        from hwmodels.toml_io import loads

        text = tomli_w.dumps(self.document())
        target = cluster or next(iter(loads(text, source="calibration").clusters.values()))
        return CalibratedCost.from_text(target, text, source="calibration")

    def report(self) -> dict[str, Any]:
        """The figures ``placelab calibrate`` prints (JSON-ready)."""
        from runtime.calfile import report

        return report(self)


class _Stages:
    """Wall time per stage."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = now - self._last
        self._last = now


def _time(engine: Engine, configs: Sequence[Config], budget: Budget, progress: Progress,
          what: str, caches: Sequence[int]) -> tuple[list[Timed], list[float]]:
    return time_cases(engine, configs, repeats=budget.repeats,
                      min_seconds=budget.min_seconds, caches=caches,
                      progress=lambda items: progress(items, what))


def _roof(samples: Sequence[OpSample], fit: Fit, model: str) -> Device:
    """The fastest rates measured: the peak of the fastest product or convolution, the
    bandwidth of the fastest elementwise op (each at least the roofline fit's), so every
    utilisation is at most 1."""
    from hwmodels.spec import Device

    peak = max([s.flops / s.seconds for s in samples if s.op_class in ("matmul", "conv")
                and s.dtype == "fp32"] + [fit.peak_flops])
    bandwidth = max([s.moved / s.seconds for s in samples if s.op_class == "elementwise"]
                    + [fit.bandwidth])
    peaks = {"fp32": peak}
    if fit.fp64_ratio:
        peaks["fp64"] = peak * fit.fp64_ratio
    return Device(f"{model}-roof", "cpu", peaks, 2**30, bandwidth)


def cross_validate(samples: Sequence[OpSample], roof: Device, *, folds: int = 4,
                   seed: int = 0) -> np.ndarray:
    """Each sample's relative error when predicted by its key's model fitted on the other
    folds (samples of keys too small to split: NaN)."""
    errors = np.full(len(samples), np.nan)
    by_key: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        by_key.setdefault(s.key, []).append(i)
    rng = np.random.default_rng(seed)
    for key, index in by_key.items():
        if len(index) < 2 * folds:
            continue
        order = rng.permutation(index)
        for k in range(folds):
            test = order[k::folds]
            train = [samples[i] for i in order if i not in set(test)]
            model = fit_kind(key, train, roof, seed=seed)
            measured = np.array([samples[i].seconds for i in test])
            predicted = predict_samples(model, [samples[i] for i in test], roof)
            errors[test] = np.abs(predicted / measured - 1)
    return errors


def _adapt(timed: list[Timed], reference: float, roof: Device, extra: int,
           target: float, rng: np.random.Generator, seed: int
           ) -> tuple[list[Config], dict[str, float]]:
    """``extra`` configurations near the worst cross-validated samples of the kinds whose
    90th-percentile error exceeds ``target``, shared among them in proportion to that
    error; and each kind's cross-validated p90."""
    from runtime.sampling import perturb

    samples = [t.at(reference) for t in timed]
    errors = cross_validate(samples, roof, seed=seed)
    index: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        if not np.isnan(errors[i]):
            index.setdefault(s.key, []).append(i)
    p90 = {key: float(np.quantile(errors[mine], 0.9)) for key, mine in index.items()}
    poor = {k: v for k, v in p90.items() if v > target}
    total = sum(poor.values())
    chosen: dict[int, Config] = {}
    for key, value in sorted(poor.items(), key=lambda kv: -kv[1]):
        share = max(1, round(extra * value / total)) if total else 0
        for i in sorted(index[key], key=lambda i: -errors[i])[:share]:
            chosen.setdefault(id(timed[i].config), timed[i].config)
    return [perturb(c, rng) for c in list(chosen.values())[:extra]], p90


@dataclass
class _Measured:
    """What calibration measured, before any fit: samples with the machine's speed when
    each was taken."""

    timed: list[Timed]
    heldout: list[Timed]
    zoo: list[ShapeSample]
    gaps: list[float]
    starts: list[float]

    @property
    def reference_s(self) -> float:
        """The machine's median speed over the calibration (every sample is scaled to
        it, so a slow phase of a shared machine moves no fit)."""
        return statistics.median([t.speed_s for t in self.timed + self.heldout]
                                 + [z.speed_s for z in self.zoo if z.speed_s])

    def training(self) -> list[OpSample]:
        ref = self.reference_s
        return [t.at(ref) for t in self.timed] + [
            s for z in self.zoo if (s := z.at(ref).sample) is not None]


def _draws(rng: np.random.Generator, per_family: int) -> list[Config]:
    """``per_family`` random configurations of every family, and as many training steps
    around each of :data:`runtime.sampling.TRAINED`."""
    from runtime.sampling import FAMILIES, TRAINED, draw

    return ([draw(f, rng) for f in FAMILIES for _ in range(per_family)]
            + [draw(f, rng, train=True) for f in TRAINED for _ in range(per_family)])


def _measure(engine: Engine, budget: Budget, seed: int, show: Progress,
             caches: Sequence[int], clock: _Stages) -> _Measured:
    """Random configurations fitted on and held out, timed in one shuffled pass (so both
    see the same phases of the machine); then the zoo's models whole."""
    from runtime.microbench import calibration_graphs, time_graphs

    rng, held_rng = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
    configs, held = _draws(rng, budget.cases), _draws(held_rng, budget.heldout)
    order = np.random.default_rng([seed, 2]).permutation(len(configs) + len(held))
    both = [(configs + held)[i] for i in order]
    timed, gaps = _time(engine, both, budget, show, "random ops", caches)
    heldout_ids = {id(c) for c in held}
    clock.done("random and held-out ops")
    zoo, starts = time_graphs(engine, calibration_graphs(budget.quick_zoo),
                              repeats=budget.repeats, caches=caches,
                              min_seconds=4 * budget.min_seconds,
                              progress=lambda items: show(items, "zoo models"))
    clock.done("zoo models")
    return _Measured([t for t in timed if id(t.config) not in heldout_ids],
                     [t for t in timed if id(t.config) in heldout_ids], zoo, gaps, starts)


def calibrate(engine: Engine, *, quick: bool = False, progress: Progress | None = None,
              seed: int = 0, budget: Budget | None = None) -> Calibration:
    """Measure ``engine`` and fit its cost model (see the module's docstring); ``budget``
    overrides the quick or full one."""
    from runtime.hosts import median_slowdown, slowdown_of
    from runtime.microbench import time_copies
    from runtime.sampling import FAMILIES

    kinds = {d.model: d.description or d.model for d in engine.cluster().devices}
    if len(kinds) > 1:  # ops are timed on the first device, and priced so on every one
        raise CalibrationError(f"engine {engine.name!r}: its devices differ "
                               f"({'; '.join(kinds.values())}): a calibration times the "
                               f"first and would price every device so; calibrate with "
                               f"--devices 1")
    budget = budget or (Budget.quick() if quick else Budget.full())
    show = progress or _quiet
    caches = cache_sizes()
    clock = _Stages()
    copies = time_copies(engine, quick=quick, repeats=budget.repeats)
    m = _measure(engine, budget, seed, show, caches, clock)
    reference = m.reference_s
    first = m.training()
    fit = fit_samples([Sample.of(s) for s in first], buckets=3 if quick else 4)
    model = engine.cluster().devices[0].model
    roof = _roof(first, fit, model)
    adaptive: dict[str, list[float]] = {}
    rng = np.random.default_rng([seed, 3])
    for round_ in range(budget.rounds):
        extra, p90 = _adapt(m.timed, reference, roof,
                            round(budget.extra * budget.cases * len(FAMILIES)),
                            budget.target, rng, seed + round_)
        for key, value in p90.items():
            adaptive.setdefault(key, []).append(value)
        more, more_gaps = _time(engine, extra, budget, show, f"adaptive round {round_ + 1}",
                                caches)
        m.timed += more
        m.gaps += more_gaps
        clock.done(f"adaptive round {round_ + 1}")
    copies += time_copies(engine, quick=quick, repeats=budget.repeats)
    side = slowdown_of(engine, repeats=budget.repeats)
    clock.done("links, side by side")
    training = m.training()
    seen = {s.signature for s in training}
    unseen = [s for t in m.heldout if (s := t.at(reference)).signature not in seen]
    predictor = fit_predictor(training, roof, seed=seed, heldout=unseen, caches=caches,
                              roof=True)
    clock.done("fit")
    spec = engine.cluster().devices[0]
    return Calibration(
        engine=engine.name, devices=engine.devices, model=model,
        memory_bytes=spec.memory_bytes, threads=getattr(engine, "threads", 1), fit=fit,
        predictor=predictor, link=fit_link(copies),
        dispatch_s=dispatch_seconds([Sample("gap", "dispatch", 0, 0, g) for g in m.gaps]),
        shapes=shape_table([z.at(reference) for z in m.zoo]),
        start_s=statistics.median(m.starts) if m.starts else 0.0,
        reference_s=reference, side_by_side=side,
        host_slowdown=median_slowdown(side), samples=len(training) + len(copies),
        fingerprint=engine.fingerprint(),
        heldout={k: m.heldout for k, m in predictor.models.items() if m.heldout},
        overall=predictor.quality(unseen) if unseen else None, stages=clock.seconds,
        adaptive=adaptive, signatures=frozenset(seen))

