"""The device and cluster registries, seeded from the TOML catalog shipped with placelab
and then from the user catalog: every ``*.toml`` in :func:`user_catalog_dir`, where
``placelab hw register`` stores files.

>>> from hwmodels import get_device
>>> get_device("a100-sxm4-80gb").peak_flops("bf16")
312000000000000.0
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from hwmodels.spec import Cluster, Device
from hwmodels.toml_io import HardwareFile, loads
from hwmodels.toml_io import load as load_file
from workloads.errors import HardwareSpecError
from workloads.io import write_text_atomic

__all__ = [
    "find_devices", "get_cluster", "get_device", "list_clusters", "list_devices", "load",
    "register_cluster", "register_device", "register_file", "source_of", "user_catalog_dir",
]

_DEVICES: dict[str, Device] = {}
_CLUSTERS: dict[str, Cluster] = {}
_SOURCES: dict[str, str] = {}
_CATALOG_FILES = ("devices.toml", "clusters.toml")
_loaded = False


def user_catalog_dir() -> Path:
    """Where registered hardware files live: ``$PLACELAB_HOME/hardware``, by default
    ``$XDG_CONFIG_HOME/placelab/hardware`` (``~/.config/placelab/hardware``)."""
    home = os.environ.get("PLACELAB_HOME")
    if not home:
        config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
        home = str(Path(config) / "placelab")
    return Path(home) / "hardware"


def _ensure_catalog() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    root = resources.files("hwmodels") / "catalog"
    for name in _CATALOG_FILES:
        text = (root / name).read_text(encoding="utf-8")
        _add(loads(text, source=f"catalog/{name}", known_models=get_device), "builtin")
    user = user_catalog_dir()
    if user.is_dir():
        for path in sorted(user.glob("*.toml")):
            _add(load_file(path, known_models=get_device), str(path))


def _add(hw: HardwareFile, source: str) -> None:
    for device in hw.devices.values():
        register_device(device)
        _SOURCES[f"device:{device.name}"] = source
    for cluster in hw.clusters.values():
        register_cluster(cluster)
        _SOURCES[f"cluster:{cluster.name}"] = source


def source_of(kind: str, name: str) -> str:
    """Where device or cluster ``name`` came from: ``builtin``, a file path, or ``python``."""
    _ensure_catalog()
    return _SOURCES.get(f"{kind}:{name}", "python")


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


def _load_new(path: str | Path) -> HardwareFile:
    _ensure_catalog()
    hw = load_file(path, known_models=get_device)
    for kind, names, known in (("device", hw.devices, _DEVICES),
                               ("cluster", hw.clusters, _CLUSTERS)):
        for name in names:
            if name in known:
                raise HardwareSpecError(f"{path}: {kind} {name!r} is already registered "
                                        f"(from {source_of(kind, name)})")
    if not hw.devices and not hw.clusters:
        raise HardwareSpecError(f"{path}: expected [[device]] or [[cluster]] tables, got none")
    return hw


def load(path: str | Path) -> HardwareFile:
    """Read a hardware TOML file and register every device and cluster it defines, for
    this process. Nothing is registered unless the whole file is valid and its names new.
    """
    hw = _load_new(path)
    _add(hw, str(path))
    return hw


def register_file(path: str | Path) -> Path:
    """Validate ``path`` and store a copy in the user catalog, so every later process sees
    its devices and clusters; register them in this one. Nothing is stored on error."""
    hw = _load_new(path)
    target = user_catalog_dir() / Path(path).name
    if target.exists():
        raise HardwareSpecError(f"{path}: the user catalog already has a file named "
                                f"{target.name!r} ({target})")
    write_text_atomic(target, Path(path).read_text(encoding="utf-8"))
    _add(hw, str(target))
    return target


def find_devices(*, kind: str | None = None, dtype: str | None = None,
                 min_memory_bytes: int = 0) -> list[Device]:
    """Registered device models by kind and capability, sorted by name.

    >>> [d.name for d in find_devices(kind="gpu", dtype="fp8", min_memory_bytes=100 * 2**30)]
    ['h200-sxm-141gb', 'mi300x']
    """
    _ensure_catalog()
    return [d for _, d in sorted(_DEVICES.items())
            if (kind is None or d.kind == kind) and (dtype is None or dtype in d.peak)
            and d.memory_bytes >= min_memory_bytes]
