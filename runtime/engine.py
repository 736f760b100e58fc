"""Engines: the devices a Plan really runs on, exposed as a ``hwmodels.Cluster`` so that
``policies.plan`` places a graph on them as on any other cluster.

An engine owns the array namespace its kernels use, moves arrays between its devices and
the host, and times what it runs. :class:`NumpyEngine` splits this machine's cores into
``k`` logical CPU devices, each a worker thread with its share of the BLAS threads
(threadpoolctl), so a plan spread over two logical devices really runs in parallel on two
cores. The CuPy engine lives in :mod:`runtime.cupy_engine`, the PyTorch engine (its own
kernels, on CPU and CUDA) in :mod:`runtime.torch_engine`.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hwmodels.registry import get_device
from hwmodels.spec import Cluster, Device, Link
from workloads.errors import PlacelabError
from workloads.params import Param
from workloads.plugin import Plugin
from workloads.registry import Registry

if TYPE_CHECKING:
    from runtime.training import Call
    from workloads.graph import Graph
    from workloads.op import Op

__all__ = ["ENGINES", "CalibratedEngine", "Engine", "EngineUnavailable", "NumpyEngine",
           "calibrated_cluster", "host_cluster", "make_engine"]


class EngineUnavailable(PlacelabError):
    """An engine cannot run here (its library or its hardware is missing)."""


class Engine(Plugin, ABC):
    """What the executor needs of the hardware: devices, arrays on them, copies, time.

    A plug-in (:class:`workloads.plugin.Plugin`): its constructor's keyword parameters are
    declared in ``params`` (``placelab list engines --params``), so ``ENGINES.make("cpu:
    devices=2")`` builds one and ``repr``, ``get_params`` and ``clone`` show and rebuild it.
    """

    name: ClassVar[str] = ""
    family = "engine"
    error = PlacelabError
    #: how many logical devices it has, and how many it was asked for (its ``devices``
    #: parameter; None: as many as the machine has)
    count: int
    requested: int | None
    #: the device model of its cluster, and the calibration file it takes, if any
    model: ClassVar[str] = ""
    calibration: str | None = None

    def get_params(self) -> dict[str, Any]:
        """The declared parameters; ``devices`` is the count asked for (the property of
        that name lists the devices' names)."""
        values = super().get_params()
        if "devices" in values:
            values["devices"] = self.requested
        return values

    @property
    @abstractmethod
    def devices(self) -> tuple[str, ...]:
        """The engine's device names (those of :meth:`cluster`)."""

    @abstractmethod
    def cluster(self) -> Cluster:
        """The engine's devices and the links between them, as a placeable cluster."""

    @property
    @abstractmethod
    def xp(self) -> Any:
        """The array namespace the kernels run on."""

    @abstractmethod
    def to_device(self, host: np.ndarray, device: str) -> Any:
        """A copy of a host array on ``device``."""

    @abstractmethod
    def copy(self, array: Any, src: str, dst: str) -> Any:
        """A real copy of ``array`` (on ``src``) into ``dst``'s memory, finished on return."""

    def to_host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def libraries(self) -> dict[str, str]:
        """The versions of the libraries whose kernels the engine runs (a machine's
        fingerprint holds them: a new BLAS times ops anew)."""
        return {"numpy": np.__version__}

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this machine for the engine's measurements: the CPU model, the
        cores this process may use, and :meth:`libraries`."""
        return {"cpu": cpu_model(), "cores": _cores(), "libraries": self.libraries()}

    def bind(self, graph: Graph, op: Op) -> Call:
        """The call the executor makes for ``op``: the array-API kernel library by default
        (an engine with kernels of its own overrides this). An op no kernel runs is refused
        here, before anything runs."""
        from runtime.training import bind, check_trainable

        check_trainable(graph, op)
        return bind(graph, op)

    def synchronize(self, device: str) -> None:
        """Wait until ``device`` has finished what was issued to it (a no-op on CPUs)."""

    @contextlib.contextmanager
    def on(self, device: str) -> Iterator[None]:
        """Make ``device`` current for the calling thread (a no-op on CPUs)."""
        yield

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Held while a plan runs (thread budgets and the like)."""
        yield

    def now(self) -> float:
        return time.perf_counter()


def cpu_model() -> str:
    """This machine's CPU model name (Linux ``/proc/cpuinfo``, else the platform's)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


class CalibratedEngine(Engine, ABC):
    """An engine that takes a calibration file: its cluster is the file's devices and
    links where it was given one, else its own uncalibrated figures (:meth:`_uncalibrated`),
    computed once (:attr:`_cluster`)."""

    @cached_property
    def _cluster(self) -> Cluster:
        if self.calibration is not None:
            return calibrated_cluster(self.calibration, engine=self.name, model=self.model,
                                      count=self.count)
        return self._uncalibrated()

    @abstractmethod
    def _uncalibrated(self) -> Cluster:
        """The engine's cluster before any calibration."""


class NumpyEngine(CalibratedEngine):
    """``devices`` logical CPU devices ``cpu0..cpu{k-1}`` of this machine.

    Each gets ``cores // devices`` BLAS threads (at least one) while a plan runs. While a
    plan runs NumPy also stops asking the kernel for huge pages for its large arrays
    (``hugepages=False``, the default): where the kernel compacts memory to find them
    (transparent huge pages in ``madvise`` mode), a kernel over a fresh large array stalls
    now and then, and the same VGG-16 step took 0.96 s or 1.30 s from run to run; without
    them it takes 1.30 s every time. Timings that calibrate a model must repeat. Its
    uncalibrated spec is the catalog's Xeon 8380 scaled to its share of cores, memory and
    bandwidth; links between logical devices are memory copies (an assumed 10 GB/s and 5 us
    until ``placelab calibrate`` measures them).

    >>> engine = NumpyEngine(devices=2)
    >>> engine.cluster().device_names
    ('cpu0', 'cpu1')
    """

    name = "cpu"
    model = "host-cpu"
    params = (Param("devices", "int", 1, minimum=1, doc="logical CPU devices"),
              Param("calibration", "str", None, optional=True,
                    doc="a calibration file whose devices and links this engine takes"),
              Param("hugepages", "bool", False,
                    doc="let NumPy ask for huge pages while a plan runs"))

    def __init__(self, devices: int = 1, *, calibration: str | Path | None = None,
                 hugepages: bool = False) -> None:
        self.requested = self.count = self.checked("devices", devices)
        self.hugepages: bool = self.checked("hugepages", hugepages)
        self.threads = max(1, _cores() // devices)
        self.calibration = self.checked("calibration",
                                        None if calibration is None else str(calibration))

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(f"cpu{i}" for i in range(self.count))

    def _uncalibrated(self) -> Cluster:
        return host_cluster(self.model, f"numpy-{self.count}", self.devices, self.threads)

    def cluster(self) -> Cluster:
        return self._cluster

    @property
    def xp(self) -> Any:
        import array_api_compat.numpy as xp

        return xp

    def to_device(self, host: np.ndarray, device: str) -> Any:
        return np.array(host, copy=True)

    def copy(self, array: Any, src: str, dst: str) -> Any:
        return np.array(array, copy=True)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=self.threads), _madvise_hugepage(self.hugepages):
            yield


def host_cluster(model: str, name: str, devices: tuple[str, ...], threads: int) -> Cluster:
    """Uncalibrated logical CPU devices of this machine: each a ``threads``-core share of
    it (the catalog's Xeon 8380 scaled to its share of cores and bandwidth, an equal share
    of the memory), named ``model``; links between them are memory copies (an assumed
    10 GB/s and 5 us until ``placelab calibrate`` measures them); all on host ``localhost``.

    >>> host_cluster("host-cpu", "numpy-2", ("cpu0", "cpu1"), 1).links[0].bandwidth
    10000000000.0
    """
    ref = get_device("xeon-8380")
    share = threads / 40  # the reference has 40 cores
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // len(devices)
    spec = Device(model, "cpu", {k: v * share for k, v in ref.peak.items()},
                  int(memory), ref.memory_bandwidth * share,
                  launch_overhead_s=ref.launch_overhead_s, efficiency=ref.efficiency,
                  description=f"a {threads}-core share of this machine "
                              f"(uncalibrated: the Xeon 8380's per-core figures)")
    slots = tuple(spec.instance(d) for d in devices)
    links = tuple(Link(a, b, 10e9, 5e-6) for i, a in enumerate(devices)
                  for b in devices[i + 1:])
    return Cluster(name, slots, links, hosts=dict.fromkeys(devices, "localhost"))


#: The catalog GPU whose figures an uncalibrated CUDA device takes, by a word of its name.
GPU_FIGURES = {"h200": "h200-sxm-141gb", "h100": "h100-sxm5-80gb", "a100": "a100-sxm4-80gb",
               "v100": "v100-sxm2-32gb", "l4": "l4"}


def gpu_figures(gpu_name: str) -> str:
    """The catalog GPU a GPU's name (as CUDA reports it) is priced as, the H100 where no
    word of :data:`GPU_FIGURES` is a word of it (an L40S is no L4).

    >>> gpu_figures("NVIDIA H200"), gpu_figures("NVIDIA A100-SXM4-80GB")
    ('h200-sxm-141gb', 'a100-sxm4-80gb')
    >>> gpu_figures("NVIDIA L40S"), gpu_figures("NVIDIA B300")
    ('h100-sxm5-80gb', 'h100-sxm5-80gb')
    """
    return known_gpu(gpu_name) or "h100-sxm5-80gb"


def known_gpu(gpu_name: str) -> str | None:
    """The catalog GPU whose word of :data:`GPU_FIGURES` is a word of ``gpu_name``, or
    None."""
    words = re.split(r"[^a-z0-9]+", gpu_name.lower())
    return next((v for k, v in GPU_FIGURES.items() if k in words), None)


def gpu_cluster(model: str, name: str, devices: tuple[str, ...],
                gpus: Sequence[tuple[str, int]]) -> Cluster:
    """Uncalibrated GPUs of this machine, ``gpus`` each device's (name as CUDA reports it,
    memory in bytes): each the catalog GPU its name names (:func:`gpu_figures`) with its
    real memory, those like the first named ``model`` and any other kind ``model-DEVICE``
    after its first device; links between them an assumed PCIe, 25 GB/s and 10 us, until
    ``placelab calibrate`` measures them.

    >>> c = gpu_cluster("gpu-torch", "torch-cuda-1", ("cuda0",), [("NVIDIA H200", 2**37)])
    >>> c.devices[0].description
    'NVIDIA H200 (uncalibrated: the figures of h200-sxm-141gb)'
    >>> mixed = gpu_cluster("gpu-torch", "torch-cuda-2", ("cuda0", "cuda1"),
    ...                     [("NVIDIA H100 80GB HBM3", 2**36), ("NVIDIA A100-SXM4-80GB", 2**36)])
    >>> [(d.model, d.peak_flops("bf16") / 1e12) for d in mixed.devices]
    [('gpu-torch', 989.5), ('gpu-torch-cuda1', 312.0)]
    """
    kinds: dict[tuple[str, int], Device] = {}
    slots = []
    for device, (gpu_name, memory_bytes) in zip(devices, gpus, strict=True):
        spec = kinds.get((gpu_name, memory_bytes))
        if spec is None:
            figures = gpu_figures(gpu_name)
            label = f"{model}-{device}" if kinds else model
            spec = kinds[gpu_name, memory_bytes] = replace(
                get_device(figures), name=label, model=label, memory_bytes=memory_bytes,
                description=f"{gpu_name} (uncalibrated: the figures of {figures})")
        slots.append(spec.instance(device))
    links = tuple(Link(a, b, 25e9, 10e-6) for i, a in enumerate(devices)
                  for b in devices[i + 1:])
    return Cluster(name, tuple(slots), links, hosts=dict.fromkeys(devices, "localhost"))


def calibrated_cluster(path: str | Path, *, engine: str, model: str, count: int) -> Cluster:
    """The cluster ``placelab calibrate`` measured on engine ``engine``: its device
    ``model`` in every slot and its link between any two. The file must hold a device of
    that model (a calibration of another engine does not) and be for ``count`` devices."""
    from hwmodels.toml_io import load

    found = load(path)
    spec = found.devices.get(model)
    cluster = next(iter(found.clusters.values()), None)
    if spec is None or cluster is None:
        raise PlacelabError(f"{path}: expected a calibration of the {engine} engine (a device "
                            f"{model!r} and its cluster), got devices {sorted(found.devices)}")
    if len(cluster.devices) != count:
        raise PlacelabError(f"{path}: calibrated for {len(cluster.devices)} devices, "
                            f"expected {count} (calibrate with --devices {count})")
    return cluster


@contextlib.contextmanager
def _madvise_hugepage(enabled: bool) -> Iterator[None]:
    """NumPy's huge-page advice for large arrays set to ``enabled``, restored on exit (a
    no-op where this NumPy has no such switch)."""
    core = getattr(np, "_core", None) or np.core  # NumPy 2 renamed it
    switch = getattr(core.multiarray, "_set_madvise_hugepage", None)
    if switch is None:
        yield
        return
    before = switch(enabled)
    try:
        yield
    finally:
        switch(before)


#: Engines by name (third-party engines: entry point group ``placelab.engines``); each is
#: built as ``cls(devices=k)``.
ENGINES: Registry[type[Engine]] = Registry("engine", "placelab.engines", builtins={
    "cpu": "runtime.engine:NumpyEngine", "gpu": "runtime.cupy_engine:CupyEngine",
    "torch": "runtime.torch_engine:TorchEngine",
    "torch-cuda": "runtime.torch_engine:TorchCudaEngine"})


def make_engine(name: str, devices: int = 1, calibration: str | Path | None = None
                ) -> Engine:
    """The registered engine ``name`` with ``devices`` logical devices, taking the
    calibration file ``calibration`` where one is given (every built-in engine takes one).

    >>> make_engine("cpu", 2).devices
    ('cpu0', 'cpu1')
    """
    factory: Callable[..., Engine] = ENGINES.get(name)
    if calibration is None:
        return factory(devices=devices)
    return factory(devices=devices, calibration=calibration)
