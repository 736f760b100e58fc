"""Fixtures shared by the tests of several packages."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user catalog, loaded afresh by the registry (restored afterwards)."""
    import hwmodels.registry as registry

    # the test changes copies of the registry's state; monkeypatch puts the originals back
    for name in ("_DEVICES", "_CLUSTERS", "_SOURCES"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
    monkeypatch.setattr(registry, "_loaded", registry._loaded)
    monkeypatch.setenv("PLACELAB_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
