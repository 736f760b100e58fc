"""Frozen hardware specs: :class:`Device`, :class:`Link` and :class:`Cluster`.

Everything here is in SI units (FLOP/s, bytes, bytes/s, seconds). The TOML files use human
units with the unit in the key name; :mod:`hwmodels.toml_io` converts. A spec checks its
fields against the rules declared in :mod:`hwmodels.schema` (those a hardware file meets,
with their words); what it checks itself relates fields or objects (clocks, rates, links).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache, cached_property
from types import MappingProxyType, ModuleType
from typing import Any

import networkx as nx

from workloads.dtypes import DTYPE_BYTES, OP_CLASSES
from workloads.errors import HardwareSpecError, UnsupportedOp
from workloads.names import check_name

__all__ = ["DEVICE_KINDS", "GPU_ARCHITECTURES", "Cluster", "Device", "Efficiency", "GpuSpec",
           "Hop", "Link"]

DEVICE_KINDS: tuple[str, ...] = ("cpu", "gpu", "tpu", "npu", "fpga", "other")
#: Beyond these a count can only be a mistake (and would exhaust the simulator's memory).
MAX_STREAMS = 1024
MAX_COPY_ENGINES = 64
PEAK_DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
COMPUTE_CLASSES: tuple[str, ...] = tuple(c for c in OP_CLASSES if c != "source")
#: NVIDIA GPU architectures a :class:`GpuSpec` may name, oldest first.
GPU_ARCHITECTURES: tuple[str, ...] = ("maxwell", "pascal", "volta", "turing", "ampere", "ada",
                                      "hopper", "blackwell")

#: A constant efficiency, or a table of ``(size_threshold, efficiency)`` rows: the row with
#: the largest threshold not above the op's size applies (size = FLOPs for compute-bound
#: classes, bytes otherwise).
Efficiency = float | tuple[tuple[float, float], ...]


def _numpy_scalar(value: Any) -> bool:
    """A NumPy scalar, known without importing NumPy (``import hwmodels`` stays light)."""
    return type(value).__module__ == "numpy" and hasattr(value, "item")


def _plain_numbers(spec: Any, *names: str) -> None:
    """A NumPy number among ``names`` (checked) as the Python number it holds, so the spec
    writes out and hashes as any other; Python numbers stay as given."""
    for name in names:
        value = getattr(spec, name)
        if _numpy_scalar(value):
            object.__setattr__(spec, name, value.item())


def _plain(value: Any) -> Any:
    """Mappings and tuples as dicts and lists (JSON values), recursively."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value.item() if _numpy_scalar(value) else value


def _fail(owner: str, message: str) -> HardwareSpecError:
    return HardwareSpecError(f"{owner}: {message}")


def _checked(rules: str, values: Any, owner: str = "", path: str = "") -> Any:
    """``values`` checked against the rules ``hwmodels.schema.<rules>`` (those a file meets
    too) and given back as pydantic gives them (numbers as floats, tables as tuples); a
    failure is one line naming ``owner``, the field (under ``path``), the rule and the
    value."""
    schema = _schema()
    try:
        return schema.adapter(rules).validate_python(values)
    except ValueError as err:  # a pydantic ValidationError
        from workloads.schema import rule_message

        message = rule_message(err, getattr(schema, rules), values,  # type: ignore[arg-type]
                               path=path)
        raise (_fail(owner, message) if owner else HardwareSpecError(message)) from None


def _check_positive(owner: str, name: str, value: Any, *, allow_zero: bool = False) -> None:
    """``value`` checked against the rule ``Positive`` (``NonNegative`` with
    ``allow_zero``), the message naming ``owner`` and ``name``; cost tables use it."""
    _checked("NonNegative" if allow_zero else "Positive", value, owner, name)


@cache
def _schema() -> ModuleType:
    # Imported on the first spec built, not with this module: pydantic's import and the
    # rules' validators are paid for by what builds specs, once.
    import hwmodels.schema

    return hwmodels.schema


