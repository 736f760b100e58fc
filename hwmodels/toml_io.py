"""Hardware description files: TOML in human units, specs in SI units.

Keys carry their unit: ``memory_gib`` (2**30 bytes), ``memory_bandwidth_gbps`` and
``bandwidth_gbps`` (GB/s, 10**9 bytes per second), ``latency_us`` and ``launch_overhead_us``
(microseconds), ``peak_tflops.<dtype>`` (10**12 FLOP/s). A file holds ``[[device]]`` and
``[[cluster]]`` tables; a cluster's ``[[cluster.device]]`` entries name a device ``model``
defined in the same file or already registered.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import tomli_w

from hwmodels.spec import Cluster, Device, Link
from workloads.errors import HardwareSpecError
from workloads.io import write_text_atomic

__all__ = ["HardwareFile", "dump", "dumps", "load", "loads"]

GIB = 2**30
GB = 1e9
TERA = 1e12
MICRO = 1e-6

_DEVICE_KEYS = {"name", "kind", "description", "memory_gib", "memory_bandwidth_gbps",
                "launch_overhead_us", "compute_streams", "copy_engines", "peak_tflops",
                "efficiency"}
_LINK_KEYS = {"name", "a", "b", "bandwidth_gbps", "latency_us", "duplex"}
_SLOT_KEYS = {"name", "model", "host"}
_CLUSTER_KEYS = {"name", "description", "switches", "device", "link"}


@dataclass
class HardwareFile:
    """The devices and clusters one file describes, in file order."""

    devices: dict[str, Device] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)


class _Reader:
    """Reads one table, naming the file and entry in every error."""

    def __init__(self, where: str, table: Any, allowed: set[str]) -> None:
        self.where = where
        if not isinstance(table, Mapping):
            raise HardwareSpecError(f"{where}: expected a table, got {table!r}")
        self.table = table
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise HardwareSpecError(f"{where}: unknown field {unknown[0]!r}; expected one "
                                    f"of {', '.join(sorted(allowed))}")

    def get(self, key: str, default: Any = ..., *, kind: type | tuple[type, ...] = object,
            positive: bool = False, nonneg: bool = False) -> Any:
        if key not in self.table:
            if default is ...:
                raise HardwareSpecError(f"{self.where}: missing field {key!r}")
            return default
        value: Any = self.table[key]
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            name = kind.__name__ if isinstance(kind, type) else "number"
            raise HardwareSpecError(f"{self.where}: {key} must be a {name}, got {value!r}")
        value = cast(Any, value)  # isinstance against a runtime ``kind`` narrows to object
        if positive and not value > 0:
            raise HardwareSpecError(f"{self.where}: {key} must be > 0, got {value!r}")
        if nonneg and not value >= 0:
            raise HardwareSpecError(f"{self.where}: {key} must be >= 0, got {value!r}")
        return value


_NUM = (int, float)


def _spec_error(src: str, make: Callable[[], Any]) -> Any:
    """Build a spec, prefixing its own validation errors with the file."""
    try:
        return make()
    except HardwareSpecError as err:
        raise HardwareSpecError(f"{src}: {err}") from err


def _device(src: str, table: Any) -> Device:
    name = table.get("name", "?") if isinstance(table, Mapping) else "?"
    r = _Reader(f"{src}: device {name!r}", table, _DEVICE_KEYS)
    peak = r.get("peak_tflops", kind=dict)
    for dtype, value in peak.items():
        if isinstance(value, bool) or not isinstance(value, _NUM) or value <= 0:
            raise HardwareSpecError(f"{r.where}: peak_tflops.{dtype} must be > 0, "
                                    f"got {value!r}")
    fields = dict(
        name=r.get("name", kind=str), kind=r.get("kind", kind=str),
        description=r.get("description", "", kind=str),
        peak={k: v * TERA for k, v in peak.items()},
        memory_bytes=int(r.get("memory_gib", kind=_NUM, positive=True) * GIB),
        memory_bandwidth=r.get("memory_bandwidth_gbps", kind=_NUM, positive=True) * GB,
        launch_overhead_s=r.get("launch_overhead_us", 0.0, kind=_NUM, nonneg=True) * MICRO,
        compute_streams=r.get("compute_streams", 1, kind=int),
        copy_engines=r.get("copy_engines", 1, kind=int),
        efficiency=r.get("efficiency", {}, kind=dict),
    )
    return _spec_error(src, lambda: Device(**fields))


def _link(where: str, table: Any) -> Link:
    r = _Reader(where, table, _LINK_KEYS)
    fields = dict(
        a=r.get("a", kind=str), b=r.get("b", kind=str), name=r.get("name", "", kind=str),
        bandwidth=r.get("bandwidth_gbps", kind=_NUM, positive=True) * GB,
        latency_s=r.get("latency_us", 0.0, kind=_NUM, nonneg=True) * MICRO,
        duplex=r.get("duplex", "full", kind=str),
    )
    return _spec_error(where, lambda: Link(**fields))


def _cluster(src: str, table: Any, models: Callable[[str], Device]) -> Cluster:
    name = table.get("name", "?") if isinstance(table, Mapping) else "?"
    where = f"{src}: cluster {name!r}"
    r = _Reader(where, table, _CLUSTER_KEYS)
    devices, hosts = [], {}
    for i, slot in enumerate(r.get("device", kind=list)):
        s = _Reader(f"{where}: device[{i}]", slot, _SLOT_KEYS)
        model = models(s.get("model", kind=str))
        devices.append(model.instance(s.get("name", kind=str)))
        if "host" in slot:
            hosts[devices[-1].name] = s.get("host", kind=str)
    links = [_link(f"{where}: link[{i}]", t)
             for i, t in enumerate(r.get("link", [], kind=list))]
    fields = dict(
        name=r.get("name", kind=str), description=r.get("description", "", kind=str),
        devices=tuple(devices), links=tuple(links),
        switches=tuple(r.get("switches", [], kind=list)), hosts=hosts,
    )
    return _spec_error(src, lambda: Cluster(**fields))


def loads(text: str, *, source: str = "<string>",
          known_models: Callable[[str], Device] | None = None) -> HardwareFile:
    """Parse hardware TOML; ``known_models`` resolves device models defined elsewhere.

    >>> f = loads('''
    ... [[device]]
    ... name = "toy"
    ... kind = "npu"
    ... memory_gib = 16
    ... memory_bandwidth_gbps = 800
    ... peak_tflops = { bf16 = 200 }
    ... ''')
    >>> f.devices["toy"].memory_bytes == 16 * 2**30
    True
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise HardwareSpecError(f"{source}: expected TOML, got a parse error: {err}") from err
    unknown = sorted(set(data) - {"device", "cluster"})
    if unknown:
        raise HardwareSpecError(f"{source}: unknown table {unknown[0]!r}; expected "
                                f"[[device]] or [[cluster]]")
    out = HardwareFile()
    for table in data.get("device", []):
        device = _device(source, table)
        if device.name in out.devices:
            raise HardwareSpecError(f"{source}: device {device.name!r} is defined twice")
        out.devices[device.name] = device

    def resolve(model: str) -> Device:
        if model in out.devices:
            return out.devices[model]
        if known_models is None:
            raise HardwareSpecError(f"{source}: unknown device model {model!r}")
        try:
            return known_models(model)
        except HardwareSpecError as err:
            raise HardwareSpecError(f"{source}: {err}") from err

    for table in data.get("cluster", []):
        cluster = _cluster(source, table, resolve)
        if cluster.name in out.clusters:
            raise HardwareSpecError(f"{source}: cluster {cluster.name!r} is defined twice")
        out.clusters[cluster.name] = cluster
    return out


