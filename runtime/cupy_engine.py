"""The CuPy engine: ``gpu0..gpu{n-1}``, a CUDA stream per device, copies between GPUs by
CuPy's peer-to-peer path, and times from CUDA events recorded on the device's stream.

It imports cleanly without CuPy or a GPU; building one then raises
:class:`EngineUnavailable` saying which is missing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hwmodels.spec import Cluster
from runtime.engine import CalibratedEngine, EngineUnavailable, gpu_cluster
from workloads.params import Param

__all__ = ["CupyEngine", "cupy_unavailable"]


def cupy_unavailable() -> str | None:
    """Why the CuPy engine cannot run here, or None if it can."""
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed (pip install 'placelab[gpu]')"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # CUDA driver errors have no common base here
        return f"no CUDA device is usable: {type(err).__name__}: {err}"
    return None if count > 0 else "no CUDA device is present"


class CupyEngine(CalibratedEngine):
    """The first ``devices`` GPUs of this machine (all of them by default)."""

    name = "gpu"
    model = "gpu-cupy"

    params = (Param("devices", "int", None, minimum=1, optional=True,
                    doc="the first GPUs of this machine (default: every GPU present)"),
              Param("calibration", "str", None, optional=True,
                    doc="a calibration file whose devices and links this engine takes"))

    def __init__(self, devices: int | None = None, *,
                 calibration: str | Path | None = None) -> None:
        self.requested = self.checked("devices", devices)
        self.calibration = self.checked("calibration",
                                        None if calibration is None else str(calibration))
        reason = cupy_unavailable()
        if reason:
            raise EngineUnavailable(f"engine 'gpu': {reason}")
        import cupy

        self.cp = cupy
        present = cupy.cuda.runtime.getDeviceCount()
        count = present if devices is None else devices
        if not 1 <= count <= present:
            raise EngineUnavailable(f"engine 'gpu': devices must be in [1, {present}], got "
                                    f"{devices}")
        self.count = count
        self.streams = []
        for i in range(count):
            with cupy.cuda.Device(i):
                self.streams.append(cupy.cuda.Stream(non_blocking=True))

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(f"gpu{i}" for i in range(self.count))

    def _uncalibrated(self) -> Cluster:
        properties = self.cp.cuda.runtime.getDeviceProperties
        return gpu_cluster(self.model, f"cupy-{self.count}", self.devices,
                           [(self._gpu_name(i), int(properties(i)["totalGlobalMem"]))
                            for i in range(self.count)])

    def cluster(self) -> Cluster:
        """Uncalibrated, each GPU takes the figures of the catalog GPU its name names (an
        H100 where none matches) and its memory; calibrated, the file's."""
        return self._cluster

    def libraries(self) -> dict[str, str]:
        """NumPy, CuPy, the CUDA runtime and the GPU: a measurement holds on these alone."""
        return {**super().libraries(), "cupy": self.cp.__version__,
                "cuda": str(self.cp.cuda.runtime.runtimeGetVersion()), "gpu": self._gpu_name()}

    def _gpu_name(self, index: int = 0) -> str:
        name = self.cp.cuda.runtime.getDeviceProperties(index)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    @property
    def xp(self) -> Any:
        import array_api_compat.cupy as xp

        return xp

    def _index(self, device: str) -> int:
        return int(device.removeprefix("gpu"))

    @contextlib.contextmanager
    def on(self, device: str) -> Iterator[None]:
        i = self._index(device)
        with self.cp.cuda.Device(i), self.streams[i]:
            yield

    def to_device(self, host: np.ndarray, device: str) -> Any:
        with self.cp.cuda.Device(self._index(device)):
            return self.cp.asarray(host)

    def copy(self, array: Any, src: str, dst: str) -> Any:
        with self.cp.cuda.Device(self._index(dst)):
            out = self.cp.empty_like(array)
            out.data.copy_from_device_async(array.data, array.nbytes,
                                            self.streams[self._index(dst)])
            return out

    def to_host(self, array: Any) -> np.ndarray:
        return self.cp.asnumpy(array)

    def synchronize(self, device: str) -> None:
        self.streams[self._index(device)].synchronize()
