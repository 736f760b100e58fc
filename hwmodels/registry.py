"""The device and cluster registries, seeded from the TOML catalog shipped with placelab
and then from the user catalog: every ``*.toml`` in :func:`user_catalog_dir`, where
``placelab hw register`` stores files.

The user catalog loads as one unit: every file is parsed, then every device is registered,
then every cluster, so a cluster may use a device from any file. A file that cannot be
loaded (corrupt, or naming a device that no longer exists) is reported once as a warning and
skipped; the rest of the catalog, and every command that does not need it, still works.

>>> from hwmodels import get_device
>>> get_device("a100-sxm4-80gb").peak_flops("bf16")
312000000000000.0
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from hwmodels.spec import Cluster, Device
from hwmodels.toml_io import HardwareFile, build_clusters, build_devices, loads, parse
from workloads.errors import HardwareSpecError, PlacelabError
from workloads.io import read_text, write_text_atomic

__all__ = [
    "CatalogWarning", "find_devices", "get_cluster", "get_device", "list_clusters",
    "list_devices", "load", "register_cluster", "register_device", "register_file",
    "remove", "source_of", "user_catalog_dir",
]

_DEVICES: dict[str, Device] = {}
_CLUSTERS: dict[str, Cluster] = {}
_SOURCES: dict[str, str] = {}
_CATALOG_FILES = ("devices.toml", "clusters.toml")
_loaded = False


class CatalogWarning(UserWarning):
    """A stored user hardware file could not be loaded and is skipped."""


def user_catalog_dir() -> Path:
    """Where registered hardware files live: ``$PLACELAB_HOME/hardware``, by default
    ``$XDG_CONFIG_HOME/placelab/hardware`` (``~/.config/placelab/hardware``)."""
    home = os.environ.get("PLACELAB_HOME")
    if not home:
        config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
        home = str(Path(config) / "placelab")
    return Path(home) / "hardware"


@dataclass
class _Parsed:
    path: Path
    doc: Any
    devices: dict[str, Device]


def _ensure_catalog() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    root = resources.files("hwmodels") / "catalog"
    for name in _CATALOG_FILES:
        text = (root / name).read_text(encoding="utf-8")
        _add(loads(text, source=f"catalog/{name}", known_models=get_device), "builtin")
    _load_user_catalog()


def _skip(path: Path, err: PlacelabError) -> None:
    warnings.warn(f"user hardware file {path} is skipped: {err}", CatalogWarning,
                  stacklevel=4)


def _parse_user_files(paths: list[Path]) -> list[_Parsed]:
    parsed = []
    for path in paths:
        try:
            doc = parse(read_text(path, HardwareSpecError, "hardware file"), source=str(path))
            parsed.append(_Parsed(path, doc, build_devices(doc, str(path))))
        except PlacelabError as err:
            _skip(path, err)
    return parsed


def _load_user_catalog() -> None:
    """Every stored file: devices of all files first, then clusters of all files."""
    user = user_catalog_dir()
    if not user.is_dir():
        return
    parsed = _parse_user_files(sorted(p for p in user.glob("*.toml") if p.is_file()))
    usable = []
    for item in parsed:
        try:
            _check_new(item.devices, "device")
        except PlacelabError as err:
            _skip(item.path, err)
            continue
        _add(HardwareFile(item.devices), str(item.path))
        usable.append(item)
    for item in usable:
        try:
            clusters = build_clusters(item.doc, str(item.path), get_device)
            _check_new(clusters, "cluster")
        except PlacelabError as err:
            _skip(item.path, err)
            continue
        _add(HardwareFile(clusters=clusters), str(item.path))


def _check_new(names: dict[str, Any], kind: str, where: str = "") -> None:
    try:
        for name in names:
            _check_free(kind, name)
    except HardwareSpecError as err:
        raise HardwareSpecError(f"{where}{err}") from None


def _check_free(kind: str, name: str) -> None:
    """Devices and clusters share one namespace: ``hw show NAME`` and ``hw remove NAME``
    must find one thing."""
    for taken, known in (("device", _DEVICES), ("cluster", _CLUSTERS)):
        if name in known:
            what = "is already registered" if taken == kind else f"names a {taken} already"
            raise HardwareSpecError(f"{kind} {name!r} {what} (from {source_of(taken, name)})")


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
    _check_free("device", device.name)
    _DEVICES[device.name] = device


def register_cluster(cluster: Cluster) -> None:
    """Make ``cluster`` known by its name; a name already taken is an error."""
    _ensure_catalog()
    _check_free("cluster", cluster.name)
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


def _load_new(path: str | Path, text: str) -> HardwareFile:
    """Validate a new file against everything registered; nothing is registered here."""
    _ensure_catalog()
    doc = parse(text, source=str(path))
    devices = build_devices(doc, str(path))
    _check_new(devices, "device", where=f"{path}: ")

    def resolve(model: str) -> Device:
        return devices[model] if model in devices else get_device(model)

    clusters = build_clusters(doc, str(path), resolve)
    _check_new(clusters, "cluster", where=f"{path}: ")
    both = sorted(set(devices) & set(clusters))
    if both:
        raise HardwareSpecError(f"{path}: cluster {both[0]!r}: expected a name no device "
                                f"has, got the name of a device of the same file")
    if not devices and not clusters:
        raise HardwareSpecError(f"{path}: expected [[device]] or [[cluster]] tables, got none")
    return HardwareFile(devices, clusters)


def load(path: str | Path) -> HardwareFile:
    """Read a hardware TOML file and register every device and cluster it defines, for
    this process. Nothing is registered unless the whole file is valid and its names new.
    """
    hw = _load_new(path, read_text(path, HardwareSpecError, "hardware file"))
    _add(hw, str(path))
    return hw


def _stored_name(path: Path) -> str:
    """The file name in the user catalog: the catalog reads ``*.toml`` files only."""
    return path.name if path.suffix == ".toml" else f"{path.name}.toml"


def register_file(path: str | Path) -> Path:
    """Validate ``path`` together with everything already registered and store a copy in
    the user catalog, so every later process sees its devices and clusters; register them
    in this one. Nothing is stored on error.
    """
    path = Path(path)
    text = read_text(path, HardwareSpecError, "hardware file")
    hw = _load_new(path, text)
    target = user_catalog_dir() / _stored_name(path)
    if target.exists():
        raise HardwareSpecError(f"{path}: the user catalog already has a file named "
                                f"{target.name!r} ({target})")
    write_text_atomic(target, text)
    _add(hw, str(target))
    return target


def remove(name: str) -> tuple[Path, list[str], list[str]]:
    """Undo the registration of the user file that defines device or cluster ``name``:
    delete the file and forget its devices and clusters. Refused for the built-in catalog
    and while another stored cluster uses one of the file's devices.

    Returns the removed file and the device and cluster names it held.
    """
    _ensure_catalog()
    kind = "device" if name in _DEVICES else "cluster" if name in _CLUSTERS else None
    if kind is None:
        raise HardwareSpecError(f"unknown device or cluster {name!r}; expected one of: "
                                f"{', '.join(list_devices() + list_clusters())}")
    source = source_of(kind, name)
    user = user_catalog_dir()
    if source in ("builtin", "python") or Path(source).parent != user:
        raise HardwareSpecError(f"{kind} {name!r}: expected one registered from a file in "
                                f"the user catalog ({user}), got one from {source}")
    mine = _owned(source)
    devices = [n for k, n in mine if k == "device"]
    for other, cluster in _CLUSTERS.items():
        if source_of("cluster", other) == source:
            continue
        used = sorted({d.model for d in cluster.devices} & set(devices))
        if used:
            raise HardwareSpecError(f"{kind} {name!r}: cluster {other!r} (from "
                                    f"{source_of('cluster', other)}) uses device {used[0]!r} "
                                    f"of {source}; remove that first")
    Path(source).unlink()
    for k, n in mine:
        (_DEVICES if k == "device" else _CLUSTERS).pop(n)
        _SOURCES.pop(f"{k}:{n}")
    return Path(source), devices, [n for k, n in mine if k == "cluster"]


def _owned(source: str) -> list[tuple[str, str]]:
    return [tuple(key.split(":", 1)) for key, where in _SOURCES.items()  # type: ignore[misc]
            if where == source]


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

