"""Hardware description files: TOML in human units, specs in SI units.

Keys carry their unit: ``memory_gib`` (2**30 bytes), ``memory_bandwidth_gbps`` and
``bandwidth_gbps`` (GB/s, 10**9 bytes per second), ``latency_us`` and ``launch_overhead_us``
(microseconds), ``peak_tflops.<dtype>`` (10**12 FLOP/s). A GPU may carry a ``gpu`` table
(``[device.gpu]`` or an inline ``gpu = {...}``): ``architecture``, ``sm_count``,
``base_clock_mhz`` and ``boost_clock_mhz`` (10**6 Hz), ``power_w``, ``l2_mib`` (2**20 bytes),
``shared_memory_per_sm_kib`` (2**10 bytes), ``vector_tflops.<dtype>``. A file holds
``[[device]]`` and ``[[cluster]]`` tables; a cluster's ``[[cluster.device]]`` entries name a
device ``model`` defined in the same file or already registered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from hwmodels.spec import Cluster, Device, GpuSpec, Link
from workloads.errors import HardwareSpecError
from workloads.io import read_text, write_text_atomic

__all__ = ["HardwareFile", "build_clusters", "build_devices", "dump", "dumps", "load", "loads",
           "parse"]

GIB = 2**30
MIB = 2**20
KIB = 2**10
GB = 1e9
TERA = 1e12
MEGA = 1e6
MICRO = 1e-6

@dataclass
class HardwareFile:
    """The devices and clusters one file describes, in file order."""

    devices: dict[str, Device] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)


def _spec(where: str, make: Callable[[], Any]) -> Any:
    """Build a spec, prefixing its own validation errors with where it is in the file."""
    try:
        return make()
    except HardwareSpecError as err:
        raise HardwareSpecError(f"{where}: {err}") from err


def _gpu(device: str, g: Any) -> GpuSpec | None:
    """The spec of a ``gpu`` table (its errors name the device), or None without one."""
    if g is None:
        return None
    try:
        return GpuSpec(
            architecture=g.architecture, sm_count=g.sm_count,
            base_clock_hz=g.base_clock_mhz * MEGA, boost_clock_hz=g.boost_clock_mhz * MEGA,
            power_w=g.power_w, l2_bytes=round(g.l2_mib * MIB),
            shared_memory_per_sm_bytes=round(g.shared_memory_per_sm_kib * KIB),
            vector_peak={k: v * TERA for k, v in g.vector_tflops.items()})
    except HardwareSpecError as err:
        raise HardwareSpecError(f"device {device!r}: {err}") from err


def gpu_table(g: GpuSpec) -> dict[str, Any]:
    """A GPU spec as the ``gpu`` table :func:`loads` reads back."""
    return {"architecture": g.architecture, "sm_count": g.sm_count,
            "base_clock_mhz": _num(g.base_clock_hz / MEGA),
            "boost_clock_mhz": _num(g.boost_clock_hz / MEGA), "power_w": _num(g.power_w),
            "l2_mib": _num(g.l2_bytes / MIB),
            "shared_memory_per_sm_kib": _num(g.shared_memory_per_sm_bytes / KIB),
            "vector_tflops": {k: _num(v / TERA) for k, v in g.vector_peak.items()}}


def _device(where: str, t: Any) -> Device:
    return _spec(where, lambda: Device(
        name=t.name, kind=t.kind, description=t.description, gpu=_gpu(t.name, t.gpu),
        peak={k: v * TERA for k, v in t.peak_tflops.items()},
        memory_bytes=round(t.memory_gib * GIB), memory_bandwidth=t.memory_bandwidth_gbps * GB,
        launch_overhead_s=t.launch_overhead_us * MICRO, compute_streams=t.compute_streams,
        copy_engines=t.copy_engines,
        efficiency={k: v if isinstance(v, float) else tuple(v)
                    for k, v in t.efficiency.items()}))


def _link(where: str, k: Any) -> Link:
    return _spec(where, lambda: Link(a=k.a, b=k.b, name=k.name,
                                     bandwidth=k.bandwidth_gbps * GB,
                                     latency_s=k.latency_us * MICRO, duplex=k.duplex))


def _model(where: str, models: Callable[[str], Device], name: str) -> Device:
    return _spec(where, lambda: models(name))


def _cluster(where: str, t: Any, models: Callable[[str], Device]) -> Cluster:
    devices, hosts = [], {}
    for i, slot in enumerate(t.device):
        devices.append(_model(f"{where}.device[{i}]", models, slot.model).instance(slot.name))
        if slot.host is not None:
            hosts[slot.name] = slot.host
    links = [_link(f"{where}.link[{i}]", k) for i, k in enumerate(t.link)]
    return _spec(where, lambda: Cluster(
        name=t.name, description=t.description, devices=tuple(devices), links=tuple(links),
        switches=tuple(t.switches), hosts=hosts, host_slowdown=t.host_slowdown))


def parse(text: str, *, source: str = "<string>") -> Any:
    """Parse hardware TOML and check it against the schema (no specs are built yet)."""
    from hwmodels.schema import HardwareDocument
    from workloads.schema import load_toml, validate

    data = load_toml(text, source=source, error=HardwareSpecError)
    return validate(HardwareDocument, data, source=source, error=HardwareSpecError)


def build_devices(doc: Any, source: str) -> dict[str, Device]:
    """The devices of a parsed document, by name (a name used twice is an error)."""
    out: dict[str, Device] = {}
    for i, table in enumerate(doc.device):
        device = _device(f"{source}: device[{i}] ({table.name!r})", table)
        if device.name in out:
            raise HardwareSpecError(f"{source}: device[{i}].name: expected a name not used "
                                    f"before in the file, got {device.name!r} again")
        out[device.name] = device
    return out


def build_clusters(doc: Any, source: str,
                   resolve: Callable[[str], Device]) -> dict[str, Cluster]:
    """The clusters of a parsed document; ``resolve`` finds a device model by name."""
    out: dict[str, Cluster] = {}
    for i, table in enumerate(doc.cluster):
        cluster = _cluster(f"{source}: cluster[{i}] ({table.name!r})", table, resolve)
        if cluster.name in out:
            raise HardwareSpecError(f"{source}: cluster[{i}].name: expected a name not used "
                                    f"before in the file, got {cluster.name!r} again")
        out[cluster.name] = cluster
    return out


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
    doc = parse(text, source=source)
    devices = build_devices(doc, source)

    def resolve(model: str) -> Device:
        if model in devices:
            return devices[model]
        if known_models is None:
            raise HardwareSpecError(f"unknown device model {model!r}")
        return known_models(model)

    return HardwareFile(devices, build_clusters(doc, source, resolve))


def load(path: str | Path, *,
         known_models: Callable[[str], Device] | None = None) -> HardwareFile:
    """Read a hardware TOML file (see :func:`loads`)."""
    return loads(read_text(path, HardwareSpecError, "hardware file"), source=str(path),
                 known_models=known_models)


def _num(value: float) -> float | int:
    rounded = round(value, 9)
    return int(rounded) if rounded == int(rounded) else rounded


def _exact(value: float) -> float | int:
    return int(value) if value == int(value) else value


def device_table(d: Device) -> dict[str, Any]:
    """A device as the TOML table :func:`loads` reads back."""
    table: dict[str, Any] = {"name": d.model, "kind": d.kind}
    if d.description:
        table["description"] = d.description
    table.update({
        # a byte count over 2**30 is an exact float: no rounding, so it reads back exactly
        "memory_gib": _exact(d.memory_bytes / GIB),
        "memory_bandwidth_gbps": _num(d.memory_bandwidth / GB),
        "launch_overhead_us": _num(d.launch_overhead_s / MICRO),
        "compute_streams": d.compute_streams, "copy_engines": d.copy_engines,
        "peak_tflops": {k: _num(v / TERA) for k, v in d.peak.items()},
    })
    if d.efficiency:
        table["efficiency"] = {k: v if isinstance(v, float) else [list(r) for r in v]
                               for k, v in d.efficiency.items()}
    if d.gpu is not None:
        table["gpu"] = gpu_table(d.gpu)
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
    if c.host_slowdown:
        table["host_slowdown"] = {h: _num(v) for h, v in c.host_slowdown.items()}
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
