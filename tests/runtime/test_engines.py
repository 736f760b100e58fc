"""Engines are plug-ins like every other family: made from a spec, their parameters
declared, shown, checked and cloned the same way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest

from runtime.engine import ENGINES, Engine, EngineUnavailable, NumpyEngine, make_engine
from runtime.testing import (
    CHECKS,
    ConformanceError,
    check_engine,
    parametrize_with_checks,
    unavailable,
)
from workloads.errors import PlacelabError


def test_an_engine_is_made_from_its_spec_and_cloned() -> None:
    engine = ENGINES.make("cpu:devices=2,hugepages=true")
    assert isinstance(engine, NumpyEngine) and engine.devices == ("cpu0", "cpu1")
    assert engine.get_params() == {"devices": 2, "calibration": None, "hugepages": True}
    assert repr(engine) == "NumpyEngine(devices=2, calibration=None, hugepages=True)"
    twin = engine.clone()
    assert twin is not engine and twin.get_params() == engine.get_params()
    assert make_engine("cpu", 3).get_params()["devices"] == 3
    assert make_engine("cpu", 2, "cal.toml").get_params()["calibration"] == "cal.toml"


@pytest.mark.parametrize(("spec", "message"), [
    ("cpu:devices=0", "engine 'cpu': devices must be an int >= 1, got 0"),
    ("cpu:hugepages=maybe", "engine 'cpu': hugepages must be true or false, got 'maybe'"),
    ("cpu:threads=2", "engine 'cpu': expected parameters key=value with keys among devices, "
                      "calibration, hugepages, got 'threads=2'"),
])
def test_a_bad_parameter_is_one_line(spec: str, message: str) -> None:
    with pytest.raises(PlacelabError) as caught:
        ENGINES.make(spec)
    assert str(caught.value) == message


@parametrize_with_checks(ENGINES.names())
def test_engine_conformance(engine: str, check) -> None:  # type: ignore[no-untyped-def]
    check(engine)


@contextlib.contextmanager
def registered(name: str, engine: type[Engine]) -> Iterator[None]:
    """``engine`` registered as ``name`` for the block."""
    ENGINES.register(name, engine)
    try:
        yield
    finally:
        ENGINES.unregister(name)


class Lossy(NumpyEngine):
    """Rounds what it sends to a device to half precision."""

    name = "lossy"

    def to_device(self, host: np.ndarray, device: str) -> np.ndarray:
        return super().to_device(host.astype(np.float16).astype(host.dtype), device)


def test_the_suite_catches_an_engine_that_loses_precision() -> None:
    with registered("lossy", Lossy), pytest.raises(ConformanceError) as caught:
        check_engine("lossy")
    assert "[round_trip] engine 'lossy': an array sent to 'cpu0' came back different" in str(
        caught.value)


class OneOnly(NumpyEngine):
    """Has one device and no second, as a machine with one GPU."""

    name = "one_only"

    def __init__(self, devices: int = 1, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if devices > 1:
            raise EngineUnavailable(f"engine 'one_only': devices must be in [1, 1], got "
                                    f"{devices}")
        super().__init__(devices=devices, **kwargs)


def test_an_engine_with_one_device_here_runs_the_checks_one_device_allows() -> None:
    with registered("one_only", OneOnly):
        check_engine("one_only")  # passes: the two-device checks are not run
        reasons = {check.name: unavailable("one_only", check) for check in CHECKS}
    two = ("engine 'one_only': devices must be in [1, 1], got 2: this check needs two "
           "devices, the engine has one here")
    assert reasons == {"devices": "", "round_trip": "", "copies": two,
                       "computes_as_numpy": "", "declares_parameters": ""}
    explicit = unavailable("cpu:devices=1", CHECKS[2])
    assert explicit == "this check needs two devices, the engine has one here"


class OneWhateverAsked(NumpyEngine):
    """Builds one device however many are asked."""

    name = "one_whatever"

    def __init__(self, devices: int = 1, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(devices=1, **kwargs)


def test_the_suite_catches_an_engine_that_builds_fewer_devices_than_asked() -> None:
    with registered("one_whatever", OneWhateverAsked), pytest.raises(ConformanceError) as caught:
        check_engine("one_whatever:devices=2")
    assert "[devices] engine 'one_whatever:devices=2': devices ('cpu0',)" in str(caught.value)
