"""The conformance suite every engine must pass, built-in or third-party.

An engine is given by its registered name or spec (``"cpu"``, ``"torch:devices=2"``); the
suite builds it with two devices, or with one where the machine has no second (one GPU),
and then skips, saying why, the checks that need two. Each property is a named
:class:`~workloads.conformance.Check`; :func:`parametrize_with_checks` makes one pytest item
per (engine, check) and skips, saying why, an engine this machine cannot run (no GPU, no
torch)::

    from runtime.testing import parametrize_with_checks

    @parametrize_with_checks(["my_engine"])
    def test_conformance(engine, check):
        check(engine)

Properties: its devices are those of its cluster, as many as asked; an array sent to a
device comes back equal; a copy between devices is equal; a plan split over its devices
(on one device, the whole graph there) computes what NumPy computes on one logical CPU
device (the same weights and inputs); the part is made from its spec and rebuilt by
``clone`` with the same parameters.

>>> check_engine("cpu")  # raises ConformanceError naming every failed check
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.engine import ENGINES, Engine, EngineUnavailable, NumpyEngine
from workloads.conformance import (
    Check,
    ConformanceError,
    parametrize,
    require_plugin_contract,
    run_checks,
)
from workloads.conformance import require as _require
from workloads.params import parse_spec

if TYPE_CHECKING:
    from _pytest.mark import MarkDecorator

__all__ = ["CHECKS", "Check", "ConformanceError", "check_engine", "parametrize_with_checks",
           "unavailable"]


def _built(source: str) -> tuple[Engine, int, str]:
    """The engine of ``source``, how many devices were asked of it, and why not two: two
    devices unless the spec says how many, else one where two cannot be had."""
    cls: Any = ENGINES.get(source.partition(":")[0])  # a concrete engine: takes devices
    _, kwargs = parse_spec(source, cls.params, what=ENGINES.what, error=cls.error)
    if "devices" in kwargs:
        return cls(**kwargs), kwargs["devices"], ""
    try:
        return cls(devices=2, **kwargs), 2, ""
    except EngineUnavailable as err:
        return cls(devices=1, **kwargs), 1, str(err)


def _make(source: str) -> Engine:
    return _built(source)[0]


def _two(engine: Engine) -> bool:
    return len(engine.devices) >= 2


def unavailable(source: str, check: Check[str] | None = None) -> str:
    """Why this machine cannot run engine ``source`` ("" when it can), or, given a
    ``check``, that check on it (one that needs two devices where only one can be had)."""
    try:
        engine, _, why_one = _built(source)
    except EngineUnavailable as err:
        return str(err)
    if check is not None and not check.applies(engine):
        return (f"{why_one + ': ' if why_one else ''}this check needs two devices, the "
                f"engine has one here")
    return ""


def check_devices(source: str) -> None:
    engine, asked, _ = _built(source)
    names = engine.cluster().device_names
    _require(tuple(engine.devices) == tuple(names) and len(names) == asked,
             f"engine {source!r}: devices {engine.devices} for a cluster of {names}, "
             f"{asked} asked")


def check_round_trip(source: str) -> None:
    engine = _make(source)
    host = np.random.default_rng(0).standard_normal((33, 17)).astype(np.float32)
    for device in engine.devices:
        back = engine.to_host(engine.to_device(host, device))
        _require(back.dtype == host.dtype and np.array_equal(back, host),
                 f"engine {source!r}: an array sent to {device!r} came back different")


def check_copies(source: str) -> None:
    engine = _make(source)
    a, b = engine.devices[:2]
    host = np.arange(1000, dtype=np.float32)
    copied = engine.copy(engine.to_device(host, a), a, b)
    engine.synchronize(b)
    _require(np.array_equal(engine.to_host(copied), host),
             f"engine {source!r}: a copy from {a!r} to {b!r} differs from its source")


def check_computes_as_numpy(source: str) -> None:
    from policies import plan
    from runtime.executor import execute
    from workloads.zoo import build_model

    graph = build_model("mlp", batch=4)
    engine, reference = _make(source), NumpyEngine(devices=1)
    split = plan(graph, engine.cluster(), "round_robin")  # one device: single_device's plan
    _require(bool(split.transfers) or not _two(engine),
             f"engine {source!r}: the plan does not cross devices")
    ours = execute(split, engine, warmup=0, repeats=1).outputs
    theirs = execute(plan(graph, reference.cluster(), "single_device"), reference,
                     warmup=0, repeats=1).outputs
    for key, value in theirs.items():
        got = np.asarray(ours.get(key))
        _require(got.shape == value.shape and np.allclose(got, value, rtol=1e-4, atol=1e-5),
                 f"engine {source!r}: output {key!r} differs from NumPy's on one device")


def check_declares_parameters(source: str) -> None:
    require_plugin_contract(_make(source), f"engine {source!r}")


CHECKS: tuple[Check[str], ...] = (
    Check("devices", check_devices),
    Check("round_trip", check_round_trip),
    Check("copies", check_copies, _two),
    Check("computes_as_numpy", check_computes_as_numpy),
    Check("declares_parameters", check_declares_parameters),
)


def check_engine(source: str) -> None:
    """Run every check on a registered engine's name or spec (those that need two devices
    only where it has two); raise one :class:`ConformanceError` that lists every failure."""
    engine = _make(source)
    run_checks([c for c in CHECKS if c.applies(engine)], source)


def parametrize_with_checks(sources: Sequence[str]) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over (engine, check): one test item each, named
    ``<engine>-<check>``, skipped with the reason where this machine cannot run it."""
    return parametrize(("engine", "check"), [(s, s, c) for s in sources for c in CHECKS],
                       skip=unavailable)
