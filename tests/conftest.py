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
    for live, kept in zip((registry._DEVICES, registry._CLUSTERS, registry._SOURCES),
                          saved[:3], strict=True):
        live.clear()
        live.update(kept)
    registry._loaded = saved[3]