def load(path: str | Path, *,
         known_models: Callable[[str], Device] | None = None) -> HardwareFile:
    """Read a hardware TOML file (see :func:`loads`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise HardwareSpecError(f"{path}: cannot read hardware file: {err.strerror}") from err
    return loads(text, source=str(path), known_models=known_models)


def _num(value: float) -> float | int:
    rounded = round(value, 9)
    return int(rounded) if rounded == int(rounded) else rounded


def device_table(d: Device) -> dict[str, Any]:
    """A device as the TOML table :func:`loads` reads back."""
    table: dict[str, Any] = {"name": d.model, "kind": d.kind}
    if d.description:
        table["description"] = d.description
    table.update({
        "memory_gib": _num(d.memory_bytes / GIB),
        "memory_bandwidth_gbps": _num(d.memory_bandwidth / GB),
        "launch_overhead_us": _num(d.launch_overhead_s / MICRO),
        "compute_streams": d.compute_streams, "copy_engines": d.copy_engines,
        "peak_tflops": {k: _num(v / TERA) for k, v in d.peak.items()},
    })
    if d.efficiency:
        table["efficiency"] = {k: v if isinstance(v, float) else [list(r) for r in v]
                               for k, v in d.efficiency.items()}
    return table


def cluster_table(c: Cluster) -> dict[str, Any]:
    """A cluster as the TOML table :func:`loads` reads back."""
    table: dict[str, Any] = {"name": c.name}
    if c.description:
        table["description"] = c.description
    if c.switches:
        table["switches"] = list(c.switches)
    table["device"] = [
        {"name": d.name, "model": d.model, **({"host": c.hosts[d.name]}
                                              if d.name in c.hosts else {})}
        for d in c.devices
    ]
    table["link"] = [
        {"name": link.name, "a": link.a, "b": link.b,
         "bandwidth_gbps": _num(link.bandwidth / GB),
         "latency_us": _num(link.latency_s / MICRO), "duplex": link.duplex}
        for link in c.links
    ]
    return table


def dumps(devices: list[Device] | tuple[Device, ...] = (),
          clusters: list[Cluster] | tuple[Cluster, ...] = ()) -> str:
    """TOML text for ``devices`` and ``clusters``; ``loads(dumps(...))`` gives them back."""
    data: dict[str, Any] = {}
    if devices:
        data["device"] = [device_table(d) for d in devices]
    if clusters:
        data["cluster"] = [cluster_table(c) for c in clusters]
    return tomli_w.dumps(data)


def dump(path: str | Path, devices: list[Device] | tuple[Device, ...] = (),
         clusters: list[Cluster] | tuple[Cluster, ...] = ()) -> None:
    """Write :func:`dumps` output to ``path`` atomically."""
    write_text_atomic(path, dumps(devices, clusters))
