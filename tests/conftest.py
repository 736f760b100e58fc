"""Fixtures shared by the tests of several packages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty user catalog, loaded afresh by the registry (restored afterwards)."""
    import hwmodels.registry as registry

    saved = (dict(registry._DEVICES), dict(registry._CLUSTERS), dict(registry._SOURCES),
             registry._loaded)
    monkeypatch.setenv("PLACELAB_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"
    registry._DEVICES.clear()
    registry._DEVICES.update(saved[0])
    registry._CLUSTERS.clear()
    registry._CLUSTERS.update(saved[1])
    registry._SOURCES.clear()
    registry._SOURCES.update(saved[2])
    registry._loaded = saved[3]
