"""Engines: the devices a Plan really runs on, exposed as a ``hwmodels.Cluster`` so that
``policies.plan`` places a graph on them as on any other cluster.

An engine owns the array namespace its kernels use, moves arrays between its devices and
the host, and times what it runs. :class:`NumpyEngine` splits this machine's cores into
``k`` logical CPU devices, each a worker thread with its share of the BLAS threads
(threadpoolctl), so a plan spread over two logical devices really runs in parallel on two
cores. The CuPy engine lives in :mod:`runtime.cupy_engine`.
"""

from __future__ import annotations

import contextlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hwmodels.registry import get_device
from hwmodels.spec import Cluster, Device, Link
from workloads.errors import PlacelabError

__all__ = ["Engine", "EngineUnavailable", "NumpyEngine"]


class EngineUnavailable(PlacelabError):
    """An engine cannot run here (its library or its hardware is missing)."""


class Engine(ABC):
    """What the executor needs of the hardware: devices, arrays on them, copies, time."""

    name: ClassVar[str] = ""

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

    def synchronize(self, device: str) -> None:  # noqa: B027  (an optional hook)
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


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


class NumpyEngine(Engine):
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

    def __init__(self, devices: int = 1, *, dtype: str = "fp32",
                 calibration: str | Path | None = None, hugepages: bool = False) -> None:
        if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
            raise PlacelabError(f"engine 'cpu': devices must be an int >= 1, got {devices!r}")
        self.count = devices
        self.hugepages = hugepages
        self.threads = max(1, _cores() // devices)
        self.calibration = calibration

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(f"cpu{i}" for i in range(self.count))

    @cached_property
    def _cluster(self) -> Cluster:
        if self.calibration is not None:
            return self._calibrated(self.calibration)
        ref = get_device("xeon-8380")
        share = self.threads / 40  # the reference has 40 cores
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // self.count
        spec = Device("host-cpu", "cpu", {k: v * share for k, v in ref.peak.items()},
                      int(memory), ref.memory_bandwidth * share,
                      launch_overhead_s=ref.launch_overhead_s, efficiency=ref.efficiency,
                      description=f"a {self.threads}-core share of this machine "
                                  f"(uncalibrated: the Xeon 8380's per-core figures)")
        devices = tuple(spec.instance(d) for d in self.devices)
        links = tuple(Link(a, b, 10e9, 5e-6) for i, a in enumerate(self.devices)
                      for b in self.devices[i + 1:])
        return Cluster(f"numpy-{self.count}", devices, links,
                       hosts=dict.fromkeys(self.devices, "localhost"))

    def _calibrated(self, path: str | Path) -> Cluster:
        """The cluster ``placelab calibrate`` measured: its ``host-cpu`` device in every slot
        and its link between any two (the file must be for this many devices)."""
        from hwmodels.toml_io import load

        found = load(path)
        spec = found.devices.get("host-cpu")
        cluster = next(iter(found.clusters.values()), None)
        if spec is None or cluster is None:
            raise PlacelabError(f"{path}: expected a calibration of the cpu engine (a device "
                                f"'host-cpu' and its cluster), got devices "
                                f"{sorted(found.devices)}")
        if len(cluster.devices) != self.count:
            raise PlacelabError(f"{path}: calibrated for {len(cluster.devices)} devices, "
                                f"expected {self.count} (calibrate with --devices "
                                f"{self.count})")
        return cluster

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