@dataclass(frozen=True)
class GpuSpec:
    """The figures of a GPU that a tile-aware model needs beyond the roofline (SI units).

    ``vector_peak`` holds FLOP/s on the CUDA cores alone (no tensor cores) per dtype, at the
    boost clock; :attr:`Device.peak` keeps the best dense rate, tensor cores included.

    >>> g = GpuSpec("volta", 80, 1.29e9, 1.53e9, 300.0, 6 * 2**20, 96 * 2**10,
    ...             {"fp32": 15.7e12, "fp16": 31.4e12})
    >>> round(g.vector_flops("fp32") / (g.sm_count * g.boost_clock_hz))  # FLOP/cycle per SM
    128
    """

    architecture: str
    sm_count: int
    base_clock_hz: float
    boost_clock_hz: float
    power_w: float
    l2_bytes: int
    shared_memory_per_sm_bytes: int
    vector_peak: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        valid = _checked("GpuRules", {
            "architecture": self.architecture, "sm_count": self.sm_count,
            "l2_bytes": self.l2_bytes, "shared_memory_per_sm_bytes":
            self.shared_memory_per_sm_bytes, "base_clock_hz": self.base_clock_hz,
            "boost_clock_hz": self.boost_clock_hz, "power_w": self.power_w,
            "vector_peak": self.vector_peak}, path="gpu")
        if valid["base_clock_hz"] > valid["boost_clock_hz"]:
            raise HardwareSpecError(f"gpu.base_clock_hz must be <= boost_clock_hz "
                                    f"({self.boost_clock_hz!r}), got {self.base_clock_hz!r}")
        for name in ("base_clock_hz", "boost_clock_hz", "power_w"):
            object.__setattr__(self, name, valid[name])
        object.__setattr__(self, "vector_peak", MappingProxyType(valid["vector_peak"]))

    def __hash__(self) -> int:
        return hash((self.architecture, self.sm_count, self.boost_clock_hz,
                     tuple(self.vector_peak.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        return (GpuSpec, (self.architecture, self.sm_count, self.base_clock_hz,
                          self.boost_clock_hz, self.power_w, self.l2_bytes,
                          self.shared_memory_per_sm_bytes, dict(self.vector_peak)))

    def vector_flops(self, dtype: str) -> float:
        """FLOP/s of the CUDA cores alone for ``dtype``; an error naming what it has."""
        try:
            return self.vector_peak[dtype]
        except KeyError:
            raise UnsupportedOp(f"gpu ({self.architecture}, {self.sm_count} SMs): has no "
                                f"vector rate for dtype {dtype!r}; it has "
                                f"{', '.join(self.vector_peak) or 'none'}") from None

    def definition(self) -> dict[str, Any]:
        """Every figure, as JSON values."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class Device:
    """One processor: peak rates per dtype, memory, overheads, per-class efficiency.

    >>> d = Device("toy", "gpu", peak={"fp32": 1e12}, memory_bytes=2**30,
    ...            memory_bandwidth=1e11)
    >>> d.peak_flops("fp32")
    1000000000000.0
    """

    name: str
    kind: str
    peak: Mapping[str, float]
    memory_bytes: int
    memory_bandwidth: float
    launch_overhead_s: float = 0.0
    compute_streams: int = 1
    copy_engines: int = 1
    efficiency: Mapping[str, Efficiency] = field(default_factory=dict)
    model: str = ""
    description: str = ""
    #: The GPU figures of a GPU from the catalog (architecture, SMs, clocks, caches); None
    #: for other kinds and for GPUs described by their roofline alone.
    gpu: GpuSpec | None = None

    def __post_init__(self) -> None:
        check_name("device", self.name, HardwareSpecError)
        owner = f"device {self.name!r}"
        valid = _checked("DeviceRules", {
            "kind": self.kind, "peak": self.peak, "memory_bytes": self.memory_bytes,
            "memory_bandwidth": self.memory_bandwidth,
            "launch_overhead_s": self.launch_overhead_s,
            "compute_streams": self.compute_streams, "copy_engines": self.copy_engines,
            "efficiency": self.efficiency}, owner)
        object.__setattr__(self, "peak", MappingProxyType(valid["peak"]))
        object.__setattr__(self, "memory_bytes", valid["memory_bytes"])
        _plain_numbers(self, "memory_bandwidth", "launch_overhead_s")
        object.__setattr__(self, "efficiency", MappingProxyType(valid["efficiency"]))
        object.__setattr__(self, "model", self.model or self.name)
        self._check_gpu(owner)

    def __hash__(self) -> int:
        return hash((self.name, self.model))

    def __reduce__(self) -> tuple[Any, ...]:
        # Read-only mappings do not pickle: rebuild from plain ones (process pools, Dask).
        return (Device, (self.name, self.kind, dict(self.peak), self.memory_bytes,
                         self.memory_bandwidth, self.launch_overhead_s, self.compute_streams,
                         self.copy_engines, dict(self.efficiency), self.model,
                         self.description, self.gpu))

    def _check_gpu(self, owner: str) -> None:
        gpu = self.gpu
        if gpu is None:
            return
        if not isinstance(gpu, GpuSpec):
            raise _fail(owner, f"gpu must be a GpuSpec or None, got {type(gpu).__name__}")
        if self.kind == "cpu":
            raise _fail(owner, "gpu must be absent on a device of kind 'cpu', got a gpu table")
        for dtype, rate in gpu.vector_peak.items():
            if rate > self.peak.get(dtype, 0.0):
                raise _fail(owner, f"gpu.vector_peak.{dtype} must be <= peak.{dtype} (the best "
                                   f"rate, tensor cores included: "
                                   f"{self.peak.get(dtype, 'none')!r}), got {rate!r}")

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; error naming the device if it has no such unit."""
        try:
            return self.peak[dtype]
        except KeyError:
            if dtype not in DTYPE_BYTES:
                raise _fail(f"device {self.name!r}",
                            f"dtype must be one of {', '.join(PEAK_DTYPES)}, "
                            f"got {dtype!r}") from None
            raise UnsupportedOp(f"device {self.name!r}: has no peak rate for dtype "
                                f"{dtype!r}; it has {', '.join(self.peak)}") from None

    def efficiency_for(self, op_class: str, size: float = 0.0) -> float:
        """Fraction of peak an op of ``op_class`` and ``size`` reaches (1.0 if unset)."""
        value = self.efficiency.get(op_class, 1.0)
        if isinstance(value, float):
            return value
        index = bisect.bisect_right([t for t, _ in value], size) - 1
        return value[max(index, 0)][1]

    def instance(self, name: str) -> Device:
        """This spec under another name (a device slot of a cluster)."""
        from dataclasses import replace
        return replace(self, name=name, model=self.model)


@dataclass(frozen=True)
class Link:
    """A point-to-point connection between two nodes (devices or switches).

    ``full`` duplex carries one transfer per direction at a time; ``half`` one in all.
    """

    a: str
    b: str
    bandwidth: float
    latency_s: float = 0.0
    duplex: str = "full"
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name or f"{self.a}<->{self.b}")
        owner = f"link {self.name!r}"
        _checked("LinkRules", {"bandwidth": self.bandwidth, "latency_s": self.latency_s,
                               "duplex": self.duplex}, owner)
        _plain_numbers(self, "bandwidth", "latency_s")
        if self.a == self.b:
            raise _fail(owner, f"must join two different nodes, got {self.a!r} twice")


@dataclass(frozen=True)
class Hop:
    """One link traversed in one direction; ``channel`` is what contends for it."""

    link: Link
    src: str
    dst: str

    @property
    def channel(self) -> str:
        if self.link.duplex == "half":
            return self.link.name
        return f"{self.link.name}:{self.src}->{self.dst}"


@dataclass(frozen=True)
class Cluster:
    """Devices, switches and links; routes go by least total latency.

    >>> from hwmodels import get_cluster
    >>> c = get_cluster("workstation")
    >>> [h.link.name for h in c.route("cpu0", "gpu0")]
    ['pcie0']
    """

    name: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...] = ()
    switches: tuple[str, ...] = ()
    hosts: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    #: Host -> how many times slower each op runs while two of the host's devices compute
    #: at once (cores, caches and memory bandwidth shared); ``1 + (s - 1)(k - 1)`` with
    #: ``k`` devices busy. A host not named runs its devices independently.
    host_slowdown: Mapping[str, float] = field(default_factory=dict)
    _routes: dict[tuple[str, str], tuple[Hop, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "links", tuple(self.links))
        object.__setattr__(self, "switches", tuple(self.switches))
        object.__setattr__(self, "hosts", MappingProxyType(dict(self.hosts)))
        object.__setattr__(self, "host_slowdown", MappingProxyType(
            {h: _plain(v) for h, v in self.host_slowdown.items()}))
        self._validate()

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        # The definition travels; routes and other caches are rebuilt where it lands.
        return (Cluster, (self.name, self.devices, self.links, self.switches, dict(self.hosts),
                          self.description, dict(self.host_slowdown)))

    def _validate(self) -> None:
        check_name("cluster", self.name, HardwareSpecError)
        owner = f"cluster {self.name!r}"
        if not self.devices:
            raise _fail(owner, "devices must list at least one device, got none")
        nodes: set[str] = set()
        for node in [d.name for d in self.devices] + list(self.switches):
            if node in nodes:
                raise _fail(owner, f"duplicate device or switch name {node!r}")
            nodes.add(node)
        pairs: set[frozenset[str]] = set()
        for link in self.links:
            for end in (link.a, link.b):
                if end not in nodes:
                    raise _fail(owner, f"link {link.name!r} joins {end!r}, which is not a "
                                       f"device or switch of the cluster")
            pair = frozenset((link.a, link.b))
            if pair in pairs:
                raise _fail(owner, f"link {link.name!r}: a second link between {link.a!r} "
                                   f"and {link.b!r}; give one link their total bandwidth")
            pairs.add(pair)
        for device in self.hosts:
            if device not in nodes:
                raise _fail(owner, f"hosts names {device!r}, which is not a device")
        for host in self.host_slowdown:
            if host not in self.hosts.values():
                raise _fail(owner, f"host_slowdown names {host!r}, which no device sits on")
        if self.host_slowdown:
            _checked("HostSlowdownRules", {"host_slowdown": self.host_slowdown}, owner)
        if len(self.devices) > 1 and not nx.is_connected(self.graph):
            parts = sorted(sorted(c) for c in nx.connected_components(self.graph))
            raise _fail(owner, f"must be connected, got separate parts {parts}")

    @cached_property
    def graph(self) -> nx.Graph:
        """Devices and switches as nodes (``kind`` attr), links as edges (``link`` attr)."""
        g = nx.Graph(name=self.name)
        for device in self.devices:
            g.add_node(device.name, kind="device")
        for switch in self.switches:
            g.add_node(switch, kind="switch")
        for link in self.links:
            g.add_edge(link.a, link.b, link=link, latency=link.latency_s)
        return g

    @cached_property
    def _by_name(self) -> dict[str, Device]:
        return {d.name: d for d in self.devices}

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def device(self, name: str) -> Device:
        try:
            return self._by_name[name]
        except KeyError:
            raise _fail(f"cluster {self.name!r}",
                        f"no device named {name!r}; it has "
                        f"{', '.join(self.device_names)}") from None

    def devices_of_kind(self, kind: str) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind == kind)

    def devices_with(self, *, dtype: str | None = None, min_memory_bytes: int = 0,
                     host: str | None = None) -> tuple[Device, ...]:
        """Devices that have a peak rate for ``dtype``, at least ``min_memory_bytes`` and
        sit on ``host`` (each filter optional)."""
        return tuple(d for d in self.devices
                     if (dtype is None or dtype in d.peak)
                     and d.memory_bytes >= min_memory_bytes
                     and (host is None or self.hosts.get(d.name) == host))

    def route(self, src: str, dst: str) -> tuple[Hop, ...]:
        """The hops from ``src`` to ``dst`` along the least-latency path (empty if equal)."""
        key = (src, dst)
        if key not in self._routes:
            self.device(src)
            self.device(dst)
            path: Sequence[str] = (
                [src] if src == dst
                else nx.shortest_path(self.graph, src, dst, weight="latency"))
            self._routes[key] = tuple(
                Hop(self.graph.edges[u, v]["link"], u, v) for u, v in itertools.pairwise(path)
            )
        return self._routes[key]

    def bandwidth(self, src: str, dst: str) -> float:
        """Bottleneck bandwidth (bytes/s) from ``src`` to ``dst`` (inf on one device)."""
        hops = self.route(src, dst)
        return min((h.link.bandwidth for h in hops), default=float("inf"))

    def latency(self, src: str, dst: str) -> float:
        """Sum of link latencies (seconds) from ``src`` to ``dst``."""
        return sum(h.link.latency_s for h in self.route(src, dst))

    @cached_property
    def definition_hash(self) -> str:
        """SHA-256 of the cluster's definition (devices with every figure, links, switches,
        hosts and their slowdowns): a plan or cost model made for another definition, even
        of the same name, is told apart by it."""
        return hashlib.sha256(json.dumps(self.definition(), sort_keys=True).encode()).hexdigest()

    def definition(self) -> dict[str, Any]:
        """Everything that defines the cluster, as JSON values."""
        def device(d: Device) -> dict[str, Any]:
            out = {f.name: _plain(getattr(d, f.name)) for f in fields(d)
                   if f.name not in ("description", "gpu")}
            return {**out, **({"gpu": d.gpu.definition()} if d.gpu else {})}

        return {"name": self.name, "devices": [device(d) for d in self.devices],
                "links": [{f.name: getattr(k, f.name) for f in fields(k)} for k in self.links],
                "switches": list(self.switches), "hosts": dict(self.hosts),
                **({"host_slowdown": dict(self.host_slowdown)} if self.host_slowdown else {})}

    def without(self, *names: str, name: str | None = None) -> Cluster:
        """This cluster with devices ``names`` retired, and their links with them, and the
        switches no remaining device reaches (checked as any cluster is: what is left must
        still be connected).

        >>> from hwmodels import get_cluster
        >>> get_cluster("quad-v100-nvlink").without("gpu3").device_names
        ('gpu0', 'gpu1', 'gpu2')
        """
        for gone in names:
            self.device(gone)  # an unknown name is an error naming the cluster's devices
        keep = tuple(d for d in self.devices if d.name not in names)
        links = tuple(k for k in self.links if k.a not in names and k.b not in names)
        reached = {d.name for d in keep}
        grew = True
        while grew:  # switches reachable from a kept device
            more = {end for k in links for end in (k.a, k.b)
                    if k.a in reached or k.b in reached}
            grew = not more <= reached
            reached |= more
        switches = tuple(s for s in self.switches if s in reached)
        links = tuple(k for k in links if k.a in reached and k.b in reached)
        hosts = {d: h for d, h in self.hosts.items() if d not in names}
        slowdown = {h: s for h, s in self.host_slowdown.items() if h in hosts.values()}
        return Cluster(name or self.name, keep, links, switches, hosts, self.description,
                       slowdown)

    def with_devices(self, devices: tuple[Device, ...], links: tuple[Link, ...], *,
                     hosts: Mapping[str, str] | None = None,
                     name: str | None = None) -> Cluster:
        """This cluster with ``devices`` added, joined to it by ``links``.

        >>> from hwmodels import get_cluster, Link
        >>> c = get_cluster("quad-v100-nvlink")
        >>> bigger = c.with_devices((c.device("gpu0").instance("gpu4"),),
        ...                         (Link("gpu4", "gpu0", 25e9, 2e-6),))
        >>> len(bigger.devices)
        5
        """
        return Cluster(name or self.name, (*self.devices, *devices), (*self.links, *links),
                       self.switches, {**self.hosts, **(hosts or {})}, self.description,
                       self.host_slowdown)

    def slowest_link(self, src: str, dst: str) -> Link | None:
        hops = self.route(src, dst)
        return min((h.link for h in hops), key=lambda link: link.bandwidth, default=None)
