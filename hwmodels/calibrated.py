"""The ``calibrated`` cost model: op times from what calibration measured and fitted on an
engine, in three sources tried in order.

1. **Measured** (``"profile"``, ``"shape table"``): an op whose signature
   (:func:`hwmodels.cost.op_signature`) was timed in context — by ``placelab profile``, in the
   profile database, at this batch; or by calibration inside the zoo's models, interpolated
   in batch (:func:`hwmodels.cost.interpolate`) — takes that time.
2. **Fitted** (``"predictor"``): the op kind's (else its op class's) fitted utilisation model
   (:mod:`hwmodels.predictor`) over the roofline calibration measured.
3. **Analytic** (``"roofline"``): the calibrated roofline (peak, bandwidth, launch overhead,
   efficiencies per op class) for anything else, and the catalog spec for a device the
   file does not calibrate.

:meth:`CalibratedCost.sources` says which source priced each op; the simulator reports how
many ops and what share of the predicted time each priced. Weights count as read from memory
when the weights on the op's device exceed the last-level cache (:meth:`op_times`;
:meth:`op_time`, which sees one op, takes them as cached). Each device's first op without
inputs pays the executor's delay before a run's first op (``[run] start_us``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hwmodels.cost import (
    Placement,
    RooflineCost,
    interpolate,
    op_batch,
    op_signature,
    weight_bytes,
)
from hwmodels.predictor import (
    ALONE,
    DEFAULT_CACHES,
    Context,
    KindModel,
    OpTimePredictor,
    Quality,
)
from hwmodels.spec import Cluster, Device
from workloads.errors import HardwareSpecError
from workloads.graph import Graph
from workloads.op import Op
from workloads.params import Param

if TYPE_CHECKING:
    from hwmodels.profiles import ProfileView

__all__ = ["SOURCES", "CalibratedCost"]

#: The sources of an op's time, in the order they are tried; ``run start`` is the
#: executor's delay before a run's first op, which a device's first input carries.
SOURCES = ("profile", "shape table", "predictor", "roofline", "run start")

#: A calibration's profile lookup: ``"default"`` reads the user's profile database
#: (``$PLACELAB_HOME/profiles.sqlite``) where it exists, None reads none.
DEFAULT = "default"


class CalibratedCost(RooflineCost):
    """Op times from a calibration file (see the module docstring); ``profiles`` is a
    profile database (path), ``"default"`` for the user's, or None for none.

    >>> from hwmodels import Cluster, Device, dumps
    >>> import tempfile, pathlib
    >>> spec = Device("n0", "npu", {"fp32": 5e13}, 2**34, 5e11, launch_overhead_s=3e-6)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "n0.toml"
    >>> _ = path.write_text(dumps(devices=[spec]))
    >>> cost = CalibratedCost(Cluster("c", (spec.instance("a"),)), path, profiles=None)
    >>> from workloads import build_model
    >>> cost.source(build_model("mlp").op("fc1"), "a")
    'roofline'
    """

    params = (Param("file", "str", None, optional=True, doc="the calibration file read"),)

    def __init__(self, cluster: Cluster, file: str | Path, *,
                 profiles: str | Path | None = DEFAULT) -> None:
        from workloads.io import read_text

        super().__init__(cluster)
        self.file: str | None = str(file)
        self._load(read_text(file, HardwareSpecError, "hardware file"), str(file), profiles)

    @classmethod
    def from_text(cls, cluster: Cluster, text: str, *, source: str = "<string>",
                  profiles: str | Path | None = None) -> CalibratedCost:
        """The model of a calibration held in ``text`` (TOML)."""
        model = cls.__new__(cls)
        RooflineCost.__init__(model, cluster)
        model.file = None
        model._load(text, source, profiles)
        return model

    @classmethod
    def create(cls, cluster: Cluster, file: str | Path | None = None) -> CalibratedCost:
        if file is None:
            raise HardwareSpecError("cost model calibrated: needs a calibration file, "
                                    "got none")
        return cls(cluster, file)

    def _load(self, text: str, source: str, profiles: str | Path | None) -> None:
        from hwmodels.toml_io import build_devices, parse

        doc = parse(text, source=source)
        calibrated = build_devices(doc, source)
        if not calibrated:
            raise HardwareSpecError(f"{source}: expected at least one [[device]], got none")
        self._specs = {d.name: calibrated[d.model].instance(d.name)
                       for d in self.cluster.devices if d.model in calibrated}
        if not self._specs:
            raise HardwareSpecError(
                f"{source}: calibrates {', '.join(calibrated)}, but cluster "
                f"{self.cluster.name!r} has only "
                f"{', '.join(sorted({d.model for d in self.cluster.devices}))}")
        self._predictors = {p.model: _predictor(p, f"{source}: predictor[{i}]")
                            for i, p in enumerate(doc.predictor)}
        self._shapes = _shapes(doc)
        self._start = doc.run.start_us * 1e-6 if doc.run else 0.0
        self._profiles = _profiles(doc.calibration or {}, profiles, source)
        self._memo: dict[tuple[str, str, int, Context], tuple[str, float]] = {}

    # -- one op -------------------------------------------------------------------------

    def spec(self, device: str) -> Device:
        return self._specs.get(device) or self.cluster.device(device)

    def op_time(self, op: Op, device: str) -> float:
        return self._priced(op, device, ALONE, op_batch(op))[1]

    def source(self, op: Op, device: str, batch: int | None = None) -> str:
        """Which source times ``op`` on ``device`` at ``batch`` (see :data:`SOURCES`)."""
        return self._priced(op, device, ALONE, op_batch(op) if batch is None else batch)[0]

    def _priced(self, op: Op, device: str, context: Context, batch: int
                ) -> tuple[str, float]:
        if op.op_class == "source":
            return "roofline", 0.0
        model = self.spec(device).model
        key = (model, op_signature(op, batch), batch, context)
        if key not in self._memo:
            found = self._measured(model, key[1], batch)
            if found is None:
                predictor = self._predictors.get(model)
                if predictor is not None and op.dtype == "fp32" and predictor.model_for(op):
                    found = "predictor", predictor.time(op, self.spec(device), context)
                else:
                    found = "roofline", super().op_time(op, device)
            self._memo[key] = found
        return self._memo[key]

    def _measured(self, model: str, signature: str, batch: int) -> tuple[str, float] | None:
        if self._profiles is not None and model in self._predictors:
            seconds = self._profiles.seconds(signature, batch)
            if seconds is not None:
                return "profile", seconds
        measured = self._shapes.get((model, signature))
        # one batch measured says nothing of another: the fitted model then
        if measured is not None and (len(measured[0]) > 1 or batch in measured[0]):
            return "shape table", interpolate(*measured, batch)
        return None

    # -- a whole graph ------------------------------------------------------------------

    def op_times(self, graph: Graph, placement: Placement) -> list[float]:
        return [t for _, t in self._graph(graph, placement)]

    def least_op_times(self, graph: Graph, device: str) -> list[float]:
        """The lesser of each op's time alone (its weights warm) and with the whole graph on
        ``device`` (cold where they exceed the cache, the run's start charged): the two
        contexts farthest apart (the fitted trees are not proven monotone in between)."""
        together = super().least_op_times(graph, device)
        return [min(t, self.op_time(graph.op(name), device))
                for t, name in zip(together, graph.arrays.names, strict=True)]

    def sources(self, graph: Graph, placement: Placement) -> list[str]:
        return [s for s, _ in self._graph(graph, placement)]

    def _graph(self, graph: Graph, placement: Placement) -> list[tuple[str, float]]:
        names = self.cluster.device_names
        where = [names[d] for d in placement.tolist()] if isinstance(
            placement, np.ndarray) else [placement[n] for n in graph.arrays.names]
        ops = [graph.op(n) for n in graph.arrays.names]
        context = op_contexts(graph, ops, where, {d: self._cache(d) for d in set(where)})
        self._predict_ahead(graph, ops, where, context)
        priced = [self._priced(op, d, c, op_batch(op, graph))
                  for op, d, c in zip(ops, where, context, strict=True)]
        started: set[str] = set()
        for i, (op, device) in enumerate(zip(ops, where, strict=True)):
            if not op.inputs and device not in started:  # the executor wakes the device
                started.add(device)
                priced[i] = ("run start", priced[i][1] + self._start)
        return priced

    def _cache(self, device: str) -> int:
        predictor = self._predictors.get(self.spec(device).model)
        return predictor.caches[-1] if predictor is not None else DEFAULT_CACHES[-1]

    def _predict_ahead(self, graph: Graph, ops: Sequence[Op], where: Sequence[str],
                       context: Sequence[Context]) -> None:
        """Price every op the predictor will time in one call per device model and kind
        (a call per op would cost a model's overhead each time)."""
        todo: dict[str, list[int]] = {}
        for i, (op, device) in enumerate(zip(ops, where, strict=True)):
            model = self.spec(device).model
            batch = op_batch(op, graph)
            key = (model, op_signature(op, batch), batch, context[i])
            if (key not in self._memo and op.op_class != "source" and op.dtype == "fp32"
                    and model in self._predictors and self._predictors[model].model_for(op)
                    and self._measured(model, key[1], batch) is None):
                todo.setdefault(device, []).append(i)
        for device, index in todo.items():
            spec = self.spec(device)
            times = self._predictors[spec.model].times([ops[i] for i in index], spec,
                                                       [context[i] for i in index])
            for i, seconds in zip(index, times.tolist(), strict=True):
                batch = op_batch(ops[i], graph)
                self._memo[(spec.model, op_signature(ops[i], batch), batch, context[i])] = (
                    "predictor", seconds)

    def heldout(self, model: str | None = None) -> dict[str, Quality]:
        """The held-out error of each fitted model of device model ``model`` (the first
        calibrated one by default), by kind key."""
        name = model or next(iter(self._predictors), "")
        predictor = self._predictors.get(name)
        if predictor is None:
            return {}
        return {k: m.heldout for k, m in predictor.models.items() if m.heldout}


def op_contexts(graph: Graph, ops: Sequence[Op], where: Sequence[str],
                caches: Mapping[str, int]) -> list[Context]:
    """Per op (placed on ``where``), its context: the weights its device holds (each
    tensor once), and the weight bytes it reads from memory: all it reads where those
    exceed the device's last-level cache (``caches``, bytes), none otherwise.

    >>> from workloads import build_model
    >>> g = build_model("mlp", batch=2)
    >>> op_contexts(g, [g.op("fc1")], ["d"], {"d": 2**30})[0].cold_bytes
    0
    """
    held: dict[str, int] = {}
    for op, device in zip(ops, where, strict=True):
        own = op.param_bytes + (op.outputs[0].nbytes if op.kind == "parameter" else 0)
        held[device] = held.get(device, 0) + own
    return [Context(weight_bytes(graph, op) if held[d] > caches[d] else 0, held[d])
            for op, d in zip(ops, where, strict=True)]


def _predictor(table: Any, where: str) -> OpTimePredictor:
    roof = None
    if table.peak_tflops and table.memory_bandwidth_gbps:
        roof = Device(f"{table.model}-roof", "cpu",
                      {k: v * 1e12 for k, v in table.peak_tflops.items()}, 2**30,
                      table.memory_bandwidth_gbps * 1e9)
    models = {}
    for i, k in enumerate(table.kind):
        text = KindModel.unpack(k.model, f"{where}.kind[{i}].model")
        quality = Quality(k.heldout_median, k.heldout_p90, k.heldout_worst,
                          k.heldout_samples) if k.heldout_samples else None
        models[k.key] = KindModel(k.key, tuple(k.base), text, k.samples, quality)
    return OpTimePredictor(models, [int(c * 2**10) for c in table.caches_kib], roof)


def _shapes(doc: Any) -> dict[tuple[str, str], tuple[tuple[int, ...], tuple[float, ...]]]:
    out = {}
    for m in doc.measured_shape:
        pairs = sorted(zip(m.batches, m.us, strict=True))
        out[m.model, m.signature] = (tuple(b for b, _ in pairs),
                                     tuple(t * 1e-6 for _, t in pairs))
    return out


def _profiles(provenance: Mapping[str, Any], profiles: str | Path | None, source: str
              ) -> ProfileView | None:
    """The profile database's view for the engine, machine and threads the calibration was
    made on (None without a database or without that provenance)."""
    if profiles is None or not provenance.get("fingerprint"):
        return None
    from hwmodels.profiles import ProfileStore, default_path

    path = default_path() if profiles == DEFAULT else Path(profiles)
    if profiles == DEFAULT and not path.exists():
        return None
    return ProfileStore(path).view(str(provenance.get("engine", "")),
                                   provenance["fingerprint"],
                                   int(provenance.get("threads_per_device", 1)))
