"""The device and cluster registries, seeded from the TOML catalog shipped with placelab.

>>> from hwmodels import get_device
>>> get_device("a100-sxm4-80gb").peak_flops("bf16")
312000000000000.0
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hwmodels.spec import Cluster, Device
from hwmodels.toml_io import HardwareFile, loads
from hwmodels.toml_io import load as load_file
from workloads.errors import HardwareSpecError

__all__ = [
    "get_cluster", "get_device", "list_clusters", "list_devices", "load",
    "register_cluster", "register_device",
]

_DEVICES: dict[str, Device] = {}
_CLUSTERS: dict[str, Cluster] = {}
_CATALOG_FILES = ("devices.toml", "clusters.toml")
_loaded = False


def _ensure_catalog() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    root = resources.files("hwmodels") / "catalog"
    for name in _CATALOG_FILES:
        text = (root / name).read_text(encoding="utf-8")
        _add(loads(text, source=f"catalog/{name}", known_models=get_device))


def _add(hw: HardwareFile) -> None:
    for device in hw.devices.values():
        register_device(device)
    for cluster in hw.clusters.values():
        register_cluster(cluster)


def register_device(device: Device) -> None:
    """Make ``device`` known by its name; a name already taken is an error."""
    _ensure_catalog()
    if device.name in _DEVICES:
        raise HardwareSpecError(f"device {device.name!r} is already registered")
    _DEVICES[device.name] = device


def register_cluster(cluster: Cluster) -> None:
    """Make ``cluster`` known by its name; a name already taken is an error."""
    _ensure_catalog()
    if cluster.name in _CLUSTERS:
        raise HardwareSpecError(f"cluster {cluster.name!r} is already registered")
    _CLUSTERS[cluster.name] = cluster


def get_device(name: str) -> Device:
    _ensure_catalog()
    try:
        return _DEVICES[name]
    except KeyError:
        raise HardwareSpecError(
            f"unknown device {name!r}; expected one of: {', '.join(list_devices())}"
        ) from None


def get_cluster(name: str) -> Cluster:
    _ensure_catalog()
    try:
        return _CLUSTERS[name]
    except KeyError:
        raise HardwareSpecError(
            f"unknown cluster {name!r}; expected one of: {', '.join(list_clusters())}"
        ) from None


def list_devices() -> list[str]:
    _ensure_catalog()
    return sorted(_DEVICES)


def list_clusters() -> list[str]:
    _ensure_catalog()
    return sorted(_CLUSTERS)


def load(path: str | Path) -> HardwareFile:
    """Read a hardware TOML file and register every device and cluster it defines.

    Nothing is registered unless the whole file is valid and its names are all new.
    """
    _ensure_catalog()
    hw = load_file(path, known_models=get_device)
    taken = [n for n in hw.devices if n in _DEVICES] + [n for n in hw.clusters
                                                        if n in _CLUSTERS]
    if taken:
        raise HardwareSpecError(f"{path}: name {taken[0]!r} is already registered")
    _add(hw)
    return hw
