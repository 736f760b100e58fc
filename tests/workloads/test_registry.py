from __future__ import annotations

import pytest

from workloads import RegistryError, build_model
from workloads.registry import Registry


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(RegistryError, match=r"unknown model 'nope'; expected one of: .*lenet5"):
        build_model("nope")


def test_bad_batch_is_named() -> None:
    with pytest.raises(RegistryError, match="batch must be an int >= 1, got 0"):
        build_model("mlp", batch=0)


def test_duplicate_registration_is_refused() -> None:
    reg: Registry[int] = Registry("widget")
    reg.register("a", 1)
    with pytest.raises(RegistryError, match="widget 'a' is already registered"):
        reg.register("a", 2)
    assert reg.get("a") == 1
